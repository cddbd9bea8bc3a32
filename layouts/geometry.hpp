// The geometry every tree and workload shares: coordinates padded to 2, 4, 8 or 16 floats, and
// squared distances computed with correctly rounded operations in one summation order, so the
// builders, the CPU and the GPU take bit-identical decisions.
#pragma once

#include <string>
#include <type_traits>

#include "core/rounding.hpp"

namespace canopy {

constexpr int kMaxDims = 16;

// Coordinates are stored padded with zeros to the next of 2, 4, 8 or 16 floats, so a GPU
// thread reads a point or a box half with 8- or 16-byte loads and distance code needs no
// per-dimension guard. Zero padding leaves every distance unchanged.
constexpr int padded_dims(int dims) { return dims <= 2 ? 2 : dims <= 4 ? 4 : dims <= 8 ? 8 : 16; }

// Loads N consecutive floats (a padded point or box half); 16- or 8-byte loads on the GPU.
template <int N>
CANOPY_HD inline void load_padded(const float* src, float (&dst)[N]) {
#if defined(__CUDA_ARCH__)
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(src) + i);
      dst[4 * i] = v.x;
      dst[4 * i + 1] = v.y;
      dst[4 * i + 2] = v.z;
      dst[4 * i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 v = __ldg(reinterpret_cast<const float2*>(src) + i);
      dst[2 * i] = v.x;
      dst[2 * i + 1] = v.y;
    }
  }
#else
  for (int i = 0; i < N; ++i) dst[i] = src[i];
#endif
}

// Sums N (a power of two) terms as a balanced tree: a short dependency chain on the GPU, and
// the same rounding everywhere. Zero terms from padding change nothing, so the value is the
// same for every padded width that holds the dimensions.
template <int N>
CANOPY_HD inline float pairwise_sum(float (&t)[N]) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int w = 1; w < N; w *= 2) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int i = 0; i + w < N; i += 2 * w) t[i] = add_rn(t[i], t[i + w]);
  }
  return t[0];
}

// Squared distance from q to the box [lo, hi], all three padded to MaxDim floats. It uses the
// same rounded operations and summation tree as point_distance2; rounding is monotonic, so for
// every point p inside the box box_distance2 <= point_distance2(q, p): pruning never drops a
// point that the brute-force count keeps.
template <int MaxDim>
CANOPY_HD inline float box_distance2(const float (&q)[MaxDim], const float* lo, const float* hi) {
  float l[MaxDim], h[MaxDim], t[MaxDim];
  load_padded(lo, l);
  load_padded(hi, h);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int d = 0; d < MaxDim; ++d) {
    const float gap = fmaxf(fmaxf(sub_rn(l[d], q[d]), sub_rn(q[d], h[d])), 0.0f);
    t[d] = mul_rn(gap, gap);
  }
  return pairwise_sum(t);
}

template <int MaxDim>
CANOPY_HD inline float point_distance2(const float (&q)[MaxDim], const float* p) {
  float x[MaxDim], t[MaxDim];
  load_padded(p, x);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int d = 0; d < MaxDim; ++d) {
    const float diff = sub_rn(q[d], x[d]);
    t[d] = mul_rn(diff, diff);
  }
  return pairwise_sum(t);
}

// A row of `dims` floats as a zero-padded MaxDim array.
template <int MaxDim>
CANOPY_HD inline void load_query(const float* src, int dims, float (&q)[MaxDim]) {
  for (int d = 0; d < MaxDim; ++d) q[d] = d < dims ? src[d] : 0.0f;
}

// Calls f(std::integral_constant<int, padded_dims(dims)>{}); the library instantiates its
// kernels for exactly these four widths.
template <class F>
decltype(auto) dispatch_dims(int dims, F&& f) {
  if (dims <= 2) return f(std::integral_constant<int, 2>{});
  if (dims <= 4) return f(std::integral_constant<int, 4>{});
  if (dims <= 8) return f(std::integral_constant<int, 8>{});
  if (dims <= kMaxDims) return f(std::integral_constant<int, 16>{});
  throw Error("dims = " + std::to_string(dims) + " is outside 1.." + std::to_string(kMaxDims));
}

// The distance D(q, p) the metric trees store and prune with.
template <int MaxDim>
CANOPY_HD inline float point_distance(const float (&q)[MaxDim], const float* p) {
  return sqrt_rn(point_distance2(q, p));
}

}  // namespace canopy
