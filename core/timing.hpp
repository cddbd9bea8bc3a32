// Host wall-clock timing (GPU phases are timed with CUDA events, core/cuda.cuh).
#pragma once

#include <chrono>

namespace canopy {

// Milliseconds on the host clock since t0.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace canopy
