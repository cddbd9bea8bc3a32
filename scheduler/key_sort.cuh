// Key sorts on the GPU: a stable radix sort of the queries by a per-query key. LeafSort, the
// hand-tuned baseline, sorts by the leaf a query's greedy descent ends in or a body's Morton
// code; HybridKey by the compact keys the inspector wrote. key_of is a device functor
// index_t -> unsigned integer (32 or 64 bits). Include from .cu files only.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <type_traits>

#include "core/bits.hpp"
#include "core/cuda.cuh"
#include "inspector/device_matrix.cuh"
#include "scheduler/device_schedule.hpp"

namespace canopy {

// The key sort's scratch memory, reused from call to call.
struct KeySortScratch {
  DeviceBuffer<unsigned char> keys_in, keys_out, temp;
  DeviceBuffer<index_t> ids;
};

namespace gpu {

constexpr int kKeyBlock = 256;

template <class KeyOf, class Key>
__global__ void __launch_bounds__(kKeyBlock) query_key_kernel(KeyOf key_of, index_t n, Key* keys, index_t* ids) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  keys[i] = key_of(i);
  ids[i] = i;
}

template <class Key>
__global__ void __launch_bounds__(kKeyBlock) key_heads_kernel(const Key* sorted, index_t n, std::uint8_t* heads) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) heads[i] = i == 0 || sorted[i] != sorted[i - 1];
}

// The pairs (keys[i], ids[i]), i < n, every key <= max_key, stably sorted by key: the ids into
// order[0..n), on stream s; with `heads` (may be null), heads[i] = 1 where a run of equal keys
// starts. k's keys_out and temp are the scratch space.
template <class Key>
void sort_key_pairs(const Key* keys, const index_t* ids, std::uint64_t max_key, index_t n, KeySortScratch& k,
                    index_t* order, std::uint8_t* heads, cudaStream_t s) {
  static_assert(std::is_unsigned<Key>::value, "a sort key is an unsigned integer");
  if (n == 0) return;
  k.keys_out.reserve(static_cast<std::size_t>(n) * sizeof(Key), "the sort keys", s);
  Key* sorted = reinterpret_cast<Key*>(k.keys_out.get());
  const int end_bit = bits_for(max_key);
  // Radix sort is stable: queries with equal keys keep their input order.
  run_cub("cub::DeviceRadixSort::SortPairs (the key sort)", k.temp, "the sort scratch space", s,
          [&](void* t, std::size_t& bytes) {
            return cub::DeviceRadixSort::SortPairs(t, bytes, keys, sorted, ids, order, n, 0, end_bit, s);
          });
  if (!heads) return;
  key_heads_kernel<<<static_cast<unsigned>((n + kKeyBlock - 1) / kKeyBlock), kKeyBlock, 0, s>>>(sorted, n, heads);
  CANOPY_CUDA_CHECK_LAUNCH("key_heads_kernel");
}

// The queries 0..n-1 stably sorted by key_of(i) (every key <= max_key) into order[0..n), on
// stream s; heads as in sort_key_pairs.
template <class KeyOf>
void sort_keys(const KeyOf& key_of, std::uint64_t max_key, index_t n, KeySortScratch& k, index_t* order,
               std::uint8_t* heads, cudaStream_t s) {
  using Key = std::decay_t<decltype(key_of(index_t{}))>;
  if (n == 0) return;
  const std::size_t m = static_cast<std::size_t>(n);
  k.keys_in.reserve(m * sizeof(Key), "the sort keys", s);
  k.ids.reserve(m, "the sort ids", s);
  Key* in = reinterpret_cast<Key*>(k.keys_in.get());
  query_key_kernel<<<static_cast<unsigned>((n + kKeyBlock - 1) / kKeyBlock), kKeyBlock, 0, s>>>(key_of, n, in,
                                                                                                k.ids.get());
  CANOPY_CUDA_CHECK_LAUNCH("query_key_kernel");
  sort_key_pairs(in, k.ids.get(), max_key, n, k, order, heads, s);
}

// The same into a DeviceSchedule; with `buckets`, a bucket is a run of equal keys.
template <class KeyOf>
void sort_by_key(const KeyOf& key_of, std::uint64_t max_key, index_t n, KeySortScratch& k, DeviceSchedule& out,
                 cudaStream_t s, bool buckets) {
  out.size = n;
  out.buckets.clear();
  out.has_heads = false;
  const std::size_t m = static_cast<std::size_t>(n);
  out.order.reserve(m, "the schedule", s);
  if (n == 0) return;
  if (buckets) out.heads.reserve(m, "the schedule's bucket heads", s);
  sort_keys(key_of, max_key, n, k, out.order.get(), buckets ? out.heads.get() : nullptr, s);
  out.has_heads = buckets;
}

// The stable sort of the keys a key inspection wrote into m (ScheduleKind::HybridKey) into
// order, heads as in sort_key_pairs.
inline void sort_stored_keys(const DeviceMatrix& m, KeySortScratch& k, index_t* order, std::uint8_t* heads,
                             cudaStream_t s) {
  if (narrow_keys(m.max_key))
    sort_key_pairs(reinterpret_cast<const std::uint32_t*>(m.keys.get()), m.key_ids.get(), m.max_key, m.rows, k, order,
                   heads, s);
  else
    sort_key_pairs(reinterpret_cast<const std::uint64_t*>(m.keys.get()), m.key_ids.get(), m.max_key, m.rows, k,
                   order, heads, s);
}

}  // namespace gpu
}  // namespace canopy
