// User trees given as graphs (layouts/graph_tree*.hpp) and custom traversals through the
// library's inspector, schedulers and executors (runtime/custom.hpp, runtime/custom.cuh).
#include <gtest/gtest.h>

#include <boost/graph/adjacency_list.hpp>

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "executor/cpu_executor.hpp"
#include "layouts/graph_tree_boost.hpp"
#include "runtime/custom.hpp"
#include "runtime/schedule_quality.hpp"
#include "tests/interval_tree.hpp"
#include "tests/require_gpu.hpp"
#include "tests/test_errors.hpp"

namespace canopy {
namespace {

using test::Interval;
using test::IntervalVisitor;
using test::error_of;

GraphTreeShape flatten(const std::vector<std::vector<index_t>>& children) {
  return GraphTree<int>::from_children(children, [](index_t) { return 0; }).shape();
}

TEST(GraphTree, FlattenKeepsEveryParentChildPairInDepthFirstOrder) {
  const test::RandomTree rt = test::random_interval_tree(3000, 6, 7);
  const GraphTree<Interval> t = test::build_interval_tree(rt);
  const GraphTreeView v = t.view();
  ASSERT_EQ(t.size(), 3000);
  int height = 0, widest = 0;
  std::vector<int> depth(t.size(), 0);
  for (node_id n = 0; n < t.size(); ++n) {
    EXPECT_EQ(t.node_of(t.vertex_of(n)), n);
    EXPECT_EQ(t.payload()[n].lo, rt.payload[t.vertex_of(n)].lo);
    const auto& kids = rt.children[t.vertex_of(n)];
    ASSERT_EQ(v.child_count(n), static_cast<int>(kids.size()));
    EXPECT_EQ(v.is_leaf(n), kids.empty());
    for (int i = 0; i < v.child_count(n); ++i) {
      EXPECT_EQ(t.vertex_of(v.child(n, i)), kids[i]) << "child order is the caller's";
      depth[v.child(n, i)] = depth[n] + 1;
    }
    if (!kids.empty()) {
      EXPECT_EQ(v.child(n, 0), n + 1) << "depth-first: the first child follows its parent";
    }
    // Preorder: a later sibling starts right after the previous sibling's subtree.
    for (int i = 1; i < v.child_count(n); ++i) EXPECT_GT(v.child(n, i), v.child(n, i - 1));
    height = std::max(height, depth[n] + 1);
    widest = std::max(widest, v.child_count(n));
  }
  EXPECT_EQ(t.height(), height);
  EXPECT_EQ(v.height, height);
  EXPECT_EQ(t.max_children(), widest);
  EXPECT_GE(t.shape().stack_needed, widest);
  EXPECT_LE(t.shape().stack_needed, GraphTreeView::kMaxStack);
}

TEST(GraphTree, ALoneRootIsATreeOfOneLevel) {
  const GraphTreeShape s = flatten({{}});
  EXPECT_EQ(s.size(), 1);
  EXPECT_EQ(s.height, 1);
  EXPECT_TRUE(s.view().is_leaf(0));
}

TEST(GraphTree, GraphsThatAreNotRootedTreesAreErrorsNamingTheVertices) {
  EXPECT_NE(error_of([] { flatten({}); }).find("no vertices"), std::string::npos);
  EXPECT_NE(error_of([] { flatten({{1}, {2}, {0}}); }).find("there is no root"), std::string::npos);
  EXPECT_NE(error_of([] { flatten({{1, 2}, {2}, {}}); }).find("vertex 2 has two parents (vertices 0 and 1)"),
            std::string::npos);
  EXPECT_NE(error_of([] { flatten({{1}, {}, {3}, {}}); }).find("2 vertices have no parent (0, 2)"), std::string::npos);
  EXPECT_NE(error_of([] { flatten({{1}, {}, {3}, {2}}); }).find("vertex 2 is not reachable from the root (vertex 0)"),
            std::string::npos);
  EXPECT_NE(error_of([] { flatten({{0}}); }).find("vertex 0 has an edge to itself"), std::string::npos);
  EXPECT_NE(error_of([] { flatten({{5}}); }).find("vertex 0 has an edge to vertex 5, which does not exist"),
            std::string::npos);
}

TEST(GraphTree, ATreeNeedingTooDeepAStackIsAnError) {
  // A spine whose every node also has two leaf children: each level leaves two siblings
  // pending, so 200 levels need about 400 stack entries.
  std::vector<std::vector<index_t>> c;
  for (index_t i = 0; i < 200; ++i) {
    const index_t spine = static_cast<index_t>(c.size());
    c.push_back({spine + 1, spine + 2, spine + 3});
    c.push_back({});
    c.push_back({});
  }
  c.push_back({});
  const std::string e = error_of([&] { flatten(c); });
  EXPECT_NE(e.find("traversal stack entries"), std::string::npos) << e;
  EXPECT_NE(e.find("at most 256"), std::string::npos) << e;
}

struct Cell {
  float lo, hi;
  int tag;
};

TEST(GraphTree, BoostAdjacencyListFlattensLikeItsChildLists) {
  using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, Cell>;
  const test::RandomTree rt = test::random_interval_tree(500, 5, 3);
  G g(rt.children.size());
  for (std::size_t v = 0; v < rt.children.size(); ++v) {
    g[v] = Cell{rt.payload[v].lo, rt.payload[v].hi, static_cast<int>(v)};
    for (index_t c : rt.children[v]) boost::add_edge(v, static_cast<std::size_t>(c), g);
  }
  const GraphTree<Cell> a = flatten_tree(g);
  const GraphTree<Interval> b = flatten_tree(g, [](const Cell& c) { return Interval{c.lo, c.hi}; });
  const GraphTree<Interval> ref = test::build_interval_tree(rt);
  EXPECT_EQ(a.shape().child_begin, ref.shape().child_begin);
  EXPECT_EQ(a.shape().children, ref.shape().children);
  EXPECT_EQ(b.shape().vertex_of, ref.shape().vertex_of);
  for (node_id n = 0; n < a.size(); ++n) {
    EXPECT_EQ(a.payload()[n].tag, a.vertex_of(n));
    EXPECT_EQ(b.payload()[n].hi, ref.payload()[n].hi);
  }
  // The root gets a parent: a cycle, and no root.
  boost::add_edge(static_cast<std::size_t>(a.vertex_of(5)), static_cast<std::size_t>(a.vertex_of(0)), g);
  EXPECT_NE(error_of([&] { flatten_tree(g); }).find("no root"), std::string::npos);
}

// The independent reference: the paper's recursive traversal (Figure 1), written out.
struct Reference {
  std::vector<std::int32_t> counts;
  std::vector<std::int64_t> sums;
  std::vector<std::vector<node_id>> visits;  // unguided visit sequences (node, or ~node when truncated)
};
Reference reference(const GraphTree<Interval>& t, const std::vector<float>& xs) {
  Reference r;
  const GraphTreeView v = t.view();
  const std::vector<Interval>& iv = t.payload();
  for (float x : xs) {
    std::int32_t count = 0;
    std::int64_t sum = 0;
    std::vector<node_id> seq;
    std::function<void(node_id)> rec = [&](node_id n) {
      if (!(iv[n].lo <= x && x <= iv[n].hi)) {
        seq.push_back(~n);
        return;
      }
      seq.push_back(n);
      if (v.is_leaf(n)) {
        ++count;
        sum += static_cast<std::int64_t>(n + 1) * (n + 1);
        return;
      }
      for (int i = 0; i < v.child_count(n); ++i) rec(v.child(n, i));
    };
    rec(0);
    r.counts.push_back(count);
    r.sums.push_back(sum);
    r.visits.push_back(seq);
  }
  return r;
}

std::vector<float> random_points(index_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.05f, 1.05f);
  std::vector<float> xs(static_cast<std::size_t>(n));
  for (float& x : xs) x = u(rng);
  return xs;
}

constexpr int kCapacity = 4096;

template <bool Guided>
struct CpuRun {
  std::vector<std::int32_t> counts;
  std::vector<std::int64_t> sums;
  std::vector<node_id> trace;
  std::vector<std::int32_t> lengths;
  TraversalStats stats;
  CpuRun(const GraphTree<Interval>& t, const std::vector<float>& xs, const TraversalOptions& opt)
      : counts(xs.size()), sums(xs.size()), trace(xs.size() * kCapacity), lengths(xs.size()) {
    TracingVisitor<IntervalVisitor<Guided>> v;
    v.inner = {t.view(), t.payload().data(), xs.data(), sums.data(), counts.data()};
    v.trace = trace.data();
    v.lengths = lengths.data();
    v.capacity = kCapacity;
    stats = traverse_cpu(t.view(), v, static_cast<index_t>(xs.size()), opt);
  }
  std::vector<node_id> visits(index_t q) const {
    return {trace.begin() + q * kCapacity, trace.begin() + q * kCapacity + std::min(lengths[q], kCapacity)};
  }
};

void expect_permutation(const std::vector<index_t>& order, index_t n) {
  std::vector<index_t> s = order;
  std::sort(s.begin(), s.end());
  std::vector<index_t> id(static_cast<std::size_t>(n));
  std::iota(id.begin(), id.end(), 0);
  EXPECT_EQ(s, id);
}

std::vector<TraversalOptions> all_options(int height) {
  std::vector<TraversalOptions> out;
  for (ScheduleKind s : {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridDevice,
                         ScheduleKind::HybridKey, ScheduleKind::Auto})
    for (ExecutorKind e : {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep})
      for (int d : {2, 4, height, 0}) {
        TraversalOptions o;
        o.schedule = s;
        o.executor = s == ScheduleKind::Auto ? ExecutorKind::Auto : e;
        o.depth = d;
        o.keep_schedule = true;
        o.count_nodes = true;
        out.push_back(o);
        if (s == ScheduleKind::InputOrder || s == ScheduleKind::Auto) break;
      }
  return out;
}

// A CPU run of each of all_options() over tree t and points xs: its counts and sums are the
// recursive reference's, and check(run, reference) checks the rest (a fatal failure ends it).
template <bool Guided, class Check>
void expect_cpu_runs_equal_reference(const GraphTree<Interval>& t, const std::vector<float>& xs, Check check) {
  const Reference ref = reference(t, xs);
  for (const TraversalOptions& o : all_options(t.height())) {
    SCOPED_TRACE(std::string(to_string(o.schedule)) + " " + to_string(o.executor) + " depth " + std::to_string(o.depth));
    const CpuRun<Guided> r(t, xs, o);
    EXPECT_EQ(r.counts, ref.counts);
    EXPECT_EQ(r.sums, ref.sums);
    ASSERT_NO_FATAL_FAILURE(check(r, ref));
  }
}

TEST(CustomTraversal, CpuUnguidedResultsAndVisitsEqualTheRecursiveReferenceUnderEverySchedule) {
  const GraphTree<Interval> t = test::build_interval_tree(test::random_interval_tree(4000, 7, 11));
  const std::vector<float> xs = random_points(1500, 5);
  expect_cpu_runs_equal_reference<false>(t, xs, [&](const CpuRun<false>& r, const Reference& ref) {
    for (index_t q = 0; q < static_cast<index_t>(xs.size()); ++q) ASSERT_EQ(r.visits(q), ref.visits[q]) << "query " << q;
    expect_permutation(r.stats.schedule.order, static_cast<index_t>(xs.size()));
    EXPECT_EQ(r.stats.warp_nodes.size(), (xs.size() + 31) / 32);
  });
}

TEST(CustomTraversal, CpuGuidedResultsEqualTheReferenceOnTreesWiderThanEightChildren) {
  const GraphTree<Interval> t = test::build_interval_tree(test::random_interval_tree(4000, 12, 13));
  ASSERT_GT(t.max_children(), 8);
  const std::vector<float> xs = random_points(1500, 6);
  expect_cpu_runs_equal_reference<true>(t, xs, [&](const CpuRun<true>& r, const Reference& ref) {
    // Reordered children, same set of nodes.
    for (index_t q = 0; q < 50; ++q) {
      std::vector<node_id> a = r.visits(q), b = ref.visits[q];
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      ASSERT_EQ(a, b) << "query " << q;
    }
    expect_permutation(r.stats.schedule.order, static_cast<index_t>(xs.size()));
  });
}

TEST(CustomTraversal, TheSandpileOnAUserTreeNeedsFewerNodesPerWarpThanInputOrder) {
  const GraphTree<Interval> t = test::build_interval_tree(test::random_interval_tree(20000, 4, 17));
  const std::vector<float> xs = random_points(8000, 8);
  TraversalOptions o;
  o.count_nodes = true;
  o.schedule = ScheduleKind::InputOrder;
  const double unscheduled = CpuRun<false>(t, xs, o).stats.nodes_per_warp();
  o.schedule = ScheduleKind::Hybrid;
  o.depth = std::min(8, t.height());
  const double scheduled = CpuRun<false>(t, xs, o).stats.nodes_per_warp();
  EXPECT_LT(scheduled, 0.8 * unscheduled);
}

TEST(CustomTraversal, BadOptionsAreErrorsNamingTheParameter) {
  const GraphTree<Interval> t = test::build_interval_tree(test::random_interval_tree(100, 3, 1));
  const std::vector<float> xs = random_points(10, 1);
  TraversalOptions o;
  o.schedule = ScheduleKind::LeafSort;
  EXPECT_NE(error_of([&] { CpuRun<false>(t, xs, o); }).find("leaf-sort needs a workload's own sort key"),
            std::string::npos);
  o.schedule = ScheduleKind::Hybrid;
  o.depth = t.height() + 1;
  EXPECT_NE(error_of([&] { CpuRun<false>(t, xs, o); }).find("is deeper than the tree"), std::string::npos);
  o.depth = 0;
  o.device = Device::Gpu;
  EXPECT_NE(error_of([&] { CpuRun<false>(t, xs, o); }).find("device gpu"), std::string::npos);
  o.device = Device::Cpu;
  std::vector<std::int32_t> c;
  std::vector<std::int64_t> s;
  IntervalVisitor<false> v{t.view(), t.payload().data(), xs.data(), s.data(), c.data()};
  EXPECT_NE(error_of([&] { traverse_cpu(t.view(), v, -1, o); }).find("n_queries = -1"), std::string::npos);
  EXPECT_NO_THROW(traverse_cpu(t.view(), v, 0, o));
}

TEST(CustomTraversal, PerWarpUnionOfVisitSetsEqualsTheLockstepEmulatorsNodeCount) {
  const GraphTree<Interval> t = test::build_interval_tree(test::random_interval_tree(6000, 5, 23));
  const std::vector<float> xs = random_points(3001, 9);  // a short last warp
  std::vector<std::int32_t> counts(xs.size());
  std::vector<std::int64_t> sums(xs.size());
  IntervalVisitor<false> v{t.view(), t.payload().data(), xs.data(), sums.data(), counts.data()};
  const index_t n = static_cast<index_t>(xs.size());
  TraversalOptions o;
  o.schedule = ScheduleKind::Hybrid;
  o.depth = 5;
  o.keep_schedule = true;
  const std::vector<index_t> order = traverse_cpu(t.view(), v, n, o).schedule.order;
  for (const index_t* ord : {static_cast<const index_t*>(nullptr), order.data()}) {
    const ScheduleQuality q = measure_schedule(t.view(), v, ord, n);
    for (LockstepMode m : {LockstepMode::Mask, LockstepMode::Fsm}) {
      const std::vector<index_t> warps = emulate_lockstep(t.view(), v, ord, n, m);
      EXPECT_EQ(q.warp_union, std::accumulate(warps.begin(), warps.end(), index_t{0}));
    }
    // Δ from the sets held whole.
    std::vector<index_t> all(static_cast<std::size_t>(n));
    std::iota(all.begin(), all.end(), 0);
    const VisitSets sets = collect_visit_sets(t.view(), v, all);
    EXPECT_EQ(q.delta, schedule_delta(sets, ord, n));
    EXPECT_EQ(q.warp_union, group_union_sum(sets, ord, n, 32));
  }
}

// --- the same custom traversals on the GPU -------------------------------------------------

TEST(CustomTraversalGpu, ResultsVisitsAndWarpNodeCountsEqualTheCpu) {
  CANOPY_REQUIRE_GPU();
  for (bool guided : {false, true}) {
    const GraphTree<Interval> t = test::build_interval_tree(test::random_interval_tree(5000, guided ? 12 : 4, 29));
    const std::vector<float> xs = random_points(2500, 10);
    const Reference ref = reference(t, xs);
    for (TraversalOptions o : all_options(t.height())) {
      SCOPED_TRACE(std::string(guided ? "guided " : "") + to_string(o.schedule) + " " + to_string(o.executor) +
                   " depth " + std::to_string(o.depth));
      o.count_nodes = false;
      o.gpu_count_nodes = true;
      const test::IntervalRun g = test::run_interval_gpu(t, xs, guided, o, kCapacity);
      EXPECT_EQ(g.counts, ref.counts);
      EXPECT_EQ(g.sums, ref.sums);
      expect_permutation(g.order, static_cast<index_t>(xs.size()));
      if (o.schedule == ScheduleKind::Auto) continue;  // the GPU's pick is its own (AutoChoiceGpu)
      if (!guided) {
        for (index_t q = 0; q < static_cast<index_t>(xs.size()); ++q) {
          const std::vector<node_id> got(g.trace.begin() + q * kCapacity,
                                         g.trace.begin() + q * kCapacity + std::min(g.lengths[q], kCapacity));
          ASSERT_EQ(got, ref.visits[q]) << "query " << q;
        }
      }
      // The emulator on the GPU's own order casts the same votes and visits the same nodes.
      auto emulated = [&](auto v) {
        return emulate_lockstep(t.view(), v, o.schedule == ScheduleKind::InputOrder ? nullptr : g.order.data(),
                                static_cast<index_t>(xs.size()), lockstep_mode(o.executor));
      };
      std::vector<std::int32_t> cnt(xs.size());
      std::vector<std::int64_t> sm(xs.size());
      if (o.executor != ExecutorKind::Independent) {
        if (guided)
          EXPECT_EQ(g.gpu_warp_nodes, emulated(IntervalVisitor<true>{t.view(), t.payload().data(), xs.data(), sm.data(), cnt.data()}));
        else
          EXPECT_EQ(g.gpu_warp_nodes, emulated(IntervalVisitor<false>{t.view(), t.payload().data(), xs.data(), sm.data(), cnt.data()}));
      }
      // Hybrid, HybridDevice and HybridKey give the same schedule as the CPU path.
      if (o.schedule != ScheduleKind::InputOrder) {
        TraversalOptions c = o;
        c.gpu_count_nodes = false;
        EXPECT_EQ(g.order, guided ? CpuRun<true>(t, xs, c).stats.schedule.order : CpuRun<false>(t, xs, c).stats.schedule.order);
      }
    }
  }
}

}  // namespace
}  // namespace canopy
