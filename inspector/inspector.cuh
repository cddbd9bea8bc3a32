// The GPU inspector kernel: one thread per query (input order) writes its scheduling-matrix
// row with the same inspect_row() the CPU twin runs. Include from .cu files only.
#pragma once

#include "inspector/inspector.hpp"
#include "runtime/cuda_support.cuh"

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

// Guided rows at full width; *max_length gets the longest row (atomicMax), so the host can copy
// only the columns that hold entries.
template <class Topology, class Visitor>
__global__ void __launch_bounds__(kInspectorBlock)
guided_inspector_kernel(Topology tree, TopTreeView top, Visitor v, index_t n, std::int32_t* matrix,
                        unsigned long long* max_length) {
  const index_t q = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  index_t len = 0;
  if (q < n) len = inspect_row_guided(tree, top, v, q, matrix + q * top.n_leaves, top.n_leaves);
  // One atomic per warp.
  for (int off = 16; off > 0; off /= 2) len = max(len, static_cast<index_t>(__shfl_down_sync(0xffffffffu, len, off)));
  if ((threadIdx.x & 31) == 0 && len > 0) atomicMax(max_length, static_cast<unsigned long long>(len));
}

template <class Topology, class Visitor>
void launch_guided_inspector(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t n,
                             std::int32_t* matrix, unsigned long long* max_length, cudaStream_t stream) {
  if (n <= 0) return;
  guided_inspector_kernel<<<static_cast<unsigned>((n + kInspectorBlock - 1) / kInspectorBlock), kInspectorBlock, 0,
                            stream>>>(tree, top, v, n, matrix, max_length);
  CANOPY_CUDA_CHECK_LAUNCH("guided_inspector_kernel");
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
