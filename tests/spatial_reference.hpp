// The reference for SpatialOrder's cells (scheduler/spatial_order.hpp), independent of its heap:
// each query's cell found by walking the kd-tree itself, and the stable sort by it. Used by the
// unit tests and the MPI tests of spatial shards, with the clustered points both take; and the
// MPI tests' tie case.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "layouts/kdtree.hpp"

namespace canopy {
namespace test {

// Points in blobs of `blob` consecutive points, each Gaussian (sigma) around a centre drawn
// uniformly in the unit cube; the same on every rank for a seed.
inline std::vector<float> blob_points(index_t n, int dims, unsigned seed, float sigma, index_t blob) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> centre(static_cast<std::size_t>(dims)), p;
  for (index_t i = 0; i < n; ++i) {
    if (i % blob == 0)
      for (float& c : centre) c = u(rng);
    for (int d = 0; d < dims; ++d) p.push_back(centre[static_cast<std::size_t>(d)] + g(rng));
  }
  return p;
}

// The cell of q: `depth` steps of the tree's descent (ties go left, as find_leaf), the path's
// bits left to right; a leaf met sooner continues left.
inline std::uint32_t cell_by_walk(const KdTreeView& v, const float* q, int depth) {
  node_id node = 0;
  std::uint32_t key = 0;
  for (int l = 0; l < depth; ++l) {
    if (v.is_leaf(node)) {
      key <<= depth - l;
      break;
    }
    const int d = v.nodes[node].split_dim;
    const bool right = q[d] > v.hi(node + 1)[d];
    key = 2 * key + (right ? 1u : 0u);
    node = v.child(node, right ? 1 : 0);
  }
  return key;
}

// The queries [n][tree.dims()] stably sorted by cell_by_walk.
inline std::vector<index_t> stable_by_cell(const KdTree& tree, const float* queries, index_t n, int depth) {
  const KdTreeView v = tree.view();
  std::vector<std::uint32_t> cell(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) cell[static_cast<std::size_t>(i)] = cell_by_walk(v, queries + i * v.dims, depth);
  std::vector<index_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](index_t a, index_t b) { return cell[static_cast<std::size_t>(a)] < cell[static_cast<std::size_t>(b)]; });
  return ids;
}

// 2-d points where two squared distances round to one distance: (1, y) lies farther than (1, 0)
// from the origin (1 + 2^-23 against 1) at the same float distance 1, and has the lower index;
// then 60 points far off; and three queries, the origin first. The kNN merges of the partitioned
// trees must order them as one process.
struct TieCase {
  std::vector<float> points, queries;
  index_t n = 0;
};
inline TieCase squared_distance_tie() {
  TieCase c;
  const float y = 1.5f * std::ldexp(1.0f, -12);
  c.points = {1.0f, y, 1.0f, 0.0f};
  for (int i = 0; i < 60; ++i) {
    c.points.push_back(3.0f + static_cast<float>(i));
    c.points.push_back(static_cast<float>(i % 5));
  }
  c.n = static_cast<index_t>(c.points.size()) / 2;
  c.queries = {0.0f, 0.0f, 0.5f, 0.25f, 2.0f, 0.0f};
  return c;
}

}  // namespace test
}  // namespace canopy
