// The GPU engine's instance for detail::KnnWorkload<VpTree> (each workload in its own file, so they compile in parallel).
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.cuh"

namespace canopy {

template std::unique_ptr<GpuPart<detail::KnnWorkload<VpTree>>> make_gpu_part<detail::KnnWorkload<VpTree>>(const detail::KnnWorkload<VpTree>::Data& data);

}  // namespace canopy
