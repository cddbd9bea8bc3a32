// Issue 35: Auto and the node counters never run a caller's visitor more than once per query in
// a call unless it declares itself re-runnable (runtime/custom.hpp, "One run per call"). An
// adding visitor (counts[q] += ..., a histogram by atomics) run k times must hold k times one
// call's results, and one call's results must equal a fixed schedule's and a brute force's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/custom.hpp"
#include "tests/custom_auto.hpp"
#include "tests/require_gpu.hpp"

namespace canopy {
namespace {

using test::AddingCounter;
using test::Interval;
using test::kCountBins;
using test::WritingCounter;

static_assert(!is_rerunnable_v<AddingCounter>, "a visitor is not re-runnable unless it says so");
static_assert(is_rerunnable_v<WritingCounter>);
static_assert(!workload_rerunnable_v<CustomWorkload<GraphTreeView, AddingCounter>>);
static_assert(workload_rerunnable_v<CustomWorkload<GraphTreeView, WritingCounter>>);

struct Counts {
  std::vector<std::int32_t> counts;
  std::vector<std::uint32_t> hist;
};

// Brute force, independent of any traversal: a leaf is reached when its interval and every
// ancestor's hold the point (a child's interval may stick out of its parent's).
Counts brute_force(const GraphTree<Interval>& t, const std::vector<float>& xs) {
  const GraphTreeView v = t.view();
  const std::vector<Interval>& iv = t.payload();
  std::vector<node_id> parent(static_cast<std::size_t>(v.n_nodes), -1);
  for (node_id n = 0; n < v.n_nodes; ++n)
    for (int i = 0; i < v.child_count(n); ++i) parent[v.child(n, i)] = n;
  Counts r;
  r.hist.assign(kCountBins, 0);
  for (float x : xs) {
    std::int32_t c = 0;
    for (node_id l = 0; l < v.n_nodes; ++l) {
      if (!v.is_leaf(l)) continue;
      bool in = true;
      for (node_id a = l; a >= 0 && in; a = parent[a]) in = iv[a].lo <= x && x <= iv[a].hi;
      c += in;
    }
    r.counts.push_back(c);
    ++r.hist[std::min(c, kCountBins - 1)];
  }
  return r;
}

std::vector<float> points(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 1.05f);
  std::vector<float> xs(n);
  for (float& x : xs) x = u(rng);
  return xs;
}

template <class T>
std::vector<T> times(const std::vector<T>& a, int k) {
  std::vector<T> out(a);
  for (T& x : out) x *= static_cast<T>(k);
  return out;
}

struct Fixture {
  GraphTree<Interval> tree = test::build_interval_tree(test::random_interval_tree(5000, 4, 35));
  std::vector<float> xs = points(3000, 36);
  Counts ref = brute_force(tree, xs);
};
const Fixture& fixture() {
  static const Fixture f;
  return f;
}

// The CPU run of an adding or writing counter into `c` (host buffers, kept by the caller).
template <class V>
TraversalStats run_cpu(const Fixture& f, Counts& c, const TraversalOptions& opt) {
  V v;
  v.iv = f.tree.payload().data();
  v.xs = f.xs.data();
  v.counts = c.counts.data();
  v.hist = std::is_same_v<V, AddingCounter> ? c.hist.data() : nullptr;
  TraversalOptions o = opt;
  o.device = Device::Cpu;
  return traverse_cpu(f.tree.view(), v, static_cast<index_t>(f.xs.size()), o);
}

Counts zeros(const Fixture& f) { return {std::vector<std::int32_t>(f.xs.size(), 0), std::vector<std::uint32_t>(kCountBins, 0)}; }

TraversalOptions options(ScheduleKind s, ExecutorKind e, int depth, bool count_nodes = false) {
  TraversalOptions o;
  o.schedule = s;
  o.executor = e;
  o.depth = depth;
  o.count_nodes = count_nodes;
  return o;
}

std::string describe(const TraversalOptions& o) {
  return to_string(o.schedule) + std::string(" ") + to_string(o.executor) + " depth " + std::to_string(o.depth) +
         (o.count_nodes ? " count_nodes" : "") + (o.gpu_count_nodes ? " gpu_count_nodes" : "");
}

TEST(CustomAuto, CpuAddingVisitorRunsOncePerQueryPerCall) {
  const Fixture& f = fixture();
  // One call of a fixed schedule into fresh buffers: the per-call reference beside the brute force.
  Counts fixed = zeros(f);
  run_cpu<AddingCounter>(f, fixed, options(ScheduleKind::Hybrid, ExecutorKind::FsmLockstep, 4));
  ASSERT_EQ(fixed.counts, f.ref.counts);
  ASSERT_EQ(fixed.hist, f.ref.hist);
  // Depth auto's trial and count_nodes' emulator after an independent run each reran the visitor.
  for (const TraversalOptions& o :
       {options(ScheduleKind::Auto, ExecutorKind::Auto, 0), options(ScheduleKind::Auto, ExecutorKind::Auto, kAutoDepth),
        options(ScheduleKind::Hybrid, ExecutorKind::FsmLockstep, kAutoDepth),
        options(ScheduleKind::HybridKey, ExecutorKind::Independent, kAutoDepth, true),
        options(ScheduleKind::Auto, ExecutorKind::Auto, 0, true),
        options(ScheduleKind::InputOrder, ExecutorKind::Independent, 0, true)}) {
    SCOPED_TRACE(describe(o));
    Counts c = zeros(f);
    for (int k = 1; k <= 4; ++k) {
      const TraversalStats st = run_cpu<AddingCounter>(f, c, o);
      ASSERT_EQ(c.counts, times(fixed.counts, k)) << "call " << k;
      ASSERT_EQ(c.hist, times(fixed.hist, k)) << "call " << k;
      EXPECT_EQ(st.depth_trial_ms, 0.0);
      EXPECT_EQ(st.auto_trial_ms, 0.0);
      if (o.depth == kAutoDepth && o.schedule == ScheduleKind::Hybrid) {
        EXPECT_EQ(st.depth, std::min(kDefaultTopTreeDepth, f.tree.height()));  // depth 0's
      }
      if (o.count_nodes) {
        EXPECT_EQ(st.warp_nodes.size(), (f.xs.size() + 31) / 32);
        // The counts of the FSM emulator over the same order, from a writing visitor.
        TraversalOptions e = o;
        e.executor = ExecutorKind::FsmLockstep;
        if (e.schedule == ScheduleKind::Auto) e.schedule = ScheduleKind::InputOrder;  // the CPU's pick
        if (e.depth == kAutoDepth) e.depth = 0;
        Counts w = zeros(f);
        EXPECT_EQ(st.warp_nodes, run_cpu<WritingCounter>(f, w, e).warp_nodes);
        EXPECT_EQ(w.counts, f.ref.counts);
      }
    }
  }
}

TEST(CustomAuto, CpuRerunnableVisitorIsStillTrialled) {
  const Fixture& f = fixture();
  for (int k = 1; k <= 3; ++k) {
    Counts c = zeros(f);
    std::fill(c.counts.begin(), c.counts.end(), -1);
    const TraversalStats st =
        run_cpu<WritingCounter>(f, c, options(ScheduleKind::Hybrid, ExecutorKind::FsmLockstep, kAutoDepth));
    EXPECT_EQ(c.counts, f.ref.counts) << "call " << k;
    // traverse_cpu keeps no state from call to call: each call's depth auto runs its trial.
    EXPECT_GT(st.depth_trial_ms, 0.0) << "call " << k;
    EXPECT_GE(st.depth, std::max(1, kDefaultTopTreeDepth - 3));
    EXPECT_LE(st.depth, std::min(f.tree.height(), kDefaultTopTreeDepth + 3));
  }
}

// --- the GPU ----------------------------------------------------------------------------------

TEST(CustomAutoGpu, AddingVisitorRunsOncePerQueryPerCall) {
  CANOPY_REQUIRE_GPU();
  const Fixture& f = fixture();
  AutoChoice::forget_all();
  test::CountGpu gpu(f.tree, f.xs);
  TraversalOptions fixed_opt = options(ScheduleKind::HybridKey, ExecutorKind::FsmLockstep, 0);
  fixed_opt.device = Device::Gpu;
  gpu.reset(0);
  const test::CountRun fixed = gpu.run(false, fixed_opt);
  ASSERT_EQ(fixed.counts, f.ref.counts);
  ASSERT_EQ(fixed.hist, f.ref.hist);
  std::vector<TraversalOptions> runs{options(ScheduleKind::Auto, ExecutorKind::Auto, 0),
                                     options(ScheduleKind::Auto, ExecutorKind::Auto, kAutoDepth),
                                     options(ScheduleKind::Hybrid, ExecutorKind::Auto, 0),
                                     options(ScheduleKind::Auto, ExecutorKind::Auto, 0),
                                     options(ScheduleKind::Hybrid, ExecutorKind::MaskLockstep, kAutoDepth)};
  runs[3].gpu_count_nodes = true;  // the instrumented kernel reran the visitor
  runs[4].gpu_count_nodes = true;
  for (TraversalOptions o : runs) {
    SCOPED_TRACE(describe(o));
    o.device = Device::Gpu;
    o.keep_schedule = true;
    gpu.reset(0);
    for (int k = 1; k <= 4; ++k) {  // Auto's trial would come on the second call
      const test::CountRun r = gpu.run(false, o);
      ASSERT_EQ(r.counts, times(fixed.counts, k)) << "call " << k;
      ASSERT_EQ(r.hist, times(fixed.hist, k)) << "call " << k;
      EXPECT_EQ(r.stats.auto_trial_ms, 0.0);
      EXPECT_EQ(r.stats.depth_trial_ms, 0.0);
      if (o.schedule == ScheduleKind::Auto) {  // the prior, every call: HybridKey under FSM lockstep
        EXPECT_EQ(r.stats.schedule_kind, ScheduleKind::HybridKey);
        EXPECT_EQ(r.stats.executor_kind, ExecutorKind::FsmLockstep);
      }
      if (o.gpu_count_nodes) {
        // The GPU's counts in its one run equal the CPU emulator's over the order it ran.
        ASSERT_EQ(r.stats.schedule.order.size(), f.xs.size());
        Counts w = zeros(f);
        WritingCounter v;
        v.iv = f.tree.payload().data();
        v.xs = f.xs.data();
        v.counts = w.counts.data();
        EXPECT_EQ(r.stats.gpu_warp_nodes, emulate_lockstep(f.tree.view(), v, r.stats.schedule.order.data(),
                                                           static_cast<index_t>(f.xs.size()),
                                                           lockstep_mode(r.stats.executor_kind)));
      }
    }
  }
}

TEST(CustomAutoGpu, PipelinedRerunsOfAnAddingVisitorAreErrorsBeforeItRuns) {
  CANOPY_REQUIRE_GPU();
  const Fixture& f = fixture();
  test::CountGpu gpu(f.tree, f.xs);
  TraversalOptions o = options(ScheduleKind::Hybrid, ExecutorKind::FsmLockstep, 4);
  o.device = Device::Gpu;
  o.pipeline = true;
  o.chunk = 1000;
  for (bool overlap : {false, true}) {
    TraversalOptions p = o;
    (overlap ? p.measure_overlap : p.gpu_count_nodes) = true;
    gpu.reset(0);
    EXPECT_THROW(gpu.run(false, p), Error);
    const test::CountRun r = gpu.read();
    EXPECT_EQ(r.counts, std::vector<std::int32_t>(f.xs.size(), 0));
    EXPECT_EQ(r.hist, std::vector<std::uint32_t>(kCountBins, 0));
    // Re-runnable: allowed, and right.
    gpu.reset(-1);
    const test::CountRun w = gpu.run(true, p);
    EXPECT_EQ(w.counts, f.ref.counts);
    EXPECT_GT(w.stats.pipeline.chunks, 1);
    if (!overlap) {
      EXPECT_EQ(w.stats.gpu_warp_nodes.size(), (f.xs.size() + 31) / 32);
    }
  }
  // Pipelined without either: one run, right totals.
  gpu.reset(0);
  const test::CountRun once = gpu.run(false, o);
  EXPECT_EQ(once.counts, f.ref.counts);
  EXPECT_EQ(once.hist, f.ref.hist);
}

TEST(CustomAutoGpu, RerunnableVisitorIsTrialledOnItsSecondCallAndSettles) {
  CANOPY_REQUIRE_GPU();
  const Fixture& f = fixture();
  AutoChoice::forget_all();
  test::CountGpu gpu(f.tree, f.xs);
  TraversalOptions o;
  o.device = Device::Gpu;
  for (int k = 1; k <= 4; ++k) {
    gpu.reset(-1);  // every call must write every result
    const test::CountRun r = gpu.run(true, o);
    EXPECT_EQ(r.counts, f.ref.counts) << "call " << k;
    if (k == 2) {
      EXPECT_GT(r.stats.auto_trial_ms, 0.0) << "the shape's second call runs the trial";
    } else {
      EXPECT_EQ(r.stats.auto_trial_ms, 0.0) << "call " << k << ": the prior, then the settled pick";
    }
  }
}

}  // namespace
}  // namespace canopy
