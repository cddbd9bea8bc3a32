#include "core/device_buffer.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda.cuh"
#include "core/device.hpp"

namespace canopy {
namespace {

std::atomic<std::int64_t> g_device_allocations{0}, g_device_frees{0}, g_pinned_allocations{0}, g_pinned_frees{0};

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// The current device's stream-ordered pool keeps up to an eighth of the device's memory once
// freed, for the next allocation: at CUDA's default (0) every synchronisation gave freed blocks
// back, so each new tree's build, engine and result buffers paid the pool's growth again. Set
// once per device, and only where the threshold is still CUDA's default (a caller's own stays).
cudaMemPool_t kept_pool() {
  static std::mutex mu;
  static std::vector<int> done;
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  cudaMemPool_t pool;
  CANOPY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (std::find(done.begin(), done.end(), dev) != done.end()) return pool;
  done.push_back(dev);
  std::uint64_t keep = 0;
  CANOPY_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  if (keep == 0) {
    std::size_t free_b = 0, total_b = 0;
    CANOPY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    keep = total_b / 8;
    CANOPY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  return pool;
}

}  // namespace

std::size_t pool_spare_bytes() {
  if (!gpu_available()) return 0;
  const cudaMemPool_t pool = kept_pool();
  std::uint64_t reserved = 0, used = 0;
  CANOPY_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  CANOPY_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return reserved > used ? static_cast<std::size_t>(reserved - used) : 0;
}

MemoryEvents memory_events() {
  MemoryEvents e;
  e.device_allocations = g_device_allocations.load();
  e.device_frees = g_device_frees.load();
  e.pinned_allocations = g_pinned_allocations.load();
  e.pinned_frees = g_pinned_frees.load();
  return e;
}

namespace detail {

template <>
Memory<MemoryKind::Device>::~Memory() {
  if (!ptr_) return;
  ++g_device_frees;
  cudaFreeAsync(ptr_, stream_);
}

template <>
void Memory<MemoryKind::Device>::reserve(std::size_t bytes, const char* what, stream_t stream) {
  if (bytes <= bytes_ && ptr_) return;
  // Stream 0 is the legacy default stream, which synchronises with every blocking stream.
  if (!stream) throw Error(std::string("internal: ") + what + " was to be allocated on the legacy default stream");
  if (ptr_) {
    ++g_device_frees;
    CANOPY_CUDA_CHECK(cudaFreeAsync(ptr_, stream));
  }
  ptr_ = nullptr;
  bytes_ = 0;
  ++g_device_allocations;
  const cudaMemPool_t pool = kept_pool();
  cudaError_t err = cudaMallocAsync(&ptr_, std::max<std::size_t>(bytes, 1), stream);
  if (err == cudaErrorMemoryAllocation) {  // (what the pool keeps may be what is missing)
    cudaGetLastError();
    CANOPY_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    err = cudaMallocAsync(&ptr_, std::max<std::size_t>(bytes, 1), stream);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it for later checks
    ptr_ = nullptr;
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory(std::string("not enough GPU memory for ") + what + ": it needs " + mib(bytes) + ", " + mib(free_b) +
                " of " + mib(total_b) + " are free");
  }
  if (err != cudaSuccess) throw_cuda_error(err, "cudaMallocAsync", __FILE__, __LINE__);
  bytes_ = bytes;
  stream_ = stream;
}

template <>
Memory<MemoryKind::Pinned>::~Memory() {
  if (!ptr_) return;
  ++g_pinned_frees;
  cudaFreeHost(ptr_);
}

template <>
void Memory<MemoryKind::Pinned>::reserve(std::size_t bytes, const char* /*what*/, stream_t /*stream*/) {
  if (bytes <= bytes_ && ptr_) return;
  if (ptr_) {
    ++g_pinned_frees;
    CANOPY_CUDA_CHECK(cudaFreeHost(ptr_));
  }
  ptr_ = nullptr;
  bytes_ = 0;
  ++g_pinned_allocations;
  CANOPY_CUDA_CHECK(cudaMallocHost(&ptr_, std::max<std::size_t>(bytes, 1)));
  bytes_ = bytes;
}

}  // namespace detail
}  // namespace canopy
