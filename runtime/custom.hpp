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
#pragma once

#include "runtime/engine.hpp"

namespace canopy {

// A caller's visitor over a caller's topology, as the engine sees it (runtime/engine.hpp): the
// visitor holds its queries and results, so the engine moves no data, and there is no sort key.
// A custom tree may have any fan-out, so guided rows keep the probe and kDefaultTopTreeDepth.
template <class Topology, class Visitor>
struct CustomWorkload {
  using View = Topology;
  static constexpr bool kGuided = is_guided_v<Visitor>, kBuiltinTree = false, kSortKey = false;
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

// Runs n_queries traversals of `v` over `tree` on the CPU (TBB threads): inspector + CPU
// scheduler for the hybrid schedules (HybridKey's CPU twin included; auto: the input order),
// then the executor (Independent: one task per query;
// the lockstep kinds: the warp emulator, which also counts nodes per warp). Errors: a depth
// outside 0..tree.height, schedule LeafSort, device gpu, n_queries < 0.
template <class Topology, class Visitor>
TraversalStats traverse_cpu(const Topology& tree, const Visitor& v, index_t n_queries, const TraversalOptions& opt = {}) {
  if (opt.device == Device::Gpu)
    throw Error("traverse_cpu runs on the CPU; device gpu was requested (use canopy::Traverser from runtime/custom.cuh)");
  using W = CustomWorkload<Topology, Visitor>;
  const W w{v, "traverse_cpu"};
  EngineState state;
  CallData call;
  call.n = n_queries;
  return run_call(w, tree, Device::Cpu, static_cast<GpuPart<W>*>(nullptr), state, call, opt);
}

}  // namespace canopy
