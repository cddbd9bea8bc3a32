// The pipelined hybrid traversal: the queries in chunks, each chunk inspected on one stream
// (inspector/device_matrix.cuh), its scheduling matrix copied into pinned host memory and
// scheduled on TBB threads as soon as the copy's event fires (or scheduled on the device right
// behind the inspector), its order copied back and executed on an execute stream (two, taken in
// turn). Chunk i+1's inspection overlaps chunk i's scheduling and chunk i-1's execution; two
// slots of buffers alternate between chunks. The matrix never exists for more than two chunks at
// once, which is also how a memory budget too small for the whole matrix still completes.
// Include from .cu files only.
#pragma once

#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/cuda.cuh"
#include "core/timing.hpp"
#include "executor/gpu_kernels.cuh"
#include "inspector/device_matrix.cuh"
#include "layouts/top_tree.hpp"
#include "runtime/options.hpp"
#include "scheduler/device_schedule.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/guided_gpu.hpp"
#include "scheduler/key_sort.cuh"
#include "scheduler/sandpile_gpu.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace detail {

// The inspector's view of one chunk: its queries 0..m-1 are the caller's first..first+m-1.
template <class Inner>
struct ChunkVisitor : ForwardingVisitor<Inner> {
  using State = typename Inner::State;
  index_t first;

  CANOPY_HD State init(index_t q) const { return this->inner.init(first + q); }
  CANOPY_HD void finish(State& s, index_t q) const { this->inner.finish(s, first + q); }
};

// What a pipelined run does, beside the tree, visitor and chunks.
struct PipelineRun {
  ScheduleKind kind = ScheduleKind::Hybrid;  // Hybrid: the CPU scheduler; HybridDevice, HybridKey: the device's
  ExecutorKind executor = ExecutorKind::FsmLockstep;
  GuidedRows rows;               // how a guided inspector forms its rows
  bool inspector_first = true;   // inspect on a high-priority stream (opt.pipeline_inspector_first)
  index_t* order = nullptr;      // device [n]: the whole schedule, the caller's query ids
  cudaStream_t after = nullptr;  // the caller's stream: the pipeline starts after its work and it waits for the pipeline
};

class Pipeline {
 public:
  // Runs r.kind over the queries in the chunks bounds[0] = 0 .. bounds.back() = n
  // (chunk_boundaries), writing the whole schedule into r.order, chunk after chunk, and
  // executing it.
  template <class Topology, class Visitor>
  PipelineStats run(const Topology& tree, const TopTree& top, const Visitor& v, const std::vector<index_t>& bounds,
                    const PipelineRun& r) {
    constexpr bool guided = is_guided_v<Visitor>;
    PipelineStats st;
    if (bounds.size() < 2 || bounds.back() <= 0) return st;
    inspect_ = r.inspector_first ? inspect_first_.get() : inspect_equal_.get();
    st.chunks = static_cast<index_t>(bounds.size()) - 1;
    auto first = [&](index_t i) { return bounds[static_cast<std::size_t>(i)]; };
    auto size = [&](index_t i) { return bounds[static_cast<std::size_t>(i) + 1] - first(i); };
    for (index_t i = 0; i < st.chunks; ++i) st.chunk = std::max(st.chunk, size(i));
    const auto t0 = std::chrono::steady_clock::now();
    const cudaStream_t s1 = inspect_;
    if (r.after) {
      begin_.record(r.after);
      CANOPY_CUDA_CHECK(cudaStreamWaitEvent(s1, begin_.get(), 0));
      for (Stream& e : execute_) CANOPY_CUDA_CHECK(cudaStreamWaitEvent(e.get(), begin_.get(), 0));
    }
    top_.upload(top, s1);
    rows_ = r.rows;
    keyed_ = r.kind == ScheduleKind::HybridKey;
    on_device_ = r.kind == ScheduleKind::HybridDevice;
    if constexpr (guided) on_device_ = on_device_ && DeviceGuidedScheduler::supports(top.parents().data(), top.size(), st.chunk);
    on_device_ = on_device_ || keyed_;
    for (Slot& sl : slot_) {  // at their largest now, so that no buffer grows during the run
      reserve_matrix(sl, guided, st.chunk, top.size(), s1);
      sl.matrix.reserve_packed(st.chunk, s1);
      if (on_device_ && guided && !keyed_)
        sl.heads.reserve(static_cast<std::size_t>(st.chunk), "the chunk's bucket heads", s1);
      if (!on_device_) sl.host_order.reserve(static_cast<std::size_t>(st.chunk));
    }
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(s1));

    enqueue_inspect(tree, top, v, first(0), size(0), r.order, slot_[0]);
    for (index_t i = 0; i < st.chunks; ++i) {
      Slot& sl = slot_[i % 2];
      // Consecutive chunks execute on alternate streams, so one chunk's last, slowest warps
      // share the GPU with the next chunk's first ones.
      const cudaStream_t s2 = execute_[i % 2].get();
      finish_inspect(sl);
      if (i + 1 < st.chunks) enqueue_inspect(tree, top, v, first(i + 1), size(i + 1), r.order, slot_[(i + 1) % 2]);
      if (on_device_) {
        st.inspect_ms += sl.inspect_stop.since(sl.inspect_start);
        st.schedule_ms += sl.ready.since(sl.inspect_stop);
        CANOPY_CUDA_CHECK(cudaStreamWaitEvent(s2, sl.ready.get(), 0));
      } else {
        st.inspect_ms += sl.ready.since(sl.inspect_start);  // waits for the rows on the host
        const auto c0 = std::chrono::steady_clock::now();
        if (sl.order_pending) CANOPY_CUDA_CHECK(cudaEventSynchronize(sl.order_sent.get()));
        schedule_on_host(sl, top, first(i), size(i));
        copy_to_device(r.order + first(i), sl.host_order.get(), static_cast<std::size_t>(size(i)), s2);
        sl.order_sent.record(s2);
        sl.order_pending = true;
        st.schedule_ms += ms_since(c0);
      }
      if (sl.exec_pending) st.execute_ms += sl.exec_stop.since(sl.exec_start);
      sl.exec_start.record(s2);
      gpu::launch_executor(r.executor, tree, v, r.order + first(i), size(i), nullptr, s2);
      sl.exec_stop.record(s2);
      sl.exec_pending = true;
    }
    for (Slot& sl : slot_) {
      if (sl.exec_pending) st.execute_ms += sl.exec_stop.since(sl.exec_start);
      sl.exec_pending = false;
      sl.order_pending = false;
    }
    if (r.after) {
      for (Stream& e : execute_) {
        end_.record(e.get());
        CANOPY_CUDA_CHECK(cudaStreamWaitEvent(r.after, end_.get(), 0));
      }
    }
    st.wall_ms = ms_since(t0);
    return st;
  }

 private:
  struct Slot {
    DeviceMatrix matrix;
    DeviceBuffer<std::uint8_t> heads;  // the device guided scheduler's bucket heads
    PinnedBuffer<index_t> host_order;
    Event inspect_start, inspect_stop, ready, order_sent, exec_start, exec_stop;
    bool order_pending = false, exec_pending = false;
  };

  // Chunk [first, first + m): the inspector on the inspect stream, the matrix on its way to the
  // host for the host scheduler (packed guided rows: their sizes first, the rows follow in
  // finish_inspect), or the device scheduler right behind it, into order[first ..).
  template <class Topology, class Visitor>
  void enqueue_inspect(const Topology& tree, const TopTree& top, const Visitor& v, index_t first, index_t m,
                       index_t* order, Slot& sl) {
    const cudaStream_t s = inspect_;
    reserve_matrix(sl, is_guided_v<Visitor>, m, top.size(), s);
    sl.inspect_start.record(s);
    gpu::inspect(tree, top_.view, ChunkVisitor<Visitor>{{v}, first}, rows_, sl.matrix, s);
    if (on_device_) {
      sl.inspect_stop.record(s);
      if (keyed_)
        gpu::sort_stored_keys(sl.matrix, key_sort_, order + first, nullptr, s);
      else if constexpr (is_guided_v<Visitor>)
        guided_.run(sl.matrix.entries.get(), m, sl.matrix.cols, sl.matrix.width, top.parents().data(), order + first,
                    sl.heads.get(), s);
      else
        sandpile_.run(sl.matrix.bits.get(), m, sl.matrix.words(), order + first, s);
      // The device schedulers write the chunk's own positions 0..m-1.
      DeviceScheduler::offset(order + first, m, first, s);
    }
    if (!sl.matrix.packed) sl.ready.record(s);  // packed rows: finish_inspect records it
  }

  // A slot's matrix for m queries: keys, or rows (copied to the host for the host scheduler).
  void reserve_matrix(Slot& sl, bool guided, index_t m, index_t top_leaves, cudaStream_t s) {
    if (keyed_)
      reserve_keys(sl.matrix, m, top_leaves, s);
    else
      sl.matrix.reserve(guided, m, top_leaves, rows_, on_device_ ? HostCopy::None : HostCopy::Auto, s);
  }

  // Packed guided rows: pack them at the scanned offsets and copy them over.
  void finish_inspect(Slot& sl) {
    if (!sl.matrix.packed) return;
    gpu::finish_inspect(sl.matrix, inspect_);
    sl.ready.record(inspect_);
  }

  void schedule_on_host(Slot& sl, const TopTree& top, index_t first, index_t m) {
    index_t* out = sl.host_order.get();
    if (sl.matrix.guided)
      guided_schedule(sl.matrix.host_rows_view(), top.parents().data(), out, nullptr);
    else
      cpu_sandpile_.run(sl.matrix.host_bits_view(), out, nullptr);
    tbb::parallel_for(tbb::blocked_range<index_t>(0, m, 1 << 16), [&](const tbb::blocked_range<index_t>& b) {
      for (index_t i = b.begin(); i < b.end(); ++i) out[i] += first;
    });
  }

  // A high-priority executor starved the inspector, and the host scheduler then waited for rows
  // (measured: pipeline efficiency 0.92 -> 0.81 on pc). The other way round, the inspector's
  // few blocks are dispatched ahead of an executor's queued ones, so a chunk's rows and
  // schedule are ready while the previous chunk still executes.
  Stream inspect_equal_, inspect_first_{Stream::HighPriority{}}, execute_[2];  // first: the buffers are freed on them
  cudaStream_t inspect_ = nullptr;  // the one of the two this run uses
  Event begin_, end_;
  Slot slot_[2];
  DeviceTopTree top_;
  SandpileScheduler cpu_sandpile_;
  DeviceSandpile sandpile_;
  DeviceGuidedScheduler guided_;
  KeySortScratch key_sort_;  // HybridKey's sorts: only on the inspect stream, so it may grow there
  GuidedRows rows_;
  bool on_device_ = false, keyed_ = false;
};

}  // namespace detail
}  // namespace canopy
