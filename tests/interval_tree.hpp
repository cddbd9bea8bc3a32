// A test workload on user trees: random n-ary trees whose nodes hold 1-d intervals; a query
// point visits a node when the node's interval holds it, and sums the leaves it reaches. The
// guided flavour visits first the child whose interval's centre is nearest the point (the
// result does not depend on the order). Compiled by g++ (CPU tests) and nvcc (GPU entry points).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <memory>
#include <vector>

#include "executor/visitor.hpp"
#include "layouts/graph_tree.hpp"
#include "runtime/options.hpp"

namespace canopy {
namespace test {

struct Interval {
  float lo, hi;
};

template <bool Guided>
struct IntervalVisitor {
  static constexpr bool kGuided = Guided;
  GraphTreeView tree;
  const Interval* iv = nullptr;
  const float* xs = nullptr;
  std::int64_t* sums = nullptr;  // [queries]: Σ over reached leaves of (node + 1)^2
  std::int32_t* counts = nullptr;

  struct State {
    float x;
    std::int32_t count;
    std::int64_t sum;
  };
  CANOPY_HD State init(index_t q) const { return {xs[q], 0, 0}; }
  CANOPY_HD bool descend(State& s, node_id n) const { return iv[n].lo <= s.x && s.x <= iv[n].hi; }
  CANOPY_HD void leaf(State& s, node_id n) const {
    ++s.count;
    s.sum += static_cast<std::int64_t>(n + 1) * (n + 1);
  }
  CANOPY_HD int first_child(const State& s, node_id n) const {
    int best = 0;
    float best_d = 3.0e38f;
    for (int i = 0; i < tree.child_count(n); ++i) {
      const Interval c = iv[tree.child(n, i)];
      const float d = fabsf(0.5f * (c.lo + c.hi) - s.x);
      if (d < best_d) {
        best_d = d;
        best = i;
      }
    }
    return best;
  }
  CANOPY_HD void finish(State& s, index_t q) const {
    counts[q] = s.count;
    sums[q] = s.sum;
  }
};

// A random tree of about `nodes` vertices, numbered in a shuffled order (so flattening has to
// renumber), with up to max_children children per node; child intervals are random
// sub-intervals of their parent's, so queries prune at every level. children[v], payload[v].
struct RandomTree {
  std::vector<std::vector<index_t>> children;
  std::vector<Interval> payload;
};
inline RandomTree random_interval_tree(index_t nodes, int max_children, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<index_t> label(static_cast<std::size_t>(nodes));
  for (index_t i = 0; i < nodes; ++i) label[i] = i;
  std::shuffle(label.begin(), label.end(), rng);
  RandomTree t;
  t.children.resize(static_cast<std::size_t>(nodes));
  t.payload.resize(static_cast<std::size_t>(nodes));
  t.payload[label[0]] = {0.0f, 1.0f};
  // Breadth-first growth: each created vertex in turn takes 1..max_children children.
  index_t next = 1;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (index_t i = 0; i < nodes && next < nodes; ++i) {
    const int c = std::min<index_t>(1 + static_cast<int>(rng() % max_children), nodes - next);
    const Interval p = t.payload[label[i]];
    for (int j = 0; j < c; ++j) {
      const float a = p.lo + (p.hi - p.lo) * u(rng), b = p.lo + (p.hi - p.lo) * u(rng);
      t.payload[label[next]] = {std::min(a, b) - 0.05f, std::max(a, b) + 0.05f};
      t.children[label[i]].push_back(label[next]);
      ++next;
    }
  }
  return t;
}

inline GraphTree<Interval> build_interval_tree(const RandomTree& t) {
  return GraphTree<Interval>::from_children(t.children, [&](index_t v) { return t.payload[v]; });
}

// GPU entry point: runs the visitor (TracingVisitor-wrapped, capacity visits per query) through
// canopy::Traverser with `opt`.
struct IntervalRun {
  std::vector<std::int32_t> counts;
  std::vector<std::int64_t> sums;
  std::vector<node_id> trace;
  std::vector<std::int32_t> lengths;
  std::vector<index_t> order;           // keep_schedule
  std::vector<index_t> gpu_warp_nodes;  // gpu_count_nodes
};
// The interval visitors on the GPU (tests/interval_gpu.cu) through one Traverser, device tree and
// set of buffers kept from call to call, as a program would keep them.
class IntervalGpu {
 public:
  explicit IntervalGpu(const GraphTree<Interval>& tree);
  ~IntervalGpu();
  IntervalRun run(const std::vector<float>& xs, bool guided, const TraversalOptions& opt, int capacity);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

IntervalRun run_interval_gpu(const GraphTree<Interval>& tree, const std::vector<float>& xs, bool guided,
                             const TraversalOptions& opt, int capacity);

}  // namespace test
}  // namespace canopy
