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
#include <cstring>
#include <string>
#include <vector>

#include "layouts/arrays.hpp"
#include "layouts/forest.hpp"
#include "layouts/forest_layouts.hpp"
#include "core/types.hpp"

namespace canopy {

struct AdaptiveOptions {
  bool node_rearrangement = true;  // the more probable child first
  // Storage order of the interleaved copy: tree_order[s] = the canonical tree at position s.
  // Empty: canonical order (no tree rearrangement).
  std::vector<index_t> tree_order;
};

// Node word of the adaptive format (ForestNode's 8 bytes, read differently):
//   value  inner: the threshold; leaf: NaN
//   info   bit 31 leaf; bit 30 "the x < threshold side is the stored second child" (the
//          children were swapped); bit 29 "a missing value takes the x < threshold side";
//          bit 28 categorical (value: the bits of its set's offset in the common view's
//          categories; the tree's left child, the "x < threshold" side, takes the categories
//          outside the set); bits [0, feature_bits) the feature; bits [feature_bits, 28) the
//          first child's index within the tree. A leaf points at itself, with a test no row passes (NaN threshold,
//          bit 30 set, bit 29 clear: every row stays), so a walk of depth[t] steps ends on the
//          leaf whatever level it sits at: the loop needs no leaf test and a warp walking one
//          tree runs a uniform trip count. Leaf values live apart, in leaf[] (scalar leaves:
//          the float's bits; vector leaves: the leaf's index within its tree).
constexpr std::uint32_t kAdaptiveLtSecondBit = 1u << 30;
constexpr std::uint32_t kAdaptiveNanLtBit = 1u << 29;
constexpr std::uint32_t kAdaptiveCategoricalBit = 1u << 28;
constexpr int kAdaptivePayloadBits = 28;
constexpr std::uint32_t kAdaptivePayloadMask = (1u << kAdaptivePayloadBits) - 1u;

struct AdaptiveForestView {
  ForestCommonView common;  // trees in canonical (layout) order
  int feature_bits = 1;
  std::uint32_t feature_mask = 1;
  const ForestNode* nodes = nullptr;     // tree-major: tree t's nodes at tree_begin[t] ...
  const std::uint32_t* leaf = nullptr;   // tree-major, as nodes: a leaf's value bits or index
  const index_t* tree_begin = nullptr;   // [n_trees + 1]
  const std::int32_t* depth = nullptr;   // [n_trees] steps from the root to the deepest leaf
  // The fast copy (AdaptiveForest::fast_nodes), null when the forest has none.
  const ForestNode* fast = nullptr;
  const std::uint32_t* fast_leaf = nullptr;
  // Vector leaves of at most kAdaptiveFastVectorWidth entries: at fast position p (tree_begin +
  // position), the leaf's vector itself (leaf_width values), so a walk that ends there reads it
  // with one load instead of its leaf word and then the vector. Null otherwise.
  const double* fast_leaf_vectors = nullptr;
  const ForestNode* inter = nullptr;     // interleaved: [max_nodes][n_trees]
  const index_t* inter_tree = nullptr;   // [n_trees] storage position -> canonical tree
  const std::int32_t* inter_depth = nullptr;  // [n_trees] by storage position: depth[inter_tree[s]]
  index_t max_nodes = 0;
};

// 1 if a row whose feature value is x goes to the stored second child (0 at a leaf).
// Integer bit operations rather than branches or selects: this is every walk's inner step.
// `categories`: the common view's category sets (read at categorical nodes only). kCat false:
// the forest has no categorical node (ForestCommonView::has_categorical), and the walk skips
// the test, which costs the GPU's direct strategy 9% of its rows per second.
template <bool kCat = true>
CANOPY_HD inline std::uint32_t adaptive_second(ForestNode n, float x, const std::uint32_t* categories) {
  static_assert(kAdaptiveNanLtBit == 1u << 29 && kAdaptiveLtSecondBit == 1u << 30, "adaptive_second reads bits 29, 30");
  // The x < threshold side: x below it, or a missing x that the node sends there.
  std::uint32_t lt = static_cast<std::uint32_t>(x < n.value) | (static_cast<std::uint32_t>(x != x) & (n.info >> 29));
  // Categorical: the left side is the categories outside the set.
  if (kCat && (n.info & kAdaptiveCategoricalBit))
    lt = x != x ? (n.info >> 29) & 1u
                : static_cast<std::uint32_t>(!forest_category_right(categories + float_to_bits(n.value), x));
  return (lt ^ (n.info >> 30) ^ 1u) & 1u;  // that side is the second child iff bit 30
}

// One step of a walk: the node's position after `n` for the row that get(f) reads.
template <class Get>
CANOPY_HD inline std::uint32_t adaptive_step(ForestNode n, int feature_bits, std::uint32_t feature_mask, const Get& get,
                                             const std::uint32_t* categories) {
  return ((n.info & kAdaptivePayloadMask) >> feature_bits) +
         adaptive_second(n, get(static_cast<int>(n.info & feature_mask)), categories);
}

// The leaf position a row reaches in one tree whose node k is at base[k * stride].
template <class Get>
CANOPY_HD inline std::uint32_t adaptive_walk(const ForestNode* base, index_t stride, int depth, int feature_bits,
                                             std::uint32_t feature_mask, const Get& get, const std::uint32_t* categories) {
  std::uint32_t k = 0;
  for (int l = 0; l < depth; ++l)
    k = adaptive_step(base[static_cast<index_t>(k) * stride], feature_bits, feature_mask, get, categories);
  return k;
}

// One step over the fast copy, for a row with no missing value: the x < threshold side is
// always the second child and nothing else is flagged, so a step is a mask, a shift, a compare
// and an add (the walks are bound by those integer instructions, not by memory).
CANOPY_HD inline std::uint32_t adaptive_fast_step(ForestNode n, int feature_bits, float x) {
  return (n.info >> feature_bits) + static_cast<std::uint32_t>(x < n.value);
}

// The leaf at position k of canonical tree t, as the executors' Sums take it.
// kFast: k is a position in the fast copy.
template <bool kFast = false>
CANOPY_HD inline ForestNode adaptive_leaf(const AdaptiveForestView& v, index_t t, std::uint32_t k) {
  const std::uint32_t w = (kFast ? v.fast_leaf : v.leaf)[v.tree_begin[t] + k];
  return ForestNode{bits_to_float(w), kForestLeafBit | (w & kForestIndexMask)};
}

// The widest leaf vectors the fast copy keeps at its positions (a random forest's class
// vectors, up to 4 classes): wider ones would multiply the copy's size.
constexpr int kAdaptiveFastVectorWidth = 4;

struct AdaptiveForest {
  static AdaptiveForest build(const Forest& f, const AdaptiveOptions& opt = {});
  template <class Map>
  AdaptiveForestView map_view(Map&& map) const {
    AdaptiveForestView v;
    v.common = common.map_view(map);
    v.feature_bits = feature_bits;
    v.feature_mask = (1u << feature_bits) - 1u;
    v.nodes = map(nodes, "the adaptive nodes");
    v.leaf = map(leaf, "the adaptive leaf values");
    v.tree_begin = map(tree_begin, "the adaptive tree offsets");
    v.depth = map(depth, "the adaptive tree depths");
    if (!fast_nodes.empty()) {
      v.fast = map(fast_nodes, "the adaptive fast nodes");
      v.fast_leaf = map(fast_leaf, "the adaptive fast leaf values");
      if (!fast_leaf_vectors.empty()) v.fast_leaf_vectors = map(fast_leaf_vectors, "the adaptive fast leaf vectors");
    }
    v.inter = map(inter, "the adaptive interleaved nodes");
    v.inter_tree = map(inter_tree, "the adaptive tree order");
    v.inter_depth = map(inter_depth, "the adaptive tree depths in storage order");
    v.max_nodes = max_nodes;
    return v;
  }
  AdaptiveForestView view() const { return map_view(HostArrays{}); }
  std::size_t footprint_bytes() const { return array_bytes(*this); }
  std::string details() const;  // for reports

  ForestCommon common;
  bool node_rearranged = false, tree_rearranged = false;
  int feature_bits = 1;
  std::vector<ForestNode> nodes;       // tree-major
  std::vector<std::uint32_t> leaf;     // tree-major: leaf value bits / leaf index; 0 at inner nodes
  // Host only (not in the view or the footprint), tree-major as `leaf`: a leaf's index within
  // its tree (ForestTree::leaf_index, for the leaf output); -1 at inner nodes.
  std::vector<std::int32_t> leaf_number;
  std::vector<index_t> tree_begin;     // [n_trees + 1]
  // The fast copy: the tree-major nodes renumbered (breadth-first, still tree_begin's offsets)
  // so that every inner node's x < threshold child is its second, its info only
  // feature | first child << feature_bits (leaves: themselves, NaN threshold), and the leaf
  // words at the new positions. The direct (rows staged) and tree-major shared-data walks take
  // it for blocks whose rows have no missing value. Empty when the forest has categorical
  // splits (their test needs the flags).
  std::vector<ForestNode> fast_nodes;
  std::vector<std::uint32_t> fast_leaf;
  // [fast position][leaf_width] (AdaptiveForestView::fast_leaf_vectors; zeros at inner nodes).
  std::vector<double> fast_leaf_vectors;
  std::vector<ForestNode> inter;       // interleaved
  std::vector<index_t> inter_tree;     // [n_trees]
  // depth[inter_tree[s]]: a walk over the interleaved copy reads its trip count beside its tree
  // instead of after it.
  std::vector<std::int32_t> inter_depth;
  index_t max_nodes = 0;
  index_t swapped_nodes = 0;           // inner nodes whose children were swapped
  // Per canonical tree: the expected number of nodes a row visits (training weights; 2^-depth
  // per leaf when the model has none), and the tree's depth.
  std::vector<double> expected_visits;
  std::vector<std::int32_t> depth;

 private:
  explicit AdaptiveForest(const Forest& f) : common(f) {}
  void build_fast_copy();
};

// Per tree of `f` (the forest's own order), the probability that a row reaching the root
// reaches each node: the product of the edge probabilities cover[child] / (cover[left] +
// cover[right]) from the training weights (cover[n] / cover[0] when they add up), or 2^-depth
// when the tree has none.
std::vector<std::vector<double>> forest_node_probabilities(const Forest& f);

}  // namespace canopy
