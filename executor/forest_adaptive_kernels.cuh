// The four GPU strategies of Tahoe (Xie et al., section 5) over the adaptive format
// (layouts/forest_adaptive.hpp), with SilvanForge-style schedule knobs. Include from .cu files.
//
//   direct        a thread per row (rows_per_thread rows, tree_interleave trees walked at
//                 once for memory-level parallelism), every tree from global memory; rows
//                 optionally staged in shared memory, transposed so a warp reading one feature
//                 of 32 rows hits 32 banks; optionally a block barrier every tree_sync trees.
//   shared data   a block caches rows; its threads split the trees (storage order of the
//                 interleaved copy, so neighbouring threads read neighbouring nodes); each
//                 leaf lands in shared memory at its tree's canonical slot, and then one thread
//                 per (row, output) adds the slots in canonical order.
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
  int width = 0;
  ForestOutput output = ForestOutput::Prob;
};

CANOPY_HD inline index_t adaptive_out_row(const AdaptiveBatch& b, index_t i) { return b.order ? b.order[i] : i; }

// The walks of the thread-per-row strategies: R rows through trees t0 .. t0 + K - 1 (those
// below t_end) together, a trip count the whole warp shares (leaves point at themselves):
// independent loads that overlap, and no leaf test. base(t): tree t's first node; get(r, f):
// feature f of row r. The leaves go to s[r] in tree order.
template <class Sums, int R, int K, bool kCat, class Base, class Get>
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
        k[r][q] = ((n.info & kAdaptivePayloadMask) >> v.feature_bits) +
                  adaptive_second<kCat>(n, get(r, static_cast<int>(n.info & v.feature_mask)), v.common.categories);
      }
  }
#pragma unroll
  for (int q = 0; q < K; ++q)
    if (t0 + q < t_end)
#pragma unroll
      for (int r = 0; r < R; ++r) s[r].add(v.common, t0 + q, adaptive_leaf(v, t0 + q, k[r][q]));
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
  if (kCache) {
    for (index_t k = tid; k < static_cast<index_t>(width) * F; k += B) {
      const int j = static_cast<int>(k / F), f = static_cast<int>(k - static_cast<index_t>(j) * F);
      const index_t p = first + j;
      if (p < b.n_rows) tile[f * width + j] = b.rows[p * F + f];
    }
    __syncthreads();
  }
  // Threads past the end walk row 0 and write nothing: with tree_sync they must reach every barrier.
  if (first + tid >= b.n_rows && tree_sync == 0) return;
  Sums s[R];
#pragma unroll
  for (int r = 0; r < R; ++r) s[r].begin(c);
  const index_t T = c.n_trees;
  for (index_t t0 = 0; t0 < T; t0 += K) {
    // Keeping the block's warps within tree_sync trees of each other keeps the trees they
    // read in L1.
    if (tree_sync > 0 && t0 % tree_sync < K) __syncthreads();
    adaptive_walk_trees<Sums, R, K, kCat>(
        v, t0, T, [&](index_t t) { return v.nodes + v.tree_begin[t]; },
        [&](int r, int f) { return kCache ? tile[f * width + r * B + tid] : src[r][f]; }, s);
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (pos[r] < b.n_rows) {
      s[r].end(c);
      s[r].write(c, b.output, b.out + adaptive_out_row(b, pos[r]) * b.width);
    }
}

// ---- shared data ---------------------------------------------------------------------------------

// Rows a shared-data pass takes through the trees together (tree_group), at most.
constexpr int kAdaptiveMaxGroup = 8;

struct AdaptiveSharedDataPlan {
  int rows_per_block = 0;  // rows cached per block
  int items = 1;           // rows evaluated together per pass
  int outputs = 1;         // per row: XGBoost groups or class-vector entries, summed in parallel
};

template <class Sums, bool kCat>
__global__ void adaptive_shared_data_kernel(AdaptiveForestView v, AdaptiveBatch b, AdaptiveSharedDataPlan plan) {
  extern __shared__ __align__(16) unsigned char adaptive_shared_smem[];
  const ForestCommonView& c = v.common;
  const int B = blockDim.x, tid = threadIdx.x, F = c.n_features;
  const index_t T = c.n_trees;
  const int items = plan.items, outs = plan.outputs;
  // [T][items] leaf words (scalar: the value; vector: the leaf index), then per row of the pass
  // its partial sums [items][outs] (Sums::Carry), then the row tile.
  std::uint32_t* leaves = reinterpret_cast<std::uint32_t*>(adaptive_shared_smem);
  using Carry = typename Sums::Carry;
  std::size_t off = (static_cast<std::size_t>(T) * items * sizeof(std::uint32_t) + 15) / 16 * 16;
  Carry* partial = reinterpret_cast<Carry*>(adaptive_shared_smem + off);
  off += (static_cast<std::size_t>(items) * outs * sizeof(Carry) + 15) / 16 * 16;
  float* tile = reinterpret_cast<float*>(adaptive_shared_smem + off);

  const index_t first = blockIdx.x * static_cast<index_t>(plan.rows_per_block);
  const index_t remaining = b.n_rows - first;
  const int n = remaining < plan.rows_per_block ? static_cast<int>(remaining) : plan.rows_per_block;
  for (index_t k = tid; k < static_cast<index_t>(n) * F; k += B) tile[k] = b.rows[first * F + k];
  __syncthreads();
  for (int r0 = 0; r0 < n; r0 += items) {
    const int m = items < n - r0 ? items : n - r0;
    for (index_t s = tid; s < T; s += B) {
      const index_t t = v.inter_tree[s];
      const ForestNode* base = v.inter + s;
      const int steps = v.depth[t];
      // The pass's rows walk this tree together: independent loads that overlap.
      std::uint32_t k[kAdaptiveMaxGroup];
#pragma unroll
      for (int j = 0; j < kAdaptiveMaxGroup; ++j) k[j] = 0;
      for (int l = 0; l < steps; ++l)
#pragma unroll
        for (int j = 0; j < kAdaptiveMaxGroup; ++j)
          if (j < m) {
            const ForestNode n = base[static_cast<index_t>(k[j]) * T];
            k[j] = ((n.info & kAdaptivePayloadMask) >> v.feature_bits) +
                   adaptive_second<kCat>(n, tile[(r0 + j) * F + (n.info & v.feature_mask)], v.common.categories);
          }
      const std::uint32_t* lw = v.leaf + v.tree_begin[t];
#pragma unroll
      for (int j = 0; j < kAdaptiveMaxGroup; ++j)
        if (j < m) leaves[t * items + j] = lw[k[j]];
    }
    __syncthreads();
    // One thread per (row, output): XGBoost group g adds its trees from base_margin[g]; a
    // forest's class k adds entry k of every tree's leaf vector from 0. The same additions, in
    // the same order, as Sums::add makes.
    for (int w = tid; w < m * outs; w += B) {
      const int j = w / outs, o = w - j * outs;
      Carry acc;
      if constexpr (Sums::kScalarLeaves) {
        acc = c.base_margin[o];
        // Unrolled so that the shared-memory loads run ahead of the chain of additions.
#pragma unroll 8
        for (index_t t = c.group_begin[o]; t < c.group_begin[o + 1]; ++t) {
          acc = add_rn(acc, __uint_as_float(leaves[t * items + j]));
        }
      } else {
        acc = 0.0;
#pragma unroll 8
        for (index_t t = 0; t < T; ++t)
          acc = add_rn(acc, c.leaf_values[(c.tree_leaf_begin[t] + leaves[t * items + j]) * c.leaf_width + o]);
      }
      partial[j * outs + o] = acc;
    }
    __syncthreads();
    if (tid < m) {
      Sums s;
      s.load(c, partial + tid * outs, T);
      s.end(c);
      s.write(c, b.output, b.out + adaptive_out_row(b, first + r0 + tid) * b.width);
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
        s[r].write(c, b.output, b.out + adaptive_out_row(b, pos[r]) * b.width);
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
