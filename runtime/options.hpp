// Options and run statistics shared by every workload's API (point correlation, nearest
// neighbours, Barnes-Hut): where to run, how to schedule, which executor, and what each phase
// cost. CUDA-free.
#pragma once

#include <cstddef>
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "executor/executor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "core/types.hpp"
#include "core/device.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

enum class ScheduleKind {
  InputOrder,  // run the queries as given
  Hybrid,      // inspector over the top-tree + the CPU scheduler (the paper's design: the
               // matrix crosses to the host): the sandpile for unguided traversals, the
               // recursive buckets for guided ones
  HybridDevice,  // the same schedule, bit for bit, computed on the GPU next to the matrix
                 // (the sandpile, or the recursive buckets for binary top-trees; otherwise the
                 // CPU's); on the CPU device the same as Hybrid
  LeafSort,    // the hand-tuned baseline: sort by the leaf each query falls in (kd, ball and
               // vp trees) or by Morton code (Barnes-Hut)
};
const char* to_string(ScheduleKind k);

// Top-tree depth used when the options say 0 (capped at the tree's height); the octree, with
// up to eight children per node, uses kDefaultOctreeDepth.
constexpr int kDefaultTopTreeDepth = 8;

// Guided rows without a probe (GuidedProbe::None) are a positional signature: they need a
// deeper top-tree than probed rows, and only their first entries shape the schedule
// (README, "Guided rows").
constexpr int kDefaultPositionalDepth = 12;
constexpr index_t kDefaultPositionalRowCap = 32;
// The pipeline's first chunk is chunk / kPipelineRamp (TraversalOptions::pipeline_ramp).
constexpr index_t kPipelineRamp = 8;

// Depth value that asks for the automatic choice (AutoDepth below).
constexpr int kAutoDepth = -1;

struct TraversalOptions {
  Device device = Device::Auto;
  ExecutorKind executor = ExecutorKind::FsmLockstep;
  ScheduleKind schedule = ScheduleKind::HybridDevice;
  int depth = 0;                 // top-tree depth for Hybrid: 1..tree height, 0 = default,
                                 // kAutoDepth = a quick trial (AutoDepth)
  bool count_nodes = false;      // also run the CPU warp emulator on the same schedule
  bool gpu_count_nodes = false;  // GPU lockstep: instrumented kernel's per-warp node counts
  bool keep_schedule = false;    // copy the schedule the executor ran into the result
  // Guided traversals (nearest neighbour and the like; unguided ones ignore both): how the
  // inspector bounds each query's walk of the top-tree (GuidedProbe; unset: Full, or None when
  // the run is pipelined on the GPU, where the inspector competes with the executor), and the most
  // top-leaves a row keeps, the walk stopping there (0: every top-leaf, or
  // kDefaultPositionalRowCap with None). With None, depth 0 is kDefaultPositionalDepth. Custom
  // traversals (trees of any fan-out) default to Full and keep kDefaultTopTreeDepth.
  std::optional<GuidedProbe> probe;
  index_t row_cap = 0;

  // The pipeline (GPU; schedule Hybrid or HybridDevice): the queries in chunks; chunk i+1's
  // inspection, chunk i's scheduling (on TBB threads) and chunk i-1's execution overlap, on
  // two CUDA streams. Results are those of any other schedule; the schedule is the chunks'
  // schedules one after the other.
  bool pipeline = false;
  index_t chunk = 0;  // queries per chunk; 0: n / 8, at least 65,536 (never more than n)
  // Device memory this call may use, the tree, queries and results included; 0: what the
  // device has free. A scheduling matrix that does not fit is chunked (the pipeline runs even
  // when `pipeline` is off); a tree that does not fit is an error.
  std::size_t memory_budget = 0;
  bool measure_overlap = false;  // pipeline: also time the executor alone over the same schedule
  // Pipeline: inspect on a high-priority stream, so each chunk's inspection (and device
  // schedule) is dispatched ahead of the executor blocks already queued.
  bool pipeline_inspector_first = true;
  // Pipeline with the CPU scheduler (Hybrid): the first chunks ramp up (chunk / kPipelineRamp,
  // doubling to `chunk`), so that execution starts after one small chunk's inspection and
  // schedule instead of a full one's. The device schedulers keep equal chunks: their schedule
  // is short GPU work with a cost per chunk.
  bool pipeline_ramp = true;
  // A cudaStream_t of the caller's (null: Canopy's own non-blocking streams only). The call's
  // GPU work starts after the work queued there, and the stream waits for the call's work.
  void* stream = nullptr;
};

// What a pipelined run cost: busy time per phase (GPU phases timed with CUDA events per chunk,
// the CPU scheduler with a host clock) and the wall time of the whole pipeline.
struct PipelineStats {
  index_t chunks = 0;  // 0: the run was not pipelined
  index_t chunk = 0;
  double wall_ms = 0;
  double inspect_ms = 0, schedule_ms = 0, execute_ms = 0;
  double execute_only_ms = 0;  // measure_overlap: the executor alone over the same schedule
  // execute-only time / wall time: 1 when inspection and scheduling hide completely.
  double overlap_efficiency() const { return wall_ms > 0 ? execute_only_ms / wall_ms : 0.0; }
};

// --depth auto. A quick trial: each candidate depth (the default - 3 .. the default + 3,
// within the tree) runs the whole call, with the caller's options, on an evenly spread sample
// of the queries (kAutoDepthSample on the GPU, a tenth of it on the CPU; all when fewer), once
// to warm up and once timed; the fastest total (the wall time when pipelined) wins. Choices are
// remembered per schedule, executor, pipeline setting, guided rows and power of two of the
// query count, so a program streaming batches through one tree pays for the trial once.
constexpr index_t kAutoDepthSample = 131072;
class AutoDepth {
 public:
  // trial(depth, sample_rows) -> total ms of the call on those rows (ascending query indices).
  template <class Trial>
  int choose(const TraversalOptions& opt, Device device, index_t n, int height, int default_depth, Trial&& trial,
             double* trial_ms);
  // A whole call with opt.depth == kAutoDepth: the trial runs call(trial options, &sample rows),
  // then call(opt at the chosen depth, nullptr) gives the result, the trial's cost recorded.
  template <class Options, class Call>
  auto run(const Options& opt, Device device, index_t n, int height, int default_depth, Call&& call);

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
// A guided run's rows under the options on `device` (where the run goes): the probe
// (opt.probe, else None when pipelined on the GPU over a built-in tree and Full otherwise) and
// the cap (opt.row_cap, else kDefaultPositionalRowCap for None and none otherwise). A negative
// row_cap is an error. `builtin`: a built-in binary tree (false: a custom tree of any fan-out).
GuidedRows guided_rows(const TraversalOptions& opt, Device device, bool builtin = true);
// The top-tree depth a guided run takes for depth 0 (kDefaultPositionalDepth for rows without
// a probe, else kDefaultTopTreeDepth); AutoDepth's trial centres on it.
int guided_default_depth(const TraversalOptions& opt, Device device);

// m query indices spread evenly over 0..n-1 (all of them when m >= n): row i is i * n / m.
std::vector<index_t> spread_sample(index_t n, index_t m);
// The rows of a row-major [n][dims] array at `rows`.
std::vector<float> gather_rows(const float* data, int dims, const std::vector<index_t>& rows);
// The options of one trial run at `depth`: nothing kept, nothing counted.
TraversalOptions trial_options(const TraversalOptions& opt, int depth);
struct TraversalStats;
// Host copy of n x dims query floats that may live in device memory (empty when they are on
// the host: use the pointer as it is).
std::vector<float> stage_queries(const float* queries, index_t n, int dims);
// A run's total time: the wall time when pipelined, else inspect + schedule + execute.
double run_ms(const TraversalStats& s);

template <class Trial>
int AutoDepth::choose(const TraversalOptions& opt, Device device, index_t n, int height, int default_depth,
                      Trial&& trial, double* trial_ms) {
  *trial_ms = 0;
  if (n == 0 || (opt.schedule != ScheduleKind::Hybrid && opt.schedule != ScheduleKind::HybridDevice))
    return std::min(default_depth, height);
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

// How a GPU run of n queries is carried out under the options and the memory budget.
struct RunPlan {
  bool pipelined = false;
  index_t chunk = 0;
};
// fixed_bytes: the tree, queries and results on the device; per_query_bytes: what the pipeline
// holds per query of a chunk (pipeline_bytes_per_query); free_bytes: the device's free memory.
// Errors name the sizes: a budget (or device) too small for the tree, or for the tree plus the
// queries and results, or for one query's matrix row.
RunPlan plan_run(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t fixed_bytes,
                 std::size_t per_query_bytes, std::size_t free_bytes);
// Queries per call when the queries and results themselves (per_query_bytes each) do not fit
// the memory budget beside the tree (tree_bytes): batches that leave room for their whole
// matrix (matrix_bytes_per_query). n when there is no budget or the queries and results fit
// (the matrix is then chunked instead); an error naming the sizes when not even one query fits.
index_t budget_batch(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t per_query_bytes,
                     std::size_t matrix_bytes_per_query);
// Appends one batch's statistics (the queries first .. first + batch) to the whole call's.
void append_batch(TraversalStats& all, TraversalStats&& part, index_t first, bool first_batch);

// A pipeline's chunks, as boundaries 0, ..., n (a pipelined schedule's buckets are its chunks):
// of `chunk` queries each, or with `ramp` (and more than one chunk) of chunk / kPipelineRamp,
// doubling up to `chunk`.
std::vector<index_t> chunk_boundaries(index_t n, index_t chunk, bool ramp);
// Whether a pipelined run under `opt` ramps its chunks (TraversalOptions::pipeline_ramp).
inline bool pipeline_ramps(const TraversalOptions& opt) {
  return opt.pipeline_ramp && opt.schedule == ScheduleKind::Hybrid;
}
// Device bytes per query of a chunk the pipeline's two buffer slots need; row_entries: the
// top-leaves (unguided) or the entries per guided row (GuidedRows::width).
std::size_t pipeline_bytes_per_query(bool guided, index_t row_entries);

struct PhaseTimes {
  double inspect_ms = 0;   // GPU: inspector kernel + matrix copy to pinned host memory
  double schedule_ms = 0;  // CPU scheduler + order upload, or the device sandpile / sort
  double execute_ms = 0;   // the executor alone
  double total_ms() const { return inspect_ms + schedule_ms + execute_ms; }
};

struct TraversalStats {
  PhaseTimes times;
  Device device = Device::Cpu;  // where it ran
  int depth = 0;                // top-tree depth used (Hybrid)
  GuidedRows rows;              // guided Hybrid: how the inspector formed its rows
  double depth_trial_ms = 0;    // kAutoDepth: what the trial cost (0 when a cached choice was used)
  Schedule schedule;            // keep_schedule: the order the executor ran the queries in
  std::vector<index_t> warp_nodes;      // count_nodes: nodes visited per lockstep warp (emulator)
  std::vector<index_t> gpu_warp_nodes;  // gpu_count_nodes: the same, counted on the GPU
  PipelineStats pipeline;               // a pipelined run's busy and wall times
  double nodes_per_warp() const;        // mean of warp_nodes
  double gpu_nodes_per_warp() const;    // mean of gpu_warp_nodes

  // How a workload's rows and depth default (begin()).
  enum class Guided { No, BuiltinTree, CustomTree };
  // Checks the options every workload shares and fills device, depth and (guided) rows: a
  // depth outside 0..height, a negative row_cap, or device gpu on an object made for the cpu
  // (`who` names it), is an error. Depth 0 becomes default_depth capped at the height, or
  // kDefaultPositionalDepth for rows without a probe on a built-in tree (a custom tree's
  // fan-out is unknown: a deeper top-tree could have millions of leaves).
  void begin(const TraversalOptions& opt, Device held, const char* who, int height, int default_depth,
             Guided guided = Guided::No);
  // A pipelined run: its statistics, and its busy times as the phase times.
  void take_pipeline(const PipelineStats& p);
  // keep_schedule: the order the executor ran (null: the input order) and its buckets.
  void keep(const index_t* order, index_t n, std::vector<index_t>&& bucket_offsets);
};

// The pipelined path of a GPU run, shared by the workloads: plans the run under the options and
// the memory budget and, when it pipelines, run(chunk boundaries) -> PipelineStats executes it
// (chunk_boundaries under the plan's chunk and pipeline_ramps, computed here only). When the
// schedule is to be kept or counted, fetch() -> the order lands in `order` (and order_ptr) and
// the buckets are the chunks. Returns whether the run was pipelined (and so executed).
template <class Run, class Fetch>
bool pipeline_if_planned(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t fixed_bytes,
                         std::size_t per_query_bytes, TraversalStats& res, Run&& run, Fetch&& fetch,
                         std::vector<index_t>& order, index_t*& order_ptr, std::vector<index_t>& buckets) {
  const RunPlan plan = plan_run(opt, n, tree_bytes, fixed_bytes, per_query_bytes, gpu_free_memory());
  if (!plan.pipelined) return false;
  std::vector<index_t> chunks = chunk_boundaries(n, plan.chunk, pipeline_ramps(opt));
  res.take_pipeline(run(chunks));
  if (opt.keep_schedule || opt.count_nodes) {
    order = fetch();
    order_ptr = order.data();
    buckets = std::move(chunks);
  }
  return true;
}

template <class Options, class Call>
auto AutoDepth::run(const Options& opt, Device device, index_t n, int height, int default_depth, Call&& call) {
  double trial_ms = 0;
  Options chosen = opt;
  chosen.depth = choose(
      opt, device, n, height, default_depth,
      [&](int d, const std::vector<index_t>& rows) {
        Options t = opt;
        static_cast<TraversalOptions&>(t) = trial_options(opt, d);
        return run_ms(call(t, &rows));
      },
      &trial_ms);
  auto r = call(chosen, static_cast<const std::vector<index_t>*>(nullptr));
  r.depth_trial_ms = trial_ms;
  return r;
}

}  // namespace canopy
