// Which executors a machine offers, and moving bytes between host and device. CUDA-free:
// callable from any C++ code.
#pragma once

#include <cstddef>
#include <string>

#include "core/types.hpp"

namespace canopy {

enum class Device { Auto, Cpu, Gpu };

// True when a CUDA device is present and usable (driver and runtime agree).
bool gpu_available();
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)" or why there is none.
std::string gpu_description();

// Bytes of device memory free now for Canopy: cudaMemGetInfo's, and what the stream-ordered pool
// keeps freed for its next allocations (pool_spare_bytes).
std::size_t gpu_free_memory();

// Whether p points into device memory (false for host memory, and on machines without a GPU).
bool is_device_pointer(const void* p);
// Copies bytes between any two of host and device memory on a non-blocking stream of the calling
// thread (never the legacy default stream) and waits for the copy; the copy starts after the
// work queued on `after` (a caller's stream; null: none).
void copy_memory(void* dst, const void* src, std::size_t bytes, stream_t after = nullptr);
// Enqueues the same copy on `stream` (it returns early only for page-locked host memory).
void copy_async(void* dst, const void* src, std::size_t bytes, stream_t stream);
template <class T>
void copy_n_async(T* dst, const T* src, std::size_t n, stream_t stream) {
  copy_async(dst, src, n * sizeof(T), stream);
}

// first_non_finite() of values in device memory, computed there after the work queued on `after`.
index_t first_non_finite_on_device(const float* v, index_t n, stream_t after = nullptr);

// Auto becomes Gpu when one is available, else Cpu; Gpu without one is an error.
Device resolve_device(Device requested);
const char* to_string(Device d);

}  // namespace canopy
