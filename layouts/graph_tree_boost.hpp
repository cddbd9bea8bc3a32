// A Boost.Graph tree handed to Canopy: a directed graph (adjacency_list with directedS or
// bidirectionalS; vecS out-edge lists keep the children in insertion order) whose edges go
// from parent to child, with the node payloads as bundled vertex properties.
//
//   using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, Cell>;
//   G g; ... add_vertex(cell, g); add_edge(parent, child, g); ...
//   canopy::GraphTree<Cell> tree = canopy::flatten_tree(g);       // payload = the bundle
//   auto t2 = canopy::flatten_tree(g, [](const Cell& c) { return DeviceCell{c}; });  // or converted
//
// flatten_tree checks that the graph is a rooted tree (one root, one parent for every other
// vertex, all reachable: a clear canopy::Error otherwise) and lays it out depth-first.
#pragma once

#include <type_traits>
#include <vector>

#include <boost/graph/graph_traits.hpp>
#include <boost/graph/properties.hpp>

#include "layouts/graph_tree.hpp"

namespace canopy {

template <class Graph>
GraphTreeShape flatten_tree_shape(const Graph& g) {
  static_assert(std::is_convertible<typename boost::graph_traits<Graph>::directed_category, boost::directed_tag>::value,
                "flatten_tree needs a directed graph whose edges go from parent to child");
  const auto index = get(boost::vertex_index, g);
  const index_t n = static_cast<index_t>(num_vertices(g));
  std::vector<index_t> begin(static_cast<std::size_t>(n) + 1, 0), targets;
  targets.reserve(static_cast<std::size_t>(num_edges(g)));
  // Vertex indices need not come in iteration order, so gather per index, then concatenate.
  std::vector<std::vector<index_t>> out(static_cast<std::size_t>(n));
  for (auto [v, vend] = vertices(g); v != vend; ++v)
    for (auto [e, eend] = out_edges(*v, g); e != eend; ++e)
      out[get(index, *v)].push_back(static_cast<index_t>(get(index, target(*e, g))));
  for (index_t v = 0; v < n; ++v) {
    targets.insert(targets.end(), out[v].begin(), out[v].end());
    begin[v + 1] = static_cast<index_t>(targets.size());
  }
  return GraphTreeShape::flatten(n, begin, targets);
}

// payload_of(bundle) -> the payload stored for that node.
template <class Graph, class PayloadOf>
auto flatten_tree(const Graph& g, PayloadOf&& payload_of) {
  using Bundle = typename boost::vertex_bundle_type<Graph>::type;
  using Payload = std::decay_t<decltype(payload_of(std::declval<const Bundle&>()))>;
  std::vector<typename boost::graph_traits<Graph>::vertex_descriptor> by_index(num_vertices(g));
  const auto index = get(boost::vertex_index, g);
  for (auto [v, vend] = vertices(g); v != vend; ++v) by_index[get(index, *v)] = *v;
  return GraphTree<Payload>::from_shape(flatten_tree_shape(g),
                                        [&](index_t v) { return payload_of(g[by_index[v]]); });
}

template <class Graph>
auto flatten_tree(const Graph& g) {
  using Bundle = typename boost::vertex_bundle_type<Graph>::type;
  return flatten_tree(g, [](const Bundle& b) { return b; });
}

}  // namespace canopy
