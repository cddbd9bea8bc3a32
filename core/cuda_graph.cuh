// Replaying a call's launches as a CUDA graph when the same call comes again. A small call (a
// batch of 100 rows) is a few microseconds of GPU work, and the host's time between the call's
// first event and its launch lands inside it: a graph submits the event records and the
// kernel in one go, so the GPU runs them back to back, and the host makes one call instead of
// three. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <utility>

#include "core/cuda.cuh"

namespace canopy {

// `Key` says everything a call's launches depend on (its kernel, schedule, pointers, sizes):
// two calls with equal keys launch the same work. A call whose key equals the previous call's
// is captured (a graph of what `enqueue(true)` queues) and replayed from then on (the last few
// graphs are kept); the others run `enqueue(false)` directly. Only a repeat of the previous
// call: a server whose batch sizes vary would otherwise capture (about 0.1 ms each) keys that
// come back too rarely to pay for it, and its slowest calls would be those captures. Should a capture fail where the direct call then succeeds (the GPU
// or driver refuses graphs), every later call runs directly; an Error of the call's own (a
// schedule this GPU cannot take) comes from the direct call as it would without graphs.
template <class Key>
class GraphReplay {
 public:
  GraphReplay() = default;
  GraphReplay(const GraphReplay&) = delete;
  GraphReplay& operator=(const GraphReplay&) = delete;
  ~GraphReplay() {
    for (auto& g : graphs_) cudaGraphExecDestroy(g.second);
  }

  // Queues the call on `stream`: replayed, captured then replayed, or `enqueue(false)`.
  // enqueue(true) is being captured: its event records must say so (record_in_graph).
  // Returns whether a graph ran.
  template <class Enqueue>
  bool run(const Key& key, cudaStream_t stream, Enqueue&& enqueue) {
    if (off_) {
      enqueue(false);
      return false;
    }
    const bool repeat = std::find(seen_.begin(), seen_.end(), key) != seen_.end();
    if (!repeat) {
      seen_.push_front(key);
      if (seen_.size() > kSeen) seen_.pop_back();
    }
    for (std::size_t i = 0; i < graphs_.size(); ++i)
      if (graphs_[i].first == key) {
        std::rotate(graphs_.begin(), graphs_.begin() + i, graphs_.begin() + i + 1);  // most recent first
        CANOPY_CUDA_CHECK(cudaGraphLaunch(graphs_.front().second, stream));
        return true;
      }
    if (!repeat) {
      enqueue(false);
      return false;
    }
    cudaGraphExec_t exec = capture(stream, enqueue);
    if (!exec) {
      enqueue(false);
      off_ = true;  // (not reached when the call itself throws)
      return false;
    }
    if (graphs_.size() == kGraphs) {
      cudaGraphExecDestroy(graphs_.back().second);
      graphs_.pop_back();
    }
    graphs_.emplace_front(key, exec);
    CANOPY_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    return true;
  }

 private:
  static constexpr std::size_t kGraphs = 4, kSeen = 1;

  // The graph of what enqueue(true) queues, instantiated; null where anything fails (nothing
  // captured has run, and the capture is over).
  template <class Enqueue>
  cudaGraphExec_t capture(cudaStream_t stream, Enqueue& enqueue) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    bool queued = true;
    try {
      enqueue(true);
    } catch (...) {
      queued = false;
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    const bool ended = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
    if (!queued || !ended || !graph || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = nullptr;
    if (graph) cudaGraphDestroy(graph);
    if (!exec) cudaGetLastError();  // a refused capture leaves its error behind
    return exec;
  }

  std::deque<std::pair<Key, cudaGraphExec_t>> graphs_;  // most recently used first
  std::deque<Key> seen_;                                // the previous calls' keys, newest first
  bool off_ = false;
};

// Records `e` on `s`; inside a capture, as a node of the graph (an event the graph records
// each time it runs, so that the call's phase times read the same).
inline void record_in_graph(Event& e, cudaStream_t s, bool in_graph) {
  if (in_graph)
    CANOPY_CUDA_CHECK(cudaEventRecordWithFlags(e.get(), s, cudaEventRecordExternal));
  else
    e.record(s);
}

}  // namespace canopy
