// Point correlation (the paper's Figure 1): for each query, count the tree points within
// Euclidean radius r, truncating at nodes whose bounding box lies farther than r.
#pragma once

#include "layouts/kdtree.hpp"

namespace canopy {

// MaxDim is the padded width of the register-held query: padded_dims(tree.dims).
template <int MaxDim>
struct PointCorrelationVisitor {
  KdTreeView tree;
  const float* queries = nullptr;  // row-major [queries][dims]
  index_t* counts = nullptr;       // [queries]
  float radius2 = 0.0f;

  struct State {
    float q[MaxDim];
    index_t count;
  };

  CANOPY_HD State init(index_t query) const {
    State s;
    load_query(queries + query * tree.dims, tree.dims, s.q);
    s.count = 0;
    return s;
  }
  CANOPY_HD bool descend(State& s, node_id n) const {
    return box_distance2(s.q, tree.lo(n), tree.hi(n)) <= radius2;
  }
  // The side of the split the query lies on, ties left as in find_leaf (the key inspector's
  // hint; it changes no visit): the key is then the top-leaf holding the query, so queries that
  // share a top-leaf run together however large the radius, and the walk is one descent.
  CANOPY_HD int home_child(const State& s, node_id n) const {
    const int d = tree.nodes[n].split_dim;
    return s.q[d] <= tree.hi(n + 1)[d] ? 0 : 1;
  }
  CANOPY_HD void leaf(State& s, node_id n) const {
    const KdNode node = tree.nodes[n];
    for (index_t i = node.first; i < node.first + node.count; ++i)
      if (point_distance2(s.q, tree.point(i)) <= radius2) ++s.count;
  }
  CANOPY_HD void finish(State& s, index_t query) const { counts[query] = s.count; }
};

// Most radii one walk counts at (PcRadiiVisitor; PointCorrelation::run_radii).
constexpr int kMaxPcRadii = 32;

// Point correlation at several radii in one walk (the two-point correlation's bins): the walk of
// the largest radius, each point within it counted in the bin of the first radius it is within,
// and finish() turning the bins into cumulative counts. counts[q][j] is then exactly
// PointCorrelationVisitor's count at radii2[j]; the nodes visited are its at the largest.
template <int MaxDim>
struct PcRadiiVisitor {
  KdTreeView tree;
  const float* queries = nullptr;  // row-major [queries][dims]
  index_t* counts = nullptr;       // [queries][n_radii]: the bins, then the counts
  int n_radii = 1;
  float radii2[kMaxPcRadii] = {};  // non-decreasing

  struct State {
    float q[MaxDim];
    index_t* row;
  };

  CANOPY_HD State init(index_t query) const {
    State s;
    load_query(queries + query * tree.dims, tree.dims, s.q);
    s.row = counts + query * n_radii;
    for (int j = 0; j < n_radii; ++j) s.row[j] = 0;
    return s;
  }
  CANOPY_HD bool descend(State& s, node_id n) const {
    return box_distance2(s.q, tree.lo(n), tree.hi(n)) <= radii2[n_radii - 1];
  }
  CANOPY_HD int home_child(const State& s, node_id n) const {
    const int d = tree.nodes[n].split_dim;
    return s.q[d] <= tree.hi(n + 1)[d] ? 0 : 1;
  }
  CANOPY_HD void leaf(State& s, node_id n) const {
    const KdNode node = tree.nodes[n];
    const float outer = radii2[n_radii - 1];
    for (index_t i = node.first; i < node.first + node.count; ++i) {
      const float d2 = point_distance2(s.q, tree.point(i));
      if (!(d2 <= outer)) continue;
      // The radii are compared at compile-time indices: a dynamic index into the visitor (a
      // kernel parameter) would copy it to local memory.
      int bin = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int j = 0; j < kMaxPcRadii; ++j) bin += (j < n_radii && d2 > radii2[j]) ? 1 : 0;
      ++s.row[bin];
    }
  }
  CANOPY_HD void finish(State& s, index_t) const {
    index_t sum = 0;
    for (int j = 0; j < n_radii; ++j) {
      sum += s.row[j];
      s.row[j] = sum;
    }
  }
};

}  // namespace canopy
