// The GPU engine's instance for detail::KnnWorkload<BallTree> (each workload in its own file, so they compile in parallel).
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.cuh"

namespace canopy {

template std::unique_ptr<GpuPart<detail::KnnWorkload<BallTree>>> make_gpu_part<detail::KnnWorkload<BallTree>>(const detail::KnnWorkload<BallTree>::Data& data);

}  // namespace canopy
