// The pipelined hybrid traversal: the queries in chunks, each chunk inspected on one stream,
// its scheduling matrix copied into pinned host memory, scheduled on TBB threads as soon as the
// copy's event fires, its order copied back and executed on an execute stream (two, taken in
// turn). Chunk i+1's inspection overlaps chunk i's scheduling and chunk i-1's execution; two
// slots of buffers alternate between chunks. The matrix never exists for more than two chunks at once, which
// is also how a memory budget too small for the whole matrix still completes.
// Include from .cu files only.
#pragma once

#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cub/device/device_scan.cuh>

#include "executor/gpu_kernels.cuh"
#include "inspector/inspector.cuh"
#include "layouts/top_tree.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "core/cuda.cuh"
#include "runtime/options.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/guided_gpu.hpp"
#include "scheduler/sandpile_gpu.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace detail {

// The inspector's view of one chunk: its queries 0..m-1 are the caller's first..first+m-1.
template <class Inner>
struct ChunkVisitor {
  static constexpr bool kGuided = is_guided_v<Inner>;
  using State = typename Inner::State;
  Inner inner;
  index_t first;

  CANOPY_HD State init(index_t q) const { return inner.init(first + q); }
  CANOPY_HD bool descend(State& s, node_id n) const { return inner.descend(s, n); }
  CANOPY_HD void leaf(State& s, node_id n) const { inner.leaf(s, n); }
  CANOPY_HD int first_child(const State& s, node_id n) const { return preferred_child(inner, s, n); }
  CANOPY_HD bool probe_satisfied(const State& s) const { return canopy::probe_satisfied(inner, s); }
  CANOPY_HD void finish(State& s, index_t q) const { inner.finish(s, first + q); }
};

template <class T>
__global__ void add_offset_kernel(T* values, index_t n, T offset) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) values[i] += offset;
}

class Pipeline {
 public:
  // Runs `kind` (Hybrid: the CPU scheduler; HybridDevice: the device's) over the queries in
  // the chunks bounds[0] = 0 .. bounds.back() = n (chunk_boundaries), writing the whole
  // schedule (the caller's query ids, chunk after chunk) into the device array order[n] and
  // executing it. `after`, if not null, is the caller's stream: the pipeline starts after the
  // work already on it and it waits for the pipeline.
  // `rows`: how a guided inspector forms its rows.
  // `inspector_first`: inspect on a high-priority stream (opt.pipeline_inspector_first).
  template <class Topology, class Visitor>
  PipelineStats run(const Topology& tree, const TopTree& top, const Visitor& v, const std::vector<index_t>& bounds,
                    ScheduleKind kind, ExecutorKind exec, GuidedRows rows, bool inspector_first, index_t* order,
                    cudaStream_t after) {
    constexpr bool guided = is_guided_v<Visitor>;
    PipelineStats st;
    if (bounds.size() < 2 || bounds.back() <= 0) return st;
    inspect_ = inspector_first ? inspect_first_.get() : inspect_equal_.get();
    st.chunks = static_cast<index_t>(bounds.size()) - 1;
    auto first = [&](index_t i) { return bounds[static_cast<std::size_t>(i)]; };
    auto size = [&](index_t i) { return bounds[static_cast<std::size_t>(i) + 1] - first(i); };
    for (index_t i = 0; i < st.chunks; ++i) st.chunk = std::max(st.chunk, size(i));
    const index_t chunk = st.chunk;
    const auto t0 = std::chrono::steady_clock::now();
    const cudaStream_t s1 = inspect_;
    if (after) {
      begin_.record(after);
      CANOPY_CUDA_CHECK(cudaStreamWaitEvent(s1, begin_.get(), 0));
      for (Stream& e : execute_) CANOPY_CUDA_CHECK(cudaStreamWaitEvent(e.get(), begin_.get(), 0));
    }
    TopTreeView dtop = top.view();
    top_leaves_.reserve(top.leaves().size(), "the top-tree leaves", inspect_);
    copy_to_device(top_leaves_.get(), top.leaves().data(), top.leaves().size(), s1);
    dtop.leaves = top_leaves_.get();
    cols_ = top.size();
    rows_ = rows;
    on_device_ = kind == ScheduleKind::HybridDevice;
    if constexpr (guided) on_device_ = on_device_ && DeviceGuidedScheduler::supports(top.parents().data(), cols_, chunk);
    unpacked_ = guided && !on_device_ && width() <= kUnpackedRowWidth;
    for (Slot& sl : slot_) reserve(sl, chunk, guided);
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(s1));

    enqueue_inspect(tree, dtop, top, v, first(0), size(0), order, slot_[0]);
    for (index_t i = 0; i < st.chunks; ++i) {
      Slot& sl = slot_[i % 2];
      // Consecutive chunks execute on alternate streams, so one chunk's last, slowest warps
      // share the GPU with the next chunk's first ones.
      const cudaStream_t s2 = execute_[i % 2].get();
      finish_inspect<guided>(sl, size(i));
      if (i + 1 < st.chunks) enqueue_inspect(tree, dtop, top, v, first(i + 1), size(i + 1), order, slot_[(i + 1) % 2]);
      if (on_device_) {
        st.inspect_ms += sl.inspect_stop.since(sl.inspect_start);
        st.schedule_ms += sl.ready.since(sl.inspect_stop);
        CANOPY_CUDA_CHECK(cudaStreamWaitEvent(s2, sl.ready.get(), 0));
      } else {
        st.inspect_ms += sl.ready.since(sl.inspect_start);  // waits for the rows on the host
        const auto c0 = std::chrono::steady_clock::now();
        if (sl.order_pending) CANOPY_CUDA_CHECK(cudaEventSynchronize(sl.order_sent.get()));
        schedule_on_host<guided>(sl, top, first(i), size(i));
        copy_to_device(order + first(i), sl.host_order.get(), static_cast<std::size_t>(size(i)), s2);
        sl.order_sent.record(s2);
        sl.order_pending = true;
        st.schedule_ms += ms_since(c0);
      }
      if (sl.exec_pending) st.execute_ms += sl.exec_stop.since(sl.exec_start);
      sl.exec_start.record(s2);
      gpu::launch_executor(exec, tree, v, order + first(i), size(i), nullptr, s2);
      sl.exec_stop.record(s2);
      sl.exec_pending = true;
    }
    for (Slot& sl : slot_) {
      if (sl.exec_pending) st.execute_ms += sl.exec_stop.since(sl.exec_start);
      sl.exec_pending = false;
      sl.order_pending = false;
    }
    if (after) {
      for (Stream& e : execute_) {
        end_.record(e.get());
        CANOPY_CUDA_CHECK(cudaStreamWaitEvent(after, end_.get(), 0));
      }
    }
    st.wall_ms = ms_since(t0);
    return st;
  }

 private:
  struct Slot {
    DeviceBuffer<std::uint64_t> bits;
    PinnedBuffer<std::uint64_t> host_bits;
    DeviceBuffer<std::int32_t> rows, packed;
    DeviceBuffer<index_t> sizes, offsets;
    DeviceBuffer<unsigned long long> max_len;
    DeviceBuffer<unsigned char> scan_temp;
    std::size_t scan_bytes = 0;
    PinnedBuffer<index_t> host_offsets;
    PinnedBuffer<unsigned long long> host_max;
    PinnedBuffer<std::int32_t> host_rows;
    PinnedBuffer<index_t> host_order;
    Event inspect_start, inspect_stop, sized, ready, order_sent, exec_start, exec_stop;
    bool order_pending = false, exec_pending = false;
    index_t first = 0;
  };

  index_t width() const { return rows_.width(cols_); }  // entries per guided row

  // Rows this narrow (capped positional rows, mostly full) travel to the host as the inspector
  // wrote them, end markers and all: packing them would save few bytes and cost a round trip
  // through the host (the packed size) between a chunk's inspection and its schedule.
  static constexpr index_t kUnpackedRowWidth = 64;

  void reserve(Slot& sl, index_t chunk, bool guided) {
    const std::size_t m = static_cast<std::size_t>(chunk);
    if (guided) {
      sl.rows.reserve(m * static_cast<std::size_t>(width()), "the guided scheduling matrix (one chunk)", inspect_);
      sl.sizes.reserve(m + 1, "the guided row sizes", inspect_);
      sl.max_len.reserve(1, "the longest-row counter", inspect_);
      if (!on_device_ && !unpacked_) {  // what packing the rows on the way to the host takes
        sl.offsets.reserve(m + 1, "the guided row offsets", inspect_);
        std::size_t bytes = 0;
        CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, bytes, sl.sizes.get(), sl.offsets.get(), m + 1,
                                                        inspect_));
        sl.scan_temp.reserve(bytes, "the row-offset scan scratch space", inspect_);
        sl.scan_bytes = bytes;
        sl.host_offsets.reserve(m + 1);
        sl.host_max.reserve(1);
        sl.packed.reserve(m * static_cast<std::size_t>(width()) + m, "the packed guided rows (one chunk)", inspect_);
      }
      if (!on_device_) sl.host_rows.reserve(m * static_cast<std::size_t>(width()) + m);
    } else {
      const std::size_t words = m * static_cast<std::size_t>(words_per_row(cols_));
      sl.bits.reserve(words, "the scheduling matrix (one chunk)", inspect_);
      if (!on_device_) sl.host_bits.reserve(words);
    }
    if (!on_device_) sl.host_order.reserve(m);
  }

  // Chunk [first, first + m): the inspector on the inspect stream; for the host scheduler the
  // matrix (unguided) or the row sizes (guided; the rows follow in finish_inspect, once their
  // packed size is known) travel to pinned memory; for the device scheduler the schedule is
  // computed right there, into order[first ..).
  template <class Topology, class Visitor>
  void enqueue_inspect(const Topology& tree, const TopTreeView& dtop, const TopTree& top, const Visitor& v,
                       index_t first, index_t m, index_t* order, Slot& sl) {
    const cudaStream_t s = inspect_;
    const ChunkVisitor<Visitor> cv{v, first};
    sl.first = first;
    sl.inspect_start.record(s);
    if constexpr (is_guided_v<Visitor>) {
      const std::size_t mm = static_cast<std::size_t>(m);
      CANOPY_CUDA_CHECK(cudaMemsetAsync(sl.max_len.get(), 0, sizeof(unsigned long long), s));
      CANOPY_CUDA_CHECK(cudaMemsetAsync(sl.sizes.get() + mm, 0, sizeof(index_t), s));
      gpu::launch_guided_inspector(tree, dtop, cv, m, rows_, sl.rows.get(), sl.sizes.get(), sl.max_len.get(), s);
      if (on_device_) {
        sl.inspect_stop.record(s);
        guided_.run(sl.rows.get(), m, cols_, width(), top.parents().data(), order + first, s);
      } else if (unpacked_) {
        copy_to_host(sl.host_rows.get(), sl.rows.get(), mm * static_cast<std::size_t>(width()), s);
      } else {
        std::size_t bytes = sl.scan_bytes;
        CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(sl.scan_temp.get(), bytes, sl.sizes.get(), sl.offsets.get(),
                                                        mm + 1, s));
        copy_to_host(sl.host_offsets.get(), sl.offsets.get(), mm + 1, s);
        copy_to_host(sl.host_max.get(), sl.max_len.get(), 1, s);
        sl.sized.record(s);
      }
    } else {
      const std::size_t words = static_cast<std::size_t>(m) * static_cast<std::size_t>(words_per_row(cols_));
      gpu::launch_inspector(tree, dtop, cv, m, sl.bits.get(), s);
      if (on_device_) {
        sl.inspect_stop.record(s);
        sandpile_.run(sl.bits.get(), m, words_per_row(cols_), order + first, s);
      } else {
        copy_to_host(sl.host_bits.get(), sl.bits.get(), words, s);
      }
    }
    if (on_device_) {
      // The device schedulers write the chunk's own positions 0..m-1.
      add_offset_kernel<<<static_cast<unsigned>((m + 255) / 256), 256, 0, s>>>(order + first, m, first);
      CANOPY_CUDA_CHECK_LAUNCH("add_offset_kernel");
    }
    if (is_guided_v<Visitor> && !on_device_ && !unpacked_) return;  // ready is recorded by finish_inspect
    sl.ready.record(s);
  }

  // Guided rows for the host scheduler: pack them at the scanned offsets and copy them over.
  template <bool kGuided>
  void finish_inspect(Slot& sl, index_t m) {
    if constexpr (kGuided) {
      if (on_device_ || unpacked_) return;
      const cudaStream_t s = inspect_;
      CANOPY_CUDA_CHECK(cudaEventSynchronize(sl.sized.get()));
      const index_t total = sl.host_offsets.get()[m];
      gpu::launch_pack_guided_rows(sl.rows.get(), width(), m, sl.offsets.get(), sl.packed.get(), s);
      copy_to_host(sl.host_rows.get(), sl.packed.get(), static_cast<std::size_t>(total), s);
      sl.ready.record(s);
    } else {
      (void)sl;
      (void)m;
    }
  }

  template <bool kGuided>
  void schedule_on_host(Slot& sl, const TopTree& top, index_t first, index_t m) {
    index_t* out = sl.host_order.get();
    if constexpr (kGuided) {
      GuidedMatrixView mv;
      mv.entries = sl.host_rows.get();
      mv.rows = m;
      mv.cols = cols_;
      mv.width = unpacked_ ? width() : static_cast<index_t>(*sl.host_max.get()) + 1;
      mv.offsets = unpacked_ ? nullptr : sl.host_offsets.get();
      guided_schedule(mv, top.parents().data(), out, nullptr);
    } else {
      const SchedulingMatrixView mv{sl.host_bits.get(), m, cols_, words_per_row(cols_)};
      cpu_sandpile_.run(mv, out, nullptr);
    }
    tbb::parallel_for(tbb::blocked_range<index_t>(0, m, 1 << 16), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t i = r.begin(); i < r.end(); ++i) out[i] += first;
    });
  }

  // A high-priority executor starved the inspector, and the host scheduler then waited for rows
  // (measured: pipeline efficiency 0.92 -> 0.81 on pc). The other way round, the inspector's
  // few blocks are dispatched ahead of an executor's queued ones, so a chunk's rows and
  // schedule are ready while the previous chunk still executes.
  Stream inspect_equal_, inspect_first_{Stream::HighPriority{}}, execute_[2];
  cudaStream_t inspect_ = nullptr;  // the one of the two this run uses
  Event begin_, end_;
  Slot slot_[2];
  DeviceBuffer<node_id> top_leaves_;
  SandpileScheduler cpu_sandpile_;
  DeviceSandpile sandpile_;
  DeviceGuidedScheduler guided_;
  index_t cols_ = 0;
  GuidedRows rows_;
  bool on_device_ = false;
  bool unpacked_ = false;  // guided rows travel as the inspector wrote them (kUnpackedRowWidth)
};

}  // namespace detail
}  // namespace canopy
