// The four GPU strategies of Tahoe (Xie et al., section 5) over the adaptive format
// (layouts/forest_adaptive.hpp), with SilvanForge-style schedule knobs. Include from .cu files.
//
//   direct        a thread per row (rows_per_thread rows, tree_interleave trees walked at
//                 once for memory-level parallelism), every tree from global memory; rows
//                 optionally staged in shared memory, transposed so a warp reading one feature
//                 of 32 rows hits 32 banks; optionally a block barrier every tree_sync trees.
//   shared data   a block caches rows; its threads split the pass's (row, tree) walks (tree in
//                 the storage order of the interleaved copy, row fastest, so a warp walks few
//                 trees); each leaf lands in shared memory at its tree's canonical slot, and
//                 then one thread per (row, output) adds the slots in canonical order.
//   shared forest / splitting shared forest
//                 the forest (or one part of it: a canonical range of trees that fits) in
//                 shared memory, a thread per row, the block's rows staged beside it. A part is one launch of persistent blocks;
//                 between parts each row's sums wait in global memory (Sums::save / load), so
//                 the cross-part reduction adds in exactly the sequential order.
// Every strategy adds each row's leaves in canonical order with the Sums of
// executor/forest_eval.hpp: all of them give the CPU executor's bits.
#pragma once

#include <climits>
#include <cstddef>

#include "executor/forest_eval.hpp"
#include "core/cuda.cuh"

namespace canopy {
namespace gpu {

struct AdaptiveBatch {
  const float* rows = nullptr;     // [n_rows][n_features] in execution order (row scheduling
                                   // gathers them), so warps read neighbouring rows
  const index_t* order = nullptr;  // execution position -> the row's place in `out`; null: identity
  index_t n_rows = 0;
  float* out = nullptr;            // [n_rows][width], the caller's row order
  int width = 0;                   // floats per row (f64: twice the output's values)
  ForestOutput output = ForestOutput::Prob;
  bool f64 = false;                // out holds doubles (ForestPredictor's double output)
};

CANOPY_HD inline index_t adaptive_out_row(const AdaptiveBatch& b, index_t i) { return b.order ? b.order[i] : i; }

// The walks of the thread-per-row strategies: R rows through trees t0 .. t0 + K - 1 (those
// below t_end) together, a trip count the whole warp shares (leaves point at themselves):
// independent loads that overlap, and no leaf test. base(t): tree t's first node; get(r, f):
// feature f of row r. The leaves go to s[r] in tree order. kFast: base_of gives the fast copy's
// trees and no row has a missing value (adaptive_fast_step).
template <class Sums, int R, int K, bool kCat, bool kFast = false, class Base, class Get>
__device__ __forceinline__ void adaptive_walk_trees(const AdaptiveForestView& v, index_t t0, index_t t_end,
                                                    const Base& base_of, const Get& get, Sums (&s)[R]) {
  const ForestNode* base[K];
  int steps = 0;
#pragma unroll
  for (int q = 0; q < K; ++q) {
    const index_t t = t0 + q < t_end ? t0 + q : t_end - 1;
    base[q] = base_of(t);
    steps = max(steps, v.depth[t]);
  }
  std::uint32_t k[R][K];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int q = 0; q < K; ++q) k[r][q] = 0;
  for (int l = 0; l < steps; ++l) {
    ForestNode node[R][K];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int q = 0; q < K; ++q) node[r][q] = base[q][k[r][q]];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int q = 0; q < K; ++q) {
        const ForestNode n = node[r][q];
        const float x = get(r, static_cast<int>(n.info & v.feature_mask));
        if constexpr (kFast)
          k[r][q] = adaptive_fast_step(n, v.feature_bits, x);
        else
          k[r][q] = ((n.info & kAdaptivePayloadMask) >> v.feature_bits) + adaptive_second<kCat>(n, x, v.common.categories);
      }
  }
#pragma unroll
  for (int q = 0; q < K; ++q)
    if (t0 + q < t_end)
#pragma unroll
      for (int r = 0; r < R; ++r) s[r].add(v.common, t0 + q, adaptive_leaf<kFast>(v, t0 + q, k[r][q]));
}

// Whether a block takes the fast copy: it has one, and none of the rows it staged has a
// missing value (`missing`: this thread's staging saw one). Block-uniform; a barrier.
__device__ __forceinline__ bool adaptive_block_fast(const AdaptiveForestView& v, bool missing) {
  return __syncthreads_or(missing) == 0 && v.fast != nullptr;
}

// ---- direct ------------------------------------------------------------------------------------

// kCat: the forest has categorical splits (ForestCommonView::has_categorical).
template <class Sums, int R, int K, bool kCache, bool kCat>
__global__ void adaptive_direct_kernel(AdaptiveForestView v, AdaptiveBatch b, int tree_sync) {
  extern __shared__ __align__(16) unsigned char adaptive_direct_smem[];
  float* tile = reinterpret_cast<float*>(adaptive_direct_smem);  // [F][B * R]
  const ForestCommonView& c = v.common;
  const int B = blockDim.x, tid = threadIdx.x, F = c.n_features;
  const index_t first = blockIdx.x * static_cast<index_t>(B) * R;
  const int width = B * R;
  index_t pos[R];
  const float* src[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    pos[r] = first + r * B + tid;
    src[r] = b.rows + (pos[r] < b.n_rows ? pos[r] : 0) * F;
  }
  bool fast = false;
  if (kCache) {
    bool missing = false;
    for (index_t k = tid; k < static_cast<index_t>(width) * F; k += B) {
      const int j = static_cast<int>(k / F), f = static_cast<int>(k - static_cast<index_t>(j) * F);
      const index_t p = first + j;
      if (p < b.n_rows) {
        const float x = b.rows[p * F + f];
        missing |= x != x;
        tile[f * width + j] = x;
      }
    }
    fast = adaptive_block_fast(v, missing);
  }
  // Threads past the end walk row 0 and write nothing: with tree_sync they must reach every barrier.
  if (first + tid >= b.n_rows && tree_sync == 0) return;
  Sums s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) s[r].begin(c);
  const index_t T = c.n_trees;
  auto get = [&](int r, int f) { return kCache ? tile[f * width + r * B + tid] : src[r][f]; };
  // The fast copy's walk is compiled where it pays: rows staged, no categorical test, and sums
  // narrow enough that a second walk leaves the registers a 512-thread block needs.
  bool walked = false;
  if constexpr (kCache && !kCat && Sums::kMax <= 8) {
    if (fast) {
      for (index_t t0 = 0; t0 < T; t0 += K) {
        if (tree_sync > 0 && t0 % tree_sync < K) __syncthreads();
        adaptive_walk_trees<Sums, R, K, false, true>(v, t0, T, [&](index_t t) { return v.fast + v.tree_begin[t]; }, get, s);
      }
      walked = true;
    }
  }
  if (!walked) {
    for (index_t t0 = 0; t0 < T; t0 += K) {
      // Keeping the block's warps within tree_sync trees of each other keeps the trees they
      // read in L1.
      if (tree_sync > 0 && t0 % tree_sync < K) __syncthreads();
      adaptive_walk_trees<Sums, R, K, kCat>(v, t0, T, [&](index_t t) { return v.nodes + v.tree_begin[t]; }, get, s);
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (pos[r] < b.n_rows) {
      s[r].end(c);
      s[r].write(c, b.output, b.out + adaptive_out_row(b, pos[r]) * b.width, b.f64);
    }
}

// ---- shared data ---------------------------------------------------------------------------------

// Rows a shared-data pass takes through the trees together (tree_group), at most.
constexpr int kAdaptiveMaxGroup = 64;

struct AdaptiveSharedDataPlan {
  int rows_per_block = 0;  // rows cached per block
  int items = 1;           // rows per pass: the pass's (row, tree) walks are dealt to the block's threads
  int outputs = 1;         // per row: XGBoost groups or class-vector entries, summed in parallel
  int leaf_words = 1;      // 32-bit words kept per (row, tree): 1, the leaf word (scalar value bits or
                           // vector leaf index), or 2 x leaf_width, the leaf's float64 vector itself
  int interleaved = 1;     // walk the slot-interleaved copy (1) or the tree-major nodes (0)
  int top_rows = 0;        // interleaved: node rows staged in shared memory
};

// 32-bit words of a shared-data pass's leaves, [tree][row][leaf_words] for `items` rows: a warp's
// walks (neighbouring rows of one tree) write neighbouring words, and the in-order sums' threads
// (neighbouring rows) read them, without bank conflicts. 16-byte aligned.
CANOPY_HD inline std::size_t shared_data_leaf_words_per_pass(index_t n_trees, int items, int leaf_words) {
  return (static_cast<std::size_t>(n_trees) * items * leaf_words + 3) / 4 * 4;
}

// Floats between one staged row and the next in the shared-data strategy's tile: odd, so the
// walks of a warp (neighbouring rows) reading one feature hit different banks.
CANOPY_HD inline int shared_data_tile_stride(int n_features) { return n_features | 1; }

// G walks of the shared-data strategy, from their first loads (begin) to their leaves (finish).
// Over the slot-interleaved copy, node k of storage slot s is inter[k * T + s], and its first
// `top_rows` rows may wait in shared memory (`top`); over the tree-major nodes, the slot is the
// canonical tree and its nodes are contiguous, so one sector holds a node's two children.
template <int G>
struct SharedDataWalks {
  int tree[G], row[G], slot[G], steps[G];
  index_t leaf_begin[G];  // tree-major: also the tree's first node
  ForestNode node[G];     // the node each walk reads next
  std::uint32_t k[G];

  // Walks p0 + g * B (past `walks`: p0 again, kept nowhere) of a pass of m rows. Nothing here
  // waits for memory: the loads overlap each other and whatever the caller does before it
  // calls finish (the row tile's staging). The interleaved copy's roots load here unless they
  // are staged.
  __device__ __forceinline__ void begin(const AdaptiveForestView& v, const AdaptiveSharedDataPlan& plan, int p0, int B,
                                        int m, int walks) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int p = p0 + g * B < walks ? p0 + g * B : p0;
      slot[g] = p / m;
      row[g] = p - slot[g] * m;
      k[g] = 0;
      if (plan.interleaved) {
        tree[g] = static_cast<int>(v.inter_tree[slot[g]]);
        steps[g] = v.inter_depth[slot[g]];
        if (plan.top_rows == 0) node[g] = v.inter[slot[g]];
      } else {
        tree[g] = slot[g];
        steps[g] = v.depth[slot[g]];
        leaf_begin[g] = v.tree_begin[slot[g]];
      }
    }
  }

  // The walks through the tile's rows r0 + row[g] (tile rows `stride` floats apart); each leaf
  // lands at its (tree, row) slot of the pass. kFast: tree-major over the fast copy (a tile
  // without missing values).
  template <bool kCat, bool kFast = false>
  __device__ __forceinline__ void finish(const AdaptiveForestView& v, const AdaptiveSharedDataPlan& plan,
                                         const ForestNode* top, const float* tile, int stride_f, int r0, int p0, int B,
                                         int walks, std::uint32_t* leaves) {
    const ForestCommonView& c = v.common;
    const index_t T = c.n_trees;
    const int words = plan.leaf_words;
    const bool inter = !kFast && plan.interleaved != 0;
    const std::uint32_t R = static_cast<std::uint32_t>(plan.top_rows);
    const ForestNode* base[G];
    int most = 0;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (inter) {
        leaf_begin[g] = v.tree_begin[tree[g]];  // needed at the end only: overlaps the walk
        base[g] = v.inter + slot[g];
        if (R > 0) node[g] = top[slot[g]];
      } else {
        base[g] = (kFast ? v.fast : v.nodes) + leaf_begin[g];
        node[g] = base[g][0];
      }
      most = max(most, steps[g]);
    }
    const index_t stride = inter ? T : 1;
    // Leaves point at themselves, so walks shorter than the longest take extra steps in place.
    for (int l = 0; l < most; ++l) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float x = tile[(r0 + row[g]) * stride_f + (node[g].info & v.feature_mask)];
        if constexpr (kFast)
          k[g] = adaptive_fast_step(node[g], v.feature_bits, x);
        else
          k[g] = ((node[g].info & kAdaptivePayloadMask) >> v.feature_bits) + adaptive_second<kCat>(node[g], x, c.categories);
      }
      if (l + 1 < most) {
#pragma unroll
        for (int g = 0; g < G; ++g)
          node[g] = k[g] < R ? top[static_cast<index_t>(k[g]) * T + slot[g]] : base[g][static_cast<index_t>(k[g]) * stride];
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (p0 + g * B >= walks) continue;
      std::uint32_t* dst =
          leaves + (static_cast<std::size_t>(tree[g]) * plan.items + static_cast<std::size_t>(row[g])) * words;
      if (words == 1) {
        dst[0] = (kFast ? v.fast_leaf : v.leaf)[leaf_begin[g] + k[g]];
      } else {
        // The vector itself, so that the in-order sums read shared memory only; the fast copy
        // keeps it at the walk's last position (one load, not the leaf word and then the vector).
        const double* lv =
            kFast && v.fast_leaf_vectors
                ? v.fast_leaf_vectors + (leaf_begin[g] + k[g]) * c.leaf_width
                : c.leaf_values + (c.tree_leaf_begin[tree[g]] +
                                   static_cast<index_t>((kFast ? v.fast_leaf : v.leaf)[leaf_begin[g] + k[g]] & kForestIndexMask)) *
                                      c.leaf_width;
        double* d = reinterpret_cast<double*>(dst);
        for (int o = 0; o < c.leaf_width; ++o) d[o] = lv[o];
      }
    }
  }
};

// acc + x[0] + x[stride] + ... + x[(n - 1) * stride], one addition after another (the canonical
// order's bits), each value loaded A additions ahead of its use (eight registers' worth: more
// would cost the walks occupancy), so that the chain runs at the additions' latency and not
// the loads'.
template <class T>
__device__ __forceinline__ T add_strided_in_order(T acc, const T* x, int n, std::size_t stride) {
  constexpr int A = static_cast<int>(32 / sizeof(T));
  int i = 0;
  if (n >= A) {
    T a[A];
#pragma unroll
    for (int j = 0; j < A; ++j) a[j] = x[j * stride];
    for (; i + 2 * A <= n; i += A) {
#pragma unroll
      for (int j = 0; j < A; ++j) {
        const T next = x[(i + A + j) * stride];
        acc = add_rn(acc, a[j]);
        a[j] = next;
      }
    }
#pragma unroll
    for (int j = 0; j < A; ++j) acc = add_rn(acc, a[j]);
    i += A;
  }
  for (; i < n; ++i) acc = add_rn(acc, x[i * stride]);
  return acc;
}

// The same for float32 values; contiguous ones (stride 1, x 16-byte aligned) four per
// shared-memory load.
__device__ __forceinline__ float add_in_order(float acc, const float* x, int n, int stride) {
  if (stride != 1) return add_strided_in_order(acc, x, n, static_cast<std::size_t>(stride));
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const int quads = n / 4;
  int q = 0;
  if (quads >= 2) {
    float4 a = x4[0], b = x4[1];
    for (; q + 2 < quads; q += 2) {
      const float4 na = x4[q + 2];
      acc = add_rn(add_rn(add_rn(add_rn(acc, a.x), a.y), a.z), a.w);
      const float4 nb = q + 3 < quads ? x4[q + 3] : na;
      acc = add_rn(add_rn(add_rn(add_rn(acc, b.x), b.y), b.z), b.w);
      a = na;
      b = nb;
    }
    acc = add_rn(add_rn(add_rn(add_rn(acc, a.x), a.y), a.z), a.w);
    if (q + 1 < quads) acc = add_rn(add_rn(add_rn(add_rn(acc, b.x), b.y), b.z), b.w);
    q += 2;
    if (q > quads) q = quads;
  }
  for (int i = q * 4; i < n; ++i) acc = add_rn(acc, x[i]);
  return acc;
}

// A pass of m rows is m x T walks, walk p = (storage slot p / m, row p % m): a warp walks few
// trees for many rows, so their upper nodes are one load. Each thread walks G of them at once
// (independent loads that overlap) and leaves each leaf at its (canonical tree, row) slot; then
// one thread per (row, output) adds the slots in canonical order, from shared memory only.
template <class Sums, int G, bool kCat>
__global__ void adaptive_shared_data_kernel(AdaptiveForestView v, AdaptiveBatch b, AdaptiveSharedDataPlan plan) {
  extern __shared__ __align__(16) unsigned char adaptive_shared_smem[];
  const ForestCommonView& c = v.common;
  const int B = blockDim.x, tid = threadIdx.x, F = c.n_features;
  const int T = static_cast<int>(c.n_trees);
  const int items = plan.items, outs = plan.outputs, words = plan.leaf_words;
  const int Fs = shared_data_tile_stride(F);
  // [T][items][words] leaves, then per row of the pass its partial sums [items][outs]
  // (Sums::Carry), then the staged node rows [top_rows][T], then the row tile [n][Fs].
  std::uint32_t* leaves = reinterpret_cast<std::uint32_t*>(adaptive_shared_smem);
  using Carry = typename Sums::Carry;
  std::size_t off = shared_data_leaf_words_per_pass(T, items, words) * sizeof(std::uint32_t);
  Carry* partial = reinterpret_cast<Carry*>(adaptive_shared_smem + off);
  off += (static_cast<std::size_t>(items) * outs * sizeof(Carry) + 15) / 16 * 16;
  ForestNode* top = reinterpret_cast<ForestNode*>(adaptive_shared_smem + off);
  const int top_nodes = plan.top_rows * T;
  off += static_cast<std::size_t>(top_nodes) * sizeof(ForestNode);
  float* tile = reinterpret_cast<float*>(adaptive_shared_smem + off);

  const index_t first = blockIdx.x * static_cast<index_t>(plan.rows_per_block);
  const index_t remaining = b.n_rows - first;
  const int n = remaining < plan.rows_per_block ? static_cast<int>(remaining) : plan.rows_per_block;
  // The first walks' loads go out before the staging's: one memory latency for all of them.
  SharedDataWalks<G> w;
  const int m0 = items < n ? items : n;
  if (tid < m0 * T) w.begin(v, plan, tid, B, m0, m0 * T);
  {
    // The interleaved copy's first rows are contiguous: two nodes per 16-byte load, eight loads
    // in flight per thread.
    const uint4* src = reinterpret_cast<const uint4*>(v.inter);
    uint4* dst = reinterpret_cast<uint4*>(top);
#pragma unroll 8
    for (int k = tid; k < top_nodes / 2; k += B) dst[k] = src[k];
    if ((top_nodes & 1) && tid == 0) top[top_nodes - 1] = v.inter[top_nodes - 1];
  }
  bool missing = false;
  for (index_t k = tid; k < static_cast<index_t>(n) * F; k += B) {
    const float x = b.rows[first * F + k];
    missing |= x != x;
    const int j = static_cast<int>(k / F);
    tile[j * Fs + static_cast<int>(k - static_cast<index_t>(j) * F)] = x;
  }
  const bool fast = adaptive_block_fast(v, missing) && !kCat && plan.interleaved == 0;  // (the barrier first)
  for (int r0 = 0; r0 < n; r0 += items) {
    const int m = items < n - r0 ? items : n - r0;
    const int walks = m * T;
    for (int p0 = tid; p0 < walks; p0 += G * B) {
      if (r0 > 0 || p0 != tid) w.begin(v, plan, p0, B, m, walks);
      bool walked = false;
      if constexpr (!kCat && Sums::kMax <= 8) {  // (as in the direct strategy)
        if (fast) {
          w.template finish<false, true>(v, plan, top, tile, Fs, r0, p0, B, walks, leaves);
          walked = true;
        }
      }
      if (!walked) w.template finish<kCat>(v, plan, top, tile, Fs, r0, p0, B, walks, leaves);
    }
    __syncthreads();
    // One thread per (row, output): XGBoost group g adds its trees from base_margin[g]; a
    // forest's class k adds entry k of every tree's leaf vector from 0. The same additions, in
    // the same order, as Sums::add makes.
    for (int q = tid; q < m * outs; q += B) {
      const int j = q / outs, o = q - j * outs;
      const std::uint32_t* mine = leaves + static_cast<std::size_t>(j) * words;  // tree t: mine[t * items * words]
      const int stride = items * words;
      Carry acc;
      if constexpr (Sums::kScalarLeaves) {
        const int t0 = static_cast<int>(c.group_begin[o]), t1 = static_cast<int>(c.group_begin[o + 1]);
        acc = c.base_margin[o];
        int t = t0;
        if (stride == 1)
          for (; t < t1 && (t & 3) != 0; ++t) acc = add_rn(acc, bits_to_float(mine[t]));  // to a 16-byte boundary
        acc = add_in_order(acc, reinterpret_cast<const float*>(mine) + static_cast<std::size_t>(t) * stride, t1 - t, stride);
      } else if (words == 1) {
        acc = 0.0;
#pragma unroll 8
        for (int t = 0; t < T; ++t)
          acc = add_rn(acc, c.leaf_values[(c.tree_leaf_begin[t] + (mine[static_cast<std::size_t>(t) * stride] & kForestIndexMask)) *
                                              c.leaf_width + o]);
      } else {
        acc = 0.0;
        const double* d = reinterpret_cast<const double*>(mine) + o;
        acc = add_strided_in_order(acc, d, T, static_cast<std::size_t>(stride / 2));  // (doubles per tree: stride / 2)
      }
      partial[j * outs + o] = acc;
    }
    __syncthreads();
    if (tid < m) {
      Sums s;
      s.load(c, partial + tid * outs, T);
      s.end(c);
      s.write(c, b.output, b.out + adaptive_out_row(b, first + r0 + tid) * b.width, b.f64);
    }
    __syncthreads();  // the next pass overwrites the leaves and partial sums
  }
}

// ---- shared forest / splitting shared forest -------------------------------------------------------

struct AdaptivePart {
  index_t first_tree = 0, end_tree = 0;  // canonical range
  bool first = true, last = true;
  void* carry = nullptr;                 // [n_rows][outputs] Sums::Carry, by execution position
  int outputs = 1;
};

template <class Sums, int R, int K, bool kCat>
__global__ void adaptive_shared_forest_kernel(AdaptiveForestView v, AdaptiveBatch b, AdaptivePart part) {
  extern __shared__ __align__(16) unsigned char adaptive_forest_smem[];
  ForestNode* nodes = reinterpret_cast<ForestNode*>(adaptive_forest_smem);
  const ForestCommonView& c = v.common;
  const int B = blockDim.x, tid = threadIdx.x, F = c.n_features;
  const index_t node0 = v.tree_begin[part.first_tree];
  const index_t count = v.tree_begin[part.end_tree] - node0;
  // After the part: the tile's rows, transposed as in the direct strategy (conflict-free).
  const int width = B * R;
  float* tile = reinterpret_cast<float*>(nodes + count);
  for (index_t k = tid; k < count; k += B) nodes[k] = v.nodes[node0 + k];
  using Carry = typename Sums::Carry;
  Carry* carry = static_cast<Carry*>(part.carry);
  const index_t per_block = static_cast<index_t>(B) * R;
  for (index_t first = blockIdx.x * per_block; first < b.n_rows; first += gridDim.x * per_block) {
    __syncthreads();  // the part is loaded; the previous tile is done with
    for (index_t k = tid; k < static_cast<index_t>(width) * F; k += B) {
      const int j = static_cast<int>(k / F), f = static_cast<int>(k - static_cast<index_t>(j) * F);
      if (first + j < b.n_rows) tile[f * width + j] = b.rows[(first + j) * F + f];
    }
    __syncthreads();
    index_t pos[R];
    Sums s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      pos[r] = first + r * B + tid;
      const bool valid = pos[r] < b.n_rows;
      if (part.first) s[r].begin(c);
      else if (valid) s[r].load(c, carry + pos[r] * part.outputs, part.first_tree);
      else s[r].begin(c);
    }
    for (index_t t0 = part.first_tree; t0 < part.end_tree; t0 += K) {
      adaptive_walk_trees<Sums, R, K, kCat>(
          v, t0, part.end_tree, [&](index_t t) { return nodes + (v.tree_begin[t] - node0); },
          [&](int r, int f) { return tile[f * width + r * B + tid]; }, s);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (pos[r] >= b.n_rows) continue;
      if (part.last) {
        s[r].end(c);
        s[r].write(c, b.output, b.out + adaptive_out_row(b, pos[r]) * b.width, b.f64);
      } else {
        s[r].save(c, carry + pos[r] * part.outputs);
      }
    }
  }
}

// ---- launch helpers --------------------------------------------------------------------------------------

inline unsigned adaptive_grid(index_t items, index_t per_block) {
  const index_t g = (items + per_block - 1) / per_block;
  if (g > INT_MAX) throw Error("adaptive forest kernel: " + std::to_string(items) + " rows need too many blocks");
  return static_cast<unsigned>(g);
}

// Lets `kernel` take `bytes` of dynamic shared memory (above 48 KiB needs the opt-in).
template <class Kernel>
void allow_dynamic_smem(Kernel kernel, std::size_t bytes, const char* name) {
  if (bytes <= 48 * 1024) return;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) throw_cuda_error(err, name, __FILE__, __LINE__);
}

}  // namespace gpu
}  // namespace canopy
