// The GPU half of the traversal engine (runtime/engine.hpp): one call of a workload on the GPU
// as explicit steps with explicit data,
//   inspect  (inspector/device_matrix.cuh)     queries through the top-tree -> a DeviceMatrix
//   schedule (scheduler/device_schedule.hpp,   the matrix, its keys or a    -> a DeviceSchedule
//             scheduler/key_sort.cuh)       sort key
//   execute  (gpu::execute below)              the schedule                 -> the results
// or the same steps overlapped chunk by chunk (runtime/pipeline.cuh). Each step may be called on
// its own (the tests do). Include from .cu files only.
#pragma once

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/cuda.cuh"
#include "executor/gpu_kernels.cuh"
#include "inspector/device_matrix.cuh"
#include "layouts/resident.hpp"
#include "runtime/engine.hpp"
#include "runtime/pipeline.cuh"
#include "scheduler/device_schedule.hpp"
#include "scheduler/key_sort.cuh"

namespace canopy {
namespace gpu {

// Step 3: the executor over queries 0..n-1 in the schedule's order (null: the input order), on
// stream s; warp_nodes (lockstep only, may be null) gets each warp's node count.
template <class Topology, class Visitor>
void execute(const Topology& tree, const Visitor& v, const DeviceSchedule* schedule, index_t n, ExecutorKind kind,
             cudaStream_t s, index_t* warp_nodes = nullptr) {
  launch_executor(kind, tree, v, schedule ? schedule->order.get() : nullptr, n, warp_nodes, s);
}

}  // namespace gpu

// What GPU calls keep from one to the next on a host thread: a non-blocking stream, the
// top-tree, matrix and schedule buffers, the schedulers' scratch and the pipeline.
struct GpuResources {
  Stream stream;  // first: the buffers below are freed in order on it
  Event start, stop, caller_ready, done;
  DeviceTopTree top;
  DeviceMatrix matrix;
  DeviceSchedule schedule;
  DeviceScheduler scheduler;
  KeySortScratch key_sort;
  DeviceBuffer<index_t> warp_nodes;
  std::unique_ptr<detail::Pipeline> pipeline;
  std::unique_ptr<TopTree> top_host;
  const index_t* last_order = nullptr;  // the last run's schedule on the device (null: the input order)

  // The top-tree of the last depth a call used, cut on the host and uploaded to `top` once: a
  // deep top-tree of a large tree takes milliseconds to cut, every call. A built-in engine's
  // tree never changes; the custom Traverser forgets it at each call (forget_top_tree).
  template <class Topology>
  const TopTree& top_tree(const Topology& host, int depth, cudaStream_t s) {
    if (!top_host || top_host->depth() != depth) {
      top_host = std::make_unique<TopTree>(TopTree::build(host, depth));
      top.upload(*top_host, s);
    }
    return *top_host;
  }
  void forget_top_tree() { top_host.reset(); }

  // GPU milliseconds of f()'s work on the stream (CUDA events).
  template <class F>
  double time(F&& f) {
    start.record(stream.get());
    f();
    stop.record(stream.get());
    return stop.since(start);
  }
};

// Device bytes of a call's fixed data: the tree's, and the queries' and results' per query.
struct DeviceFootprint {
  std::size_t tree = 0;
  std::size_t per_query = 0;
};

// One call on the GPU (the depth resolved, the statistics begun): `host` and `device` are the
// workload's view with host and device pointers, `call` the queries and results in device
// memory. The executor's results are on the device when this returns; the order it ran goes to
// st.schedule when kept or counted.
template <class W>
void run_on_gpu(GpuResources& g, const W& w, const typename W::View& host, const typename W::View& device,
                const CallData& call, const TraversalOptions& opt, DeviceFootprint fp, TraversalStats& st) {
  const cudaStream_t s = g.stream.get();
  const auto& tree = W::topology(device);
  const index_t n = call.n;
  const bool want = opt.keep_schedule || opt.count_nodes;
  w.with_visitor(device, call.queries, call.outputs, [&](const auto& v) {
    const DeviceSchedule* schedule = nullptr;  // null: the input order
    bool pipelined = false;
    if (uses_top_tree(opt.schedule)) {
      const TopTree& top = g.top_tree(W::topology(host), st.depth, s);
      const bool keyed = opt.schedule == ScheduleKind::HybridKey;
      const index_t entries = W::kGuided ? st.rows.width(top.size()) : top.size();
      const RunPlan plan = plan_run(opt, n, fp.tree, fp.tree + static_cast<std::size_t>(n) * fp.per_query,
                                    pipeline_bytes_per_query(opt.schedule, W::kGuided, entries), gpu_free_memory());
      g.schedule.size = n;
      if (plan.pipelined) {
        // Both would run the pipeline's executor again, over the caller's data: refused before
        // anything runs for a visitor that may not rerun.
        const bool rerun = opt.measure_overlap || (opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent);
        if (rerun && !workload_rerunnable_v<W>)
          throw Error(std::string(w.name) + ": " + (opt.measure_overlap ? "measure_overlap" : "gpu_count_nodes") +
                      " on a pipelined run executes the visitor a second time; declare the visitor "
                      "`static constexpr bool rerunnable = true;` (runtime/custom.hpp) or turn the option off");
        const std::vector<index_t> chunks = chunk_boundaries(n, plan.chunk, pipeline_ramps(opt));
        g.schedule.order.reserve(static_cast<std::size_t>(n), "the schedule", s);
        g.schedule.has_heads = false;
        if (!g.pipeline) g.pipeline = std::make_unique<detail::Pipeline>();
        detail::PipelineRun r;
        r.kind = opt.schedule;
        r.executor = opt.executor;
        r.rows = st.rows;
        r.inspector_first = opt.pipeline_inspector_first;
        r.order = g.schedule.order.get();
        r.after = s;
        st.pipeline = g.pipeline->run(tree, top, v, chunks, r);
        st.times.inspect_ms = st.pipeline.inspect_ms;
        st.times.schedule_ms = st.pipeline.schedule_ms;
        st.times.execute_ms = st.pipeline.execute_ms;
        g.schedule.buckets = chunks;  // a pipelined schedule's buckets are its chunks
        pipelined = true;
      } else {
        const bool to_host = DeviceScheduler::on_host(opt.schedule, W::kGuided, top, n);
        if (keyed)
          reserve_keys(g.matrix, n, top.size(), s);
        else
          g.matrix.reserve(W::kGuided, n, top.size(), st.rows, to_host ? HostCopy::Auto : HostCopy::None, s);
        st.times.inspect_ms = g.time([&] {
          gpu::inspect(tree, g.top.view, v, st.rows, g.matrix, s);
          gpu::finish_inspect(g.matrix, s);
        });
        if (to_host) {  // the CPU scheduler: host time, the order's upload included
          const auto t0 = std::chrono::steady_clock::now();
          g.scheduler.schedule(g.matrix, opt.schedule, top, g.schedule, s, want);
          st.times.schedule_ms = ms_since(t0);
        } else {
          st.times.schedule_ms = g.time([&] { g.scheduler.schedule(g.matrix, opt.schedule, top, g.schedule, s, want); });
        }
      }
      schedule = &g.schedule;
    } else if (opt.schedule == ScheduleKind::LeafSort) {
      if constexpr (W::kSortKey) {
        w.with_sort_key(device, call.queries, [&](const auto& key_of, std::uint64_t max_key) {
          st.times.schedule_ms = g.time([&] { gpu::sort_by_key(key_of, max_key, n, g.key_sort, g.schedule, s, want); });
        });
        schedule = &g.schedule;
      }
    }
    const bool count = opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent;
    const std::size_t warps = static_cast<std::size_t>((n + 31) / 32);
    if (count) g.warp_nodes.reserve(warps, "the per-warp node counts", s);
    // A visitor that may not rerun counts in its one run: the instrumented kernel is the timed one.
    const bool count_in_run = count && !workload_rerunnable_v<W>;
    if (!pipelined) {
      st.times.execute_ms = g.time([&] {
        gpu::execute(tree, v, schedule, n, opt.executor, s, count_in_run ? g.warp_nodes.get() : nullptr);
      });
    } else if (opt.measure_overlap) {
      st.pipeline.execute_only_ms = g.time([&] { gpu::execute(tree, v, schedule, n, opt.executor, s); });
    }
    if (count) {
      if (!count_in_run) gpu::execute(tree, v, schedule, n, opt.executor, s, g.warp_nodes.get());
      st.gpu_warp_nodes.resize(warps);
      copy_to_host(st.gpu_warp_nodes.data(), g.warp_nodes.get(), warps, s);
      g.stream.sync();
    }
    if (want) st.schedule = schedule ? DeviceScheduler::download(*schedule, s) : input_order(n);
    g.last_order = schedule ? schedule->order.get() : nullptr;
  });
}

namespace gpu {
// Auto's trial sample (GpuPart::gather_sample): row j of the sample is position
// runs.first[b] + (j - b * runs.each) of the order, b = j / runs.each.
template <class Index>
__global__ void gather_sample_kernel(const float* queries, int dims, const Index* order, SampleRuns runs, float* out) {
  const std::size_t total = static_cast<std::size_t>(runs.size()) * static_cast<std::size_t>(dims);
  for (std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const index_t row = static_cast<index_t>(t / dims);
    const int b = static_cast<int>(row / runs.each);
    const index_t q = scheduled_query(order, runs.first[b] + (row - b * runs.each));
    out[t] = queries[static_cast<std::size_t>(q) * dims + t % dims];
  }
}
}  // namespace gpu

// A built-in workload's GPU side: the device copy of its data, made once, and the queries' and
// results' device buffers, reused from call to call. Queries and results the caller holds in
// device memory are read and written in place.
template <class W>
class BuiltinGpuPart final : public GpuPart<W> {
 public:
  explicit BuiltinGpuPart(const typename W::Data& data)
      : device_(data, g_.stream.get()) {
    g_.stream.sync();
  }
  std::size_t tree_bytes() const override { return device_.bytes(); }
  stream_t stream() const override { return g_.stream.get(); }
  bool gathers_samples() const override { return true; }
  void gather_sample(const float* queries, int dims, const SampleRuns& runs, bool sorted, float* out) override {
    const std::size_t total = static_cast<std::size_t>(runs.size()) * static_cast<std::size_t>(dims);
    if (total == 0) return;
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((total + 255) / 256, 4096));
    const index_t* order = sorted ? g_.last_order : nullptr;
    gpu::gather_sample_kernel<index_t><<<blocks, 256, 0, g_.stream.get()>>>(queries, dims, order, runs, out);
    CANOPY_CUDA_CHECK_LAUNCH("gather_sample_kernel (Auto's trial sample)");
  }

  void run(const W& w, const typename W::View& host, const CallData& call, const TraversalOptions& opt,
           TraversalStats& st) override {
    const cudaStream_t s = g_.stream.get();
    {
      // Its destructor, at the end of this block or on an error, makes the caller's stream wait.
      const CallerStream caller(s, opt.stream, g_.caller_ready, g_.done);
      const std::size_t n = static_cast<std::size_t>(call.n);
      CallData d = call;
      const std::size_t query_floats = n * static_cast<std::size_t>(w.query_dims);
      if (query_floats > 0 && !is_device_pointer(call.queries)) {
        queries_.reserve(query_floats, "the queries", s);
        detail::copy_up(queries_.get(), call.queries, query_floats * sizeof(float), s, &staging_);
        d.queries = queries_.get();
      }
      for (int i = 0; i < 2; ++i) {
        if (w.output_bytes[i] == 0 || is_device_pointer(call.outputs[i])) continue;
        outputs_[i].reserve(n * w.output_bytes[i], "the results", s);
        d.outputs[i] = outputs_[i].get();
      }
      const DeviceFootprint fp{device_.bytes(), w.query_dims * sizeof(float) + w.output_bytes[0] + w.output_bytes[1]};
      run_on_gpu(g_, w, host, device_.view(), d, opt, fp, st);
      // Large results through the part's pinned slots, the host's side on all its cores (H200
      // host: a pageable copy of 258 MB took 75 ms, mostly fresh pages faulted in on one core).
      for (int i = 0; i < 2; ++i)
        if (d.outputs[i] != call.outputs[i]) detail::copy_down(call.outputs[i], outputs_[i].get(), n * w.output_bytes[i], s, &staging_);
    }
    g_.stream.sync();
  }

 private:
  GpuResources g_;  // first: its stream frees the buffers below
  typename W::Device device_;
  DeviceBuffer<float> queries_;
  DeviceBuffer<unsigned char> outputs_[2];
  detail::StagingSlots staging_;  // (the engine runs one call at a time)
};

template <class W>
std::unique_ptr<GpuPart<W>> make_gpu_part(const typename W::Data& data) {
  return std::make_unique<BuiltinGpuPart<W>>(data);
}

}  // namespace canopy
