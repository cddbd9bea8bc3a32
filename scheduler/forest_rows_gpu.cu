#include "core/cuda.cuh"
#include "scheduler/forest_rows.hpp"

namespace canopy {
namespace {

constexpr int kBlock = 256;

__global__ void __launch_bounds__(kBlock)
gather_rows_kernel(const float* rows, const index_t* order, index_t n_rows, int features, float* dst) {
  const index_t k = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (k >= n_rows * features) return;
  const index_t i = k / features;
  dst[k] = rows[order[i] * features + (k - i * features)];
}

}  // namespace

void launch_gather_rows(const float* rows, const index_t* order, index_t n_rows, int features, float* dst,
                        stream_t stream) {
  const index_t values = n_rows * features;
  if (values <= 0) return;
  gather_rows_kernel<<<static_cast<unsigned>((values + kBlock - 1) / kBlock), kBlock, 0, stream>>>(rows, order, n_rows,
                                                                                               features, dst);
  CANOPY_CUDA_CHECK_LAUNCH("gather_rows_kernel");
}

}  // namespace canopy
