// GPU kernels of forest inference, templated on the layout view and the per-row sums type
// (executor/forest_eval.hpp). They only decide which thread evaluates which (row, tree) pair
// and how partial sums meet; find_leaf and the sums are the code the CPU executor runs.
// Include from .cu files only.
//
//   direct       one thread per row, every tree in layout order: bit-identical to the CPU.
//   hybrid       (hierarchical layout) Shah et al. section 3.2: a block loads the root subtrees
//                of a chunk of trees into shared memory, each thread walks its row through
//                them, then continues in global memory; trees in layout order: bit-identical.
//   shared data  FIL's / Tahoe's strategy: a block caches a tile of rows in shared memory and
//                its threads split the trees: for a few rows at a time, thread i walks tree
//                c0 + i of each chunk of B trees and leaves the leaf it reaches in shared
//                memory; then one thread per row adds the chunk's leaves in tree order with
//                the Sums the CPU runs. A tree-shaped (CUB) reduction of the partial sums
//                would be cheaper, but its different order of float32 additions moved
//                XGBoost probabilities by up to 2.5e-5 relative; this way the kernel is
//                bit-identical to the CPU like the other two.
#pragma once

#include <climits>
#include <cstddef>
#include <type_traits>

#include "executor/forest_eval.hpp"
#include "core/cuda.cuh"

namespace canopy {
namespace gpu {

// Tuning constants, apart from the logic.
constexpr int kForestDirectBlock = 128;
constexpr int kForestHybridBlock = 256;
constexpr std::size_t kForestHybridSmemBytes = 24 * 1024;  // root subtrees per chunk (at least one)
constexpr int kForestSharedBlock = 128;
constexpr int kForestSharedItems = 8;                      // rows evaluated together per pass
constexpr std::size_t kForestSmemLimit = 48 * 1024;        // per block, static + dynamic

// What every forest kernel gets besides the layout view.
struct ForestBatch {
  const float* rows = nullptr;  // [n_rows][n_features]
  index_t n_rows = 0;
  float* out = nullptr;         // [n_rows][width]
  int width = 0;                // floats per row (f64: twice the output's values)
  ForestOutput output = ForestOutput::Prob;
  bool f64 = false;             // out holds doubles (ForestPredictor's double output)
};

// ---- direct --------------------------------------------------------------------------------------

template <class Sums, class View>
__global__ void __launch_bounds__(kForestDirectBlock) forest_direct_kernel(View v, ForestBatch b) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= b.n_rows) return;
  predict_row<Sums>(v, b.rows + i * v.common.n_features, b.output, b.out + i * b.width, b.f64);
}

// ---- hybrid (hierarchical layout) ------------------------------------------------------------------

// chunk_trees root subtrees (of root_stride nodes each) fit the dynamic shared memory.
template <class Sums>
__global__ void __launch_bounds__(kForestHybridBlock)
forest_hybrid_kernel(HierarchicalForestView v, ForestBatch b, index_t chunk_trees) {
  extern __shared__ __align__(16) unsigned char forest_hybrid_smem[];
  ForestNode* roots = reinterpret_cast<ForestNode*>(forest_hybrid_smem);
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  const bool valid = i < b.n_rows;  // threads past the end still help load and synchronise
  const float* row = b.rows + (valid ? i : 0) * v.common.n_features;
  const index_t trees = v.common.n_trees;
  Sums s;
  s.begin(v.common);
  for (index_t t0 = 0; t0 < trees; t0 += chunk_trees) {
    const index_t t1 = t0 + chunk_trees < trees ? t0 + chunk_trees : trees;
    const index_t count = (t1 - t0) * v.root_stride;
    const ForestNode* src = v.root_nodes + t0 * v.root_stride;
    __syncthreads();  // every thread is done with the previous chunk
    for (index_t k = threadIdx.x; k < count; k += blockDim.x) roots[k] = src[k];
    __syncthreads();
    if (valid)
      for (index_t t = t0; t < t1; ++t) s.add(v.common, t, find_leaf(v, t, row, roots + (t - t0) * v.root_stride));
  }
  if (valid) {
    s.end(v.common);
    s.write(v.common, b.output, b.out + i * b.width, b.f64);
  }
}

// ---- shared data --------------------------------------------------------------------------------------

struct ForestSharedPlan {
  int rows_per_block = 0;  // rows cached per block
  int items = 1;           // rows evaluated together per pass (<= kForestSharedItems)
  std::size_t dynamic_smem = 0;
};

template <class Sums, class View>
__global__ void __launch_bounds__(kForestSharedBlock)
forest_shared_data_kernel(View v, ForestBatch b, ForestSharedPlan plan) {
  extern __shared__ __align__(16) unsigned char forest_shared_smem[];
  constexpr int B = kForestSharedBlock;
  const int tid = threadIdx.x;
  const ForestCommonView& c = v.common;
  const int F = c.n_features;
  const int items = plan.items;
  // [B trees][items rows] leaves of the current chunk (a row's leaves are `items` apart, so
  // the adding threads read neighbouring words), then the row tile.
  ForestNode* leaves = reinterpret_cast<ForestNode*>(forest_shared_smem);
  float* tile = reinterpret_cast<float*>(forest_shared_smem + sizeof(ForestNode) * items * B);

  const index_t first = blockIdx.x * static_cast<index_t>(plan.rows_per_block);
  const index_t remaining = b.n_rows - first;
  const int n = remaining < plan.rows_per_block ? static_cast<int>(remaining) : plan.rows_per_block;
  const float* src = b.rows + first * F;
  const index_t values = static_cast<index_t>(n) * F;
  for (index_t k = tid; k < values; k += B) tile[k] = src[k];
  __syncthreads();

  const index_t trees = c.n_trees;
  for (int r0 = 0; r0 < n; r0 += items) {
    const int m = items < n - r0 ? items : n - r0;
    Sums s;
    if (tid < m) s.begin(c);
    for (index_t c0 = 0; c0 < trees; c0 += B) {
      const index_t t = c0 + tid;
      if (t < trees)
        for (int j = 0; j < m; ++j) leaves[tid * items + j] = find_leaf(v, t, tile + (r0 + j) * F);
      __syncthreads();
      if (tid < m) {
        const int count = trees - c0 < B ? static_cast<int>(trees - c0) : B;
        for (int i = 0; i < count; ++i) s.add(c, c0 + i, leaves[i * items + tid]);
      }
      __syncthreads();  // the next chunk overwrites the leaves
    }
    if (tid < m) {
      s.end(c);
      s.write(c, b.output, b.out + (first + r0 + tid) * b.width, b.f64);
    }
  }
}

// ---- launchers ------------------------------------------------------------------------------------

inline unsigned grid_for(index_t items, index_t per_block) {
  const index_t g = (items + per_block - 1) / per_block;
  if (g > INT_MAX) throw Error("forest kernel: " + std::to_string(items) + " rows need too many blocks");
  return static_cast<unsigned>(g);
}

// Small batches: halve the block (down to one warp) until there are two blocks per SM, so a
// batch of 1,000 rows runs on 32 SMs rather than 8. The kernels take any blockDim.x up to
// their launch bound.
inline int block_for(index_t rows, int max_block, int sm_count) {
  int threads = max_block;
  while (threads > 32 && (rows + threads - 1) / threads < 2 * static_cast<index_t>(sm_count)) threads /= 2;
  return threads;
}

// ---- leaf output (XGBoost's pred_leaf) -------------------------------------------------------------

// The leaf output's tables on the device (ForestCommon's host-only leaf ids, the layout order).
struct ForestLeafTable {
  const index_t* id_begin = nullptr;          // [n_trees + 1], layout order
  const std::int32_t* source_id = nullptr;    // the model's node id of each layout leaf index
  const index_t* order = nullptr;             // layout position -> the model's tree (the column)
  const std::int32_t* leaf_number = nullptr;  // adaptive layout: per node, its leaf index (-1 inner)
};

// A thread per (row, tree), the row slowest: out[row][order[t]] = the model's node id of the
// leaf the row reaches in layout tree t, as the CPU's predict_forest_leaves_cpu writes it.
template <class View>
__global__ void forest_leaf_kernel(View v, const float* rows, index_t n_rows, ForestLeafTable lt, float* out) {
  const index_t T = v.common.n_trees;
  const index_t p = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (p >= n_rows * T) return;
  const index_t i = p / T, t = p - i * T;
  const float* row = rows + i * v.common.n_features;
  index_t leaf;
  if constexpr (std::is_same<View, AdaptiveForestView>::value) {
    const std::uint32_t k = adaptive_walk(v.nodes + v.tree_begin[t], 1, v.depth[t], v.feature_bits, v.feature_mask,
                                          [row](int f) { return row[f]; }, v.common.categories);
    leaf = lt.leaf_number[v.tree_begin[t] + k];
  } else {
    leaf = static_cast<index_t>(forest_index(find_leaf(v, t, row).info));
  }
  const index_t count = lt.id_begin[t + 1] - lt.id_begin[t];
  out[i * T + lt.order[t]] = leaf >= 0 && leaf < count ? static_cast<float>(lt.source_id[lt.id_begin[t] + leaf]) : -1.0f;
}

template <class View>
void launch_forest_leaves(const View& v, const float* rows, index_t n_rows, const ForestLeafTable& lt, float* out,
                          cudaStream_t stream) {
  const index_t pairs = n_rows * v.common.n_trees;
  if (pairs == 0) return;
  forest_leaf_kernel<View><<<grid_for(pairs, 256), 256, 0, stream>>>(v, rows, n_rows, lt, out);
  CANOPY_CUDA_CHECK_LAUNCH("forest_leaf_kernel");
}

template <class Sums, class View>
void launch_forest_direct(const View& v, const ForestBatch& b, int sm_count, cudaStream_t stream) {
  const int threads = block_for(b.n_rows, kForestDirectBlock, sm_count);
  forest_direct_kernel<Sums, View><<<grid_for(b.n_rows, threads), threads, 0, stream>>>(v, b);
  CANOPY_CUDA_CHECK_LAUNCH("forest_direct_kernel");
}

template <class Sums>
void launch_forest_hybrid(const HierarchicalForestView& v, const ForestBatch& b, int sm_count, cudaStream_t stream) {
  const std::size_t per_tree = static_cast<std::size_t>(v.root_stride) * sizeof(ForestNode);
  index_t chunk = static_cast<index_t>(kForestHybridSmemBytes / per_tree);
  if (chunk < 1) chunk = 1;  // one root subtree is at most 32 KiB (kMaxRootDepth)
  if (chunk > v.common.n_trees) chunk = v.common.n_trees;
  const std::size_t smem = static_cast<std::size_t>(chunk) * per_tree;
  if (smem > kForestSmemLimit) throw Error("hybrid kernel: a root subtree needs " + std::to_string(per_tree) + " bytes of shared memory");
  const int threads = block_for(b.n_rows, kForestHybridBlock, sm_count);
  forest_hybrid_kernel<Sums><<<grid_for(b.n_rows, threads), threads, smem, stream>>>(v, b, chunk);
  CANOPY_CUDA_CHECK_LAUNCH("forest_hybrid_kernel");
}

template <class Sums, class View>
void launch_forest_shared_data(const View& v, const ForestBatch& b, int sm_count, cudaStream_t stream) {
  auto kernel = forest_shared_data_kernel<Sums, View>;
  cudaFuncAttributes attr;
  CANOPY_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  const std::size_t limit = kForestSmemLimit - attr.sharedSizeBytes;
  ForestSharedPlan plan;
  plan.items = kForestSharedItems;
  const std::size_t row_bytes = static_cast<std::size_t>(v.common.n_features) * sizeof(float);
  const std::size_t leaf_bytes = sizeof(ForestNode) * static_cast<std::size_t>(plan.items) * kForestSharedBlock;
  if (leaf_bytes + row_bytes * plan.items > limit)
    throw Error("shared-data kernel: rows of " + std::to_string(v.common.n_features) + " features do not fit in " +
                std::to_string(limit) + " bytes of shared memory; use the direct kernel");
  const index_t max_rows = static_cast<index_t>((limit - leaf_bytes) / row_bytes);
  // Enough blocks to fill the GPU (four per SM) before making tiles large.
  index_t rows = (b.n_rows + 4 * sm_count - 1) / (4 * static_cast<index_t>(sm_count));
  rows = (rows + plan.items - 1) / plan.items * plan.items;
  if (rows > max_rows) rows = max_rows;
  if (rows < plan.items) rows = plan.items;
  plan.rows_per_block = static_cast<int>(rows);
  plan.dynamic_smem = leaf_bytes + row_bytes * static_cast<std::size_t>(rows);
  kernel<<<grid_for(b.n_rows, rows), kForestSharedBlock, plan.dynamic_smem, stream>>>(v, b, plan);
  CANOPY_CUDA_CHECK_LAUNCH("forest_shared_data_kernel");
}

}  // namespace gpu
}  // namespace canopy
