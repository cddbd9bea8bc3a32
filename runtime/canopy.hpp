// Canopy's public API for point correlation: build a kd-tree once, then count, for batches of
// queries, the tree points within a radius, on the GPU (inspector -> sandpile scheduler ->
// lockstep executor) or on the CPU. Compiles with a plain C++ compiler.
//
//   canopy::KdTree tree = canopy::KdTree::build(points, n, dims);
//   canopy::PointCorrelation pc(tree);             // uploads the tree when a GPU is used
//   canopy::PcOptions opt;
//   opt.radius = 0.05f;
//   canopy::PcResult r = pc.run(queries, m, opt);  // r.counts[i] belongs to query i
#pragma once

#include <memory>
#include <vector>

#include "executor/executor.hpp"
#include "layouts/kdtree.hpp"
#include "runtime/common.hpp"
#include "runtime/device.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

enum class ScheduleKind {
  InputOrder,  // run the queries as given
  Hybrid,      // inspector over the top-tree + sandpile partition-join (automatic), the
               // sandpile on the CPU (the paper's design: the matrix crosses to the host)
  HybridDevice,  // the same schedule, bit for bit, with the sandpile on the GPU next to the
                 // matrix (on the CPU device: the same as Hybrid)
  LeafSort,    // sort by the kd-tree leaf each query falls in (the hand-tuned baseline)
};
const char* to_string(ScheduleKind k);

// Top-tree depth used when PcOptions::depth is 0 (capped at the tree's height).
constexpr int kDefaultTopTreeDepth = 8;

struct PcOptions {
  float radius = 0.0f;  // finite and >= 0; a point at exactly this distance counts
  Device device = Device::Auto;
  ExecutorKind executor = ExecutorKind::FsmLockstep;
  ScheduleKind schedule = ScheduleKind::HybridDevice;
  int depth = 0;             // top-tree depth for Hybrid: 1..tree height, 0 = default
  bool count_nodes = false;  // also run the CPU warp emulator on the same schedule
  bool gpu_count_nodes = false;  // GPU lockstep: instrumented kernel's per-warp node counts
  bool keep_schedule = false;    // copy the schedule the executor ran into the result
};

struct PhaseTimes {
  double inspect_ms = 0;   // GPU: inspector kernel + matrix copy to pinned host memory
  double schedule_ms = 0;  // CPU sandpile + order upload, or the leaf sort
  double execute_ms = 0;   // the executor alone
  double total_ms() const { return inspect_ms + schedule_ms + execute_ms; }
};

struct PcResult {
  std::vector<index_t> counts;  // counts[i]: tree points within the radius of query i
  PhaseTimes times;
  Device device = Device::Cpu;  // where it ran
  int depth = 0;                // top-tree depth used (Hybrid)
  Schedule schedule;            // keep_schedule: the order the executor ran the queries in
  std::vector<index_t> warp_nodes;      // count_nodes: nodes visited per lockstep warp (emulator)
  std::vector<index_t> gpu_warp_nodes;  // gpu_count_nodes: the same, counted on the GPU
  double nodes_per_warp() const;        // mean of warp_nodes
};

namespace detail {
class PcGpuEngine;
}

// Holds a tree (which must outlive it) and, on the GPU, the tree's device copy and reusable
// buffers. Not thread-safe: use one object per thread.
class PointCorrelation {
 public:
  explicit PointCorrelation(const KdTree& tree, Device device = Device::Auto);
  ~PointCorrelation();
  PointCorrelation(const PointCorrelation&) = delete;
  PointCorrelation& operator=(const PointCorrelation&) = delete;

  // The device runs use unless options.device says cpu.
  Device device() const { return device_; }
  const KdTree& tree() const { return tree_; }

  // queries: row-major [n_queries][tree.dims()]. Errors (canopy::Error): negative or
  // non-finite radius, a NaN/infinite query coordinate, a depth outside 1..height, device gpu
  // on a machine without one. Zero queries give an empty result.
  PcResult run(const float* queries, index_t n_queries, const PcOptions& options);

 private:
  struct Run;
  void schedule_on_cpu(Run& r);
  void schedule_on_gpu(Run& r);
  void execute(Run& r);

  const KdTree& tree_;
  Device device_;
  std::unique_ptr<detail::PcGpuEngine> gpu_;
  // Kept from run to run so scheduling touches no fresh memory.
  SandpileScheduler sandpile_;
  std::vector<index_t> order_;
};

// Picks r so that the mean count over a seeded sample of the queries is about target_mean
// (counting the query itself when it is a tree point): exponential search, then bisection.
float estimate_radius(const KdTree& tree, const float* queries, index_t n_queries, double target_mean,
                      std::uint64_t seed = 1, index_t sample = 2048);

}  // namespace canopy
