// The GPU engine's instance for detail::KnnWorkload<KdTree> (each workload in its own file, so they compile in parallel).
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.cuh"

namespace canopy {

template std::unique_ptr<GpuPart<detail::KnnWorkload<KdTree>>> make_gpu_part<detail::KnnWorkload<KdTree>>(const detail::KnnWorkload<KdTree>::Data& data);

}  // namespace canopy
