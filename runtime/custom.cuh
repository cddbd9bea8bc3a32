// Custom traversals on the GPU: the caller's visitor and topology, compiled by nvcc in the
// caller's own .cu file, through Canopy's GPU inspector, schedulers and executors (the CPU
// path is runtime/custom.hpp). Include from .cu files only.
//
//   canopy::Traverser t;                                  // threads may share it (calls take turns)
//   canopy::DeviceGraphTree<Cell> dtree(tree, t.stream()); // a GraphTree's copy on the GPU
//   MyVisitor v{dtree.payload(), device_queries, device_results};
//   canopy::TraversalStats st = t.run(tree.view(), dtree.view(), v, n_queries, opt);
//   // first the HOST view (the top-tree is cut on the host), then the device view
//   // results are in device_results; every kernel ran on t.stream(), which run() has synced
#pragma once

#include <algorithm>
#include <mutex>
#include <type_traits>

#include "core/cuda.cuh"
#include "core/device.hpp"
#include "layouts/graph_tree.hpp"
#include "runtime/custom.hpp"
#include "runtime/engine.cuh"

namespace canopy {

// A GraphTree's shape and payloads in device memory, copied on `stream` (synchronised before
// the constructor returns; freed on it, so it must outlive this object). Payload must be
// trivially copyable.
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
// to run. Several host threads may call one Traverser at once: its calls take turns on its lock
// (Traversers of their own run side by side).
class Traverser {
 public:
  Traverser() {
    if (!gpu_available()) throw Error("canopy::Traverser needs a CUDA device: " + gpu_description());
  }
  cudaStream_t stream() const { return g_.stream.get(); }

  // host_tree: the topology with host pointers (the top-tree is cut on the host);
  // device_tree: the same tree with device pointers; v: the visitor with device pointers.
  // Every schedule but LeafSort (a custom traversal has no sort key), the pipeline, depth auto
  // and the caller's stream (opt.stream) work as for the built-in workloads, with one rule
  // (runtime/custom.hpp, "One run per call"): the visitor runs once per query per call unless
  // it declares `static constexpr bool rerunnable = true;`. Without it, Auto runs its prior
  // untried (with both Auto: HybridKey under FSM lockstep; independent threads for a guided
  // visitor), depth auto runs depth 0, gpu_count_nodes counts in the one lockstep run, and
  // gpu_count_nodes or measure_overlap on a pipelined run is an Error. With it, Auto's trial
  // reruns the visitor on the caller's buffers, as the instrumented rerun does: finish() must
  // write, not accumulate.
  // count_nodes (the CPU emulator) needs the host visitor: run traverse_cpu for it.
  template <class Topology, class Visitor>
  TraversalStats run(const Topology& host_tree, const Topology& device_tree, const Visitor& v, index_t n_queries,
                     const TraversalOptions& opt = {}) {
    if (opt.count_nodes)
      throw Error("Traverser::run: count_nodes runs the CPU warp emulator, which needs host pointers; use "
                  "traverse_cpu for it, or gpu_count_nodes");
    if (opt.device == Device::Cpu)
      throw Error("Traverser::run: device cpu was requested; the visitor holds device pointers (use traverse_cpu)");
    using W = CustomWorkload<Topology, Visitor>;
    const W w{v, "Traverser::run"};
    const std::lock_guard<std::mutex> lock(mutex_);
    // Each call may pass another tree (or the same memory rebuilt): nothing cut from the last
    // one is kept.
    g_.forget_top_tree();
    state_.top_leaves.clear();
    Part<W> part(g_, device_tree);
    CallData call;
    call.n = n_queries;
    return run_call(w, host_tree, Device::Gpu, &part, state_, call, opt);
  }

 private:
  // The call's GPU side over the caller's device tree. The caller's data sizes are not known
  // here: a memory budget bounds the scheduling matrix alone.
  template <class W>
  class Part final : public GpuPart<W> {
   public:
    Part(GpuResources& g, const typename W::View& device) : g_(g), device_(device) {}
    std::size_t tree_bytes() const override { return 0; }
    stream_t stream() const override { return g_.stream.get(); }
    void run(const W& w, const typename W::View& host, const CallData& call, const TraversalOptions& opt,
             TraversalStats& st) override {
      {
        // Its destructor, at the end of this block or on an error, makes the caller's stream wait.
        const CallerStream caller(g_.stream.get(), opt.stream, g_.caller_ready, g_.done);
        run_on_gpu(g_, w, host, device_, call, opt, DeviceFootprint{}, st);
      }
      g_.stream.sync();
    }

   private:
    GpuResources& g_;
    const typename W::View& device_;
  };

  GpuResources g_;
  EngineState state_;
  std::mutex mutex_;  // one run() at a time: g_ and state_ are its one set
};

}  // namespace canopy
