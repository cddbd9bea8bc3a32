// The group executor: a warp walks the tree once for its 32 scheduled queries, bounded by the
// box around them, and every lane takes every leaf the walk reaches. For guided visitors that
// can bound a node's distance from a box of queries (group_visitor_v below); the kNN visitor
// over a kd-tree is one. Include through executor/gpu_kernels.cuh.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "executor/traversal.hpp"
#include "core/cuda.cuh"

namespace canopy {

// A visitor the group executor can run declares
//   kGroupDims                              the coordinates of a query's point (compile time)
//   group_point(State, float (&x)[D])       the query's point
//   group_distance(lo, hi, node)            a lower bound of group_bound's measure over every
//                                           query in the box [lo, hi] and every point of node
//   group_bound(State)                      a node whose group_distance exceeds this holds
//                                           nothing the query would take (it may shrink as
//                                           leaves are taken, never grow)
// For such a visitor a lane skipped by the warp's walk is one whose own walk would prune the
// same node, so the result is the lane's own walk's (the visitor's answer does not depend on
// the order its leaves come in: guided visitors promise that).
template <class V, class = void>
struct group_visitor : std::false_type {};
template <class V>
struct group_visitor<V, std::void_t<decltype(V::kGroupDims),
                                    decltype(std::declval<const V&>().group_bound(std::declval<const typename V::State&>()))>>
    : std::true_type {};
template <class V>
constexpr bool group_visitor_v = group_visitor<V>::value;

namespace gpu {

constexpr int kGroupWarpsPerBlock = 4;

__device__ __forceinline__ float warp_min(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// warp_nodes, when given, gets each warp's visited nodes. Each pending node carries the group distance it was pushed with: a pop rechecks it against the
// bound, which has only shrunk since, without reloading the node.
template <class Topology, class Visitor>
__global__ void __launch_bounds__(kGroupWarpsPerBlock * 32)
group_kernel(Topology tree, Visitor v, const index_t* order, index_t n, index_t* warp_nodes) {
  constexpr int D = Visitor::kGroupDims;
  __shared__ node_id stack_node[kGroupWarpsPerBlock][Topology::kMaxStack];
  __shared__ float stack_dist[kGroupWarpsPerBlock][Topology::kMaxStack];
  const int lane = threadIdx.x & 31;
  const int wib = threadIdx.x >> 5;
  const index_t warp = blockIdx.x * static_cast<index_t>(kGroupWarpsPerBlock) + wib;
  if (warp * 32 >= n) return;  // whole warps only
  const index_t slot = warp * 32 + lane;
  const bool valid = slot < n;
  const index_t q = valid ? scheduled_query(order, slot) : 0;
  typename Visitor::State s;
  constexpr float inf = std::numeric_limits<float>::infinity();
  float lo[D], hi[D];
  {
    float x[D];
    if (valid) {
      s = v.init(q);
      v.group_point(s, x);
    }
#pragma unroll
    for (int d = 0; d < D; ++d) {
      lo[d] = warp_min(valid ? x[d] : inf);
      hi[d] = warp_max(valid ? x[d] : -inf);
    }
  }
  node_id* stack = stack_node[wib];
  float* dist = stack_dist[wib];
  float bound = inf;  // the largest of the lanes' bounds
  node_id node = 0;
  int sp = 0;
  index_t visited = 0;
  for (;;) {
    ++visited;
    if (tree.is_leaf(node)) {
      if (valid) v.leaf(s, node);
      bound = warp_max(valid ? v.group_bound(s) : -inf);
    } else {
      // The nearer child first (ties: child 0); the farther waits on the stack if it may hold
      // anything.
      const node_id c0 = tree.child(node, 0), c1 = tree.child(node, 1);
      const float g0 = v.group_distance(lo, hi, c0), g1 = v.group_distance(lo, hi, c1);
      const bool swap = g1 < g0;
      const float near_g = swap ? g1 : g0, far_g = swap ? g0 : g1;
      if (far_g <= bound) {
        if (lane == 0) {
          stack[sp] = swap ? c0 : c1;
          dist[sp] = far_g;
        }
        ++sp;
      }
      if (near_g <= bound) {
        node = swap ? c1 : c0;
        continue;
      }
    }
    bool more = false;
    while (sp > 0) {
      __syncwarp();  // the pushes are visible before the pop
      --sp;
      node = stack[sp];
      const float g = dist[sp];
      __syncwarp();  // every lane has read the slot before it is pushed over
      if (g <= bound) {
        more = true;
        break;
      }
    }
    if (!more) break;
  }
  if (valid) v.finish(s, q);
  if (warp_nodes && lane == 0) warp_nodes[warp] = visited;
}

}  // namespace gpu
}  // namespace canopy
