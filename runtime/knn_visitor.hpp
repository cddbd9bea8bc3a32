// k-nearest-neighbour search as a guided visitor, over three trees: the kd-tree (boxes), the
// ball tree (hyperspheres) and the vantage-point tree (distance shells). One candidate list
// and one leaf loop serve all three; a small "metric" policy per tree says when a node can
// hold a better candidate and which child a query visits first.
//
// The answer is defined independently of the visiting order: the k points with the smallest
// (squared distance, original index) pairs, ascending. Pruning keeps a node whenever it may
// hold a point that ties the current k-th candidate, so a lockstep warp's vote (which changes
// the order, hence the bound at each node) changes which nodes a query visits, never its
// result.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/vp_tree.hpp"
#include "core/bits.hpp"
#include "core/rounding.hpp"

namespace canopy {

// The pruning tests of the ball and vp trees work on computed (rounded) distances and the
// triangle inequality; this relative slack covers the rounding of every term (<= ~1e-6 for
// 16 dimensions), so a node is only pruned when it provably holds no candidate.
constexpr float kMetricSlack = 1.0f + 1e-5f;

// Kd-tree: the box distance is a lower bound of every point's distance (see box_distance2).
struct KdMetric {
  KdTreeView tree;
  template <int MaxDim>
  CANOPY_HD bool may_hold(const float (&q)[MaxDim], node_id n, float bound2) const {
    return box_distance2(q, tree.lo(n), tree.hi(n)) <= bound2;
  }
  // The side of the split the query lies on (ties go left, like find_leaf).
  template <int MaxDim>
  CANOPY_HD int first_child(const float (&q)[MaxDim], node_id n) const {
    const int d = tree.nodes[n].split_dim;
    return q[d] <= tree.hi(n + 1)[d] ? 0 : 1;
  }
};

// Ball tree: |q - p| >= |q - c| - r for every point p of a ball (c, r).
struct BallMetric {
  BallTreeView tree;
  template <int MaxDim>
  CANOPY_HD bool may_hold(const float (&q)[MaxDim], node_id n, float bound2) const {
    if (!(bound2 < std::numeric_limits<float>::infinity())) return true;
    const float dc = point_distance(q, tree.centre(n));
    return !(dc > mul_rn(kMetricSlack, add_rn(tree.radius(n), sqrt_rn(bound2))));
  }
  // The child whose centre is nearer (ties go to child 0).
  template <int MaxDim>
  CANOPY_HD int first_child(const float (&q)[MaxDim], node_id n) const {
    return point_distance(q, tree.centre(tree.child(n, 0))) <= point_distance(q, tree.centre(tree.child(n, 1))) ? 0 : 1;
  }
};

// Vantage-point tree: every point p of node n lies in the shell [lo, hi] of distances from its
// parent's vantage point v, so |q - p| >= max(d - hi, lo - d) with d = |q - v|.
struct VpMetric {
  VpTreeView tree;
  template <int MaxDim>
  CANOPY_HD bool may_hold(const float (&q)[MaxDim], node_id n, float bound2) const {
    const node_id parent = tree.parent[n];
    if (parent < 0 || !(bound2 < std::numeric_limits<float>::infinity())) return true;
    const float d = point_distance(q, tree.vantage(parent));
    const float b = sqrt_rn(bound2);
    return !(d > mul_rn(kMetricSlack, add_rn(tree.shell_hi[n], b)) ||
             tree.shell_lo[n] > mul_rn(kMetricSlack, add_rn(d, b)));
  }
  // Inside the split radius: the inside child first.
  template <int MaxDim>
  CANOPY_HD int first_child(const float (&q)[MaxDim], node_id n) const {
    return point_distance(q, tree.vantage(n)) <= tree.mu[n] ? 0 : 1;
  }
};

// The candidate list of one query: the k smallest (dist2, index) pairs seen so far; the k-th
// squared distance is the pruning bound. finish() writes them ascending, as distances (square
// roots) and indices.
// - Rows (Heap = false): the list lives sorted in the query's rows of the result arrays, an
//   insertion shifting up to k entries.
// - Heap (the tree has fewer than 2^31 points): a binary max-heap of k keys (knn_key: dist2's bits
//   above the index, so one unsigned compare orders two pairs, ties included) whose root is the
//   k-th candidate, so an insertion costs log2(k) steps. It lives in the block's dynamic shared
//   memory when the kernel was launched with shared_bytes_per_thread() for every thread (slot j
//   of thread t at j * blockDim + t: free of bank conflicts whichever slot each lane reads), else in the
//   query's index row, whose index_t slots hold the keys until finish(). The earlier lists, sorted
//   in registers (8 to 64 slots, every insertion a pass over all of them), lost to it at every k
//   (docs/design.md, "kNN candidate lists").
// dist2 >= 0 (a sum of squares, never -0), so its bits order as the floats do.
CANOPY_HD inline std::uint64_t knn_key(float d2, std::int32_t id) {
  return (static_cast<std::uint64_t>(float_to_bits(d2)) << 32) | static_cast<std::uint32_t>(id);
}
CANOPY_HD inline float knn_key_dist2(std::uint64_t key) { return bits_to_float(static_cast<std::uint32_t>(key >> 32)); }
template <bool Heap>
struct KnnSlots {
  int found;  // candidates in the result rows so far
};
template <>
struct KnnSlots<true> {
  std::uint64_t* heap;
  int stride;
  std::uint64_t top;  // heap[0], kept in a register: every candidate is compared with it
};
// Replaces the root of the max-heap h[0..size) (slots `stride` apart) with c and restores the
// heap: the larger child moves up while it exceeds c.
CANOPY_HD inline void knn_heap_sift(std::uint64_t* h, int stride, int size, std::uint64_t c) {
  int i = 0;
  for (;;) {
    const int l = 2 * i + 1;
    if (l >= size) break;
    int m = l;
    std::uint64_t km = h[l * stride];
    if (l + 1 < size) {
      const std::uint64_t kr = h[(l + 1) * stride];
      if (kr > km) {
        m = l + 1;
        km = kr;
      }
    }
    if (!(km > c)) break;
    h[i * stride] = km;
    i = m;
  }
  h[i * stride] = c;
}

template <int MaxDim, class Metric, bool Heap = false>
struct KnnVisitor {
  static constexpr bool kGuided = true;
  static constexpr std::int32_t kEmpty = std::numeric_limits<std::int32_t>::max();
  static constexpr std::uint64_t kEmptyKey = (std::uint64_t{0x7f800000u} << 32) | std::uint32_t{kEmpty};  // (+inf, kEmpty)

  Metric metric;
  const float* points = nullptr;      // the tree's points (tree order, padded)
  const index_t* point_ids = nullptr;  // their original indices
  const float* queries = nullptr;     // row-major [queries][dims]
  int dims = 0;
  int k = 1;
  float* dist = nullptr;              // [queries][k]
  index_t* index = nullptr;           // [queries][k]

  struct State : KnnSlots<Heap> {
    float q[MaxDim];
    float bound2;  // +inf until k candidates are known
    index_t query;
  };

  // Dynamic shared memory a kernel gives each thread for the heap (executor/gpu_kernels.cuh asks).
  CANOPY_HD std::size_t shared_bytes_per_thread() const {
    return Heap ? static_cast<std::size_t>(k) * sizeof(std::uint64_t) : 0;
  }
  // The heap's slots: the kernel's shared memory when it has k keys for every thread of the block,
  // else the query's index row.
  CANOPY_HD std::uint64_t* heap_slots(index_t query, int& stride) const {
#if defined(__CUDA_ARCH__)
    extern __shared__ std::uint64_t canopy_knn_heap[];
    unsigned bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    if (blockDim.y == 1 && blockDim.z == 1 && bytes >= shared_bytes_per_thread() * blockDim.x) {
      stride = static_cast<int>(blockDim.x);
      return canopy_knn_heap + threadIdx.x;
    }
#endif
    stride = 1;
    return reinterpret_cast<std::uint64_t*>(index + query * k);
  }

  CANOPY_HD State init(index_t query) const {
    State s;
    load_query(queries + query * dims, dims, s.q);
    s.bound2 = std::numeric_limits<float>::infinity();
    s.query = query;
    if constexpr (Heap) {
      s.heap = heap_slots(query, s.stride);
      for (int j = 0; j < k; ++j) s.heap[j * s.stride] = kEmptyKey;
      s.top = kEmptyKey;
    } else {
      s.found = 0;
    }
    return s;
  }
  CANOPY_HD bool descend(State& s, node_id n) const { return metric.may_hold(s.q, n, s.bound2); }
  CANOPY_HD int first_child(const State& s, node_id n) const { return metric.first_child(s.q, n); }
  // The inspector's probe goes on until k candidates give a pruning bound.
  CANOPY_HD bool probe_satisfied(const State& s) const {
    if constexpr (Heap)
      return s.top != kEmptyKey;
    else
      return s.found == k;
  }

  CANOPY_HD void leaf_range(State& s, index_t first, index_t count) const {
    if constexpr (Heap) {
      for (index_t i = first; i < first + count; ++i) {
        const float d2 = point_distance2(s.q, points + i * MaxDim);
        if (d2 > s.bound2) continue;
        const std::uint64_t c = knn_key(d2, static_cast<std::int32_t>(point_ids[i]));
        if (!(c < s.top)) continue;  // ties: the lower index wins
        knn_heap_sift(s.heap, s.stride, k, c);
        s.top = s.heap[0];
        s.bound2 = knn_key_dist2(s.top);  // +inf while a sentinel is left
      }
    } else {
      float* d = dist + s.query * k;
      index_t* id = index + s.query * k;
      for (index_t i = first; i < first + count; ++i) {
        const float d2 = point_distance2(s.q, points + i * MaxDim);
        if (d2 > s.bound2) continue;
        const index_t pid = point_ids[i];
        // Insert (d2, pid) if it beats the k-th candidate (ties: the lower index wins).
        int j = s.found < k ? s.found : k - 1;
        if (s.found == k && !(d2 < d[j] || (d2 == d[j] && pid < id[j]))) continue;
        while (j > 0 && (d2 < d[j - 1] || (d2 == d[j - 1] && pid < id[j - 1]))) {
          d[j] = d[j - 1];
          id[j] = id[j - 1];
          --j;
        }
        d[j] = d2;
        id[j] = pid;
        if (s.found < k) ++s.found;
        if (s.found == k) s.bound2 = d[k - 1];
      }
    }
  }
  CANOPY_HD void leaf(State& s, node_id n) const {
    const KdNode node = metric.tree.nodes[n];
    leaf_range(s, node.first, node.count);
  }
  CANOPY_HD void finish(State& s, index_t query) const {
    float* d = dist + query * k;
    index_t* id = index + query * k;
    if constexpr (Heap) {
      // Heap sort: the largest key goes to the end, the rest is a heap again; then ascending.
      for (int end = k - 1; end > 0; --end) {
        const std::uint64_t last = s.heap[end * s.stride];
        s.heap[end * s.stride] = s.heap[0];
        knn_heap_sift(s.heap, s.stride, end, last);
      }
      for (int j = 0; j < k; ++j) {  // a row heap's slot j is read before id[j] overwrites it
        const std::uint64_t key = s.heap[j * s.stride];
        const bool empty = key == kEmptyKey;  // only when the tree has fewer than k points
        d[j] = empty ? std::numeric_limits<float>::infinity() : sqrt_rn(knn_key_dist2(key));
        id[j] = empty ? index_t{-1} : static_cast<index_t>(static_cast<std::int32_t>(key & 0xffffffffu));
      }
    } else {
      for (int j = 0; j < s.found; ++j) d[j] = sqrt_rn(d[j]);
      for (int j = s.found; j < k; ++j) {  // only when the tree has fewer than k points
        d[j] = std::numeric_limits<float>::infinity();
        id[j] = -1;
      }
    }
  }
};

template <class View> struct metric_for;
template <> struct metric_for<KdTreeView> { using type = KdMetric; };
template <> struct metric_for<BallTreeView> { using type = BallMetric; };
template <> struct metric_for<VpTreeView> { using type = VpMetric; };

// The kNN visitor over a tree view (host or device pointers alike); Heap as KnnVisitor says.
template <int MaxDim, class View, bool Heap = false>
KnnVisitor<MaxDim, typename metric_for<View>::type, Heap> make_knn_visitor(const View& tree, const float* queries,
                                                                          int k, float* dist, index_t* index) {
  KnnVisitor<MaxDim, typename metric_for<View>::type, Heap> v;
  v.metric.tree = tree;
  v.points = tree.points;
  v.point_ids = tree.point_ids;
  v.queries = queries;
  v.dims = tree.dims;
  v.k = k;
  v.dist = dist;
  v.index = index;
  return v;
}

// The leaf a query's greedy descent (first_child all the way down) ends in: the key of the
// hand-tuned "sorted" baseline for the metric trees (for the kd-tree it is find_leaf()).
template <class Topology, class Visitor>
CANOPY_HD inline node_id greedy_leaf(const Topology& tree, const Visitor& v, index_t query) {
  const auto s = v.init(query);
  node_id n = 0;
  while (!tree.is_leaf(n)) n = tree.child(n, v.first_child(s, n));
  return n;
}

// greedy_leaf() as a per-query key functor (the GPU sort's key kernel calls it).
template <class Topology, class Visitor>
struct GreedyLeafKey {
  Topology tree;
  Visitor v;
  CANOPY_HD std::uint32_t operator()(index_t q) const { return static_cast<std::uint32_t>(greedy_leaf(tree, v, q)); }
};

}  // namespace canopy
