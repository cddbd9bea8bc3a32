// Internal: launching the adaptive-format strategies (executor/forest_adaptive_kernels.cuh).
// Each strategy is compiled in its own .cu file (executor/forest_adaptive_*.cu) so that its many
// template instances build in parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "executor/forest_adaptive_kernels.cuh"
#include "executor/forest_schedule.hpp"

namespace canopy {
namespace gpu {

// What the launchers and the schedule defaults read of the current GPU.
struct GpuLimits {
  int sm_count = 1;
  std::size_t smem_optin = 48 * 1024;  // dynamic shared memory a block may opt into
};
struct AdaptiveDevice : GpuLimits {
  cudaStream_t stream = nullptr;
};

// Rows per thread and trees per walk that are compiled: (1, 2, 4) x (1, 2); wide sums (more than
// 8 outputs per row) only (1, 1), their registers leave no room for more.
template <class Sums, class F>
void dispatch_rows_trees(int rows, int trees, const char* strategy, F&& f) {
  auto bad = [&] {
    throw Error(std::string(strategy) + ": rows_per_thread " + std::to_string(rows) + " x tree_interleave " +
                std::to_string(trees) + " is not built" + (Sums::kMax > 8 ? " for more than 8 outputs per row (only 1 x 1)" : " (1, 2, 4 x 1, 2)"));
  };
  if constexpr (Sums::kMax > 8) {
    if (rows != 1 || trees != 1) bad();
    f(std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{});
  } else {
    if (trees == 1) {
      if (rows == 1) return f(std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{});
      if (rows == 2) return f(std::integral_constant<int, 2>{}, std::integral_constant<int, 1>{});
      if (rows == 4) return f(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{});
    } else if (trees == 2) {
      if (rows == 1) return f(std::integral_constant<int, 1>{}, std::integral_constant<int, 2>{});
      if (rows == 2) return f(std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{});
      if (rows == 4) return f(std::integral_constant<int, 4>{}, std::integral_constant<int, 2>{});
    }
    bad();
  }
}

// f(std::integral_constant<bool, forest has categorical splits>): the kernels for forests
// without them skip the categorical test (see adaptive_second).
// Walks one thread of the shared-data strategy takes at once (tree_interleave): 1, 2 or 4.
template <class F>
void dispatch_walks(int walks, F&& f) {
  if (walks == 1) return f(std::integral_constant<int, 1>{});
  if (walks == 2) return f(std::integral_constant<int, 2>{});
  if (walks == 4) return f(std::integral_constant<int, 4>{});
  throw Error("shared-data strategy: tree_interleave " + std::to_string(walks) + " is not built (1, 2, 4)");
}

template <class F>
void dispatch_categorical(const AdaptiveForestView& v, F&& f) {
  if (v.common.has_categorical) return f(std::true_type{});
  f(std::false_type{});
}

// A block of more than 256 threads may ask for more registers than an SM has (a kernel of
// over 128 per thread): a clear error instead of a failed launch.
template <class Kernel>
void check_block_registers(Kernel kernel, int threads, const char* name) {
  if (threads <= 256) return;
  cudaFuncAttributes a{};
  CANOPY_CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
  if (threads > a.maxThreadsPerBlock)
    throw Error(std::string(name) + ": a block of " + std::to_string(threads) + " threads needs more registers than an SM has (" +
                std::to_string(a.numRegs) + " per thread); block_threads may be at most " + std::to_string(a.maxThreadsPerBlock));
}

// Shared memory the direct strategy's row tile takes.
inline std::size_t direct_tile_bytes(const AdaptiveForestView& v, const ForestSchedule& s) {
  return s.cache_rows == 1 ? static_cast<std::size_t>(v.common.n_features) * s.block_threads * s.rows_per_thread * sizeof(float) : 0;
}

// Shared memory of the shared-forest strategies' row tile (beside the part).
inline std::size_t forest_tile_bytes(const AdaptiveForestView& v, const ForestSchedule& s) {
  return static_cast<std::size_t>(v.common.n_features) * s.block_threads * s.rows_per_thread * sizeof(float);
}

// 32-bit words the shared-data strategy keeps per (row, tree): a vector forest of at most 8
// outputs keeps the leaf's float64 vector when one row's take at most a quarter of what a block
// may use (its in-order sums then read shared memory only), else the leaf word.
inline int shared_data_leaf_words(const AdaptiveForestView& v, std::size_t smem_optin) {
  const ForestCommonView& c = v.common;
  if (c.leaf_width == 0 || c.leaf_width > 8) return 1;
  const std::size_t row = static_cast<std::size_t>(c.n_trees) * c.leaf_width * sizeof(double);
  return row <= smem_optin / 4 ? 2 * c.leaf_width : 1;
}

// Shared memory of the shared-data strategy for a schedule.
inline std::size_t shared_data_bytes(const AdaptiveForestView& v, const ForestSchedule& s, int outputs, std::size_t carry_size,
                                     int leaf_words) {
  const std::size_t leaves = shared_data_leaf_words_per_pass(v.common.n_trees, s.tree_group, leaf_words) * 4;
  const std::size_t partial = (static_cast<std::size_t>(s.tree_group) * outputs * carry_size + 15) / 16 * 16;
  const std::size_t top = static_cast<std::size_t>(std::max(s.top_rows, 0)) * v.common.n_trees * sizeof(ForestNode);
  return leaves + partial + top +
         static_cast<std::size_t>(s.rows_per_block) * shared_data_tile_stride(v.common.n_features) * sizeof(float);
}

void launch_adaptive_direct(const AdaptiveForestView& v, const AdaptiveBatch& b, const ForestSchedule& s,
                            const AdaptiveDevice& d);
void launch_adaptive_shared_data(const AdaptiveForestView& v, const AdaptiveBatch& b, const ForestSchedule& s,
                                 const AdaptiveDevice& d);
// One part of the forest (the whole forest: shared forest): part_bytes of nodes and the row tile
// in dynamic shared memory.
void launch_adaptive_shared_forest(const AdaptiveForestView& v, const AdaptiveBatch& b, const ForestSchedule& s,
                                   const AdaptivePart& part, std::size_t part_bytes, const AdaptiveDevice& d);

}  // namespace gpu
}  // namespace canopy
