// The inspector on the GPU, as a step with explicit data: inspect() runs every query's traversal
// through the top-tree (one thread per query, the same row functions as the CPU twin in
// inspector/inspector.hpp) into a DeviceMatrix, and, when the scheduler that reads it runs on the
// host, copies it to pinned host memory. Include from .cu files only.
#pragma once

#include <cub/device/device_scan.cuh>

#include "core/cuda.cuh"
#include "inspector/inspector.cuh"
#include "layouts/top_tree.hpp"

namespace canopy {

// Whether an inspection leaves a copy of its matrix in pinned host memory, for a scheduler on the
// host: none; the bits, or the guided rows as written when at most kUnpackedRowWidth wide, else
// packed (Auto); or guided rows packed whatever their width (Packed).
enum class HostCopy { None, Auto, Packed };

// The top-tree's leaves on the device: the inspector's column lookup.
struct DeviceTopTree {
  DeviceBuffer<node_id> leaves;
  TopTreeView view;
  void upload(const TopTree& top, cudaStream_t s) {
    leaves.reserve(top.leaves().size(), "the top-tree leaves", s);
    copy_to_device(leaves.get(), top.leaves().data(), top.leaves().size(), s);
    view = top.view();
    view.leaves = leaves.get();
  }
};

// The scheduling matrix of one inspection. Unguided: a bit row per query. Guided: a row of at
// most `width` top-leaf columns per query, kRowEnd-terminated when shorter. Its host copy, when
// asked for, is what the host schedulers read: the bits, or the guided rows as written (rows of
// at most kUnpackedRowWidth entries) or packed back to back.
struct DeviceMatrix {
  bool guided = false;
  bool keyed = false;  // HybridKey: one compact key per query instead of a row (reserve_keys)
  index_t rows = 0, cols = 0;
  index_t width = 0;  // guided: entries per row (GuidedRows::width)
  DeviceBuffer<std::uint64_t> bits;
  DeviceBuffer<unsigned char> keys;            // keyed: [rows] keys of key_bytes() each
  DeviceBuffer<index_t> key_ids;               // keyed: [rows] 0..rows-1, the key sort's values
  std::uint64_t max_key = 0;                   // keyed: the largest key possible (max_query_key)
  DeviceBuffer<std::int32_t> entries;
  DeviceBuffer<index_t> sizes;                 // guided: each row's packed size (length + 1)
  DeviceBuffer<unsigned long long> longest;    // guided: the longest row
  // The host copy.
  bool to_host = false, packed = false;
  PinnedBuffer<std::uint64_t> host_bits;
  PinnedBuffer<std::int32_t> host_entries;
  PinnedBuffer<index_t> host_offsets;
  PinnedBuffer<unsigned long long> host_longest;
  DeviceBuffer<index_t> offsets;               // packing: the rows' scanned sizes
  DeviceBuffer<std::int32_t> packed_entries;
  DeviceBuffer<unsigned char> scan_temp;
  std::size_t scan_bytes = 0;
  Event sized;                                 // packing: the offsets have reached the host

  // Guided rows this narrow travel to the host as the inspector wrote them, end markers and all:
  // packing them would save few bytes and cost a round trip through the host.
  static constexpr index_t kUnpackedRowWidth = 64;

  index_t words() const { return words_per_row(cols); }
  // The host copy (valid once the inspection's host copy has arrived).
  SchedulingMatrixView host_bits_view() const { return {host_bits.get(), rows, cols, words()}; }
  GuidedMatrixView host_rows_view() const {
    GuidedMatrixView m;
    m.entries = host_entries.get();
    m.rows = rows;
    m.cols = cols;
    m.width = packed ? static_cast<index_t>(*host_longest.get()) + 1 : width;
    m.offsets = packed ? host_offsets.get() : nullptr;
    return m;
  }

  // Packed rows of up to `n` queries without growing during a run (the pipeline's slots): the
  // packed copy at its largest.
  void reserve_packed(index_t n, cudaStream_t s) {
    if (!packed) return;
    const std::size_t most = static_cast<std::size_t>(n) * static_cast<std::size_t>(width + 1);
    packed_entries.reserve(most, "the packed guided rows", s);
    host_entries.reserve(most);
  }

  // Sizes the buffers for `n` rows over `top_leaves` columns (reused from call to call) and
  // makes them the matrix's shape.
  void reserve(bool is_guided, index_t n, index_t top_leaves, GuidedRows form, HostCopy copy, cudaStream_t s) {
    keyed = false;
    guided = is_guided;
    rows = n;
    cols = top_leaves;
    to_host = copy != HostCopy::None;
    const std::size_t m = static_cast<std::size_t>(n);
    if (!guided) {
      bits.reserve(m * static_cast<std::size_t>(words()), "the scheduling matrix", s);
      if (to_host) host_bits.reserve(m * static_cast<std::size_t>(words()));
      packed = false;
      return;
    }
    width = form.width(cols);
    packed = copy == HostCopy::Packed || (copy == HostCopy::Auto && width > kUnpackedRowWidth);
    const std::size_t had = entries.capacity();
    entries.reserve(m * static_cast<std::size_t>(width), "the guided scheduling matrix", s);
    // Unpacked rows go to the host whole, slots past each row's end included, which the
    // inspector never writes: a new buffer is zeroed once, so no copy reads uninitialised memory.
    if (entries.capacity() != had)
      CANOPY_CUDA_CHECK(cudaMemsetAsync(entries.get(), 0, entries.capacity() * sizeof(*entries.get()), s));
    sizes.reserve(m + 1, "the guided row sizes", s);
    longest.reserve(1, "the longest-row counter", s);
    if (!to_host) return;
    if (!packed) {
      host_entries.reserve(m * static_cast<std::size_t>(width));
      return;
    }
    offsets.reserve(m + 1, "the guided row offsets", s);
    // Not run_cub: sized here with the other buffers; the scan runs later, once the sizes are known.
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, sizes.get(), offsets.get(), m + 1, s));
    scan_temp.reserve(scan_bytes, "the row-offset scan scratch space", s);
    host_offsets.reserve(m + 1);
    host_longest.reserve(1);
  }
};

// Compact keys (ScheduleKind::HybridKey) for `n` queries over `top_leaves` columns; they stay
// on the device (the key sort is a device sort; the CPU twin computes its own).
inline void reserve_keys(DeviceMatrix& m, index_t n, index_t top_leaves, cudaStream_t s) {
  m.keyed = true;
  m.guided = false;
  m.to_host = false;
  m.packed = false;
  m.rows = n;
  m.cols = top_leaves;
  m.keys.reserve(static_cast<std::size_t>(n) * sizeof(std::uint64_t), "the schedule keys", s);
  m.key_ids.reserve(static_cast<std::size_t>(n), "the schedule keys' query ids", s);
}

// Keys are stored in 32 bits when every key fits, which halves the key sort's traffic.
inline bool narrow_keys(std::uint64_t max_key) { return max_key <= 0xffffffffull; }

namespace gpu {

// Step 1 of a GPU run: the inspector over queries 0..n-1 of `v` into m (reserve()d for them),
// on stream s, and the matrix's host copy when m.to_host: the bits or unpacked rows are on
// their way when this returns; packed rows need finish_inspect() (their packed size must reach
// the host first).
template <class Topology, class Visitor>
void inspect(const Topology& tree, const TopTreeView& top, const Visitor& v, GuidedRows form, DeviceMatrix& m,
             cudaStream_t s) {
  const std::size_t n = static_cast<std::size_t>(m.rows);
  if (m.keyed) {
    m.max_key = max_query_key<Visitor>(top);
    if (narrow_keys(m.max_key))
      launch_key_inspector(tree, top, v, m.rows, reinterpret_cast<std::uint32_t*>(m.keys.get()), m.key_ids.get(), s);
    else
      launch_key_inspector(tree, top, v, m.rows, reinterpret_cast<std::uint64_t*>(m.keys.get()), m.key_ids.get(), s);
    return;
  }
  if constexpr (is_guided_v<Visitor>) {
    CANOPY_CUDA_CHECK(cudaMemsetAsync(m.longest.get(), 0, sizeof(unsigned long long), s));
    CANOPY_CUDA_CHECK(cudaMemsetAsync(m.sizes.get() + n, 0, sizeof(index_t), s));
    launch_guided_inspector(tree, top, v, m.rows, form, m.entries.get(), m.sizes.get(), m.longest.get(), s);
    if (!m.to_host) return;
    if (!m.packed) {
      copy_to_host(m.host_entries.get(), m.entries.get(), n * static_cast<std::size_t>(m.width), s);
      return;
    }
    std::size_t bytes = m.scan_bytes;
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(m.scan_temp.get(), bytes, m.sizes.get(), m.offsets.get(), n + 1, s));
    copy_to_host(m.host_offsets.get(), m.offsets.get(), n + 1, s);
    copy_to_host(m.host_longest.get(), m.longest.get(), 1, s);
    m.sized.record(s);
  } else {
    (void)form;
    launch_inspector(tree, top, v, m.rows, m.bits.get(), s);
    if (m.to_host) copy_to_host(m.host_bits.get(), m.bits.get(), n * static_cast<std::size_t>(m.words()), s);
  }
}

// Packed guided rows: once their sizes are on the host, packs the rows at the scanned offsets
// and copies them over, on stream s. Nothing to do for any other matrix.
inline void finish_inspect(DeviceMatrix& m, cudaStream_t s) {
  if (m.keyed || !m.guided || !m.packed) return;
  CANOPY_CUDA_CHECK(cudaEventSynchronize(m.sized.get()));
  const std::size_t total = static_cast<std::size_t>(m.host_offsets.get()[m.rows]);
  m.packed_entries.reserve(total, "the packed guided rows", s);
  m.host_entries.reserve(total);
  launch_pack_guided_rows(m.entries.get(), m.width, m.rows, m.offsets.get(), m.packed_entries.get(), s);
  copy_to_host(m.host_entries.get(), m.packed_entries.get(), total, s);
}

}  // namespace gpu
}  // namespace canopy
