// The top-tree of depth d: the nodes at depth < d. Its leaves (nodes at depth d - 1, and tree
// leaves shallower than that) are numbered 0..L-1 left to right; they are the columns of the
// scheduling matrix.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/types.hpp"

namespace canopy {

struct TopTreeView {
  const node_id* leaves = nullptr;  // ascending node ids; depth-first ids grow left to right
  index_t n_leaves = 0;
  int depth = 0;
  node_id first_leaf = 0, last_leaf = -1;  // leaves[0] and leaves[n_leaves - 1], on the host too

  // Column of a top-leaf node, by binary search; -1 if the node is not a top-leaf.
  CANOPY_HD index_t column(node_id n) const {
    index_t lo = 0, hi = n_leaves;
    while (lo < hi) {
      const index_t mid = (lo + hi) / 2;
      if (leaves[mid] < n) lo = mid + 1; else hi = mid;
    }
    return (lo < n_leaves && leaves[lo] == n) ? lo : -1;
  }
};

// Whether a topology's nodes record their depth (the median-split trees' KdNode): then every
// node of its array is in the tree, and a scan of the array counts the levels.
template <class T, class = void>
struct has_node_depths : std::false_type {};
template <class T>
struct has_node_depths<T, std::void_t<decltype(std::declval<const T&>().nodes[0].depth),
                                      decltype(std::declval<const T&>().n_nodes)>> : std::true_type {};

// leaves[d], d = 1..height: how many top-leaves the top-tree of depth d has (leaves[0] = 0).
// One pass over the tree: a scan of the node array where the nodes record their depth (a walk
// of a 10^6-point kd-tree's 2.6x10^5 nodes took 5 ms of Auto's trial on the H200's host).
template <class Topology>
std::vector<index_t> top_leaves_by_depth(const Topology& tree) {
  const int h = tree.height;
  std::vector<index_t> nodes_at(static_cast<std::size_t>(h) + 1, 0), leaves_at(nodes_at);
  if constexpr (has_node_depths<Topology>::value) {
    for (node_id n = 0; n < static_cast<node_id>(tree.n_nodes); ++n) {
      const int d = tree.nodes[n].depth;
      if (d < 0 || d > h) continue;  // a malformed height: TopTree::build reports it
      ++nodes_at[static_cast<std::size_t>(d)];
      if (tree.is_leaf(n)) ++leaves_at[static_cast<std::size_t>(d)];
    }
  } else {
    std::vector<std::pair<node_id, int>> stack{{0, 0}};
    while (!stack.empty()) {
      const auto [n, d] = stack.back();
      stack.pop_back();
      if (d > h) continue;  // a malformed height: TopTree::build reports it
      ++nodes_at[static_cast<std::size_t>(d)];
      if (tree.is_leaf(n)) {
        ++leaves_at[static_cast<std::size_t>(d)];
        continue;
      }
      for (int i = 0; i < tree.child_count(n); ++i) stack.push_back({tree.child(n, i), d + 1});
    }
  }
  std::vector<index_t> out(static_cast<std::size_t>(h) + 1, 0);
  index_t shallower = 0;  // tree leaves above depth d - 1
  for (int d = 1; d <= h; ++d) {
    out[static_cast<std::size_t>(d)] = nodes_at[static_cast<std::size_t>(d - 1)] + shallower;
    shallower += leaves_at[static_cast<std::size_t>(d - 1)];
  }
  return out;
}

class TopTree {
 public:
  // Topology: is_leaf / child_count / child and a `height` member. Depth must lie in
  // 1..height; a deeper one is an error that names both numbers.
  template <class Topology>
  static TopTree build(const Topology& tree, int depth) {
    if (depth < 1 || depth > tree.height) {
      throw Error("top-tree depth " + std::to_string(depth) + " is outside 1.." +
                  std::to_string(tree.height) + " (the tree has " + std::to_string(tree.height) +
                  " levels)");
    }
    // The inspectors keep each stack entry's depth in one signed byte.
    if (depth > 127) throw Error("top-tree depth " + std::to_string(depth) + " is larger than 127, the deepest Canopy inspects");
    TopTree t;
    t.depth_ = depth;
    struct Item {
      node_id n, parent;
      int depth;
    };
    std::vector<Item> stack{{0, kNoNode, 0}};
    while (!stack.empty()) {
      const Item it = stack.back();
      stack.pop_back();
      if (it.depth == depth - 1 || tree.is_leaf(it.n)) {
        t.leaves_.push_back(it.n);
        t.parents_.push_back(it.parent);
        continue;
      }
      for (int i = tree.child_count(it.n) - 1; i >= 0; --i) stack.push_back({tree.child(it.n, i), it.n, it.depth + 1});
    }
    return t;
  }

  TopTreeView view() const {
    return {leaves_.data(), static_cast<index_t>(leaves_.size()), depth_, leaves_.empty() ? 0 : leaves_.front(),
            leaves_.empty() ? -1 : leaves_.back()};
  }
  const std::vector<node_id>& leaves() const { return leaves_; }
  // parents()[c]: the parent node of top-leaf c (kNoNode for the root). Top-leaves with one
  // parent are siblings; the guided scheduler treats a visit to siblings as one step.
  const std::vector<node_id>& parents() const { return parents_; }
  index_t size() const { return static_cast<index_t>(leaves_.size()); }
  int depth() const { return depth_; }

 private:
  std::vector<node_id> leaves_;
  std::vector<node_id> parents_;
  int depth_ = 0;
};

}  // namespace canopy
