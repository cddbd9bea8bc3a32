// The engine's CPU side (runtime/engine.hpp): a call's per-query data, whether a workload's
// visitor may run twice, and one call's schedule and executors on the host.
#pragma once

#include <chrono>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "core/timing.hpp"
#include "executor/cpu_executor.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/options.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

// One call's per-query data: queries [n][query_dims] and result arrays [n][output_bytes[i]],
// each in host or device memory (the GPU reads and writes device memory in place).
struct CallData {
  const float* queries = nullptr;
  index_t n = 0;
  void* outputs[2] = {nullptr, nullptr};
};

// ---- The rules every workload shares -----------------------------------------------------------

// Whether the engine may run W's visitor more than once on the caller's data in one call: Auto's
// and depth auto's trials, count_nodes' emulator after an independent run, gpu_count_nodes'
// instrumented rerun, measure_overlap. The built-in workloads write results (and trial into
// scratch), so they may; W::kRerunnable says otherwise (a custom visitor that accumulates).
template <class W, class = void>
struct workload_rerunnable : std::true_type {};
template <class W>
struct workload_rerunnable<W, std::void_t<decltype(W::kRerunnable)>> : std::bool_constant<W::kRerunnable> {};
template <class W>
inline constexpr bool workload_rerunnable_v = workload_rerunnable<W>::value;

// ---- The CPU run --------------------------------------------------------------------------------

// What the CPU side keeps from call to call (fresh memory costs page faults on every call).
struct CpuScratch {
  SandpileScheduler sandpile;
  std::vector<index_t> order;
  // A sort's schedule as the run's order (and buckets, when asked for).
  const index_t* take(Schedule& s, std::vector<index_t>* buckets) {
    order.swap(s.order);
    if (buckets) buckets->swap(s.bucket_offsets);
    return order.data();
  }
};

// The CPU schedule of one call (the depth and guided rows resolved in st): inspector + CPU
// scheduler for Hybrid and HybridDevice, the workload's sort key for LeafSort, none for
// InputOrder. Returns the order (in cpu.order; null: the input order) and fills the phase times
// and, when asked, the buckets.
template <class W, class Visitor>
const index_t* schedule_on_cpu(CpuScratch& cpu, const W& w, const typename W::View& view, const Visitor& v,
                               const CallData& call, const TraversalOptions& opt, TraversalStats& st,
                               std::vector<index_t>* buckets) {
  const auto& tree = W::topology(view);
  const index_t n = call.n;
  if (opt.schedule == ScheduleKind::HybridKey) {
    // The GPU's keys and order, bit for bit: the same inspect_key, the same stable order.
    auto t0 = std::chrono::steady_clock::now();
    const TopTree top = TopTree::build(tree, st.depth);
    std::vector<std::uint64_t> keys(static_cast<std::size_t>(n));
    inspect_keys_cpu(tree, top.view(), v, n, keys.data());
    st.times.inspect_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    Schedule sorted = sort_by_key(keys.data(), n);
    st.times.schedule_ms = ms_since(t0);
    return cpu.take(sorted, buckets);
  }
  if (opt.schedule == ScheduleKind::Hybrid || opt.schedule == ScheduleKind::HybridDevice) {
    auto t0 = std::chrono::steady_clock::now();
    const TopTree top = TopTree::build(tree, st.depth);
    cpu.order.resize(static_cast<std::size_t>(n));
    if constexpr (W::kGuided) {
      const GuidedMatrix matrix = inspect_cpu_guided(tree, top.view(), v, n, st.rows);
      st.times.inspect_ms = ms_since(t0);
      t0 = std::chrono::steady_clock::now();
      guided_schedule(matrix.view(), top.parents().data(), cpu.order.data(), buckets);
    } else {
      const SchedulingMatrix matrix = inspect_cpu(tree, top.view(), v, n);
      st.times.inspect_ms = ms_since(t0);
      t0 = std::chrono::steady_clock::now();
      cpu.sandpile.run(matrix.view(), cpu.order.data(), buckets);
    }
    st.times.schedule_ms = ms_since(t0);
    return cpu.order.data();
  }
  if constexpr (W::kSortKey) {
    if (opt.schedule == ScheduleKind::LeafSort) {
      const auto t0 = std::chrono::steady_clock::now();
      Schedule sorted;
      w.with_sort_key(view, call.queries, [&](const auto& key_of, std::uint64_t max_key) {
        const auto fill = [&](auto* keys) {
          tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1024), [&](const tbb::blocked_range<index_t>& r) {
            for (index_t i = r.begin(); i < r.end(); ++i) keys[i] = static_cast<std::decay_t<decltype(*keys)>>(key_of(i));
          });
        };
        // Leaf ids (at most the node count) count-sort; wide keys (Morton codes) sort by comparison.
        if (max_key < std::uint64_t{1} << 31 && max_key <= 4 * static_cast<std::uint64_t>(n) + 65536) {
          std::vector<std::uint32_t> keys(static_cast<std::size_t>(n));
          fill(keys.data());
          sorted = sort_by_small_key(keys.data(), n, static_cast<std::uint32_t>(max_key));
        } else {
          std::vector<std::int64_t> keys(static_cast<std::size_t>(n));
          fill(keys.data());
          sorted = sort_by_key(keys.data(), n);
        }
      });
      st.times.schedule_ms = ms_since(t0);
      return cpu.take(sorted, buckets);
    }
  }
  return nullptr;
}

// One call on the CPU with the depth resolved and the data in host memory: the schedule
// (schedule_on_cpu), then the executor (Independent: TBB tasks; the lockstep kinds: the warp
// emulator, which counts nodes per warp). The order the executor ran goes to st.schedule when
// kept or counted.
template <class W>
void run_on_cpu(CpuScratch& cpu, const W& w, const typename W::View& view, const CallData& call,
                const TraversalOptions& opt, TraversalStats& st) {
  const bool want = opt.keep_schedule || opt.count_nodes;
  std::vector<index_t> buckets;
  const index_t* order = nullptr;
  w.with_visitor(view, call.queries, call.outputs, [&](const auto& v) {
    order = schedule_on_cpu(cpu, w, view, v, call, opt, st, want ? &buckets : nullptr);
    const auto t0 = std::chrono::steady_clock::now();
    // Counting nodes after an independent run reruns the visitor (run_fixed); one that may not
    // rerun goes through the emulator alone, which gives the same results and the counts.
    const bool emulate_once = opt.count_nodes && !workload_rerunnable_v<W>;
    if (opt.executor == ExecutorKind::Independent && !emulate_once)
      execute_cpu(W::topology(view), v, order, call.n);
    else
      st.warp_nodes = emulate_lockstep(W::topology(view), v, order, call.n, lockstep_mode(opt.executor));
    st.times.execute_ms = ms_since(t0);
  });
  if (!want) return;
  if (order) {
    st.schedule.order.assign(order, order + call.n);
    st.schedule.bucket_offsets = std::move(buckets);
  } else {
    st.schedule = input_order(call.n);
  }
}

}  // namespace canopy
