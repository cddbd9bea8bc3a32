#include "tests/stream_probe.hpp"

#include <chrono>
#include <exception>
#include <future>

#include "core/cuda.cuh"

namespace canopy {
namespace test {
namespace {

__global__ void spin_until(volatile int* flag) {
  while (*flag == 0) {
  }
}

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_for(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

}  // namespace

bool finishes_beside_a_blocking_stream(const std::function<void()>& call, double timeout_s) {
  int* flag = nullptr;
  CANOPY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* dflag = nullptr;
  CANOPY_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dflag), flag, 0));
  cudaStream_t blocking = nullptr;
  CANOPY_CUDA_CHECK(cudaStreamCreate(&blocking));  // synchronises with the legacy default stream
  spin_until<<<1, 1, 0, blocking>>>(dflag);
  CANOPY_CUDA_CHECK_LAUNCH("spin_until");
  std::future<void> done = std::async(std::launch::async, call);
  const bool finished =
      done.wait_for(std::chrono::duration<double>(timeout_s)) == std::future_status::ready;
  *reinterpret_cast<volatile int*>(flag) = 1;
  std::exception_ptr err;
  try {
    done.get();
  } catch (...) {
    err = std::current_exception();
  }
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(blocking));
  CANOPY_CUDA_CHECK(cudaStreamDestroy(blocking));
  CANOPY_CUDA_CHECK(cudaFreeHost(flag));
  if (err) std::rethrow_exception(err);
  return finished;
}

void legacy_stream_work() {
  int* d = nullptr;
  CANOPY_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
  CANOPY_CUDA_CHECK(cudaMemsetAsync(d, 0, sizeof(int), 0));
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(0));
  CANOPY_CUDA_CHECK(cudaFree(d));
}

void* device_alloc(std::size_t bytes) {
  void* p = nullptr;
  CANOPY_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}
void device_free(void* p) { CANOPY_CUDA_CHECK(cudaFree(p)); }

void* make_stream() {
  cudaStream_t s = nullptr;
  CANOPY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
void copy_after_delay(void* dst, const void* src, std::size_t bytes, double delay_ms, void* s) {
  const cudaStream_t stream = static_cast<cudaStream_t>(s);
  spin_for<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(delay_ms * 1e6));
  CANOPY_CUDA_CHECK_LAUNCH("spin_for");
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}
void sync_stream(void* s) { CANOPY_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s))); }
void destroy_stream(void* s) { CANOPY_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(s))); }

}  // namespace test
}  // namespace canopy
