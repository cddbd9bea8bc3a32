// The paper's reduction from Hamiltonian path to Sched (§3.1), built as a user tree through
// Boost.Graph and traced through Canopy: the proof's claims checked by brute force.
//
// The tree: a root whose children are x, one node E_j per graph edge, and y. Below x and y hang
// chains of 4|E| nodes that only p_x (resp. p_y) accepts; below each E_j one leaf. The point
// p_i of vertex v_i accepts E_j when v_i is an end of edge j. A visit set holds every node at
// which the traversal is asked to descend (accepted or not), so for vertices v_i, v_k
//   |δ(p_i, p_k)| = |E(v_i)| + |E(v_k)| - 2 [v_i ~ v_k],   |δ(p_x, p_i)| = 4|E| + |E(v_i)|,
// and an order with p_x and p_y at its ends has Δ = 12|E| - 2Q (Q: consecutive adjacent pairs).
#include <gtest/gtest.h>

#include <boost/graph/adjacency_list.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "layouts/graph_tree_boost.hpp"
#include "runtime/custom.hpp"
#include "runtime/schedule_quality.hpp"

namespace canopy {
namespace {

using Edge = std::pair<int, int>;

enum Colour : std::int32_t { kWhite, kRed, kGreen, kBlue };
struct Paint {
  Colour colour;
  std::int32_t edge;  // kBlue: the graph edge this node stands for
};

// can_correlate of the proof as a Canopy visitor; queries 0..V-1 are the vertices, V is p_x,
// V + 1 is p_y.
struct ReductionVisitor {
  const Paint* paint;
  const Edge* edges;
  int vertices;
  std::int32_t* reached;  // leaves reached, per query (a result, so finish() has one to write)
  struct State {
    int q;
    std::int32_t leaves;
  };
  State init(index_t q) const { return {static_cast<int>(q), 0}; }
  bool descend(State& s, node_id n) const {
    switch (paint[n].colour) {
      case kWhite: return true;
      case kRed: return s.q == vertices;
      case kGreen: return s.q == vertices + 1;
      case kBlue: {
        const Edge e = edges[paint[n].edge];
        return s.q == e.first || s.q == e.second;
      }
    }
    return false;
  }
  void leaf(State& s, node_id) const { ++s.leaves; }
  void finish(State& s, index_t q) const { reached[q] = s.leaves; }
};

GraphTree<Paint> reduction_tree(const std::vector<Edge>& edges) {
  using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, Paint>;
  G g;
  const auto root = boost::add_vertex(Paint{kWhite, -1}, g);
  const int m = static_cast<int>(edges.size());
  auto chain = [&](Colour c) {
    auto top = boost::add_vertex(Paint{c, -1}, g);
    boost::add_edge(root, top, g);
    for (int i = 0; i < 4 * m; ++i) {
      const auto next = boost::add_vertex(Paint{c, -1}, g);
      boost::add_edge(top, next, g);
      top = next;
    }
  };
  chain(kRed);  // x
  for (int j = 0; j < m; ++j) {
    const auto e = boost::add_vertex(Paint{kBlue, j}, g);
    boost::add_edge(root, e, g);
    boost::add_edge(e, boost::add_vertex(Paint{kWhite, -1}, g), g);
  }
  chain(kGreen);  // y
  return flatten_tree(g);
}

// Held-Karp over vertex subsets: an independent test for a Hamiltonian path.
bool has_hamiltonian_path(int n, const std::vector<Edge>& edges) {
  std::vector<std::vector<bool>> adj(n, std::vector<bool>(n, false));
  for (auto [a, b] : edges) adj[a][b] = adj[b][a] = true;
  std::vector<std::vector<bool>> can(1 << n, std::vector<bool>(n, false));
  for (int v = 0; v < n; ++v) can[1 << v][v] = true;
  for (int s = 1; s < (1 << n); ++s)
    for (int v = 0; v < n; ++v)
      if (can[s][v])
        for (int w = 0; w < n; ++w)
          if (!(s >> w & 1) && adj[v][w]) can[s | 1 << w][w] = true;
  for (int v = 0; v < n; ++v)
    if (can[(1 << n) - 1][v]) return true;
  return false;
}

struct Case {
  const char* name;
  int vertices;
  std::vector<Edge> edges;
};

std::vector<Case> cases() {
  std::vector<Case> c = {
      {"path P5", 5, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}},
      {"star K1,4", 5, {{0, 1}, {0, 2}, {0, 3}, {0, 4}}},
      {"complete K4", 4, {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}},
      {"cycle C6", 6, {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 0}}},
      {"two triangles", 6, {{0, 1}, {1, 2}, {2, 0}, {3, 4}, {4, 5}, {5, 3}}},
      {"spider (3 legs of 2)", 7, {{0, 1}, {1, 2}, {0, 3}, {3, 4}, {0, 5}, {5, 6}}},
  };
  std::mt19937 rng(2016);
  for (int t = 0; t < 6; ++t) {
    Case r{"random", 6 + t % 3, {}};
    for (int a = 0; a < r.vertices; ++a)
      for (int b = a + 1; b < r.vertices; ++b)
        if (rng() % 100 < 30) r.edges.push_back({a, b});
    if (r.edges.empty()) r.edges.push_back({0, 1});
    c.push_back(r);
  }
  return c;
}

TEST(SchedReduction, DeltaIs12EMinus2QAndTheOptimumFindsAHamiltonianPathExactlyWhenOneExists) {
  int with_path = 0, without_path = 0;
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(c.name) + ", |V| = " + std::to_string(c.vertices) + ", |E| = " +
                 std::to_string(c.edges.size()));
    const int V = c.vertices, m = static_cast<int>(c.edges.size());
    const GraphTree<Paint> tree = reduction_tree(c.edges);
    std::vector<std::int32_t> reached(V + 2);
    const ReductionVisitor v{tree.payload().data(), c.edges.data(), V, reached.data()};
    std::vector<index_t> all(V + 2);
    std::iota(all.begin(), all.end(), 0);
    const VisitSets sets = collect_visit_sets(tree.view(), v, all);

    std::vector<std::vector<bool>> adj(V, std::vector<bool>(V, false));
    for (auto [a, b] : c.edges) adj[a][b] = adj[b][a] = true;
    // Every order with p_x first and p_y last.
    std::vector<index_t> mid(V);
    std::iota(mid.begin(), mid.end(), 0);
    std::int64_t best_ends = INT64_MAX;
    do {
      std::vector<index_t> order{V};
      order.insert(order.end(), mid.begin(), mid.end());
      order.push_back(V + 1);
      int q = 0;
      for (int i = 0; i + 1 < V; ++i) q += adj[mid[i]][mid[i + 1]];
      const std::int64_t delta = schedule_delta(sets, order.data(), V + 2);
      ASSERT_EQ(delta, 12 * m - 2 * q);
      best_ends = std::min(best_ends, delta);
    } while (std::next_permutation(mid.begin(), mid.end()));
    const bool hp = has_hamiltonian_path(V, c.edges);
    EXPECT_EQ(best_ends == 12 * m - 2 * (V - 1), hp);
    (hp ? with_path : without_path)++;

    // Over all (V + 2)! orders the optimum puts p_x and p_y at the ends: the same minimum.
    std::vector<std::vector<std::int64_t>> d(V + 2, std::vector<std::int64_t>(V + 2));
    for (int a = 0; a < V + 2; ++a)
      for (int b = 0; b < V + 2; ++b)
        d[a][b] = symmetric_difference_size(sets.data(a), sets.count(a), sets.data(b), sets.count(b));
    std::vector<int> perm(V + 2);
    std::iota(perm.begin(), perm.end(), 0);
    std::int64_t best = INT64_MAX;
    if (V <= 6) {
      do {
        std::int64_t delta = 0;
        for (int i = 0; i + 1 < V + 2; ++i) delta += d[perm[i]][perm[i + 1]];
        best = std::min(best, delta);
      } while (std::next_permutation(perm.begin(), perm.end()));
      EXPECT_EQ(best, best_ends);
    } else {
      best = best_ends;
    }

    // The MST of the difference graph bounds the optimum from below; its preorder is 2-approximate.
    const MstBound mst = mst_bound(sets);
    EXPECT_LE(mst.weight, best);
    EXPECT_LE(best, mst.preorder_delta);
    EXPECT_LE(mst.preorder_delta, 2 * mst.weight);
  }
  EXPECT_GT(with_path, 0);
  EXPECT_GT(without_path, 0);
}

TEST(SchedReduction, TheReductionTreeRunsThroughTheInspectorAndSchedulerUnchanged) {
  const std::vector<Edge> edges = {{0, 1}, {1, 2}, {2, 3}, {0, 3}, {1, 3}};
  const GraphTree<Paint> tree = reduction_tree(edges);
  const int V = 4;
  std::vector<std::int32_t> plain(V + 2), scheduled(V + 2);
  TraversalOptions o;
  o.schedule = ScheduleKind::InputOrder;
  traverse_cpu(tree.view(), ReductionVisitor{tree.payload().data(), edges.data(), V, plain.data()}, V + 2, o);
  o.schedule = ScheduleKind::Hybrid;
  o.depth = 2;
  traverse_cpu(tree.view(), ReductionVisitor{tree.payload().data(), edges.data(), V, scheduled.data()}, V + 2, o);
  EXPECT_EQ(plain, scheduled);
  EXPECT_EQ(plain, (std::vector<std::int32_t>{2, 3, 2, 3, 1, 1}));  // |E(v_i)| leaves; p_x, p_y one chain end each
}

}  // namespace
}  // namespace canopy
