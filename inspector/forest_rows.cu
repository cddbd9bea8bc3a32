#include "inspector/forest_rows.hpp"

#include "core/cuda.cuh"

namespace canopy {
namespace {

constexpr int kBlock = 128;

__global__ void __launch_bounds__(kBlock) forest_row_key_kernel(AdaptiveForestView v, ForestRowKeys k) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= k.n_rows) return;
  k.keys[i] = adaptive_row_key(v, k.rows + i * v.common.n_features, k.depth, k.key_trees);
  k.index[i] = i;
}

}  // namespace

void launch_forest_row_keys(const AdaptiveForestView& v, const ForestRowKeys& k, stream_t stream) {
  if (k.n_rows <= 0) return;
  forest_row_key_kernel<<<static_cast<unsigned>((k.n_rows + kBlock - 1) / kBlock), kBlock, 0, stream>>>(v, k);
  CANOPY_CUDA_CHECK_LAUNCH("forest_row_key_kernel");
}

}  // namespace canopy
