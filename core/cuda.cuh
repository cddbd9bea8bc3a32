// CUDA-side support: error checks that throw, events, owned streams and typed copies.
// Only .cu files include this; device and pinned buffers are in core/device_buffer.hpp.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "core/device_buffer.hpp"
#include "core/types.hpp"

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

// `waiter`'s later work starts after the work queued on `first` so far (e marks that point).
inline void stream_wait(cudaStream_t waiter, cudaStream_t first, Event& e) {
  e.record(first);
  CANOPY_CUDA_CHECK(cudaStreamWaitEvent(waiter, e.get(), 0));
}

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
  // Work enqueued here from now on starts after the work already queued on `first` (recorded in e).
  void wait_for(cudaStream_t first, Event& e) const { stream_wait(s_, first, e); }

 private:
  cudaStream_t s_ = nullptr;
};

// A CUB device algorithm by its two-call protocol, on the stream the call names: call(nullptr,
// bytes) sizes its scratch space, `temp` grows to that (a larger buffer is kept; `temp_what`
// names it in an out-of-memory error), then call(temp.get(), bytes) runs it. `what` names the
// algorithm in a CUDA error. For an algorithm sized once and run many times, size it by hand.
template <class Call>
void run_cub(const char* what, DeviceBuffer<unsigned char>& temp, const char* temp_what, cudaStream_t s,
             const Call& call) {
  std::size_t bytes = 0;
  cudaError_t err = call(nullptr, bytes);
  if (err == cudaSuccess) {
    temp.reserve(bytes, temp_what, s);
    err = call(temp.get(), bytes);
  }
  if (err != cudaSuccess) throw_cuda_error(err, what, __FILE__, __LINE__);
}

// One call's work between the caller's stream (null: none given) and Canopy's own stream `own`:
// from construction, work queued on `own` starts after the work queued on the caller's stream so
// far (recorded in `ready`); at destruction, on the normal path and when an exception unwinds
// alike, the caller's stream waits for everything queued on `own` by then (recorded in
// `finished`). The destructor never throws: should the record fail, the next CUDA call reports it.
class CallerStream {
 public:
  CallerStream(cudaStream_t own, stream_t caller, Event& ready, Event& finished)
      : own_(own), caller_(caller), finished_(finished) {
    if (caller_) stream_wait(own_, caller_, ready);
  }
  CallerStream(const CallerStream&) = delete;
  CallerStream& operator=(const CallerStream&) = delete;
  ~CallerStream() {
    if (!caller_) return;
    if (cudaEventRecord(finished_.get(), own_) == cudaSuccess) cudaStreamWaitEvent(caller_, finished_.get(), 0);
  }

 private:
  cudaStream_t own_;
  stream_t caller_;
  Event& finished_;
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
