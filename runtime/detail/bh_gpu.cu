// The GPU engine's instance for detail::BhWorkload (each workload in its own file, so they compile in parallel).
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.cuh"

namespace canopy {

template std::unique_ptr<GpuPart<detail::BhWorkload>> make_gpu_part<detail::BhWorkload>(const detail::BhWorkload::Data& data);

}  // namespace canopy
