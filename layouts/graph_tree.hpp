// A user's own tree (an R-tree, a quadtree, a BVH, a trie...) in the layout Canopy's inspector,
// schedulers and executors walk: nodes renumbered in depth-first preorder (so a top-tree's
// leaves are numbered left to right and an unguided traversal visits ascending ids), children
// in the caller's order, any number of children per node. The payload of each node (the
// caller's bounding box, key, ...) is copied into the same order; a visitor reads it by node id.
//
// Build one from child lists with GraphTree<P>::from_children, or from a Boost.Graph
// adjacency_list with layouts/graph_tree_boost.hpp. CUDA-free and Boost-free.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.hpp"

namespace canopy {

// Non-owning, trivially copyable; host or device pointers alike.
struct GraphTreeView {
  // Rope-stack entries a traversal may hold: flattening checks the tree against it (a node's
  // pending siblings add up along a path, so very wide nodes near the root use it up fastest).
  static constexpr int kMaxStack = 256;

  const node_id* child_begin = nullptr;  // [nodes + 1]: node n's children are children[child_begin[n] ..)
  const node_id* children = nullptr;     // [nodes - 1]
  node_id n_nodes = 0;
  int height = 0;  // levels: a lone root is 1

  CANOPY_HD bool is_leaf(node_id n) const { return child_begin[n] == child_begin[n + 1]; }
  CANOPY_HD int child_count(node_id n) const { return child_begin[n + 1] - child_begin[n]; }
  CANOPY_HD node_id child(node_id n, int i) const { return children[child_begin[n] + i]; }
};

// The shape of a flattened tree, without payloads.
struct GraphTreeShape {
  std::vector<node_id> child_begin{0};
  std::vector<node_id> children;
  std::vector<index_t> vertex_of;  // node -> the caller's vertex
  std::vector<node_id> node_of;    // the caller's vertex -> node
  int height = 0;
  int max_children = 0;
  int stack_needed = 0;  // the most rope-stack entries any traversal of this tree can hold

  node_id size() const { return static_cast<node_id>(vertex_of.size()); }
  GraphTreeView view() const {
    return {child_begin.data(), children.data(), size(), height};
  }

  // Checks that the graph with `vertices` vertices and out-edge lists (CSR: vertex v's
  // children are target[edge_begin[v] .. edge_begin[v + 1]), in order) is a rooted tree (one
  // vertex without a parent, every other vertex with exactly one, all reachable from the
  // root) and flattens it. Anything else is a canopy::Error that names the offending vertices,
  // as is a tree needing more than GraphTreeView::kMaxStack stack entries or 2^31 nodes.
  static GraphTreeShape flatten(index_t vertices, const std::vector<index_t>& edge_begin,
                                const std::vector<index_t>& target);
};

template <class Payload>
class GraphTree {
 public:
  // children[v]: vertex v's children, in visit order; payload_of(v) gives vertex v's payload.
  template <class PayloadOf>
  static GraphTree from_children(const std::vector<std::vector<index_t>>& children, PayloadOf&& payload_of) {
    std::vector<index_t> begin{0}, target;
    for (const auto& c : children) {
      target.insert(target.end(), c.begin(), c.end());
      begin.push_back(static_cast<index_t>(target.size()));
    }
    return from_shape(GraphTreeShape::flatten(static_cast<index_t>(children.size()), begin, target), payload_of);
  }

  // A flattened shape plus payload_of(vertex) for each of its nodes.
  template <class PayloadOf>
  static GraphTree from_shape(GraphTreeShape&& shape, PayloadOf&& payload_of) {
    GraphTree t;
    t.payload_.reserve(shape.vertex_of.size());
    for (index_t v : shape.vertex_of) t.payload_.push_back(payload_of(v));
    t.shape_ = std::move(shape);
    return t;
  }

  GraphTreeView view() const { return shape_.view(); }
  const GraphTreeShape& shape() const { return shape_; }
  // payload()[n]: node n's payload (depth-first order).
  const std::vector<Payload>& payload() const { return payload_; }
  node_id size() const { return shape_.size(); }
  int height() const { return shape_.height; }
  int max_children() const { return shape_.max_children; }
  index_t vertex_of(node_id n) const { return shape_.vertex_of[n]; }
  node_id node_of(index_t vertex) const { return shape_.node_of[vertex]; }

 private:
  GraphTreeShape shape_;
  std::vector<Payload> payload_;
};

}  // namespace canopy
