// The GPU engine's instance for detail::BhWorkload (each workload in its own file, so they compile in parallel),
// and the bodies' original order made on the device for an octree left there.
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.cuh"

namespace canopy {
namespace detail {
namespace {

__global__ void original_order_kernel(OctreeView tree, float* xyz, float* mass) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= tree.n_bodies) return;
  const index_t id = tree.body_ids[i];
  const float* b = tree.body(i);
  xyz[id * 3] = b[0];
  xyz[id * 3 + 1] = b[1];
  xyz[id * 3 + 2] = b[2];
  mass[id] = b[3];
}

}  // namespace

void scatter_original_order(const OctreeView& tree, float* xyz, float* mass, stream_t stream) {
  if (tree.n_bodies <= 0) return;
  original_order_kernel<<<static_cast<unsigned>((tree.n_bodies + 255) / 256), 256, 0,
                          static_cast<cudaStream_t>(stream)>>>(tree, xyz, mass);
  CANOPY_CUDA_CHECK_LAUNCH("original_order_kernel");
}

}  // namespace detail

template std::unique_ptr<GpuPart<detail::BhWorkload>> make_gpu_part<detail::BhWorkload>(const detail::BhWorkload::Data& data);

}  // namespace canopy
