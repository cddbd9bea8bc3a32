// The three forest layouts of the seed papers. Each is an owning host object (plain vectors,
// built from a Forest) and a trivially copyable, non-owning view of it that the CPU executor
// and the GPU kernels both take. Each lists its arrays once, in map_view (layouts/arrays.hpp):
// its host view, its footprint and its device copy (layouts/device_copy.hpp) all come from
// that list. CUDA-free.
//
//   CSR           the random-forest paper's baseline (Shah et al., Fig. 2): per node a feature
//                 id and a value; children through an index into a children array.
//   Reorg         FIL's interleaved layout: level by level, slot j of tree t at
//                 level_begin[l] + j * n_trees + t, so threads walking different trees at the
//                 same level and slot read neighbouring addresses.
//   Hierarchical  the random-forest paper's layout (section 3.1): subtrees of SD levels stored
//                 as complete binary-tree arrays (children of position p at 2p+1, 2p+2), the
//                 connections between subtrees in a CSR-like table, and the root subtree of each
//                 tree (RSD levels) in a separate array with a fixed stride, ready to be copied
//                 into shared memory.
//
// Trees appear in *layout order*: the forest's trees stably sorted by output group, so that
// the trees of XGBoost class k are contiguous ([group_begin[k], group_begin[k+1])) and each
// class is summed in the model's tree order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "layouts/arrays.hpp"
#include "layouts/forest.hpp"
#include "core/bits.hpp"
#include "core/types.hpp"

namespace canopy {

// adaptive: layouts/forest_adaptive.hpp. Auto: the predictor picks (ForestConfig::layout).
enum class ForestLayout { Csr, Reorg, Hierarchical, Adaptive, Auto };
const char* to_string(ForestLayout l);
// "csr", "reorg", "hier" (or "hierarchical"), "adaptive", "auto"; an Error lists them.
ForestLayout parse_forest_layout(const std::string& name);

// One node in 8 bytes (a single load on the GPU).
//   value: inner: the threshold (left iff x < value); categorical inner node: the bits of its
//          set's offset in ForestCommonView::categories; scalar leaf: the leaf value.
//   info:  bit 31 leaf, bit 30 missing-goes-left; inner node: bit 29 categorical, bits 0-28
//          the feature; leaf: bits 0-29 the leaf's index within its tree
//          (ForestTree::leaf_index: the leaf output maps it back to the model's node id;
//          vector leaves: also the row of its values).
struct alignas(8) ForestNode {
  float value;
  std::uint32_t info;
};
constexpr std::uint32_t kForestLeafBit = 1u << 31;
constexpr std::uint32_t kForestDefaultLeftBit = 1u << 30;
constexpr std::uint32_t kForestCategoricalBit = 1u << 29;
constexpr std::uint32_t kForestIndexMask = (1u << 30) - 1u;
constexpr std::uint32_t kForestFeatureMask = (1u << 29) - 1u;

CANOPY_HD inline bool forest_is_leaf(std::uint32_t info) { return (info & kForestLeafBit) != 0; }
CANOPY_HD inline std::uint32_t forest_index(std::uint32_t info) { return info & kForestIndexMask; }
CANOPY_HD inline std::uint32_t forest_feature(std::uint32_t info) { return info & kForestFeatureMask; }

// A categorical split's test for a present value x: right iff its category, x truncated, is
// in the set at `set` ([0]: the set's words W; then W words, bit c % 32 of word c / 32 for
// category c). Negative values, categories past the words and +Infinity go left: XGBoost
// 1.7's predictor (python3-xgboost checks it, tests/data/forest/make_leaf_data.py).
CANOPY_HD inline bool forest_category_right(const std::uint32_t* set, float x) {
  if (!(x >= 0.0f) || !(x < 32.0f * static_cast<float>(set[0]))) return false;  // past the words: left
  const std::uint32_t c = static_cast<std::uint32_t>(x);
  return ((set[1 + (c >> 5)] >> (c & 31u)) & 1u) != 0;
}

// The decision at an inner node: 0 = left, 1 = right. A NaN feature value is missing and
// takes the default side; otherwise left iff x < threshold (false for NaN, hence the test),
// or, at a categorical node, right iff x's category is in the node's set.
CANOPY_HD inline int forest_go_right(ForestNode n, const float* row, const std::uint32_t* categories) {
  const float x = row[forest_feature(n.info)];
  if (x != x) return (n.info & kForestDefaultLeftBit) ? 0 : 1;
  if (n.info & kForestCategoricalBit) return forest_category_right(categories + float_to_bits(n.value), x) ? 1 : 0;
  return x < n.value ? 0 : 1;
}

// What every view carries besides its nodes: how the leaves reached become outputs.
struct ForestCommonView {
  index_t n_trees = 0;
  int n_features = 0;
  int n_groups = 1;    // output groups summed separately (XGBoost classes)
  int leaf_width = 0;  // 0: scalar leaves in ForestNode::value; else float64 values per leaf
  int n_classes = 0;
  ForestObjective objective = ForestObjective::SquaredError;
  const index_t* group_begin = nullptr;      // [n_groups + 1], layout order
  const float* base_margin = nullptr;        // [n_groups]
  const double* class_values = nullptr;      // [n_classes]
  const index_t* tree_leaf_begin = nullptr;  // [n_trees] vector leaves: first leaf row of tree t
  const double* leaf_values = nullptr;       // vector leaves: [leaf rows][leaf_width]
  // The categorical nodes' sets, each [W][W words] (forest_category_right); a node's value
  // holds its set's offset. Empty when the forest has no categorical split.
  const std::uint32_t* categories = nullptr;
  bool has_categorical = false;
};

// The owner of the arrays every layout shares.
struct ForestCommon {
  explicit ForestCommon(const Forest& f);
  template <class Map>
  ForestCommonView map_view(Map&& map) const {
    ForestCommonView v;
    v.n_trees = n_trees;
    v.n_features = n_features;
    v.n_groups = n_groups;
    v.leaf_width = leaf_width;
    v.n_classes = static_cast<int>(class_values.size());
    v.objective = objective;
    v.group_begin = map(group_begin, "the forest's output groups");
    v.base_margin = map(base_margin, "the forest's base margins");
    v.class_values = map(class_values, "the forest's class values");
    v.tree_leaf_begin = map(tree_leaf_begin, "the forest's leaf offsets");
    v.leaf_values = map(leaf_values, "the forest's leaf values");
    v.categories = map(categories, "the forest's category sets");
    v.has_categorical = !categories.empty();
    return v;
  }
  ForestCommonView view() const { return map_view(HostArrays{}); }
  // The node word of inner node n of the forest's tree `src` (every layout stores these):
  // the threshold, or the offset of its category set in `categories`.
  ForestNode inner_node(index_t src, const ForestTree& t, index_t n) const;

  index_t n_trees = 0;
  int n_features = 0, n_groups = 1, leaf_width = 0;
  ForestObjective objective = ForestObjective::SquaredError;
  std::vector<index_t> order;  // layout position -> the forest's tree index
  std::vector<index_t> group_begin;
  std::vector<float> base_margin;
  std::vector<double> class_values;
  std::vector<index_t> tree_leaf_begin;
  std::vector<double> leaf_values;
  // Host only (no view, no device copy, not in the footprint): the leaf output's table. The
  // leaf with index i of layout tree p has the model's node id leaf_source_id[leaf_id_begin[p] + i]
  // ([n_trees + 1]; -1: a tree built by hand without ids).
  std::vector<index_t> leaf_id_begin;
  std::vector<std::int32_t> leaf_source_id;
  std::vector<std::uint32_t> categories;
  // Host only: per tree of the forest (its own order), per node, the offset of its category
  // set in `categories`; empty for a tree without categorical splits.
  std::vector<std::vector<std::uint32_t>> category_offset;
};

// ---- CSR ------------------------------------------------------------------------------------

struct CsrForestView {
  ForestCommonView common;
  const index_t* tree_node_begin = nullptr;   // [n_trees] first node of tree t
  const index_t* tree_child_begin = nullptr;  // [n_trees] first children_arr entry of tree t
  const std::uint32_t* info = nullptr;        // [nodes] feature_id, with the leaf and default bits
  const float* value = nullptr;               // [nodes] threshold or leaf value
  const std::int32_t* child_index = nullptr;  // [nodes] children_arr_idx (within the tree); -1 at leaves
  const std::int32_t* children = nullptr;     // children_arr: node ids within the tree, left then right
};

struct CsrForest {
  static CsrForest build(const Forest& f);
  template <class Map>
  CsrForestView map_view(Map&& map) const {
    CsrForestView v;
    v.common = common.map_view(map);
    v.tree_node_begin = map(tree_node_begin, "the CSR tree offsets");
    v.tree_child_begin = map(tree_child_begin, "the CSR tree child offsets");
    v.info = map(info, "the CSR feature ids");
    v.value = map(value, "the CSR values");
    v.child_index = map(child_index, "the CSR child indices");
    v.children = map(children, "the CSR children");
    return v;
  }
  CsrForestView view() const { return map_view(HostArrays{}); }
  std::size_t footprint_bytes() const { return array_bytes(*this); }
  std::string details() const;  // for reports

  ForestCommon common;
  std::vector<index_t> tree_node_begin, tree_child_begin;
  std::vector<std::uint32_t> info;
  std::vector<float> value;
  std::vector<std::int32_t> child_index, children;

 private:
  explicit CsrForest(const Forest& f) : common(f) {}
};

// ---- Reorg (FIL's interleaved layout) --------------------------------------------------------

struct ReorgForestView {
  ForestCommonView common;
  int n_levels = 0;
  const index_t* level_begin = nullptr;     // [n_levels + 1]; level l holds width_l * n_trees slots
  const ForestNode* nodes = nullptr;        // node (t, l, j) at level_begin[l] + j * n_trees + t
  const std::int32_t* child_slot = nullptr;  // same index: slot of the left child in level l + 1
};

struct ReorgForest {
  static ReorgForest build(const Forest& f);
  template <class Map>
  ReorgForestView map_view(Map&& map) const {
    ReorgForestView v;
    v.common = common.map_view(map);
    v.n_levels = static_cast<int>(level_begin.size()) - 1;
    v.level_begin = map(level_begin, "the reorg level offsets");
    v.nodes = map(nodes, "the reorg nodes");
    v.child_slot = map(child_slot, "the reorg child slots");
    return v;
  }
  ReorgForestView view() const { return map_view(HostArrays{}); }
  std::size_t footprint_bytes() const { return array_bytes(*this); }
  std::string details() const;
  // Slots holding no node (levels are padded to the widest tree), for the footprint report.
  index_t padding_nodes = 0;

  ForestCommon common;
  std::vector<index_t> level_begin;
  std::vector<ForestNode> nodes;
  std::vector<std::int32_t> child_slot;

 private:
  explicit ReorgForest(const Forest& f) : common(f) {}
};

// ---- Hierarchical (Shah et al. section 3.1) -----------------------------------------------------

struct HierarchicalOptions {
  int subtree_depth = 6;   // SD: levels per subtree (the paper uses 4, 6, 8)
  int root_depth = 10;     // RSD: levels of the root subtree (paper: 8..12), capped at the
                           // forest's depth; at most kMaxRootDepth (shared memory)
};
// 2^12 - 1 nodes of 8 bytes = 32 KiB: one root subtree always fits the 48 KiB of shared
// memory a block gets without opting in.
constexpr int kMaxRootDepth = 12;
constexpr int kMaxSubtreeDepth = 24;

struct HierarchicalForestView {
  ForestCommonView common;
  int subtree_depth = 0;  // SD
  int root_depth = 0;     // RSD actually used
  index_t root_stride = 0;                      // 2^RSD - 1
  const ForestNode* root_nodes = nullptr;       // [n_trees * root_stride]; subtree t is tree t's root
  const ForestNode* nodes = nullptr;            // the other subtrees, each a complete-array prefix
  const index_t* subtree_node_begin = nullptr;  // [n_subtrees] first node in `nodes` (s >= n_trees)
  const index_t* connection_begin = nullptr;    // [n_subtrees] first entry in `connections`
  const index_t* connections = nullptr;         // per bottom-level position k: [2k] left, [2k+1] right subtree
};

struct HierarchicalForest {
  static HierarchicalForest build(const Forest& f, const HierarchicalOptions& opt = {});
  template <class Map>
  HierarchicalForestView map_view(Map&& map) const {
    HierarchicalForestView v;
    v.common = common.map_view(map);
    v.subtree_depth = subtree_depth;
    v.root_depth = root_depth;
    v.root_stride = root_stride;
    v.root_nodes = map(root_nodes, "the root subtrees");
    v.nodes = map(nodes, "the subtrees");
    v.subtree_node_begin = map(subtree_node_begin, "the subtree offsets");
    v.connection_begin = map(connection_begin, "the subtree connection offsets");
    v.connections = map(connections, "the subtree connections");
    return v;
  }
  HierarchicalForestView view() const { return map_view(HostArrays{}); }
  std::size_t footprint_bytes() const { return array_bytes(*this); }
  std::string details() const;
  std::size_t root_subtree_bytes() const { return static_cast<std::size_t>(root_stride) * sizeof(ForestNode); }
  index_t n_subtrees() const { return static_cast<index_t>(subtree_node_begin.size()); }
  index_t padding_nodes = 0;  // null nodes that complete the subtrees

  ForestCommon common;
  int subtree_depth = 0, root_depth = 0;
  index_t root_stride = 0;
  std::vector<ForestNode> root_nodes, nodes;
  std::vector<index_t> subtree_node_begin, connection_begin, connections;

 private:
  explicit HierarchicalForest(const Forest& f) : common(f) {}
};

}  // namespace canopy
