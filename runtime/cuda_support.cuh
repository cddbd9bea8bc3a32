// CUDA-side support: error checking that throws, owning device and pinned buffers, events.
// Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "runtime/common.hpp"

namespace canopy {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

#define CANOPY_CUDA_CHECK(call)                                              \
  do {                                                                       \
    const cudaError_t canopy_err_ = (call);                                  \
    if (canopy_err_ != cudaSuccess)                                          \
      ::canopy::throw_cuda_error(canopy_err_, #call, __FILE__, __LINE__);    \
  } while (0)

// After a kernel launch: a launch error names the kernel.
#define CANOPY_CUDA_CHECK_LAUNCH(kernel_name)                                              \
  do {                                                                                     \
    const cudaError_t canopy_err_ = cudaGetLastError();                                    \
    if (canopy_err_ != cudaSuccess)                                                        \
      ::canopy::throw_cuda_error(canopy_err_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)

// Device memory that grows on demand; `what` names the buffer in an out-of-memory error.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept { swap(o); return *this; }
  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }

  // Makes room for n elements (old contents are not kept).
  void reserve(std::size_t n, const char* what) {
    if (n <= capacity_) return;
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
    const std::size_t bytes = n * sizeof(T);
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it for later checks
      std::size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error(std::string("not enough GPU memory for ") + what + ": it needs " +
                  std::to_string(bytes >> 20) + " MiB, " + std::to_string(free_b >> 20) +
                  " MiB of " + std::to_string(total_b >> 20) + " MiB are free");
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    capacity_ = n;
  }
  T* get() const { return static_cast<T*>(ptr_); }
  std::size_t capacity() const { return capacity_; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(capacity_, o.capacity_);
  }
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

// Page-locked host memory, the target of asynchronous device-to-host copies.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { if (ptr_) cudaFreeHost(ptr_); }
  void reserve(std::size_t n) {
    if (n <= capacity_) return;
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
    CANOPY_CUDA_CHECK(cudaMallocHost(&ptr_, n * sizeof(T)));
    capacity_ = n;
  }
  T* get() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

class Event {
 public:
  Event() { CANOPY_CUDA_CHECK(cudaEventCreate(&e_)); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(e_); }
  void record(cudaStream_t s) { CANOPY_CUDA_CHECK(cudaEventRecord(e_, s)); }
  cudaEvent_t get() const { return e_; }
  // Milliseconds from `start` to this event; waits for this event.
  float since(const Event& start) const {
    CANOPY_CUDA_CHECK(cudaEventSynchronize(e_));
    float ms = 0;
    CANOPY_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
    return ms;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

// A non-blocking stream, so no work of ours ever serialises with the legacy default stream.
class Stream {
 public:
  Stream() { CANOPY_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  // A stream whose pending work the GPU dispatches before that of default-priority streams.
  struct HighPriority {};
  explicit Stream(HighPriority) {
    int least = 0, greatest = 0;
    CANOPY_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CANOPY_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, greatest));
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(s_); }
  cudaStream_t get() const { return s_; }
  void sync() const { CANOPY_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

template <class T>
void copy_to_device(T* dst, const T* src, std::size_t n, cudaStream_t s) {
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s));
}
template <class T>
void copy_device_to_device(T* dst, const T* src, std::size_t n, cudaStream_t s) {
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, s));
}
template <class T>
void copy_to_host(T* dst, const T* src, std::size_t n, cudaStream_t s) {
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, s));
}

}  // namespace canopy
