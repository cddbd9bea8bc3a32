// Tahoe's adaptive forest format (Xie et al., EuroSys 2021, section 4), as Canopy stores it.
// CUDA-free; the GPU strategies over it are in executor/forest_adaptive_kernels.cuh.
//
//   * Node rearrangement: at every inner node the child that more training weight reached
//     (XGBoost sum_hessian, scikit-learn sample counts) is stored first; its subtree moves with
//     it. A "swapped" bit keeps the test itself unchanged, so predictions are too.
//   * Compact attribute index: the feature takes the fewest bits that hold the model's feature
//     count; the bits it frees hold the first child's index, so a node is one 8-byte word with
//     no child array (children are adjacent: nodes are breadth-first in stored-child order).
//   * Tree rearrangement: a second copy of the nodes interleaves the trees slot by slot
//     (node k of the tree at storage position s lives at k * n_trees + s), in an order the
//     caller gives (scheduler/tree_similarity.hpp's SimHash + LSH order), for the strategy
//     whose neighbouring threads walk neighbouring trees (shared data). The strategies where a
//     thread walks every tree for its row read the tree-major copy.
//
// Summation never follows the storage order: every strategy adds the trees' leaves in the
// canonical (layout) order of ForestCommon, so any rearrangement leaves every bit of every
// prediction unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "layouts/forest.hpp"
#include "layouts/forest_layouts.hpp"
#include "runtime/common.hpp"

namespace canopy {

struct AdaptiveOptions {
  bool node_rearrangement = true;  // the more probable child first
  // Storage order of the interleaved copy: tree_order[s] = the canonical tree at position s.
  // Empty: canonical order (no tree rearrangement).
  std::vector<index_t> tree_order;
};

// Node word of the adaptive format (ForestNode's 8 bytes, read differently):
//   value  inner: threshold; scalar leaf: the leaf value
//   info   bit 31 leaf. Leaf: bits 0-29 the leaf's index within its tree (vector leaves).
//          Inner: bit 30 swapped (the first child is the test's right side), bit 29 a missing
//          value takes the second child, bits [0, feature_bits) the feature, bits
//          [feature_bits, 29) the first child's index within the tree.
constexpr std::uint32_t kAdaptiveSwappedBit = 1u << 30;
constexpr std::uint32_t kAdaptiveDefaultSecondBit = 1u << 29;
constexpr int kAdaptivePayloadBits = 29;

struct AdaptiveForestView {
  ForestCommonView common;  // trees in canonical (layout) order
  int feature_bits = 1;
  std::uint32_t feature_mask = 1;
  const ForestNode* nodes = nullptr;     // tree-major: tree t's nodes at tree_begin[t] ...
  const index_t* tree_begin = nullptr;   // [n_trees + 1]
  const ForestNode* inter = nullptr;     // interleaved: [max_nodes][n_trees]
  const index_t* inter_tree = nullptr;   // [n_trees] storage position -> canonical tree
  index_t max_nodes = 0;
};

// 1 if the row goes to the stored second child.
CANOPY_HD inline int adaptive_second(ForestNode n, float x) {
  if (x != x) return (n.info & kAdaptiveDefaultSecondBit) ? 1 : 0;
  return (x < n.value) == ((n.info & kAdaptiveSwappedBit) != 0) ? 1 : 0;
}

// Walks one tree whose node k is at base[k * stride]; get(f) reads feature f of the row.
template <class Get>
CANOPY_HD inline ForestNode adaptive_walk(const ForestNode* base, index_t stride, int feature_bits,
                                          std::uint32_t feature_mask, const Get& get) {
  index_t k = 0;
  for (;;) {
    const ForestNode n = base[k * stride];
    if (forest_is_leaf(n.info)) return n;
    const std::uint32_t payload = n.info & ((1u << kAdaptivePayloadBits) - 1u);
    k = static_cast<index_t>(payload >> feature_bits) + adaptive_second(n, get(static_cast<int>(payload & feature_mask)));
  }
}

// Row scheduling's key for one row (the inspector, on the CPU and the GPU alike): the top-leaf
// the row reaches in each of the first key_trees trees (canonical order), `depth` path bits
// each (1 = the stored second child), the first tree in the most significant bits. A walk that
// meets a leaf above `depth` pads its path with zeros. key_trees * depth <= 64.
CANOPY_HD inline std::uint64_t adaptive_row_key(const AdaptiveForestView& v, const float* row, int depth, int key_trees) {
  const std::uint32_t payload_mask = (1u << kAdaptivePayloadBits) - 1u;
  std::uint64_t key = 0;
  for (int t = 0; t < key_trees; ++t) {
    const ForestNode* base = v.nodes + v.tree_begin[t];
    index_t k = 0;
    std::uint64_t path = 0;
    for (int l = 0; l < depth; ++l) {
      const ForestNode n = base[k];
      int second = 0;
      if (!forest_is_leaf(n.info)) {
        const std::uint32_t payload = n.info & payload_mask;
        second = adaptive_second(n, row[payload & v.feature_mask]);
        k = static_cast<index_t>(payload >> v.feature_bits) + second;
      }
      path = (path << 1) | static_cast<std::uint64_t>(second);
    }
    key = (key << depth) | path;
  }
  return key;
}

// Trees whose top levels make the key: as many as fit 64 bits.
inline int adaptive_key_trees(index_t n_trees, int depth) {
  return static_cast<int>(n_trees < 64 / depth ? n_trees : 64 / depth);
}

struct AdaptiveForest {
  static AdaptiveForest build(const Forest& f, const AdaptiveOptions& opt = {});
  AdaptiveForestView view() const;
  std::size_t footprint_bytes() const;
  std::string details() const;  // for reports

  ForestCommon common;
  bool node_rearranged = false, tree_rearranged = false;
  int feature_bits = 1;
  std::vector<ForestNode> nodes;       // tree-major
  std::vector<index_t> tree_begin;     // [n_trees + 1]
  std::vector<ForestNode> inter;       // interleaved
  std::vector<index_t> inter_tree;     // [n_trees]
  index_t max_nodes = 0;
  index_t swapped_nodes = 0;           // inner nodes whose children were swapped
  // Per canonical tree: the expected number of nodes a row visits (training weights; 2^-depth
  // per leaf when the model has none), and the tree's depth.
  std::vector<double> expected_visits;
  std::vector<int> depth;

 private:
  explicit AdaptiveForest(const Forest& f) : common(f) {}
};

// Per tree of `f` (the forest's own order), the probability that a row reaching the root
// reaches each node: cover[n] / cover[0] from the training weights, or 2^-depth when the tree
// has none (or its root weight is 0).
std::vector<std::vector<double>> forest_node_probabilities(const Forest& f);

}  // namespace canopy
