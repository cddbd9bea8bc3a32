// The GPU inspector kernel: one thread per query (input order) writes its scheduling-matrix
// row with the same inspect_row() the CPU twin runs. Include from .cu files only.
#pragma once

#include "inspector/inspector.hpp"
#include "core/cuda.cuh"

namespace canopy {
namespace gpu {

constexpr int kInspectorBlock = 128;

template <class Topology, class Visitor>
__global__ void __launch_bounds__(kInspectorBlock)
inspector_kernel(Topology tree, TopTreeView top, Visitor v, index_t n, std::uint64_t* matrix,
                 index_t n_words) {
  const index_t q = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (q < n) inspect_row(tree, top, v, q, matrix + q * n_words, n_words);
}

// Where the guided inspector writes: rows of `width` entries (kRowEnd-terminated when shorter,
// not padded); packed_size[q] gets row q's length + 1 (its size when packed with a kRowEnd) and
// *max_length the longest row (one atomic per warp).
struct GuidedRowsOut {
  std::int32_t* matrix;
  index_t width;
  index_t* packed_size;
  unsigned long long* max_length;
};

template <class Topology, class Visitor>
__global__ void __launch_bounds__(kInspectorBlock)
guided_inspector_kernel(Topology tree, TopTreeView top, Visitor v, index_t n, GuidedProbe probe, GuidedRowsOut out) {
  const index_t q = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  index_t len = 0;
  if (q < n) {
    len = inspect_row_guided(tree, top, v, q, out.matrix + q * out.width, out.width, probe);
    out.packed_size[q] = len + 1;
  }
  for (int off = 16; off > 0; off /= 2) len = max(len, static_cast<index_t>(__shfl_down_sync(0xffffffffu, len, off)));
  if ((threadIdx.x & 31) == 0 && len > 0) atomicMax(out.max_length, static_cast<unsigned long long>(len));
}

// Packs the rows back to back, each followed by kRowEnd, at the scanned offsets. (A template
// only so that every .cu file may include it.)
template <class Entry>
__global__ void __launch_bounds__(kInspectorBlock)
pack_guided_rows_kernel(const Entry* matrix, index_t width, index_t n, const index_t* offsets,
                        Entry* packed) {
  const index_t q = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (q >= n) return;
  const Entry* row = matrix + q * width;
  Entry* out = packed + offsets[q];
  const index_t len = offsets[q + 1] - offsets[q] - 1;
  for (index_t i = 0; i < len; ++i) out[i] = row[i];
  out[len] = kRowEnd;
}

// matrix: [n][rows.width(top.n_leaves)].
template <class Topology, class Visitor>
void launch_guided_inspector(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t n,
                             GuidedRows rows, std::int32_t* matrix, index_t* packed_size,
                             unsigned long long* max_length, cudaStream_t stream) {
  if (n <= 0) return;
  const GuidedRowsOut out{matrix, rows.width(top.n_leaves), packed_size, max_length};
  guided_inspector_kernel<<<static_cast<unsigned>((n + kInspectorBlock - 1) / kInspectorBlock), kInspectorBlock, 0,
                            stream>>>(tree, top, v, n, rows.probe, out);
  CANOPY_CUDA_CHECK_LAUNCH("guided_inspector_kernel");
}

inline void launch_pack_guided_rows(const std::int32_t* matrix, index_t width, index_t n, const index_t* offsets,
                                    std::int32_t* packed, cudaStream_t stream) {
  if (n <= 0) return;
  pack_guided_rows_kernel<<<static_cast<unsigned>((n + kInspectorBlock - 1) / kInspectorBlock), kInspectorBlock, 0,
                            stream>>>(matrix, width, n, offsets, packed);
  CANOPY_CUDA_CHECK_LAUNCH("pack_guided_rows_kernel");
}

template <class Key, class Topology, class Visitor>
__global__ void __launch_bounds__(kInspectorBlock)
key_inspector_kernel(Topology tree, TopTreeView top, Visitor v, index_t n, Key* keys, index_t* ids) {
  const index_t q = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (q >= n) return;
  keys[q] = static_cast<Key>(inspect_key(tree, top, v, q));
  ids[q] = q;
}

// keys: [n], the compact key of each query (inspect_key), as Key (wide enough for every key);
// ids: [n], 0..n-1. They are the key sort's input pairs as they stand (gpu::sort_key_pairs).
template <class Key, class Topology, class Visitor>
void launch_key_inspector(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t n, Key* keys,
                          index_t* ids, cudaStream_t stream) {
  if (n <= 0) return;
  key_inspector_kernel<<<static_cast<unsigned>((n + kInspectorBlock - 1) / kInspectorBlock), kInspectorBlock, 0,
                         stream>>>(tree, top, v, n, keys, ids);
  CANOPY_CUDA_CHECK_LAUNCH("key_inspector_kernel");
}

template <class Topology, class Visitor>
void launch_inspector(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t n,
                      std::uint64_t* matrix, cudaStream_t stream) {
  if (n <= 0) return;
  inspector_kernel<<<static_cast<unsigned>((n + kInspectorBlock - 1) / kInspectorBlock), kInspectorBlock, 0,
                     stream>>>(tree, top, v, n, matrix, words_per_row(top.n_leaves));
  CANOPY_CUDA_CHECK_LAUNCH("inspector_kernel");
}

}  // namespace gpu
}  // namespace canopy
