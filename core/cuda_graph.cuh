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
// two calls with equal keys launch the same work. The keys of recent calls are counted; a key's
// kCaptureAt-th call among them is captured (a graph of what `enqueue(true)` queues) and its
// later calls replay it; the others run `enqueue(false)` directly. A capture costs about 0.1 ms
// and pays for itself only over many replays: a server whose batch sizes vary captures its few
// frequent keys once (a key that leaves the recent set takes its graph with it), where
// capturing on any repeat made captures its slowest calls (about 1% of them, forever). Should a
// capture fail where the direct call then succeeds (the GPU or driver refuses graphs), every
// later call runs directly; an Error of the call's own (a schedule this GPU cannot take) comes
// from the direct call as it would without graphs.
template <class Key>
class GraphReplay {
 public:
  GraphReplay() = default;
  GraphReplay(const GraphReplay&) = delete;
  GraphReplay& operator=(const GraphReplay&) = delete;
  ~GraphReplay() {
    for (auto& k : recent_)
      if (k.exec) cudaGraphExecDestroy(k.exec);
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
    Recent& k = touch(key);
    if (!k.exec && k.calls >= kCaptureAt) {
      k.exec = capture(stream, enqueue);
      if (!k.exec) {
        enqueue(false);
        off_ = true;  // (not reached when the call itself throws)
        return false;
      }
    }
    if (!k.exec) {
      enqueue(false);
      return false;
    }
    CANOPY_CUDA_CHECK(cudaGraphLaunch(k.exec, stream));
    return true;
  }

 private:
  // kRecent keys are counted (most recently called first); a key's kCaptureAt-th call among
  // them captures it. Uniform sizes over more than kRecent keys never capture: none comes back
  // often enough to pay for it.
  static constexpr std::size_t kRecent = 32;
  static constexpr int kCaptureAt = 4;
  struct Recent {
    Key key;
    int calls = 0;
    cudaGraphExec_t exec = nullptr;
  };

  // The key's entry, counted and moved to the front; the least recent key (and its graph)
  // leaves when a new one comes.
  Recent& touch(const Key& key) {
    auto it = std::find_if(recent_.begin(), recent_.end(), [&](const Recent& r) { return r.key == key; });
    if (it == recent_.end()) {
      if (recent_.size() == kRecent) {
        if (recent_.back().exec) cudaGraphExecDestroy(recent_.back().exec);
        recent_.pop_back();
      }
      recent_.push_front(Recent{key, 0, nullptr});
      it = recent_.begin();
    } else if (it != recent_.begin()) {
      std::rotate(recent_.begin(), it, it + 1);
      it = recent_.begin();
    }
    ++it->calls;
    return *it;
  }

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

  std::deque<Recent> recent_;
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
