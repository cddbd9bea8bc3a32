// Options and run statistics shared by every traversal workload's API (point correlation,
// nearest neighbours, Barnes-Hut, custom visitors): where to run, how to schedule, which
// executor, and what each phase cost. CUDA-free.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "core/device.hpp"
#include "core/types.hpp"
#include "executor/executor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

// Top-tree depth used when the options say 0 (capped at the tree's height); the octree, with
// up to eight children per node, uses kDefaultOctreeDepth.
constexpr int kDefaultTopTreeDepth = 8;

// Guided rows without a probe (GuidedProbe::None) are a positional signature: they need a
// deeper top-tree than probed rows, and only their first entries shape the schedule
// (docs/design.md, "Guided rows: probe or position").
constexpr int kDefaultPositionalDepth = 12;
constexpr index_t kDefaultPositionalRowCap = 32;
// Depth value that asks for the automatic choice (AutoDepth, runtime/engine.hpp).
constexpr int kAutoDepth = -1;
// HybridKey's depth 0: the shallowest top-tree with at least one top-leaf per this many queries
// (key_depth, runtime/engine.hpp). A key with a home hint (guided visitors, Barnes-Hut) names
// the top-leaf a query lies in, so finer is better, to buckets of a few queries; the two-ended
// key of unguided visitors splits each top-leaf's queries further by their reach: as good at a
// hundred queries per top-leaf as at twenty, and a smaller top-tree stays in the L2 cache
// (measured: docs/design.md, "The compact key").
constexpr index_t kKeyQueriesPerLeaf = 128;
constexpr index_t kHintedKeyQueriesPerLeaf = 4;

struct TraversalOptions {
  Device device = Device::Auto;
  // Auto: the runtime picks the executor and the schedule for this tree, visitor and batch size
  // by a trial and remembers the pick (AutoChoice, runtime/engine.hpp); TraversalStats says
  // which ran.
  ExecutorKind executor = ExecutorKind::Auto;
  ScheduleKind schedule = ScheduleKind::Auto;
  int depth = 0;                 // top-tree depth of the hybrid schedules: 1..tree height, 0 =
                                 // default (HybridKey: key_depth; the others kDefaultTopTreeDepth),
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

  // The pipeline (GPU; the hybrid schedules): the queries in chunks; chunk i+1's
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
  // GPU work, copies of the caller's device data included, starts after the work queued there,
  // and the stream waits for the call's work (whose results are in place when the call returns).
  stream_t stream = nullptr;
  // (An option added here: detail::one_pass_fits, runtime/ragged.hpp, names every option the
  // CPU's one-pass radius lists may leave at its default; add it there too where it matters.)
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

// A guided run's rows under the options on `device` (where the run goes): the probe
// (opt.probe, else None when pipelined on the GPU over a built-in tree and Full otherwise) and
// the cap (opt.row_cap, else kDefaultPositionalRowCap for None and none otherwise). A negative
// row_cap is an error. `builtin`: a built-in binary tree (false: a custom tree of any fan-out).
GuidedRows guided_rows(const TraversalOptions& opt, Device device, bool builtin = true);
// The top-tree depth a guided run takes for depth 0 (kDefaultPositionalDepth for rows without
// a probe, else kDefaultTopTreeDepth); AutoDepth's trial centres on it.
int guided_default_depth(const TraversalOptions& opt, Device device);

// The engine every workload's API object runs on (runtime/engine.hpp).
template <class W>
class Engine;

struct PhaseTimes {
  double inspect_ms = 0;   // GPU: inspector kernel + matrix copy to pinned host memory
  double schedule_ms = 0;  // CPU scheduler + order upload, or the device sandpile / sort
  double execute_ms = 0;   // the executor alone
  // The sum of the phases (a pipelined call's overlap, so its wall time is pipeline.wall_ms);
  // every wall clock is a wall_ms (TraversalStats, ForestTimes, DistributedStats).
  double total_ms() const { return inspect_ms + schedule_ms + execute_ms; }
};

struct TraversalStats {
  PhaseTimes times;
  Device device = Device::Cpu;  // where it ran
  ScheduleKind schedule_kind = ScheduleKind::InputOrder;   // what ran (Auto resolved)
  ExecutorKind executor_kind = ExecutorKind::Independent;  // what ran (Auto resolved)
  double wall_ms = 0;           // the whole call's wall clock on the host, trials included
  double auto_trial_ms = 0;     // Auto: what its trial cost (0 when a remembered pick was used)
  int depth = 0;                // top-tree depth used (the hybrid schedules)
  GuidedRows rows;              // guided Hybrid: how the inspector formed its rows
  double depth_trial_ms = 0;    // kAutoDepth: what the trial cost (0 when a cached choice was used)
  Schedule schedule;            // keep_schedule: the order the executor ran the queries in
  std::vector<index_t> warp_nodes;      // count_nodes: nodes visited per lockstep warp (emulator)
  std::vector<index_t> gpu_warp_nodes;  // gpu_count_nodes: the same, counted on the GPU
  PipelineStats pipeline;               // a pipelined run's busy and wall times
  double nodes_per_warp() const;        // mean of warp_nodes
  double gpu_nodes_per_warp() const;    // mean of gpu_warp_nodes
};

}  // namespace canopy
