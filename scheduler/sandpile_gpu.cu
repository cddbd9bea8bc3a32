#include <cub/device/device_radix_sort.cuh>

#include <vector>

#include "core/cuda.cuh"
#include "scheduler/sandpile_gpu.hpp"

namespace canopy {
namespace {

constexpr int kBlock = 256;

__global__ void __launch_bounds__(kBlock) iota_kernel(index_t* out, index_t n) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = i;
}

// keys[i] = word w of the row of query order[i].
__global__ void __launch_bounds__(kBlock)
gather_word_kernel(const std::uint64_t* matrix, index_t words, index_t w, const index_t* order, index_t n,
                   std::uint64_t* keys) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) keys[i] = matrix[order[i] * words + w];
}

// Per word of the rows: the OR and the AND over all rows (bits where they differ from each
// other vary; only those need sorting). or_and holds [words][2], zeroed/all-ones beforehand.
__global__ void __launch_bounds__(kBlock)
varying_bits_kernel(const std::uint64_t* matrix, index_t rows, index_t words, unsigned long long* or_and) {
  const index_t w = blockIdx.y;
  unsigned long long o = 0, a = ~0ull;
  for (index_t r = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<index_t>(gridDim.x) * blockDim.x) {
    const unsigned long long v = matrix[r * words + w];
    o |= v;
    a &= v;
  }
  for (int off = 16; off > 0; off /= 2) {
    o |= __shfl_xor_sync(0xffffffffu, o, off);
    a &= __shfl_xor_sync(0xffffffffu, a, off);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicOr(&or_and[2 * w], o);
    atomicAnd(&or_and[2 * w + 1], a);
  }
}

unsigned grid_for(index_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

}  // namespace

struct DeviceSandpile::Impl {
  DeviceBuffer<std::uint64_t> keys_in, keys_out;
  DeviceBuffer<index_t> order_tmp;
  DeviceBuffer<unsigned long long> or_and;
  DeviceBuffer<unsigned char> temp;
  PinnedBuffer<unsigned long long> host_or_and;
};

DeviceSandpile::DeviceSandpile() : impl_(std::make_unique<Impl>()) {}
DeviceSandpile::~DeviceSandpile() = default;

void DeviceSandpile::run(const std::uint64_t* matrix, index_t rows, index_t words, index_t* order,
                         stream_t stream) {
  if (rows <= 0) return;
  Impl& m = *impl_;
  const cudaStream_t s = stream;
  m.keys_in.reserve(rows, "the device sandpile keys", s);
  m.keys_out.reserve(rows, "the device sandpile keys", s);
  m.order_tmp.reserve(rows, "the device sandpile order", s);
  m.or_and.reserve(2 * words, "the device sandpile bit ranges", s);
  m.host_or_and.reserve(2 * words);

  // Which bits vary in each word: words where every row agrees need no pass at all.
  std::vector<unsigned long long> init(static_cast<std::size_t>(2 * words));
  for (index_t w = 0; w < words; ++w) {
    init[2 * w] = 0;
    init[2 * w + 1] = ~0ull;
  }
  copy_to_device(m.or_and.get(), init.data(), init.size(), s);
  const dim3 grid(static_cast<unsigned>(std::min<index_t>(grid_for(rows), 264)), static_cast<unsigned>(words));
  varying_bits_kernel<<<grid, kBlock, 0, s>>>(matrix, rows, words, m.or_and.get());
  CANOPY_CUDA_CHECK_LAUNCH("varying_bits_kernel");
  copy_to_host(m.host_or_and.get(), m.or_and.get(), static_cast<std::size_t>(2 * words), s);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));

  iota_kernel<<<grid_for(rows), kBlock, 0, s>>>(order, rows);
  CANOPY_CUDA_CHECK_LAUNCH("iota_kernel");
  index_t* cur = order;
  index_t* other = m.order_tmp.get();
  for (index_t w = 0; w < words; ++w) {  // least significant word first (LSD over words)
    const unsigned long long vary = m.host_or_and.get()[2 * w] ^ m.host_or_and.get()[2 * w + 1];
    if (vary == 0) continue;
    const int begin_bit = __builtin_ctzll(vary);
    const int end_bit = 64 - __builtin_clzll(vary);
    gather_word_kernel<<<grid_for(rows), kBlock, 0, s>>>(matrix, words, w, cur, rows, m.keys_in.get());
    CANOPY_CUDA_CHECK_LAUNCH("gather_word_kernel");
    // Radix sort is stable: rows equal in this word keep the order the lower words gave them.
    run_cub("cub::DeviceRadixSort::SortPairsDescending (the sandpile order)", m.temp,
            "the device sandpile scratch space", s, [&](void* t, std::size_t& bytes) {
              return cub::DeviceRadixSort::SortPairsDescending(t, bytes, m.keys_in.get(), m.keys_out.get(), cur,
                                                               other, rows, begin_bit, end_bit, s);
            });
    std::swap(cur, other);
  }
  if (cur != order) copy_device_to_device(order, cur, static_cast<std::size_t>(rows), s);
}

}  // namespace canopy
