// Custom traversals: a caller's own visitor (executor/visitor.hpp) over any topology (a Canopy
// tree's view, a GraphTreeView from layouts/graph_tree.hpp, or the caller's own type with
// is_leaf / child_count / child, a `height` member and kMaxStack) through the same engine,
// inspector, schedulers and executors as Canopy's built-in workloads. This header is the CPU
// path and compiles with a plain C++ compiler; runtime/custom.cuh runs the same on the GPU.
//
//   canopy::TraversalOptions opt;            // schedule, executor, depth: as for every workload
//   canopy::TraversalStats st = canopy::traverse_cpu(tree.view(), my_visitor, n_queries, opt);
//
// The visitor writes its results (finish()) wherever it points; the schedule only reorders.
//
// One run per call. Canopy runs a custom visitor over each query once per call, unless the
// visitor declares itself re-runnable:
//
//   struct MyVisitor {
//     static constexpr bool rerunnable = true;  // finish() writes its results, never adds to them
//     ...
//   };
//
// A re-runnable visitor lets a call run it again on the caller's buffers: Auto's trial (the
// schedule and executor, on a shape's second call; the GPU), depth auto's trial, count_nodes'
// emulator after an independent run, gpu_count_nodes' instrumented kernel after the timed one,
// and measure_overlap. Declare it only when running a query twice leaves the same results
// (finish() assigns). A visitor that accumulates (counts[q] += ..., a histogram, atomics) keeps
// the default, and then:
//   - schedule / executor Auto run the prior pick (the first candidate, auto_candidates) on
//     every call, untried: nothing is remembered and auto_trial_ms stays 0;
//   - depth auto (kAutoDepth) runs depth 0, untried (depth_trial_ms 0);
//   - count_nodes with an independent executor runs the warp emulator as the executor (the same
//     results, single pass; execute_ms is the emulator's);
//   - gpu_count_nodes runs the instrumented lockstep kernel as the call's one execution
//     (execute_ms includes the counting); on a pipelined run, gpu_count_nodes and
//     measure_overlap are a canopy::Error, raised before the visitor runs.
// Side effects belong in finish(): the guided inspector's probe calls descend() and leaf() too.
#pragma once

#include <string>
#include <type_traits>
#include <utility>

#include "runtime/engine.hpp"

namespace canopy {

// A visitor's `static constexpr bool rerunnable` (absent: false, see above).
template <class V, class = void>
struct is_rerunnable : std::false_type {};
template <class V>
struct is_rerunnable<V, std::void_t<decltype(V::rerunnable)>> : std::bool_constant<V::rerunnable> {};
template <class V>
inline constexpr bool is_rerunnable_v = is_rerunnable<V>::value;

// A caller's visitor over a caller's topology, as the engine sees it (runtime/engine.hpp): the
// visitor holds its queries and results, so the engine moves no data, and there is no sort key.
// A custom tree may have any fan-out, so guided rows keep the probe and kDefaultTopTreeDepth.
template <class Topology, class Visitor>
struct CustomWorkload {
  using View = Topology;
  static constexpr bool kGuided = is_guided_v<Visitor>, kBuiltinTree = false, kSortKey = false;
  static constexpr bool kRerunnable = is_rerunnable_v<Visitor>;  // workload_rerunnable
  static const Topology& topology(const Topology& t) { return t; }

  Visitor visitor;
  const char* name;
  int default_depth = kDefaultTopTreeDepth;
  int query_dims = 0;
  std::size_t output_bytes[2] = {0, 0};

  template <class F>
  void with_visitor(const Topology& /*tree*/, const float* /*queries*/, void* const* /*outputs*/, F&& f) const {
    f(visitor);
  }
  template <class F>
  void with_sort_key(const Topology& /*tree*/, const float* /*queries*/, F&& /*f*/) const {}
};

namespace detail {
// A tree left on the device by its GPU build hands out views whose point (octree: body) arrays
// are null until a CPU path asks for them (topology_view()); a CPU walk over such a view would
// read them.
template <class T, class = void>
struct has_point_array : std::false_type {};
template <class T>
struct has_point_array<T, std::void_t<decltype(std::declval<const T&>().points), decltype(std::declval<const T&>().n_points)>>
    : std::true_type {};
template <class T, class = void>
struct has_body_array : std::false_type {};
template <class T>
struct has_body_array<T, std::void_t<decltype(std::declval<const T&>().bodies), decltype(std::declval<const T&>().n_bodies)>>
    : std::true_type {};

template <class Topology>
void require_host_arrays(const Topology& tree, const char* who) {
  bool missing = false;
  if constexpr (has_point_array<Topology>::value) missing = tree.n_points > 0 && tree.points == nullptr;
  if constexpr (has_body_array<Topology>::value) missing = missing || (tree.n_bodies > 0 && tree.bodies == nullptr);
  if (missing)
    throw Error(std::string(who) +
                ": the tree's arrays are not on the host (a topology_view() of a tree built on the GPU); pass "
                "tree.view(), which copies them once");
}
}  // namespace detail

// Runs n_queries traversals of `v` over `tree` on the CPU (TBB threads): inspector + CPU
// scheduler for the hybrid schedules (HybridKey's CPU twin included; auto: the input order),
// then the executor (Independent: one task per query;
// the lockstep kinds: the warp emulator, which also counts nodes per warp). The CPU's Auto has
// one candidate and no trial; depth auto trials only a re-runnable visitor. Errors: a depth
// outside 0..tree.height, schedule LeafSort, device gpu, n_queries < 0.
template <class Topology, class Visitor>
TraversalStats traverse_cpu(const Topology& tree, const Visitor& v, index_t n_queries, const TraversalOptions& opt = {}) {
  if (opt.device == Device::Gpu)
    throw Error("traverse_cpu runs on the CPU; device gpu was requested (use canopy::Traverser from runtime/custom.cuh)");
  detail::require_host_arrays(tree, "traverse_cpu");
  using W = CustomWorkload<Topology, Visitor>;
  const W w{v, "traverse_cpu"};
  EngineState state;
  CallData call;
  call.n = n_queries;
  return run_call(w, tree, Device::Cpu, static_cast<GpuPart<W>*>(nullptr), state, call, opt);
}

}  // namespace canopy
