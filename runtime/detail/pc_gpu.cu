// The GPU engine's instance for detail::PcWorkload (each workload in its own file, so they compile in parallel).
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.cuh"

namespace canopy {

template std::unique_ptr<GpuPart<detail::PcWorkload>> make_gpu_part<detail::PcWorkload>(const detail::PcWorkload::Data& data);

}  // namespace canopy
