// Device and page-locked host memory behind a CUDA-free interface, so that any header may hold
// buffers (kernels receive the raw pointers). Device memory is stream-ordered: a buffer grows with
// cudaMallocAsync and gives its old block back with cudaFreeAsync, both on the stream that will
// use it, so growing never synchronises the device (cudaFree would); it is freed on the stream of
// its last growth when destroyed, so that stream must outlive it (declare the owning Stream first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/types.hpp"

namespace canopy {
namespace detail {

// Owned memory of one kind, grown on demand: device memory (stream-ordered, as above) or
// page-locked host memory (cudaMallocHost; the stream is not used).
enum class MemoryKind { Device, Pinned };
template <MemoryKind kKind>
class Memory {
 public:
  Memory() = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  Memory(Memory&& o) noexcept { swap(o); }
  Memory& operator=(Memory&& o) noexcept {
    swap(o);
    return *this;
  }
  ~Memory();
  // Room for `bytes` (old contents are not kept); `what` names the buffer in an out-of-memory error.
  void reserve(std::size_t bytes, const char* what, stream_t stream);
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void swap(Memory& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(stream_, o.stream_);
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  stream_t stream_ = nullptr;
};
using DeviceMemory = Memory<MemoryKind::Device>;
using PinnedMemory = Memory<MemoryKind::Pinned>;
// Defined in core/device_buffer.cu.
template <>
DeviceMemory::~Memory();
template <>
void DeviceMemory::reserve(std::size_t bytes, const char* what, stream_t stream);
template <>
PinnedMemory::~Memory();
template <>
void PinnedMemory::reserve(std::size_t bytes, const char* what, stream_t stream);

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
  void reserve(std::size_t n) { mem_.reserve(n * sizeof(T), "pinned host memory", nullptr); }
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

// Device memory the current device's stream-ordered pool holds freed, ready for Canopy's next
// allocations (it keeps up to an eighth of the device's memory; cudaMemGetInfo counts it as used).
std::size_t pool_spare_bytes();

}  // namespace canopy
