// Device and page-locked host memory behind a CUDA-free interface, so that any header may hold
// buffers (kernels receive the raw pointers). Device memory is stream-ordered: a buffer grows with
// cudaMallocAsync and gives its old block back with cudaFreeAsync, both on the stream that will
// use it, so growing never synchronises the device (cudaFree would); it is freed on the stream of
// its last growth when destroyed, so that stream must outlive it (declare the owning Stream first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.hpp"

namespace canopy {
namespace detail {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  DeviceMemory(DeviceMemory&& o) noexcept { swap(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    swap(o);
    return *this;
  }
  ~DeviceMemory();
  // Room for `bytes` (old contents are not kept); `what` names the buffer in an out-of-memory error.
  void reserve(std::size_t bytes, const char* what, stream_t stream);
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void swap(DeviceMemory& o) noexcept;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  stream_t stream_ = nullptr;
};

class PinnedMemory {
 public:
  PinnedMemory() = default;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;
  PinnedMemory(PinnedMemory&& o) noexcept { swap(o); }
  PinnedMemory& operator=(PinnedMemory&& o) noexcept {
    swap(o);
    return *this;
  }
  ~PinnedMemory();
  void reserve(std::size_t bytes);
  void* get() const { return ptr_; }

 private:
  void swap(PinnedMemory& o) noexcept;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace detail

// Device memory for n elements of T that grows on demand.
template <class T>
class DeviceBuffer {
 public:
  void reserve(std::size_t n, const char* what, stream_t stream) { mem_.reserve(n * sizeof(T), what, stream); }
  T* get() const { return static_cast<T*>(mem_.get()); }
  std::size_t capacity() const { return mem_.bytes() / sizeof(T); }

 private:
  detail::DeviceMemory mem_;
};

// Page-locked host memory, the end of asynchronous copies from and to the device.
template <class T>
class PinnedBuffer {
 public:
  void reserve(std::size_t n) { mem_.reserve(n * sizeof(T)); }
  T* get() const { return static_cast<T*>(mem_.get()); }

 private:
  detail::PinnedMemory mem_;
};

// How often Canopy has allocated and freed memory, process-wide: a steady-state call (the same
// sizes as the call before) adds nothing.
struct MemoryEvents {
  std::int64_t device_allocations = 0, device_frees = 0;
  std::int64_t pinned_allocations = 0, pinned_frees = 0;
};
MemoryEvents memory_events();

}  // namespace canopy
