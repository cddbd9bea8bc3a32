// The offline part of Tahoe's performance model (Algorithm 1, line 4): micro-benchmarks that
// measure Table 1's hardware parameters on a GPU. CUDA-free interface; see forest_model.hpp
// for the record, its cache and the equations that use it.
#pragma once

#include <string>
#include <utility>

#include "scheduler/forest_model.hpp"

namespace canopy {

// Measures ForestHardware on CUDA device `device` (made current for the call; the previous
// current device is restored). Every benchmark runs once to warm up, then 5 times, timed with
// CUDA events on a non-blocking stream, and the median is kept. Needs about 260 MiB of device
// memory; takes a few tens of milliseconds once the CUDA context exists. Error (CudaError for a
// failed CUDA call, naming it) on failure.
ForestHardware measure_forest_hardware(int device);

// Device `device`'s parameters from the cache file at `path` when it holds this GPU's (name and
// UUID), else measured and saved there (load_or_measure_forest_hardware).
ForestHardware cached_forest_hardware(int device, const std::string& path);

// Device `device`'s name and UUID (32 hex digits), as Canopy's caches record a GPU.
std::pair<std::string, std::string> device_identity(int device);

}  // namespace canopy
