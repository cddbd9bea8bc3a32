#include "core/cuda.cuh"
#include "core/device.hpp"
#include "core/device_buffer.hpp"

#include <algorithm>
#include <cstring>

namespace canopy {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" +
                  cudaGetErrorString(err) + ") at " + file + ":" + std::to_string(line));
}

namespace {
// Asked once; the answer cannot change while the process runs.
cudaError_t probe(int* count) {
  static int n = 0;
  static const cudaError_t err = cudaGetDeviceCount(&n);
  *count = err == cudaSuccess ? n : 0;
  return err;
}
}  // namespace

bool gpu_available() {
  int n = 0;
  return probe(&n) == cudaSuccess && n > 0;
}

std::string gpu_description() {
  int n = 0;
  const cudaError_t err = probe(&n);
  if (err != cudaSuccess) return std::string("no CUDA device (") + cudaGetErrorString(err) + ")";
  if (n == 0) return "no CUDA device";
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p;
  CANOPY_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs)";
}

std::size_t gpu_free_memory() {
  std::size_t free_b = 0, total_b = 0;
  CANOPY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b + pool_spare_bytes();
}

bool is_device_pointer(const void* p) {
  if (!p || !gpu_available()) return false;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // an unregistered host pointer is not an error worth keeping
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

void copy_memory(void* dst, const void* src, std::size_t bytes, stream_t after) {
  if (bytes == 0) return;
  if (!is_device_pointer(dst) && !is_device_pointer(src)) {
    std::memcpy(dst, src, bytes);
    return;
  }
  thread_local Stream stream;
  thread_local Event ready;
  if (after) stream.wait_for(after, ready);
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream.get()));
  stream.sync();
}

void copy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  if (bytes == 0) return;
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

namespace {

constexpr int kScanBlock = 256;

__global__ void __launch_bounds__(kScanBlock)
first_non_finite_kernel(const float* v, index_t n, unsigned long long* first) {
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x) {
    if (!isfinite(v[i])) {
      atomicMin(first, static_cast<unsigned long long>(i));
      return;  // later values of this thread are larger
    }
  }
}

}  // namespace

index_t first_non_finite_on_device(const float* v, index_t n, stream_t after) {
  if (n <= 0) return n;
  thread_local Stream stream;
  thread_local Event ready;
  thread_local DeviceBuffer<unsigned long long> first;
  thread_local PinnedBuffer<unsigned long long> found;
  if (after) stream.wait_for(after, ready);
  first.reserve(1, "the non-finite value search", stream.get());
  found.reserve(1);
  *found.get() = static_cast<unsigned long long>(n);
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(first.get(), found.get(), sizeof(unsigned long long), cudaMemcpyHostToDevice,
                                    stream.get()));
  const index_t blocks = std::min<index_t>((n + kScanBlock - 1) / kScanBlock, 1024);
  first_non_finite_kernel<<<static_cast<unsigned>(blocks), kScanBlock, 0, stream.get()>>>(v, n, first.get());
  CANOPY_CUDA_CHECK_LAUNCH("first_non_finite_kernel");
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(found.get(), first.get(), sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                    stream.get()));
  stream.sync();
  return static_cast<index_t>(*found.get());
}

Device resolve_device(Device requested) {
  if (requested == Device::Cpu) return Device::Cpu;
  const bool have = gpu_available();
  if (requested == Device::Gpu && !have)
    throw Error("device gpu was requested but there is none: " + gpu_description());
  return have ? Device::Gpu : Device::Cpu;
}

const char* to_string(Device d) {
  static constexpr const char* kNames[] = {"auto", "cpu", "gpu"};
  return enum_name(d, kNames);
}

}  // namespace canopy
