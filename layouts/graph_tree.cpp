#include "layouts/graph_tree.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace canopy {
namespace {

std::string vertex_list(const std::vector<index_t>& v) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(v.size(), 5);
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > shown) s += ", ...";
  return s;
}

}  // namespace

GraphTreeShape GraphTreeShape::flatten(index_t vertices, const std::vector<index_t>& edge_begin,
                                       const std::vector<index_t>& target) {
  if (vertices <= 0) throw Error("not a tree: the graph has no vertices");
  if (vertices > std::numeric_limits<node_id>::max() - 1)
    throw Error("the graph has " + std::to_string(vertices) + " vertices; a Canopy tree holds at most 2^31 - 2 nodes");
  if (static_cast<index_t>(edge_begin.size()) != vertices + 1 ||
      edge_begin.back() != static_cast<index_t>(target.size()))
    throw Error("GraphTreeShape::flatten: edge_begin must hold vertices + 1 offsets ending at target.size()");

  std::vector<index_t> parent(static_cast<std::size_t>(vertices), -1);
  for (index_t v = 0; v < vertices; ++v) {
    for (index_t e = edge_begin[v]; e < edge_begin[v + 1]; ++e) {
      const index_t t = target[e];
      if (t < 0 || t >= vertices)
        throw Error("not a tree: vertex " + std::to_string(v) + " has an edge to vertex " + std::to_string(t) +
                    ", which does not exist");
      if (t == v) throw Error("not a tree: vertex " + std::to_string(v) + " has an edge to itself");
      if (parent[t] >= 0)
        throw Error("not a tree: vertex " + std::to_string(t) + " has two parents (vertices " +
                    std::to_string(parent[t]) + " and " + std::to_string(v) + ")");
      parent[t] = v;
    }
  }
  std::vector<index_t> roots;
  for (index_t v = 0; v < vertices; ++v)
    if (parent[v] < 0) roots.push_back(v);
  if (roots.empty()) throw Error("not a tree: every vertex has a parent, so there is no root (the graph has a cycle)");
  if (roots.size() > 1)
    throw Error("not a tree: " + std::to_string(roots.size()) + " vertices have no parent (" + vertex_list(roots) +
                "); a rooted tree has exactly one root");

  GraphTreeShape s;
  s.node_of.assign(static_cast<std::size_t>(vertices), kNoNode);
  s.vertex_of.reserve(static_cast<std::size_t>(vertices));
  // Depth-first preorder; each stack entry carries its depth and the stack entries its
  // pending siblings hold, which is what a traversal's rope stack holds there.
  struct Item {
    index_t v;
    int depth;
    index_t pending;
  };
  std::vector<Item> stack{{roots[0], 0, 0}};
  index_t need = 1;
  index_t widest_at = roots[0];
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    s.node_of[it.v] = static_cast<node_id>(s.vertex_of.size());
    s.vertex_of.push_back(it.v);
    s.height = std::max(s.height, it.depth + 1);
    const index_t c = edge_begin[it.v + 1] - edge_begin[it.v];
    s.max_children = static_cast<int>(std::max<index_t>(s.max_children, c));
    if (it.pending + c > need) {
      need = it.pending + c;
      widest_at = it.v;
    }
    for (index_t e = edge_begin[it.v + 1] - 1; e >= edge_begin[it.v]; --e)
      stack.push_back({target[e], it.depth + 1, it.pending + c - 1});
  }
  if (static_cast<index_t>(s.vertex_of.size()) < vertices) {
    index_t lost = 0;
    while (s.node_of[lost] != kNoNode) ++lost;
    throw Error("not a tree: vertex " + std::to_string(lost) + " is not reachable from the root (vertex " +
                std::to_string(roots[0]) + "); it lies on a cycle");
  }
  if (need > GraphTreeView::kMaxStack)
    throw Error("the tree needs up to " + std::to_string(need) + " traversal stack entries (at vertex " +
                std::to_string(widest_at) + ", where the pending siblings of its ancestors add up); a graph tree may need at most " +
                std::to_string(GraphTreeView::kMaxStack) + ": give wide nodes fewer children or shallower subtrees");
  s.stack_needed = static_cast<int>(need);

  s.child_begin.reserve(static_cast<std::size_t>(vertices) + 1);
  s.children.reserve(static_cast<std::size_t>(vertices) - 1);
  for (index_t v : s.vertex_of) {
    for (index_t e = edge_begin[v]; e < edge_begin[v + 1]; ++e) s.children.push_back(s.node_of[target[e]]);
    s.child_begin.push_back(static_cast<node_id>(s.children.size()));
  }
  return s;
}

}  // namespace canopy
