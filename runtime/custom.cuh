// Custom traversals on the GPU: the caller's visitor and topology, compiled by nvcc in the
// caller's own .cu file, through Canopy's GPU inspector, schedulers and executors (the CPU
// path is runtime/custom.hpp). Include from .cu files only.
//
//   canopy::Traverser t;                                  // one per host thread
//   canopy::DeviceGraphTree<Cell> dtree(tree, t.stream()); // a GraphTree's copy on the GPU
//   MyVisitor v{dtree.payload(), device_queries, device_results};
//   canopy::TraversalStats st = t.run(tree.view(), dtree.view(), v, n_queries, opt);
//   // first the HOST view (the top-tree is cut on the host), then the device view
//   // results are in device_results; every kernel ran on t.stream(), which run() has synced
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "layouts/graph_tree.hpp"
#include "runtime/custom.hpp"
#include "core/device.hpp"
#include "runtime/traversal_gpu.cuh"

namespace canopy {

// A GraphTree's shape and payloads in device memory, copied on `stream` (synchronised before
// the constructor returns). Payload must be trivially copyable.
template <class Payload>
class DeviceGraphTree {
 public:
  explicit DeviceGraphTree(const GraphTree<Payload>& tree, cudaStream_t stream) {
    static_assert(std::is_trivially_copyable<Payload>::value, "a GPU payload must be trivially copyable");
    const GraphTreeShape& s = tree.shape();
    begin_.reserve(s.child_begin.size(), "the graph tree's child offsets", stream);
    children_.reserve(std::max<std::size_t>(s.children.size(), 1), "the graph tree's child lists", stream);
    payload_.reserve(tree.payload().size(), "the graph tree's node payloads", stream);
    copy_to_device(begin_.get(), s.child_begin.data(), s.child_begin.size(), stream);
    copy_to_device(children_.get(), s.children.data(), s.children.size(), stream);
    copy_to_device(payload_.get(), tree.payload().data(), tree.payload().size(), stream);
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(stream));
    view_ = tree.view();
    view_.child_begin = begin_.get();
    view_.children = children_.get();
  }
  GraphTreeView view() const { return view_; }
  const Payload* payload() const { return payload_.get(); }

 private:
  DeviceBuffer<node_id> begin_, children_;
  DeviceBuffer<Payload> payload_;
  GraphTreeView view_;
};

// Runs custom traversals on the GPU, on its own non-blocking stream with buffers kept from run
// to run. Not thread-safe: one Traverser per host thread (several may run at once).
class Traverser {
 public:
  Traverser() {
    if (!gpu_available()) throw Error("canopy::Traverser needs a CUDA device: " + gpu_description());
  }
  cudaStream_t stream() const { return g_.stream(); }

  // host_tree: the topology with host pointers (the top-tree is cut on the host);
  // device_tree: the same tree with device pointers; v: the visitor with device pointers.
  // Hybrid: GPU inspector, matrix to pinned host memory, CPU scheduler, order to the GPU.
  // HybridDevice: the same schedule computed on the GPU (guided visitors: where the top-tree
  // has at most two leaves per parent, else the CPU's). Then the executor kernel; with
  // gpu_count_nodes, the instrumented lockstep kernel runs once more (so finish() must be
  // idempotent: write results, do not accumulate). count_nodes (the CPU emulator) needs the
  // host visitor: run traverse_cpu for it.
  template <class Topology, class Visitor>
  TraversalStats run(const Topology& host_tree, const Topology& device_tree, const Visitor& v, index_t n_queries,
                     const TraversalOptions& opt = {}) {
    detail::check_custom_options(opt, n_queries, "Traverser::run");
    if (opt.count_nodes)
      throw Error("Traverser::run: count_nodes runs the CPU warp emulator, which needs host pointers; use "
                  "traverse_cpu for it, or gpu_count_nodes");
    TraversalStats res;
    res.begin(opt, Device::Gpu, "Traverser", host_tree.height, kDefaultTopTreeDepth,
              is_guided_v<Visitor> ? TraversalStats::Guided::CustomTree : TraversalStats::Guided::No);
    if (res.device == Device::Cpu)
      throw Error("Traverser::run: device cpu was requested; the visitor holds device pointers (use traverse_cpu)");
    g_.set_query_count(n_queries);
    if (n_queries == 0) {
      if (opt.keep_schedule) res.schedule = input_order(0);
      return res;
    }
    const index_t* order = nullptr;  // host copy of the order, when one exists
    std::vector<index_t> buckets;
    const bool reordered = opt.schedule != ScheduleKind::InputOrder;
    if (reordered) {
      // The caller's data sizes are not known here: a budget bounds the matrix alone.
      const TopTree top = TopTree::build(host_tree, res.depth);
      index_t* kept = nullptr;
      if (pipeline_if_planned(
              opt, n_queries, 0, 0,
              pipeline_bytes_per_query(is_guided_v<Visitor>,
                                       is_guided_v<Visitor> ? res.rows.width(top.size()) : top.size()),
              res, [&](const std::vector<index_t>& chunks) { return g_.pipelined(device_tree, top, v, opt, chunks, res.rows); },
              [&] { return g_.download_order(); }, order_, kept, buckets)) {
        if (opt.measure_overlap) res.pipeline.execute_only_ms = g_.execute(opt.executor, device_tree, v, true, nullptr);
        if (opt.keep_schedule) res.keep(kept, n_queries, std::move(buckets));
        if (opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent)
          g_.execute(opt.executor, device_tree, v, true, &res.gpu_warp_nodes);
        return res;
      }
      order = schedule(top, device_tree, v, opt, res, buckets);
    }
    if (opt.keep_schedule) res.keep(order, n_queries, std::move(buckets));
    res.times.execute_ms = g_.execute(opt.executor, device_tree, v, reordered, nullptr);
    if (opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent)
      g_.execute(opt.executor, device_tree, v, reordered, &res.gpu_warp_nodes);
    return res;
  }

 private:
  template <class Topology, class Visitor>
  const index_t* schedule(const TopTree& top, const Topology& device_tree, const Visitor& v,
                          const TraversalOptions& opt, TraversalStats& res, std::vector<index_t>& buckets) {
    const index_t n = g_.queries();
    std::vector<index_t>* want_buckets = opt.keep_schedule ? &buckets : nullptr;
    bool on_device = opt.schedule == ScheduleKind::HybridDevice;
    if constexpr (is_guided_v<Visitor>)
      on_device = on_device && DeviceGuidedScheduler::supports(top.parents().data(), top.size(), n);
    if (on_device) {
      if constexpr (is_guided_v<Visitor>) {
        res.times.inspect_ms = g_.inspect_guided_on_device(device_tree, top, v, res.rows);
        res.times.schedule_ms = g_.device_guided_schedule(top);
      } else {
        res.times.inspect_ms = g_.inspect_bits(device_tree, top, v);
        res.times.schedule_ms = g_.device_sandpile();
      }
      // The order stays on the device; fetch it only when asked, outside the timed regions.
      if (!opt.keep_schedule) return nullptr;
      order_ = g_.download_order();
      if constexpr (is_guided_v<Visitor>) {
        buckets = g_.device_guided_buckets();
      } else {
        const SchedulingMatrixView m = g_.download_bits();
        buckets = bucket_boundaries(n, [&](index_t i) { return highest_column(m, order_[i]); });
      }
      return order_.data();
    }
    index_t* staging = nullptr;
    std::chrono::steady_clock::time_point t0;
    if constexpr (is_guided_v<Visitor>) {
      const GuidedMatrixView m = g_.inspect_guided_to_host(device_tree, top, v, res.rows, &res.times.inspect_ms);
      t0 = std::chrono::steady_clock::now();
      staging = g_.order_staging();  // the scheduler writes straight into pinned memory
      guided_schedule(m, top.parents().data(), staging, want_buckets);
    } else {
      const SchedulingMatrixView m = g_.inspect_bits_to_host(device_tree, top, v, &res.times.inspect_ms);
      t0 = std::chrono::steady_clock::now();
      staging = g_.order_staging();
      sandpile_.run(m, staging, want_buckets);
    }
    g_.upload_order();
    res.times.schedule_ms = ms_since(t0);
    return staging;
  }

  detail::GpuTraversal g_;
  SandpileScheduler sandpile_;
  std::vector<index_t> order_;
};

}  // namespace canopy
