// Point correlation (the paper's Figure 1): for each query, count the tree points within
// Euclidean radius r, truncating at nodes whose bounding box lies farther than r.
#pragma once

#include <string>
#include <type_traits>

#include "layouts/kdtree.hpp"
#include "runtime/common.hpp"

namespace canopy {

// Squared distance from q to the box [lo, hi]. Computed with the same rounded operations, in
// the same dimension order, as point_distance2; float rounding is monotonic, so for every
// point p inside the box box_distance2 <= point_distance2(q, p) and pruning never drops a
// point the brute-force count keeps.
template <int MaxDim>
CANOPY_HD inline float box_distance2(const float* q, const float* lo, const float* hi, int dims) {
  float s = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int d = 0; d < MaxDim; ++d) {
    if (d < dims) {
      float gap = 0.0f;
      if (q[d] < lo[d]) gap = sub_rn(lo[d], q[d]);
      else if (q[d] > hi[d]) gap = sub_rn(q[d], hi[d]);
      s = add_rn(s, mul_rn(gap, gap));
    }
  }
  return s;
}

template <int MaxDim>
CANOPY_HD inline float point_distance2(const float* q, const float* p, int dims) {
  float s = 0.0f;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int d = 0; d < MaxDim; ++d) {
    if (d < dims) {
      // |q - p| is what the box gap bounds from below; square the non-negative difference.
      const float diff = q[d] >= p[d] ? sub_rn(q[d], p[d]) : sub_rn(p[d], q[d]);
      s = add_rn(s, mul_rn(diff, diff));
    }
  }
  return s;
}

// MaxDim is the capacity of the register-held query (2, 4, 8 or 16); dims <= MaxDim.
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
    const float* src = queries + query * tree.dims;
    for (int d = 0; d < MaxDim; ++d) s.q[d] = d < tree.dims ? src[d] : 0.0f;
    s.count = 0;
    return s;
  }
  CANOPY_HD bool descend(State& s, node_id n) const {
    return box_distance2<MaxDim>(s.q, tree.lo(n), tree.hi(n), tree.dims) <= radius2;
  }
  CANOPY_HD void leaf(State& s, node_id n) const {
    const KdNode node = tree.nodes[n];
    for (index_t i = node.first; i < node.first + node.count; ++i)
      if (point_distance2<MaxDim>(s.q, tree.point(i), tree.dims) <= radius2) ++s.count;
  }
  CANOPY_HD void finish(State& s, index_t query) const { counts[query] = s.count; }
};

// Calls f(std::integral_constant<int, MaxDim>{}) with the smallest register capacity that
// holds dims; the library instantiates its kernels for exactly these four.
template <class F>
decltype(auto) dispatch_dims(int dims, F&& f) {
  if (dims <= 2) return f(std::integral_constant<int, 2>{});
  if (dims <= 4) return f(std::integral_constant<int, 4>{});
  if (dims <= 8) return f(std::integral_constant<int, 8>{});
  if (dims <= kMaxDims) return f(std::integral_constant<int, 16>{});
  throw Error("dims = " + std::to_string(dims) + " is outside 1.." + std::to_string(kMaxDims));
}

}  // namespace canopy
