// The k-NN workloads that test_knn.cpp and test_knn_guided.cpp share.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "io/dataset.hpp"
#include "runtime/knn_visitor.hpp"
#include "test_util.hpp"

namespace canopy {
namespace knn_test {

template <class Tree>
Tree build_tree(const std::vector<float>& points, int dims) {
  return Tree::build(points.data(), static_cast<index_t>(points.size()) / dims, dims);
}

// Queries: random points plus exact copies of tree points (distance 0, ties with duplicates).
inline std::vector<float> make_queries(const std::vector<float>& points, int dims, index_t m, std::uint64_t seed) {
  std::vector<float> q = test::random_points(m, dims, seed);
  const index_t n = static_cast<index_t>(points.size()) / dims;
  for (index_t i = 0; i < m; i += 5) std::copy_n(&points[(i * 7 % n) * dims], dims, &q[i * dims]);
  return q;
}

// The paper's NN setup on the real subsets: a seeded random half builds the tree, the other
// half queries it.
inline void split_halves(const PointSet& ps, std::vector<float>& build, std::vector<float>& query) {
  std::mt19937_64 rng(5);
  for (index_t i = 0; i < ps.size(); ++i) {
    std::vector<float>& half = rng() & 1 ? query : build;
    half.insert(half.end(), ps.data() + i * ps.dims, ps.data() + (i + 1) * ps.dims);
  }
}

// The k-NN workload the guided checks walk: n clustered points (seed `seed`), m queries
// near them (seed + 1), the tree over the points and its visitor of k (the width a template
// argument), handed to f(points, queries, tree, view, visitor).
template <class Tree, class F>
void on_knn_workload(int dims, index_t n, index_t m, int k, std::uint64_t seed, F&& f) {
  const std::vector<float> points = test::clustered_points(n, dims, seed);
  const std::vector<float> queries = make_queries(points, dims, m, seed + 1);
  const Tree tree = build_tree<Tree>(points, dims);
  const auto view = tree.view();
  std::vector<float> dist(m * k);
  std::vector<index_t> index(m * k);
  dispatch_dims(dims, [&](auto md) {
    f(points, queries, tree, view, make_knn_visitor<decltype(md)::value>(view, queries.data(), k, dist.data(), index.data()));
  });
}

}  // namespace knn_test
}  // namespace canopy
