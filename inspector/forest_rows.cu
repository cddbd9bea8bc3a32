#include "inspector/forest_rows.hpp"

#include "core/cuda.cuh"

namespace canopy {
namespace {

constexpr int kBlock = 128;

__global__ void __launch_bounds__(kBlock)
forest_row_key_kernel(AdaptiveForestView v, const float* rows, index_t n_rows, int depth, int key_trees,
                      std::uint64_t* keys, index_t* index) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n_rows) return;
  keys[i] = adaptive_row_key(v, rows + i * v.common.n_features, depth, key_trees);
  index[i] = i;
}

}  // namespace

void launch_forest_row_keys(const AdaptiveForestView& v, const float* rows, index_t n_rows, int depth, int key_trees,
                            std::uint64_t* keys, index_t* index, stream_t stream) {
  if (n_rows <= 0) return;
  forest_row_key_kernel<<<static_cast<unsigned>((n_rows + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      v, rows, n_rows, depth, key_trees, keys, index);
  CANOPY_CUDA_CHECK_LAUNCH("forest_row_key_kernel");
}

}  // namespace canopy
