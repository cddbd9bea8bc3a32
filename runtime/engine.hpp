// The one traversal engine under every workload: point correlation, nearest neighbours,
// Barnes-Hut and custom visitors all run through Engine (here, CUDA-free: the option checks,
// depth auto, memory-budget batches; the CPU run is in runtime/engine_cpu.hpp) and run_on_gpu
// (runtime/engine.cuh). A workload supplies its tree view, its visitor, its sort key and the
// shape of its per-query data; its API class is an adapter of a page.
//
// A workload W (see runtime/detail/workloads.hpp for the built-in ones, runtime/custom.hpp for a
// caller's visitor) provides:
//   using View = ...;                          // what the visitor reads: the tree (and any fixed
//                                              // data), host or device pointers alike
//   static const auto& topology(const View&);  // the tree the inspector and executors walk
//   static constexpr bool kGuided;             // guided rows (nearest neighbour and its kin)
//   static constexpr bool kBuiltinTree;        // a binary tree of Canopy's (custom trees keep
//                                              // probed rows at kDefaultTopTreeDepth)
//   static constexpr bool kSortKey;            // whether LeafSort has a key
//   static index_t sort_key_leaves(view);      // optional: LeafSort's key is the leaf a query
//                                              // lies in, one of this many (key_is_leaf_sort)
//   const char* name;                          // the API's name in errors ("PointCorrelation")
//   int default_depth;                         // top-tree depth for depth 0
//   int query_dims;                            // floats per query (0: the view holds the queries)
//   std::size_t output_bytes[2];               // result bytes per query, per result array
//   with_visitor(view, queries, outputs, f)    // f(visitor over them)
//   with_sort_key(view, queries, f)            // f(key functor, largest key), if kSortKey
//   static constexpr bool kRerunnable;         // optional (absent: true): whether a call may run
//                                              // the visitor again on the caller's data (trials,
//                                              // node counts); false for a custom visitor unless
//                                              // it says so (runtime/custom.hpp)
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <typeinfo>
#include <utility>
#include <type_traits>
#include <vector>

#include "core/checks.hpp"
#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "core/timing.hpp"
#include "executor/cpu_executor.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/auto_choice.hpp"
#include "runtime/engine_cpu.hpp"
#include "runtime/engine_plan.hpp"
#include "runtime/options.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

// --depth auto. A quick trial: each candidate depth (the default - 3 .. the default + 3, within
// the tree) runs the whole call, with the caller's options, on an evenly spread sample of the
// queries (kAutoDepthSample on the GPU, a tenth of it on the CPU; all when fewer), once to warm
// up and once timed; the fastest total (the wall time when pipelined) wins. Choices are
// remembered per schedule, executor, pipeline setting, guided rows and power of two of the
// query count, so a program streaming batches through one tree pays for the trial once. A
// workload that may not rerun its visitor (workload_rerunnable) runs depth 0 instead, untried.
constexpr index_t kAutoDepthSample = 131072;
class AutoDepth {
 public:
  // trial(depth, sample rows) -> total ms of the call on those rows (ascending query indices).
  template <class Trial>
  int choose(const TraversalOptions& opt, Device device, index_t n, int height, int default_depth, Trial&& trial,
             double* trial_ms);

 private:
  struct Key {
    int schedule, executor, pipeline, scale, probe;
    index_t row_cap;
    bool operator==(const Key& o) const {
      return schedule == o.schedule && executor == o.executor && pipeline == o.pipeline && scale == o.scale &&
             probe == o.probe && row_cap == o.row_cap;
    }
  };
  std::vector<std::pair<Key, int>> chosen_;
};

template <class Trial>
int AutoDepth::choose(const TraversalOptions& opt, Device device, index_t n, int height, int default_depth,
                      Trial&& trial, double* trial_ms) {
  *trial_ms = 0;
  if (n == 0 || !uses_top_tree(opt.schedule)) return std::min(default_depth, height);
  int scale = 0;
  while ((index_t{1} << scale) < n) ++scale;
  const GuidedRows g = guided_rows(opt, device);
  const Key key{static_cast<int>(opt.schedule), static_cast<int>(opt.executor), opt.pipeline ? 1 : 0, scale,
                static_cast<int>(g.probe), g.cap};
  for (const auto& [k, d] : chosen_)
    if (k == key) return d;
  const std::vector<index_t> rows =
      spread_sample(n, device == Device::Gpu ? kAutoDepthSample : kAutoDepthSample / 10);
  int best = std::min(default_depth, height);
  double best_ms = 0;
  for (int d = std::max(1, default_depth - 3); d <= std::min(height, default_depth + 3); ++d) {
    *trial_ms += trial(d, rows);
    const double ms = trial(d, rows);
    *trial_ms += ms;
    if (best_ms == 0 || ms < best_ms) {
      best = d;
      best_ms = ms;
    }
  }
  chosen_.push_back({key, best});
  return best;
}

// ---- The engine ---------------------------------------------------------------------------------

// The GPU side of a workload (runtime/engine.cuh): run() is one call with the depth resolved and
// the statistics begun, the data in host or device memory.
template <class W>
class GpuPart {
 public:
  virtual ~GpuPart() = default;
  // host: the call's view with host pointers, which a top-tree is cut from (its nodes fetched).
  virtual void run(const W& w, const typename W::View& host, const CallData& call, const TraversalOptions& opt,
                   TraversalStats& st) = 0;
  // Device bytes of the tree (and any fixed data) that every call keeps on the device.
  virtual std::size_t tree_bytes() const = 0;
  // The stream its runs work on: device memory a trial allocates there is ready for them.
  virtual stream_t stream() const = 0;
  // Whether gather_sample works; where it does not, the trial gathers on the host from a
  // downloaded schedule.
  virtual bool gathers_samples() const { return false; }
  // Auto's trial sample gathered on the device, on stream(): the queries [n][dims] (device
  // memory) at the positions `runs` of the last run's schedule (`sorted`; the input order where
  // that run had none) or of the input order, into out [runs.size()][dims].
  virtual void gather_sample(const float* queries, int dims, const SampleRuns& runs, bool sorted, float* out) {
    (void)queries, (void)dims, (void)runs, (void)sorted, (void)out;
    throw Error("GpuPart::gather_sample: this part gathers no samples (gathers_samples() is false)");
  }
};

// What a workload's calls keep from one to the next (an Engine's or a Traverser's: under its lock).
struct EngineState {
  CpuScratch cpu;
  AutoDepth auto_depth;
  std::vector<index_t> top_leaves;  // top_leaves_by_depth of the engine's tree, once needed
  // Makes the nodes of the view the calls get ready on the host, where the engine's tree may
  // not have them yet (a GPU build's; Engine sets it): before a walk of its nodes there.
  std::function<void()> fetch_nodes;
};

namespace detail {

// Host scratch for the results of n queries: what a trial, the CPU run over device outputs or the
// node-counting emulator writes into.
struct ScratchOutputs {
  std::vector<unsigned char> bytes[2];
  void* ptr[2] = {nullptr, nullptr};
  ScratchOutputs(const std::size_t (&per_query)[2], index_t n) {
    for (int i = 0; i < 2; ++i) {
      bytes[i].resize(per_query[i] * static_cast<std::size_t>(n));
      ptr[i] = per_query[i] ? bytes[i].data() : nullptr;
    }
  }
};

// A host copy of queries [n][dims] in device memory, made after the work queued on `after`;
// empty when they are in host memory (or there are none).
std::vector<float> host_copy_of_queries(const float* queries, index_t n, int dims, stream_t after);

// A trial run's data (depth auto, Auto): the queries at `rows` of the call's, gathered from
// host_queries (the call's queries in host memory), or with no rows the call's own queries; and
// scratch results for them. A workload that holds its own queries runs them all. On the device
// (a GPU trial) nothing is transferred per run: the queries are uploaded once (unless already
// there), the results go to device scratch, both on `stream` (the GPU part's: its runs are
// ordered after them).
struct TrialCall {
  std::vector<float> queries;
  std::unique_ptr<ScratchOutputs> out;
  DeviceBuffer<unsigned char> device[3];  // queries, results
  CallData data;
};
template <class W>
void trial_outputs_on_device(const W& w, TrialCall& t, stream_t stream) {
  const std::size_t n = static_cast<std::size_t>(t.data.n);
  for (int i = 0; i < 2; ++i)
    if (w.output_bytes[i] && n > 0) {
      t.device[1 + i].reserve(w.output_bytes[i] * n, "Auto's trial results", stream);
      t.data.outputs[i] = t.device[1 + i].get();
    }
}
template <class W>
TrialCall trial_call(const W& w, const CallData& call, const float* host_queries, const std::vector<index_t>* rows,
                     bool on_device = false, stream_t stream = nullptr) {
  TrialCall t;
  const bool gather = rows && w.query_dims > 0;
  t.data.n = gather ? static_cast<index_t>(rows->size()) : call.n;
  if (gather) t.queries = gather_rows(host_queries, w.query_dims, *rows);
  t.data.queries = gather ? t.queries.data() : call.queries;
  const std::size_t n = static_cast<std::size_t>(t.data.n);
  if (!on_device) {
    t.out = std::make_unique<ScratchOutputs>(w.output_bytes, t.data.n);
    t.data.outputs[0] = t.out->ptr[0];
    t.data.outputs[1] = t.out->ptr[1];
    return t;
  }
  if (w.query_dims > 0 && n > 0 && !is_device_pointer(t.data.queries)) {
    const std::size_t bytes = n * static_cast<std::size_t>(w.query_dims) * sizeof(float);
    t.device[0].reserve(bytes, "Auto's trial queries", stream);
    copy_async(t.device[0].get(), t.data.queries, bytes, stream);  // pageable: staged when it returns
    t.data.queries = static_cast<const float*>(static_cast<const void*>(t.device[0].get()));
  }
  trial_outputs_on_device(w, t, stream);
  return t;
}

// The same on the device from the start (GpuPart::gather_sample): the call's queries in device
// memory at the positions `runs` of the call's schedule (sorted) or of the input order.
template <class W>
TrialCall device_trial_call(const W& w, const CallData& call, GpuPart<W>& gpu, const SampleRuns& runs, bool sorted) {
  TrialCall t;
  t.data.n = runs.size();
  const std::size_t bytes = static_cast<std::size_t>(t.data.n) * static_cast<std::size_t>(w.query_dims) * sizeof(float);
  t.device[0].reserve(bytes, "Auto's trial queries", gpu.stream());
  float* queries = static_cast<float*>(static_cast<void*>(t.device[0].get()));
  gpu.gather_sample(call.queries, w.query_dims, runs, sorted, queries);
  t.data.queries = queries;
  trial_outputs_on_device(w, t, gpu.stream());
  return t;
}

// The engine's tree for a walk of its nodes on the host: fetched first where the host lacks
// them (EngineState::fetch_nodes; `view` is the engine's own, which that replaces).
template <class W>
const auto& host_topology(const typename W::View& view, EngineState& state) {
  if (state.fetch_nodes) state.fetch_nodes();
  return W::topology(view);
}

// The engine's tree's top_leaves_by_depth, counted once.
template <class W>
const std::vector<index_t>& engine_top_leaves(const typename W::View& view, EngineState& state) {
  if (state.top_leaves.empty()) state.top_leaves = top_leaves_by_depth(host_topology<W>(view, state));
  return state.top_leaves;
}

template <class T, class = void>
struct has_node_count : std::false_type {};
template <class T>
struct has_node_count<T, std::void_t<decltype(std::declval<const T&>().n_nodes)>> : std::true_type {};

// The size of the engine's tree for Auto's key: its node count where the topology says it (the
// built-in trees, graph trees), else its leaf count. Never a walk over a built-in tree: a
// one-shot call, or a simulation's new octree each step, would pay for it.
template <class W>
index_t tree_size_for_key(const typename W::View& view, EngineState& state) {
  using Topology = std::decay_t<decltype(W::topology(view))>;
  if constexpr (has_node_count<Topology>::value)
    return static_cast<index_t>(W::topology(view).n_nodes);
  else
    return engine_top_leaves<W>(view, state).back();
}

template <class W>
void check_call(const W& w, const CallData& call, const TraversalOptions& opt) {
  const std::string who = w.name;
  if (call.n < 0) throw Error(who + ": n_queries = " + std::to_string(call.n) + " is negative");
  for (int i = 0; i < 2; ++i)
    if (call.n > 0 && w.output_bytes[i] && !call.outputs[i]) throw Error(who + "::run: an output buffer is null");
  if (w.query_dims > 0) check_queries(call.queries, call.n, w.query_dims, opt.stream);
  if (opt.schedule == ScheduleKind::LeafSort && !W::kSortKey)
    throw Error(who + ": schedule leaf-sort needs a workload's own sort key; a custom traversal takes input-order, "
                      "hybrid or hybrid-device");
}

// Whether the key inspector walks the workload's queries with a home hint (has_home_hint_v).
template <class W>
bool workload_hinted(const W& w, const typename W::View& view) {
  bool hinted = false;
  void* none[2] = {nullptr, nullptr};
  w.with_visitor(view, nullptr, none, [&](const auto& v) { hinted = has_home_hint_v<std::decay_t<decltype(v)>>; });
  return hinted;
}

// HybridKey's depth for n queries over the engine's tree (key_depth).
template <class W>
int workload_key_depth(const W& w, const typename W::View& view, EngineState& state, index_t n) {
  return key_depth(engine_top_leaves<W>(view, state), n, workload_hinted(w, view));
}

template <class W, class = void>
struct has_sort_key_leaves : std::false_type {};
template <class W>
struct has_sort_key_leaves<W, std::void_t<decltype(W::sort_key_leaves(std::declval<const typename W::View&>()))>>
    : std::true_type {};

// Whether HybridKey's order of n queries at depth 0 is the leaf sort's (but for queries the root
// rejects, which the key sorts last): the workload's sort key is the leaf a query lies in, its
// key has a home hint, and the tree has fewer leaves than the key wants (key_depth is then the
// full height, whose top-leaves are the leaves). From the tree's size alone: no walk of its nodes.
template <class W>
bool key_is_leaf_sort(const W& w, const typename W::View& view, index_t n) {
  if constexpr (has_sort_key_leaves<W>::value)
    return workload_hinted(w, view) &&
           W::sort_key_leaves(view) < (n + kHintedKeyQueriesPerLeaf - 1) / kHintedKeyQueriesPerLeaf;
  else
    return false;
}

// The top-tree depth that depth 0 stands for before it is capped at the tree's height (the
// centre of depth auto's trial).
template <class W>
int uncapped_default_depth(const W& w, const typename W::View& view, EngineState& state, index_t n,
                           const TraversalOptions& opt, Device where) {
  if (opt.schedule == ScheduleKind::HybridKey) return workload_key_depth(w, view, state, n);
  return W::kGuided && W::kBuiltinTree ? guided_default_depth(opt, where) : w.default_depth;
}

// One call at a fixed depth, the data fitting the device.
template <class W>
TraversalStats run_fixed(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                         const CallData& call, const TraversalOptions& opt) {
  TraversalStats st = begin_call(opt, held, w.name, W::topology(view).height, w.default_depth, W::kGuided,
                                 W::kBuiltinTree);
  if (call.n == 0) {
    if (opt.keep_schedule) st.schedule = input_order(0);
    return st;
  }
  std::vector<float> host_queries;
  if (st.device == Device::Gpu) {
    if (uses_top_tree(opt.schedule)) (void)host_topology<W>(view, state);  // the cut's nodes
    gpu->run(w, view, call, opt, st);
  } else {
    // The CPU reads and writes host memory: device queries and results go through the host.
    host_queries = host_copy_of_queries(call.queries, call.n, w.query_dims, opt.stream);
    CallData host = call;
    if (!host_queries.empty()) host.queries = host_queries.data();
    std::vector<unsigned char> staged[2];  // only for results in device memory
    for (int i = 0; i < 2; ++i)
      if (call.outputs[i] && is_device_pointer(call.outputs[i])) {
        staged[i].resize(w.output_bytes[i] * static_cast<std::size_t>(call.n));
        host.outputs[i] = staged[i].data();
      }
    run_on_cpu(state.cpu, w, view, host, opt, st);
    for (int i = 0; i < 2; ++i)
      if (host.outputs[i] != call.outputs[i])
        copy_memory(call.outputs[i], host.outputs[i], w.output_bytes[i] * static_cast<std::size_t>(call.n), opt.stream);
    if (!opt.count_nodes) st.warp_nodes.clear();
  }
  if (opt.count_nodes && st.warp_nodes.empty()) {
    // The warp emulator over the order that ran, into scratch results.
    if (host_queries.empty()) host_queries = host_copy_of_queries(call.queries, call.n, w.query_dims, opt.stream);
    ScratchOutputs scratch(w.output_bytes, call.n);
    const float* queries = host_queries.empty() ? call.queries : host_queries.data();
    const index_t* order = st.schedule.order.empty() ? nullptr : st.schedule.order.data();
    w.with_visitor(view, queries, scratch.ptr, [&](const auto& v) {
      st.warp_nodes = emulate_lockstep(W::topology(view), v, order, call.n, lockstep_mode(opt.executor));
    });
  }
  if (!opt.keep_schedule) st.schedule = Schedule{};
  return st;
}

}  // namespace detail

// A call's options resolved once, before anything runs (detail::plan_call). Trials run plans of
// fixed options (detail::fixed_plan), so no run re-enters the resolution or re-checks its data.
struct CallPlan {
  TraversalOptions opt;        // schedule, executor and depth fixed
  Device where = Device::Cpu;  // the CPU if asked for, else the device the object was made for
  index_t batch = 0;           // queries per memory-budget batch (the call's n: one run)
  double depth_trial_ms = 0;   // depth auto's trial, run while planning
  // Auto on a shape's second call: the call under the prior, then every candidate's trial
  // (sampled: on auto_sample_size queries at positions of the prior's schedule) at trial_depth (the
  // caller's depth; auto: 0), the fastest remembered under auto_key.
  // device_sample: the sample is gathered on the device from the call's device queries and
  // schedule (GpuPart::gather_sample), so the call copies neither to the host.
  bool auto_trial = false, trial_sampled = false, device_sample = false;
  int trial_depth = 0;
  AutoChoice::Key auto_key;
  std::vector<AutoPick> candidates;
};

namespace detail {

inline Device call_device(const TraversalOptions& opt, Device held) {
  return opt.device == Device::Cpu ? Device::Cpu : held;
}

// Finishes a plan whose schedule, executor and depth are fixed: HybridKey's depth 0 becomes the
// key depth for n queries; queries and results that do not fit the memory budget beside the tree
// run in batches, each leaving room for its whole matrix.
template <class W>
void finish_plan(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state, index_t n,
                 CallPlan& p) {
  const int height = W::topology(view).height;
  TraversalOptions& opt = p.opt;
  if (opt.schedule == ScheduleKind::HybridKey && opt.depth == 0 && n > 0)
    opt.depth = std::min(height, workload_key_depth(w, view, state, n));
  p.batch = n;
  if (!(opt.memory_budget > 0 && opt.device != Device::Cpu && held == Device::Gpu && w.query_dims > 0 &&
        opt.depth >= 0 && opt.depth <= height))
    return;
  const TraversalStats st = begin_call(opt, held, w.name, height, w.default_depth, W::kGuided, W::kBuiltinTree);
  const TopTree top = TopTree::build(host_topology<W>(view, state), st.depth);
  const std::size_t per_query = w.query_dims * sizeof(float) + w.output_bytes[0] + w.output_bytes[1];
  p.batch = budget_batch(
      opt, n, gpu->tree_bytes(), per_query,
      pipeline_bytes_per_query(opt.schedule, W::kGuided, W::kGuided ? st.rows.width(top.size()) : top.size()));
}

// The plan of a trial's fixed options (no Auto, no depth auto) for n queries.
template <class W>
CallPlan fixed_plan(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                    index_t n, const TraversalOptions& opt) {
  CallPlan p;
  p.opt = opt;
  p.where = call_device(opt, held);
  finish_plan(w, view, held, gpu, state, n, p);
  return p;
}

// Runs a plan: one fixed run, or one per memory-budget batch.
template <class W>
TraversalStats run_plan(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                        const CallData& call, const CallPlan& p) {
  if (p.batch >= call.n) return run_fixed(w, view, held, gpu, state, call, p.opt);
  TraversalStats all;
  for (index_t a = 0; a < call.n; a += p.batch) {
    CallData part = call;
    part.n = std::min(p.batch, call.n - a);
    part.queries = call.queries + a * w.query_dims;
    for (int i = 0; i < 2; ++i)
      if (call.outputs[i]) part.outputs[i] = static_cast<unsigned char*>(call.outputs[i]) + a * w.output_bytes[i];
    append_batch(all, run_fixed(w, view, held, gpu, state, part, p.opt), a, a == 0);
  }
  return all;
}

// Auto's pick: the settled one; on a shape's first call the prior (the first candidate), left
// there unsettled; on its second the prior, the trial to follow the call. A workload that may not
// rerun its visitor (workload_rerunnable) runs the prior on every call: no trial, nothing
// remembered.
template <class W>
void plan_auto(const W& w, const typename W::View& view, EngineState& state, index_t n, CallPlan& p) {
  if (p.opt.schedule != ScheduleKind::Auto && p.opt.executor != ExecutorKind::Auto) return;
  const bool wide = workload_wide(w);
  p.candidates = auto_candidates(p.opt, p.where, W::kSortKey, W::kGuided, wide);
  // HybridKey would rerun the leaf sort's order after a full-height top-tree cut (at 10^7 queries
  // 46-52 ms of host work for a 2.1 ms run, the trial 2.7x its call): not tried.
  if ((p.opt.depth == 0 || p.opt.depth == kAutoDepth) && key_is_leaf_sort(w, view, n))
    drop_twins(p.candidates, ScheduleKind::HybridKey, ScheduleKind::LeafSort);
  AutoPick pick = p.candidates.front();
  if (p.candidates.size() > 1 && n > 0 && workload_rerunnable_v<W>) {
    // A wide search has its own candidates, so its own picks (kNN with k = 30 and k = 8 differ).
    const std::size_t workload = typeid(W).hash_code() ^ (wide ? std::size_t{0x9e3779b97f4a7c15ull} : 0);
    p.auto_key = AutoChoice::key(workload, W::topology(view).height, tree_size_for_key<W>(view, state), n, p.where,
                                 p.opt);
    AutoPick known{};
    bool settled = false;
    if (!AutoChoice::find(p.auto_key, &known, &settled))
      AutoChoice::remember(p.auto_key, pick, false);
    else if (settled)
      pick = known;
    else
      p.auto_trial = true;
  }
  p.trial_depth = p.opt.depth == kAutoDepth ? 0 : p.opt.depth;
  p.trial_sampled = p.auto_trial && w.query_dims > 0 && auto_sample_size(n, p.candidates.size()) < n;
  p.opt.schedule = pick.schedule;
  p.opt.executor = pick.executor;
}

// Depth auto: AutoDepth's choice, by a trial of fixed plans on a sample of the call. A workload
// that may not rerun its visitor gets depth 0's choice, untried (the trial would rerun it on the
// caller's data).
template <class W>
void plan_depth_auto(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                     const CallData& call, CallPlan& p) {
  if (p.opt.depth != kAutoDepth) return;
  if (!workload_rerunnable_v<W>) {
    p.opt.depth = 0;
    return;
  }
  const TraversalOptions opt = p.opt;
  const std::vector<float> staged = host_copy_of_queries(call.queries, call.n, w.query_dims, opt.stream);
  const float* queries = staged.empty() ? call.queries : staged.data();
  // Every trial runs the same sample, gathered once, into one set of scratch results.
  TrialCall t;
  p.opt.depth = state.auto_depth.choose(
      opt, p.where, call.n, W::topology(view).height, uncapped_default_depth(w, view, state, call.n, opt, p.where),
      [&](int d, const std::vector<index_t>& rows) {
        if (t.data.n == 0) {
          const bool on_gpu = p.where == Device::Gpu;
          t = trial_call(w, call, queries, &rows, on_gpu, on_gpu ? gpu->stream() : nullptr);
        }
        const CallPlan trial = fixed_plan(w, view, held, gpu, state, t.data.n, trial_options(opt, d));
        return run_ms(run_plan(w, view, held, gpu, state, t.data, trial));
      },
      &p.depth_trial_ms);
}

// A checked call's plan: Auto's pick, then depth auto (under the pick), then HybridKey's key
// depth and the memory-budget batches (under the depth).
template <class W>
CallPlan plan_call(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                   const CallData& call, const TraversalOptions& opt) {
  CallPlan p;
  p.opt = opt;
  p.where = call_device(opt, held);
  plan_auto(w, view, state, call.n, p);
  plan_depth_auto(w, view, held, gpu, state, call, p);
  finish_plan(w, view, held, gpu, state, call.n, p);
  // One run (no memory-budget batches) leaves the whole call's schedule on the device.
  p.device_sample = p.trial_sampled && p.where == Device::Gpu && gpu && gpu->gathers_samples() &&
                    p.batch >= call.n && is_device_pointer(call.queries);
  if (p.trial_sampled && !p.device_sample) p.opt.keep_schedule = true;  // the sorted candidates' sample
  return p;
}

// Auto's trial, after the call (st: the call under the prior, call_wall_ms its wall time). On a
// sample of the call (auto_sample_size; in device memory on the GPU) the prior runs first,
// twice (the baseline); on the whole call the call's own time is the prior's. Every other
// candidate runs once, and again when it comes within 1.2x of the best (the faster time kept).
// The trial stops before a run that could take its wall time past kAutoTrialBudget times the
// call's; the fastest tried is remembered, settled, for the calls that follow.
template <class W>
void run_auto_trial(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                    const CallData& call, const CallPlan& p, const TraversalStats& st, double call_wall_ms) {
  const auto start = std::chrono::steady_clock::now();
  const index_t n = call.n;
  // The trial's data: samples of the call at the input order's positions and at the call's
  // schedule's, each made when a candidate first needs it (a trial that its budget stops early
  // gathers no more); or the call itself. On the device when the call's queries are there
  // (device_sample: nothing crosses to the host; the H100, 10^7 queries, k = 8: the trial 136 ->
  // 58 ms), else on the host's cores from a host copy and the downloaded schedule.
  const bool gpu_trial = p.where == Device::Gpu;
  const stream_t trial_stream = gpu_trial ? gpu->stream() : nullptr;
  std::vector<float> staged;
  if (p.trial_sampled && !p.device_sample) staged = host_copy_of_queries(call.queries, n, w.query_dims, p.opt.stream);
  const float* queries = staged.empty() ? call.queries : staged.data();
  TrialCall samples[2];
  bool made[2] = {false, false};
  const auto data_for = [&](const AutoPick& c) -> const TrialCall& {
    const int i = p.trial_sampled && c.schedule != ScheduleKind::InputOrder ? 1 : 0;
    if (!made[i]) {
      if (p.device_sample) {
        const SampleRuns runs = sample_runs(n, auto_sample_size(n, p.candidates.size()), kAutoBlocks);
        samples[i] = device_trial_call(w, call, *gpu, runs, i == 1);
      } else if (p.trial_sampled) {
        const std::vector<index_t> rows = block_sample(i ? st.schedule.order.data() : nullptr, n,
                                                       auto_sample_size(n, p.candidates.size()), kAutoBlocks);
        samples[i] = trial_call(w, call, queries, &rows, gpu_trial, trial_stream);
      } else {
        samples[i] = trial_call(w, call, nullptr, nullptr, gpu_trial, trial_stream);
      }
      made[i] = true;
    }
    return samples[i];
  };
  // The sorted sample is taken from the call's schedule, which the first trial run replaces.
  if (p.device_sample)
    for (const AutoPick& c : p.candidates)
      if (c.schedule != ScheduleKind::InputOrder) {
        data_for(c);
        break;
      }
  const double budget = kAutoTrialBudget * call_wall_ms;
  double best = p.trial_sampled ? 0 : run_ms(st), cheapest = 0;
  // The next run is assumed to cost twice the cheapest so far: a candidate can be far slower
  // than the prior (Barnes-Hut over the input order: 5.7x), and a run cannot be cut short.
  const auto over = [&] { return cheapest > 0 && ms_since(start) + 2 * cheapest > budget; };
  AutoPick pick = p.candidates.front();
  for (std::size_t i = p.trial_sampled ? 0 : 1; i < p.candidates.size() && !over(); ++i) {
    const AutoPick& c = p.candidates[i];
    TraversalOptions t = trial_options(p.opt, p.trial_depth);
    t.schedule = c.schedule;
    t.executor = c.executor;
    // A sample runs at the whole call's depth: its blocks have the call's density.
    if (c.schedule == ScheduleKind::HybridKey && p.trial_depth == 0) t.depth = workload_key_depth(w, view, state, n);
    const TrialCall& s = data_for(c);
    const CallPlan trial = fixed_plan(w, view, held, gpu, state, s.data.n, t);
    auto once = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      const double ms = run_ms(run_plan(w, view, held, gpu, state, s.data, trial));
      const double wall = ms_since(t0);
      cheapest = cheapest > 0 ? std::min(cheapest, wall) : wall;
      return ms;
    };
    double ms = once();
    if ((best == 0 || ms < 1.2 * best) && !over()) ms = std::min(ms, once());
    if (best == 0 || ms < best) {
      best = ms;
      pick = c;
    }
  }
  AutoChoice::remember(p.auto_key, pick);
}

}  // namespace detail

// A whole call of workload w over its tree `view` (host pointers), on the device `held` the
// caller's object was made for (gpu: its GPU side): checks the call's data once, resolves its
// options into a plan (Auto, depth auto by a trial, the memory-budget batches), runs the plan on
// the CPU or the GPU, then Auto's trial where the plan has one.
template <class W>
TraversalStats run_call(const W& w, const typename W::View& view, Device held, GpuPart<W>* gpu, EngineState& state,
                        const CallData& call, const TraversalOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  detail::check_call(w, call, opt);
  const CallPlan p = detail::plan_call(w, view, held, gpu, state, call, opt);
  TraversalStats st = detail::run_plan(w, view, held, gpu, state, call, p);
  st.depth_trial_ms = p.depth_trial_ms;
  if (p.auto_trial) {
    const auto t0 = std::chrono::steady_clock::now();
    detail::run_auto_trial(w, view, held, gpu, state, call, p, st, ms_since(start));
    st.auto_trial_ms = ms_since(t0);
    if (!opt.keep_schedule) st.schedule = Schedule{};
  }
  st.wall_ms = ms_since(start);
  return st;
}

namespace detail {
// Whether a call reads the whole tree on the host: the CPU run, or count_nodes' emulator. A GPU
// call reads only the topology there, so a tree its GPU build left on the device is not copied
// for it (keep_schedule and gpu_count_nodes download what the GPU made).
inline bool call_reads_host_tree(Device held, const TraversalOptions& opt) {
  return held == Device::Cpu || opt.device == Device::Cpu || opt.count_nodes;
}
template <class W, class = void>
struct has_full_view : std::false_type {};
template <class W>
struct has_full_view<W, std::void_t<decltype(W::full_view(std::declval<const typename W::Data&>()))>>
    : std::true_type {};
// A workload whose host_view may lack the nodes, which topology_view fetches.
template <class W, class = void>
struct has_topology_view : std::false_type {};
template <class W>
struct has_topology_view<W, std::void_t<decltype(W::topology_view(std::declval<const typename W::Data&>()))>>
    : std::true_type {};
}  // namespace detail

// Made in runtime/engine.cuh; each built-in workload's .cu file instantiates it.
template <class W>
std::unique_ptr<GpuPart<W>> make_gpu_part(const typename W::Data& data);

// A built-in workload's engine: its tree (the host view; on the GPU, its device copy, made once
// here) and what calls keep from one to the next. Several host threads may call it at once: the
// calls take turns on its lock.
template <class W>
class Engine {
 public:
  using Workload = W;
  // data must outlive the engine.
  Engine(const typename W::Data& data, Device device)
      : data_(data), view_(W::host_view(data)), device_(resolve_device(device)) {
    if (device_ == Device::Gpu) gpu_ = make_gpu_part<W>(data);
    if constexpr (detail::has_topology_view<W>::value)
      state_.fetch_nodes = [this] {
        if (!full_) view_ = W::topology_view(data_);  // (run_call's view is view_ itself)
      };
  }
  Device device() const { return device_; }
  // The host view: its sizes always, its nodes once a top-tree has needed them, its arrays once
  // a CPU call has (a tree left on the device by its GPU build is copied back only then). A copy:
  // a later call may replace it.
  typename W::View view() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return view_;
  }
  // Calls from several host threads take turns on the engine's lock: the view, the GPU part's
  // stream and buffers and the state below are the engine's one set.
  TraversalStats run(const W& w, const CallData& call, const TraversalOptions& opt) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if constexpr (detail::has_full_view<W>::value) {
      if (!full_ && detail::call_reads_host_tree(device_, opt)) {
        view_ = W::full_view(data_);
        full_ = true;
      }
    }
    return run_call(w, view_, device_, gpu_.get(), state_, call, opt);
  }

 private:
  const typename W::Data& data_;
  typename W::View view_;
  bool full_ = false;
  Device device_;
  std::unique_ptr<GpuPart<W>> gpu_;
  EngineState state_;
  mutable std::mutex mutex_;  // one call at a time (run), and view() beside it
};

}  // namespace canopy
