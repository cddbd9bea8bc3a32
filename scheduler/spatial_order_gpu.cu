#include "scheduler/spatial_order_gpu.hpp"

#include <cub/device/device_radix_sort.cuh>

#include "core/cuda.cuh"
#include "core/device_buffer.hpp"

namespace canopy {
namespace {

constexpr int kBlock = 256;

unsigned grid_for(index_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

// Each query's cell (spatial_cell, as the host files it).
__global__ void __launch_bounds__(kBlock)
cell_kernel(const std::int32_t* dim, const float* value, int depth, int dims, const float* queries, index_t n,
            std::uint16_t* keys, index_t* ids) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  keys[i] = static_cast<std::uint16_t>(spatial_cell(dim, value, depth, queries + i * dims));
  ids[i] = i;
}

// Rows of `words` 4-byte words: compact[j] <-> full[order[j]].
__global__ void __launch_bounds__(kBlock)
move_rows_kernel(const std::uint32_t* from, std::uint32_t* to, index_t words, const index_t* order, index_t count,
                 bool gather) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= count * words) return;
  const index_t j = t / words, w = t % words;
  const index_t f = order[j] * words + w, c = j * words + w;
  if (gather)
    to[c] = from[f];
  else
    to[f] = from[c];
}

}  // namespace

struct SpatialOrder::Gpu::State {
  Stream stream;  // first: the buffers are freed on it
  Event ready;
  DeviceBuffer<std::int32_t> dim;
  DeviceBuffer<float> value;
  DeviceBuffer<std::uint16_t> keys, sorted_keys;
  DeviceBuffer<index_t> ids, order, positions;
  DeviceBuffer<unsigned char> temp, staged;
  DeviceBuffer<unsigned char> slots[4];
};

SpatialOrder::Gpu::Gpu() : s(std::make_unique<State>()) {}
SpatialOrder::Gpu::~Gpu() = default;

void SpatialOrder::Gpu::sort(const std::vector<std::int32_t>& dim, const std::vector<float>& value, int depth,
                             int dims, const float* queries, index_t n, stream_t after) {
  const cudaStream_t st = s->stream.get();
  if (after) s->stream.wait_for(after, s->ready);
  const std::size_t m = static_cast<std::size_t>(n);
  s->dim.reserve(dim.size(), "the spatial order's cut", st);
  s->value.reserve(value.size(), "the spatial order's cut", st);
  copy_to_device(s->dim.get(), dim.data(), dim.size(), st);
  copy_to_device(s->value.get(), value.data(), value.size(), st);
  s->keys.reserve(m, "the spatial order's keys", st);
  s->sorted_keys.reserve(m, "the spatial order's keys", st);
  s->ids.reserve(m, "the spatial order's ids", st);
  s->order.reserve(m, "the spatial order", st);
  cell_kernel<<<grid_for(n), kBlock, 0, st>>>(s->dim.get(), s->value.get(), depth, dims, queries, n, s->keys.get(),
                                              s->ids.get());
  CANOPY_CUDA_CHECK_LAUNCH("cell_kernel");
  // Radix sort is stable: the queries of a cell keep their input order.
  run_cub("cub::DeviceRadixSort::SortPairs (the spatial order)", s->temp, "the spatial order's sort scratch", st,
          [&](void* t, std::size_t& bytes) {
            return cub::DeviceRadixSort::SortPairs(t, bytes, s->keys.get(), s->sorted_keys.get(), s->ids.get(),
                                                   s->order.get(), n, 0, depth, st);
          });
  s->stream.sync();
}

void SpatialOrder::Gpu::download_order(index_t* host, index_t n) {
  copy_to_host(host, s->order.get(), static_cast<std::size_t>(n), s->stream.get());
  s->stream.sync();
}

void* SpatialOrder::Gpu::buffer(int slot, std::size_t bytes) {
  s->slots[slot].reserve(bytes, "a shard's buffer", s->stream.get());
  return s->slots[slot].get();
}

void SpatialOrder::Gpu::move_rows(const void* from, void* to, std::size_t row_bytes, index_t begin, index_t count,
                                  bool gather, bool compact_on_host, const index_t* host_order, stream_t after) {
  const cudaStream_t st = s->stream.get();
  if (after) s->stream.wait_for(after, s->ready);
  const std::size_t bytes = static_cast<std::size_t>(count) * row_bytes;
  const index_t* order = s->order.get() + begin;
  if (host_order) {
    s->positions.reserve(static_cast<std::size_t>(count), "the shard's positions", st);
    copy_to_device(s->positions.get(), host_order, static_cast<std::size_t>(count), st);
    order = s->positions.get();
  }
  if (compact_on_host) s->staged.reserve(bytes, "the shard's staged rows", st);
  unsigned char* staged = s->staged.get();
  if (compact_on_host && !gather) CANOPY_CUDA_CHECK(cudaMemcpyAsync(staged, from, bytes, cudaMemcpyHostToDevice, st));
  const void* src = compact_on_host && !gather ? staged : from;
  void* dst = compact_on_host && gather ? staged : to;
  const index_t words = static_cast<index_t>(row_bytes / 4);
  move_rows_kernel<<<grid_for(count * words), kBlock, 0, st>>>(static_cast<const std::uint32_t*>(src),
                                                               static_cast<std::uint32_t*>(dst), words, order, count,
                                                               gather);
  CANOPY_CUDA_CHECK_LAUNCH("move_rows_kernel");
  if (compact_on_host && gather) CANOPY_CUDA_CHECK(cudaMemcpyAsync(to, staged, bytes, cudaMemcpyDeviceToHost, st));
  s->stream.sync();
}

}  // namespace canopy
