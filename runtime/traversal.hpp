// Options and run statistics shared by every workload's API (point correlation, nearest
// neighbours, Barnes-Hut): where to run, how to schedule, which executor, and what each phase
// cost. CUDA-free.
#pragma once

#include <vector>

#include "executor/executor.hpp"
#include "runtime/common.hpp"
#include "runtime/device.hpp"
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

struct TraversalOptions {
  Device device = Device::Auto;
  ExecutorKind executor = ExecutorKind::FsmLockstep;
  ScheduleKind schedule = ScheduleKind::HybridDevice;
  int depth = 0;                 // top-tree depth for Hybrid: 1..tree height, 0 = default
  bool count_nodes = false;      // also run the CPU warp emulator on the same schedule
  bool gpu_count_nodes = false;  // GPU lockstep: instrumented kernel's per-warp node counts
  bool keep_schedule = false;    // copy the schedule the executor ran into the result
};

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
  Schedule schedule;            // keep_schedule: the order the executor ran the queries in
  std::vector<index_t> warp_nodes;      // count_nodes: nodes visited per lockstep warp (emulator)
  std::vector<index_t> gpu_warp_nodes;  // gpu_count_nodes: the same, counted on the GPU
  double nodes_per_warp() const;        // mean of warp_nodes
  double gpu_nodes_per_warp() const;    // mean of gpu_warp_nodes

  // Checks the options every workload shares and fills device and depth: a depth outside
  // 0..height, or device gpu on an object made for the cpu (`who` names it), is an error.
  // Depth 0 becomes default_depth capped at the height.
  void begin(const TraversalOptions& opt, Device held, const char* who, int height, int default_depth);
  // keep_schedule: the order the executor ran (null: the input order) and its buckets.
  void keep(const index_t* order, index_t n, std::vector<index_t>&& bucket_offsets);
};

}  // namespace canopy
