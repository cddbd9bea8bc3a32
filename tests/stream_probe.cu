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

__global__ void spin_then_copy(float* dst, const float* src, std::size_t n, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

}  // namespace

void write_late(float* dst, const float* src, std::size_t n, void* stream, double ms) {
  int dev = 0, khz = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  const long long cycles = static_cast<long long>(ms * khz);
  spin_then_copy<<<64, 256, 0, static_cast<cudaStream_t>(stream)>>>(dst, src, n, cycles);
  CANOPY_CUDA_CHECK_LAUNCH("spin_then_copy");
}

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
void sync_stream(void* s) { CANOPY_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s))); }
void destroy_stream(void* s) { CANOPY_CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(s))); }

}  // namespace test
}  // namespace canopy
