// Custom visitors that count the leaves a point reaches in an interval tree (tests/interval_tree.hpp):
// one adds to the caller's buffers (counts[q] += ..., and a histogram of the counts by atomics),
// so a second run of a query in one call shows; the other writes and says it may be rerun.
// Compiled by g++ (CPU tests) and nvcc (the GPU entry points, tests/custom_auto_gpu.cu).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "executor/visitor.hpp"
#include "layouts/graph_tree.hpp"
#include "runtime/options.hpp"
#include "tests/interval_tree.hpp"

namespace canopy {
namespace test {

constexpr int kCountBins = 8;  // histogram of leaves reached per query; the last bin takes the rest

struct LeafCountBase {
  const Interval* iv = nullptr;
  const float* xs = nullptr;
  std::int32_t* counts = nullptr;  // [queries]
  std::uint32_t* hist = nullptr;   // [kCountBins], or null

  struct State {
    float x;
    std::int32_t count;
  };
  CANOPY_HD State init(index_t q) const { return {xs[q], 0}; }
  CANOPY_HD bool descend(State& s, node_id n) const { return iv[n].lo <= s.x && s.x <= iv[n].hi; }
  CANOPY_HD void leaf(State& s, node_id) const { ++s.count; }
  CANOPY_HD void add_to_hist(std::int32_t count) const {
    if (!hist) return;
    std::uint32_t* bin = hist + (count < kCountBins - 1 ? count : kCountBins - 1);
#ifdef __CUDA_ARCH__
    atomicAdd(bin, 1u);
#else
    __atomic_fetch_add(bin, 1u, __ATOMIC_RELAXED);
#endif
  }
};

// Adds to the caller's buffers: not re-runnable (the default).
struct AddingCounter : LeafCountBase {
  CANOPY_HD void finish(State& s, index_t q) const {
    counts[q] += s.count;
    add_to_hist(s.count);
  }
};

// Writes its result: a second run leaves the same, so it says so.
struct WritingCounter : LeafCountBase {
  static constexpr bool rerunnable = true;
  CANOPY_HD void finish(State& s, index_t q) const { counts[q] = s.count; }
};

// One call's results copied back to the host (counts and histogram as they stand after it).
struct CountRun {
  std::vector<std::int32_t> counts;
  std::vector<std::uint32_t> hist;
  TraversalStats stats;
};

// The counters on the GPU through one Traverser whose device buffers persist from call to call,
// so an adding visitor's totals grow call by call as they would in a caller's program.
class CountGpu {
 public:
  CountGpu(const GraphTree<Interval>& tree, const std::vector<float>& xs);
  ~CountGpu();
  void reset(std::int32_t count_fill);  // counts to count_fill (0 or -1), the histogram to 0
  CountRun run(bool writing, const TraversalOptions& opt);  // one call, then read()
  CountRun read();                                          // the buffers as they stand

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace test
}  // namespace canopy
