// Custom traversals: a caller's own visitor (executor/visitor.hpp) over any topology (a Canopy
// tree's view, a GraphTreeView from layouts/graph_tree.hpp, or the caller's own type with
// is_leaf / child_count / child, a `height` member and kMaxStack) through the same inspector,
// schedulers and executors as Canopy's built-in workloads. This header is the CPU path and
// compiles with a plain C++ compiler; runtime/custom.cuh runs the same on the GPU.
//
//   canopy::TraversalOptions opt;            // schedule, executor, depth: as for every workload
//   canopy::TraversalStats st = canopy::traverse_cpu(tree.view(), my_visitor, n_queries, opt);
//
// The visitor writes its results (finish()) wherever it points; the schedule only reorders.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "executor/cpu_executor.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/options.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace detail {

// A custom traversal has no workload-specific sort key, so the leaf sort is not offered.
inline void check_custom_options(const TraversalOptions& opt, index_t n_queries, const char* who) {
  if (n_queries < 0) throw Error(std::string(who) + ": n_queries = " + std::to_string(n_queries) + " is negative");
  if (opt.schedule == ScheduleKind::LeafSort)
    throw Error(std::string(who) +
                ": schedule leaf-sort needs a workload's own sort key; a custom traversal takes input-order, hybrid "
                "or hybrid-device");
}

// The CPU inspector and scheduler for Hybrid: the sandpile for an unguided visitor, the
// recursive buckets for a guided one. Writes the order into `order`.
template <class Topology, class Visitor>
void schedule_custom_cpu(const Topology& tree, const Visitor& v, index_t n, int depth, GuidedRows rows,
                         std::vector<index_t>& order, std::vector<index_t>* buckets, PhaseTimes& times) {
  auto t0 = std::chrono::steady_clock::now();
  const TopTree top = TopTree::build(tree, depth);
  order.resize(static_cast<std::size_t>(n));
  if constexpr (is_guided_v<Visitor>) {
    const GuidedMatrix matrix = inspect_cpu_guided(tree, top.view(), v, n, rows);
    times.inspect_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    guided_schedule(matrix.view(), top.parents().data(), order.data(), buckets);
  } else {
    const SchedulingMatrix matrix = inspect_cpu(tree, top.view(), v, n);
    times.inspect_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    SandpileScheduler().run(matrix.view(), order.data(), buckets);
  }
  times.schedule_ms = ms_since(t0);
}

}  // namespace detail

// Runs n_queries traversals of `v` over `tree` on the CPU (TBB threads): inspector + CPU
// scheduler for Hybrid/HybridDevice, then the executor (Independent: one task per query;
// the lockstep kinds: the warp emulator, which also counts nodes per warp). Errors: a depth
// outside 0..tree.height, schedule LeafSort, device gpu, n_queries < 0.
template <class Topology, class Visitor>
TraversalStats traverse_cpu(const Topology& tree, const Visitor& v, index_t n_queries, const TraversalOptions& opt = {}) {
  detail::check_custom_options(opt, n_queries, "traverse_cpu");
  TraversalStats res;
  res.begin(opt, Device::Cpu, "traverse_cpu call (use canopy::Traverser from runtime/custom.cuh)", tree.height,
            kDefaultTopTreeDepth,
            is_guided_v<Visitor> ? TraversalStats::Guided::CustomTree : TraversalStats::Guided::No);
  std::vector<index_t> order, buckets;
  const bool scheduled = opt.schedule != ScheduleKind::InputOrder && n_queries > 0;
  if (scheduled)
    detail::schedule_custom_cpu(tree, v, n_queries, res.depth, res.rows, order,
                                opt.keep_schedule ? &buckets : nullptr, res.times);
  const index_t* ord = scheduled ? order.data() : nullptr;
  if (opt.keep_schedule) res.keep(ord, n_queries, std::move(buckets));
  const auto t0 = std::chrono::steady_clock::now();
  if (opt.executor == ExecutorKind::Independent) {
    execute_cpu(tree, v, ord, n_queries);
    res.times.execute_ms = ms_since(t0);
    if (opt.count_nodes) res.warp_nodes = emulate_lockstep(tree, v, ord, n_queries, LockstepMode::Fsm);
  } else {
    res.warp_nodes = emulate_lockstep(tree, v, ord, n_queries, lockstep_mode(opt.executor));
    res.times.execute_ms = ms_since(t0);
    if (!opt.count_nodes) res.warp_nodes.clear();
  }
  return res;
}

}  // namespace canopy
