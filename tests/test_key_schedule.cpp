// The compact-key schedule (ScheduleKind::HybridKey) and the automatic choice (Auto): the key
// against its sequential definition, the order against a plain stable sort of the keys, the
// depth rule, the GPU's order against its CPU twin bit for bit, and Auto's picks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "core/bits.hpp"
#include "inspector/inspector.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/top_tree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/bh_visitor.hpp"
#include "runtime/custom.hpp"
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.hpp"
#include "runtime/knn.hpp"
#include "runtime/knn_visitor.hpp"
#include "runtime/pc_visitor.hpp"
#include "runtime/point_correlation.hpp"
#include "tests/interval_tree.hpp"
#include "tests/require_gpu.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

static_assert(has_home_hint_v<PointCorrelationVisitor<4>>, "point correlation names the side a query lies on");
static_assert(has_home_hint_v<BarnesHutVisitor>, "Barnes-Hut names the cell a body lies in");
static_assert(has_home_hint_v<ForwardingVisitor<BarnesHutVisitor>>, "wrappers keep the hint");
static_assert(has_home_hint_v<ForwardingVisitor<PointCorrelationVisitor<4>>>, "wrappers keep the hint");
static_assert(!has_home_hint_v<ForwardingVisitor<test::IntervalVisitor<false>>>, "wrappers add no hint");

// Point correlation without its hint: an unguided visitor whose key is two-ended.
template <class Inner>
struct WithoutHint : ForwardingVisitor<Inner> {
  static constexpr bool kHomeHint = false;
};
static_assert(!has_home_hint_v<WithoutHint<PointCorrelationVisitor<4>>>, "the hint can be withheld");
static_assert(!has_home_hint_v<test::IntervalVisitor<false>>, "first_child alone is no hint when unguided");
static_assert(has_home_hint_v<test::IntervalVisitor<true>>, "a guided visitor's first child is its hint");

// The sequential definition of the order: queries by ascending key, ties in input order.
std::vector<index_t> stable_order(const std::vector<std::uint64_t>& keys) {
  std::vector<index_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return keys[a] < keys[b]; });
  return order;
}

struct PcSetup {
  std::vector<float> pts;
  KdTree tree;
  std::vector<index_t> counts;
  PointCorrelationVisitor<4> v;
  explicit PcSetup(index_t n, int dims = 3, double mean = 20)
      : pts(test::clustered_points(n, dims, 5)), tree(KdTree::build(pts.data(), n, dims)), counts(n) {
    v.tree = tree.view();
    v.queries = pts.data();
    v.counts = counts.data();
    const float r = test::radius_for(tree, pts, mean);
    v.radius2 = r * r;
  }
};

TEST(KeyInspector, UnguidedKeyIsTheLowestAndHighestColumnOfTheRow) {
  const PcSetup s(3000);
  for (double mean : {0.0, 3.0, 60.0}) {
    WithoutHint<PointCorrelationVisitor<4>> v;
    v.inner = s.v;
    const float r = mean == 0 ? 0.0f : test::radius_for(s.tree, s.pts, mean);
    v.inner.radius2 = r * r;
    for (int d = 1; d <= s.tree.height(); ++d) {
      const TopTree top = TopTree::build(s.tree.view(), d);
      const SchedulingMatrix m = inspect_cpu(s.tree.view(), top.view(), v, 3000);
      std::vector<std::uint64_t> keys(3000);
      inspect_keys_cpu(s.tree.view(), top.view(), v, 3000, keys.data());
      for (index_t q = 0; q < 3000; ++q)
        ASSERT_EQ(keys[q], key_from_row(m.view().row(q), top.view())) << "depth " << d << ", query " << q;
    }
  }
}

// With its hint, a point-correlation query's key is the top-leaf that holds it: the top-leaf
// over the leaf find_leaf (the leaf sort's key) reaches, whatever the radius, for the tree's
// points and for others; a query the root rejects reaches nothing.
TEST(KeyInspector, PointCorrelationKeyIsTheTopLeafHoldingTheQuery) {
  const index_t n = 3000;
  const std::vector<float> pts = test::random_points(n, 3, 21);
  std::vector<float> others = test::random_points(500, 3, 22);
  for (std::size_t i = 0; i < others.size(); i += 7) others[i] = others[i] * 1.5f - 0.25f;  // some outside
  const KdTree tree = KdTree::build(pts.data(), n, 3);
  std::vector<index_t> counts(n);
  for (double mean : {0.0, 3.0, 60.0}) {
    PointCorrelationVisitor<4> v;
    v.tree = tree.view();
    v.counts = counts.data();
    const float r = mean == 0 ? 0.0f : test::radius_for(tree, pts, mean);
    v.radius2 = r * r;
    for (int d = 1; d <= tree.height(); ++d) {
      const TopTree top = TopTree::build(tree.view(), d);
      const std::vector<node_id>& tops = top.leaves();
      for (const std::vector<float>* qs : {&pts, static_cast<const std::vector<float>*>(&others)}) {
        v.queries = qs->data();
        for (index_t q = 0; q < static_cast<index_t>(qs->size() / 3); ++q) {
          auto s = v.init(q);
          node_id want = kNoNode;
          if (v.descend(s, 0)) {
            const node_id leaf = tree.view().find_leaf(qs->data() + q * 3);
            want = *(std::upper_bound(tops.begin(), tops.end(), leaf) - 1);
          }
          ASSERT_EQ(inspect_key(tree.view(), top.view(), v, q), key_code(top.view(), want))
              << "radius " << r << ", depth " << d << ", query " << q << (qs == &pts ? " (a tree point)" : "");
        }
      }
    }
  }
}

TEST(KeyInspector, CustomUnguidedVisitorsOfAnyFanOutToo) {
  const GraphTree<test::Interval> t = test::build_interval_tree(test::random_interval_tree(3000, 7, 3));
  std::vector<float> xs(800);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  std::vector<std::int64_t> sums(xs.size());
  std::vector<std::int32_t> counts(xs.size());
  test::IntervalVisitor<false> v{t.view(), t.payload().data(), xs.data(), sums.data(), counts.data()};
  const index_t n = static_cast<index_t>(xs.size());
  for (int d = 1; d <= t.height(); ++d) {
    const TopTree top = TopTree::build(t.view(), d);
    const SchedulingMatrix m = inspect_cpu(t.view(), top.view(), v, n);
    for (index_t q = 0; q < n; ++q)
      ASSERT_EQ(inspect_key(t.view(), top.view(), v, q), key_from_row(m.view().row(q), top.view())) << d << " " << q;
  }
}

TEST(KeyInspector, GuidedKeyIsTheFirstTopLeafOfTheGuidedRow) {
  const std::vector<float> pts = test::clustered_points(4000, 5, 9);
  const std::vector<float> qs = test::random_points(700, 5, 10);
  const KdTree tree = KdTree::build(pts.data(), 4000, 5);
  std::vector<index_t> idx(700 * 4);
  std::vector<float> dist(700 * 4);
  const auto v = make_knn_visitor<8>(tree.view(), qs.data(), 4, dist.data(), idx.data());
  for (int d = 1; d <= tree.height(); ++d) {
    const TopTree top = TopTree::build(tree.view(), d);
    std::vector<std::int32_t> row(static_cast<std::size_t>(top.size()) + 1);
    for (index_t q = 0; q < 700; ++q) {
      const index_t len = inspect_row_guided(tree.view(), top.view(), v, q, row.data(), top.size(), GuidedProbe::Full);
      const std::uint64_t want = key_code(top.view(), len > 0 ? top.leaves()[row[0]] : kNoNode);
      ASSERT_EQ(inspect_key(tree.view(), top.view(), v, q), want) << "depth " << d << ", query " << q;
    }
  }
}

TEST(KeyInspector, BarnesHutKeyIsATopLeafThatHoldsTheBody) {
  const std::vector<float> xyz = test::clustered_points(5000, 3, 12);
  const std::vector<float> mass(5000, 1.0f / 5000);
  const Octree tree = Octree::build(xyz.data(), mass.data(), 5000);
  std::vector<float> forces(5000 * 3);
  BarnesHutVisitor v;
  v.tree = tree.view();
  v.bodies_xyz = xyz.data();
  v.masses = mass.data();
  v.forces = forces.data();
  for (int d = 1; d <= tree.height(); ++d) {
    const TopTree top = TopTree::build(tree.view(), d);
    for (index_t q = 0; q < 5000; ++q) {
      const std::uint64_t key = inspect_key(tree.view(), top.view(), v, q);
      ASSERT_LT(key, key_code(top.view(), kNoNode)) << "every body lies in a cell";
      const node_id cell = top.view().first_leaf + static_cast<node_id>(key);
      ASSERT_GE(top.view().column(cell), 0) << "the key names a top-leaf";
      const float* c = tree.view().cube(cell);
      for (int k = 0; k < 3; ++k) ASSERT_LE(std::fabs(xyz[q * 3 + k] - c[k]), c[3]) << "depth " << d << ", body " << q;
    }
  }
}

// A tree's topology without its nodes' depths: top_leaves_by_depth walks it.
template <class View>
struct WalkedTopology {
  View v;
  int height;
  bool is_leaf(node_id n) const { return v.is_leaf(n); }
  int child_count(node_id n) const { return v.child_count(n); }
  node_id child(node_id n, int i) const { return v.child(n, i); }
};

// The scan of the nodes' depths (every built-in tree) against the walk and TopTree::build.
template <class View>
void expect_top_leaves_per_depth(const View& v, const char* tree) {
  static_assert(has_node_depths<View>::value, "the built-in trees' nodes record their depth");
  static_assert(!has_node_depths<WalkedTopology<View>>::value, "the adapter has none");
  const std::vector<index_t> scanned = top_leaves_by_depth(v);
  ASSERT_EQ(scanned.size(), static_cast<std::size_t>(v.height) + 1) << tree;
  EXPECT_EQ(scanned, top_leaves_by_depth(WalkedTopology<View>{v, v.height})) << tree;
  for (int d = 1; d <= v.height; ++d) EXPECT_EQ(scanned[d], TopTree::build(v, d).size()) << tree << ", depth " << d;
}

TEST(KeyDepth, TopLeavesPerDepthAreTheTopTreesSizes) {
  const PcSetup s(5000);
  const std::vector<float> xyz = test::clustered_points(4000, 3, 2);
  const std::vector<float> mass(4000, 1.0f);
  const Octree oct = Octree::build(xyz.data(), mass.data(), 4000);
  expect_top_leaves_per_depth(s.tree.view(), "kd-tree");
  expect_top_leaves_per_depth(oct.view(), "octree");
  const BallTree ball = BallTree::build(xyz.data(), 4000, 3);
  expect_top_leaves_per_depth(ball.view(), "ball tree");
  const VpTree vp = VpTree::build(xyz.data(), 4000, 3);
  expect_top_leaves_per_depth(vp.view(), "vp-tree");
}

TEST(KeyDepth, TheShallowestTopTreeWithEnoughTopLeaves) {
  const std::vector<index_t> leaves{0, 1, 2, 4, 8, 16, 30};
  const index_t per = kKeyQueriesPerLeaf, hinted = kHintedKeyQueriesPerLeaf;
  EXPECT_EQ(key_depth(leaves, 1, false), 1);
  EXPECT_EQ(key_depth(leaves, per * 4, false), 3);
  EXPECT_EQ(key_depth(leaves, per * 4 + 1, false), 4);
  EXPECT_EQ(key_depth(leaves, hinted * 16, true), 5);
  EXPECT_EQ(key_depth(leaves, hinted * 16 + 1, true), 6);
  EXPECT_EQ(key_depth(leaves, per * 1000, false), 6);  // never deeper than the tree
  EXPECT_EQ(key_depth(leaves, 0, true), 1);
}

TEST(KeySchedule, IsTheStableSortOfTheKeysOnTheCpu) {
  const PcSetup s(4000);
  PointCorrelation pc(s.tree, Device::Cpu);
  for (int d : {0, 3, 7, s.tree.height()}) {
    PcOptions o;
    o.device = Device::Cpu;
    o.schedule = ScheduleKind::HybridKey;
    o.executor = ExecutorKind::Independent;
    o.radius = std::sqrt(s.v.radius2);
    o.depth = d;
    o.keep_schedule = true;
    const PcResult r = pc.run(s.pts.data(), 4000, o);
    const int depth = d ? d : key_depth(top_leaves_by_depth(s.tree.view()), 4000, has_home_hint_v<PointCorrelationVisitor<4>>);
    EXPECT_EQ(r.depth, depth);
    const TopTree top = TopTree::build(s.tree.view(), depth);
    std::vector<std::uint64_t> keys(4000);
    inspect_keys_cpu(s.tree.view(), top.view(), s.v, 4000, keys.data());
    EXPECT_EQ(r.schedule.order, stable_order(keys)) << "depth " << d;
    // Buckets: runs of equal keys.
    const std::vector<index_t>& b = r.schedule.bucket_offsets;
    ASSERT_GE(b.size(), 2u);
    for (std::size_t i = 1; i + 1 < b.size(); ++i)
      EXPECT_NE(keys[r.schedule.order[b[i]]], keys[r.schedule.order[b[i] - 1]]);
    for (std::size_t i = 0; i + 1 < b.size(); ++i)
      for (index_t p = b[i] + 1; p < b[i + 1]; ++p) ASSERT_EQ(keys[r.schedule.order[p]], keys[r.schedule.order[b[i]]]);
  }
}

TEST(AutoChoice, CandidatesAndSamples) {
  TraversalOptions o;
  const std::vector<AutoPick> gpu = auto_candidates(o, Device::Gpu, true, false);
  ASSERT_EQ(gpu.size(), 5u);
  // The prior: the workload's sort key, lockstep for unguided rows, independent threads for guided.
  EXPECT_EQ(gpu[0].schedule, ScheduleKind::LeafSort);
  EXPECT_EQ(gpu[0].executor, ExecutorKind::FsmLockstep);
  EXPECT_EQ(gpu.back().schedule, ScheduleKind::InputOrder) << "unguided rows: the input order last";
  EXPECT_EQ(gpu.back().executor, ExecutorKind::Independent);
  const std::vector<AutoPick> guided = auto_candidates(o, Device::Gpu, true, true);
  ASSERT_EQ(guided.size(), 3u);
  EXPECT_EQ(guided[0].schedule, ScheduleKind::LeafSort);
  EXPECT_EQ(guided[0].executor, ExecutorKind::Independent);
  for (const AutoPick& p : guided) EXPECT_EQ(p.executor, ExecutorKind::Independent) << "guided rows: no lockstep";
  EXPECT_EQ(guided[1].schedule, ScheduleKind::InputOrder) << "guided rows: the input order next";
  // A wide guided search (kNN, k > 16): lockstep over the sorted order second, the rest as before.
  const std::vector<AutoPick> wide = auto_candidates(o, Device::Gpu, true, true, true);
  ASSERT_EQ(wide.size(), 4u);
  EXPECT_EQ(wide[0].schedule, ScheduleKind::LeafSort);
  EXPECT_EQ(wide[0].executor, ExecutorKind::Independent);
  EXPECT_EQ(wide[1].schedule, ScheduleKind::LeafSort);
  EXPECT_EQ(wide[1].executor, ExecutorKind::FsmLockstep);
  for (std::size_t i = 2; i < wide.size(); ++i) EXPECT_EQ(wide[i].executor, ExecutorKind::Independent);
  EXPECT_EQ(auto_candidates(o, Device::Cpu, true, true, true).size(), 1u) << "no trial on the CPU";
  const std::vector<AutoPick> keyless = auto_candidates(o, Device::Gpu, false, false);
  ASSERT_EQ(keyless.size(), 3u);  // no sort key: no LeafSort
  EXPECT_EQ(keyless[0].schedule, ScheduleKind::HybridKey);
  for (const auto& all : {gpu, guided, wide, keyless}) {
    std::set<std::pair<int, int>> distinct;
    for (const AutoPick& p : all) distinct.insert({static_cast<int>(p.schedule), static_cast<int>(p.executor)});
    EXPECT_EQ(distinct.size(), all.size());
  }
  const std::vector<AutoPick> cpu = auto_candidates(o, Device::Cpu, true, false);
  ASSERT_EQ(cpu.size(), 1u);
  EXPECT_EQ(cpu[0].schedule, ScheduleKind::InputOrder);
  EXPECT_EQ(cpu[0].executor, ExecutorKind::Independent);
  o.executor = ExecutorKind::MaskLockstep;  // a fixed kind stays fixed
  for (const AutoPick& p : auto_candidates(o, Device::Gpu, true, true)) EXPECT_EQ(p.executor, ExecutorKind::MaskLockstep);
  o.executor = ExecutorKind::Auto;
  o.schedule = ScheduleKind::InputOrder;  // lockstep over the input order only where it is fixed
  EXPECT_EQ(auto_candidates(o, Device::Gpu, true, false).size(), 2u);
  EXPECT_EQ(auto_candidates(o, Device::Gpu, true, true).size(), 1u);
  EXPECT_EQ(auto_candidates(o, Device::Gpu, true, true, true).size(), 1u) << "no lockstep over a fixed input order";
  // Twins: HybridKey goes where LeafSort runs under the same executor, and only there.
  std::vector<AutoPick> twins = gpu;
  drop_twins(twins, ScheduleKind::HybridKey, ScheduleKind::LeafSort);
  ASSERT_EQ(twins.size(), 3u);
  for (const AutoPick& p : twins) EXPECT_NE(p.schedule, ScheduleKind::HybridKey);
  EXPECT_EQ(twins[0].schedule, ScheduleKind::LeafSort) << "the prior stays first";
  EXPECT_EQ(twins[0].executor, ExecutorKind::FsmLockstep);
  std::vector<AutoPick> lone{{ScheduleKind::LeafSort, ExecutorKind::Independent},
                             {ScheduleKind::HybridKey, ExecutorKind::FsmLockstep}};
  drop_twins(lone, ScheduleKind::HybridKey, ScheduleKind::LeafSort);
  EXPECT_EQ(lone.size(), 2u) << "no LeafSort under lockstep: HybridKey's lockstep run stays";

  // The sample: about one call's work over the candidates (and the close ones' second timing),
  // within [kAutoSampleMin, kAutoSample], the whole of a smaller call.
  EXPECT_EQ(auto_sample_size(1000, 5), 1000);
  EXPECT_EQ(auto_sample_size(kAutoSampleMin * 2, 5), kAutoSampleMin);
  EXPECT_EQ(auto_sample_size(7000000, 5), 1000000);
  EXPECT_EQ(auto_sample_size(5000000, 3), 1000000);
  EXPECT_EQ(auto_sample_size(1000000, 3), kAutoSampleMin);
  EXPECT_EQ(auto_sample_size(index_t{100000000}, 5), kAutoSample);

  // Blocks of consecutive positions of the order, spread over it, in position order, no repeats.
  std::vector<index_t> order(1000);
  std::iota(order.rbegin(), order.rend(), 0);  // 999 .. 0
  const std::vector<index_t> rows = block_sample(order.data(), 1000, 80, 8);
  ASSERT_EQ(rows.size(), 80u);
  EXPECT_TRUE(std::is_sorted(rows.rbegin(), rows.rend())) << "the order's positions, in turn";
  EXPECT_EQ(rows.front(), 999);  // the first block starts the order
  EXPECT_EQ(rows.back(), 0);     // the last block ends it
  EXPECT_EQ(std::set<index_t>(rows.begin(), rows.end()).size(), rows.size());
  for (std::size_t b = 0; b < 8; ++b)  // each block: 10 consecutive positions
    for (std::size_t i = 1; i < 10; ++i) EXPECT_EQ(rows[b * 10 + i], rows[b * 10 + i - 1] - 1);
  const std::vector<index_t> in_order = block_sample(nullptr, 100000, 4096, 8);
  ASSERT_EQ(in_order.size(), 4096u);
  EXPECT_TRUE(std::is_sorted(in_order.begin(), in_order.end()));
  EXPECT_EQ(std::adjacent_find(in_order.begin(), in_order.end()), in_order.end());
  EXPECT_EQ(in_order.front(), 0);
  EXPECT_EQ(in_order.back(), 99999);
  EXPECT_EQ(block_sample(nullptr, 50, 80, 8).size(), 50u);
  // The same positions as runs (what the device gathers): the first at 0, the last ending at n.
  const SampleRuns runs = sample_runs(100000, 4096, 8);
  EXPECT_EQ(runs.size(), 4096);
  EXPECT_EQ(runs.first[0], 0);
  EXPECT_EQ(runs.first[7] + runs.each, 100000);
  for (int b = 0; b < 8; ++b) EXPECT_EQ(in_order[static_cast<std::size_t>(b * runs.each)], runs.first[b]);
  EXPECT_THROW(sample_runs(50, 80, 8), Error) << "a sample no smaller than the call";
  EXPECT_THROW(sample_runs(1000, 80, kAutoBlocks + 1), Error);
}

// Auto drops HybridKey where its order is the leaf sort's (key_is_leaf_sort): the premise, on
// the CPU (the GPU's orders equal the CPU's, KeyScheduleGpu): at the full height the compact key
// with a home hint sorts the queries as LeafSort does, for point correlation and for kNN over
// every point tree; and the rule names the full height only where key_depth does.
TEST(AutoChoice, TheCompactKeyAtTheFullHeightIsTheLeafSort) {
  const PcSetup s(5000, 3);
  const std::vector<float> qs = test::random_points(4000, 3, 21);
  auto orders = [&](auto run, int height, const char* what) {
    const Schedule sorted = run(ScheduleKind::LeafSort, 0);
    const Schedule key = run(ScheduleKind::HybridKey, height);
    ASSERT_EQ(sorted.order.size(), 4000u) << what;
    EXPECT_EQ(key.order, sorted.order) << what;
  };
  PointCorrelation pc(s.tree, Device::Cpu);
  orders([&](ScheduleKind kind, int d) {
    PcOptions o;
    o.device = Device::Cpu;
    o.schedule = kind;
    o.executor = ExecutorKind::Independent;
    o.radius = std::sqrt(s.v.radius2);
    o.depth = d;
    o.keep_schedule = true;
    return pc.run(s.pts.data(), 4000, o).schedule;  // (a query the root rejects sorts last under the key)
  }, s.tree.height(), "pc");
  auto knn = [&](const auto& tree, const char* what) {
    NearestNeighbors nn(tree, Device::Cpu);
    orders([&](ScheduleKind kind, int d) {
      KnnOptions o;
      o.device = Device::Cpu;
      o.k = 5;
      o.schedule = kind;
      o.executor = ExecutorKind::Independent;
      o.depth = d;
      o.keep_schedule = true;
      return nn.run(qs.data(), 4000, o).schedule;
    }, tree.height(), what);
    using W = detail::KnnWorkload<std::decay_t<decltype(tree)>>;
    const W w(3, 5);
    const std::vector<index_t> leaves = top_leaves_by_depth(tree.view());
    EXPECT_EQ(W::sort_key_leaves(tree.view()), leaves.back()) << what;
    for (index_t n = 1; n < 8 * leaves.back(); n += 97) {
      if (detail::key_is_leaf_sort(w, tree.view(), n)) {
        EXPECT_EQ(key_depth(leaves, n, true), tree.height()) << what << ", " << n << " queries";
      }
    }
    EXPECT_TRUE(detail::key_is_leaf_sort(w, tree.view(), 4 * leaves.back() + 1)) << what;
    EXPECT_FALSE(detail::key_is_leaf_sort(w, tree.view(), 4 * leaves.back())) << what;
  };
  knn(s.tree, "knn kd");
  knn(BallTree::build(s.pts.data(), 5000, 3), "knn ball");
  knn(VpTree::build(s.pts.data(), 5000, 3), "knn vp");
}

TEST(AutoChoice, TheCpuRunsIndependentTasksOverTheInputOrder) {
  const PcSetup s(2000);
  PointCorrelation pc(s.tree, Device::Cpu);
  PcOptions o;
  o.radius = std::sqrt(s.v.radius2);
  const PcResult r = pc.run(s.pts.data(), 2000, o);
  EXPECT_EQ(r.schedule_kind, ScheduleKind::InputOrder);
  EXPECT_EQ(r.executor_kind, ExecutorKind::Independent);
  EXPECT_EQ(r.auto_trial_ms, 0.0);
  EXPECT_EQ(r.counts, test::brute_force_counts(s.pts, s.pts, 3, std::sqrt(s.v.radius2)));
}

// ---- The GPU -------------------------------------------------------------------------------------

// The GPU's HybridKey order equals the CPU twin's, bit for bit, for every workload.
template <class Run>
void expect_twin_orders(const char* what, Run&& run, int height) {
  for (int d : {0, 1, 4, height}) {
    SCOPED_TRACE(std::string(what) + ", depth " + std::to_string(d));
    const Schedule gpu = run(Device::Gpu, d), cpu = run(Device::Cpu, d);
    EXPECT_EQ(gpu.order, cpu.order);
    EXPECT_EQ(gpu.bucket_offsets, cpu.bucket_offsets);
  }
}

TEST(KeyScheduleGpu, EqualsTheCpuTwinBitForBitOnEveryWorkload) {
  CANOPY_REQUIRE_GPU();
  const PcSetup s(6000, 3);
  {
    PointCorrelation g(s.tree, Device::Gpu), c(s.tree, Device::Cpu);
    expect_twin_orders("pc", [&](Device dev, int d) {
      PcOptions o;
      o.device = dev;
      o.schedule = ScheduleKind::HybridKey;
      o.executor = ExecutorKind::Independent;
      o.radius = std::sqrt(s.v.radius2);
      o.depth = d;
      o.keep_schedule = true;
      return (dev == Device::Gpu ? g : c).run(s.pts.data(), 6000, o).schedule;
    }, s.tree.height());
  }
  const std::vector<float> qs = test::random_points(3000, 3, 77);
  auto knn = [&](const auto& tree, const char* what) {
    NearestNeighbors g(tree, Device::Gpu), c(tree, Device::Cpu);
    expect_twin_orders(what, [&](Device dev, int d) {
      KnnOptions o;
      o.device = dev;
      o.k = 6;
      o.schedule = ScheduleKind::HybridKey;
      o.executor = ExecutorKind::FsmLockstep;
      o.depth = d;
      o.keep_schedule = true;
      return (dev == Device::Gpu ? g : c).run(qs.data(), 3000, o).schedule;
    }, tree.height());
  };
  knn(s.tree, "knn kd");
  knn(BallTree::build(s.pts.data(), 6000, 3), "knn ball");
  knn(VpTree::build(s.pts.data(), 6000, 3), "knn vp");
  const std::vector<float> mass(6000, 1.0f / 6000);
  const Octree oct = Octree::build(s.pts.data(), mass.data(), 6000);
  BarnesHut g(oct, Device::Gpu), c(oct, Device::Cpu);
  expect_twin_orders("bh", [&](Device dev, int d) {
    BhOptions o;
    o.device = dev;
    o.schedule = ScheduleKind::HybridKey;
    o.executor = ExecutorKind::Independent;
    o.depth = d;
    o.keep_schedule = true;
    return (dev == Device::Gpu ? g : c).run(o).schedule;
  }, oct.height());
}

TEST(KeyScheduleGpu, CustomVisitorsEqualTheCpuTwinToo) {
  CANOPY_REQUIRE_GPU();
  const GraphTree<test::Interval> t = test::build_interval_tree(test::random_interval_tree(3000, 6, 8));
  std::vector<float> xs(2000);
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  const index_t n = static_cast<index_t>(xs.size());
  for (bool guided : {false, true})
    for (int d : {0, 2, t.height()}) {
      TraversalOptions o;
      o.schedule = ScheduleKind::HybridKey;
      o.executor = ExecutorKind::FsmLockstep;
      o.depth = d;
      o.keep_schedule = true;
      const test::IntervalRun gpu = test::run_interval_gpu(t, xs, guided, o, 8);
      std::vector<std::int64_t> sums(xs.size());
      std::vector<std::int32_t> counts(xs.size());
      o.device = Device::Cpu;
      TraversalStats cpu;
      if (guided)
        cpu = traverse_cpu(t.view(), test::IntervalVisitor<true>{t.view(), t.payload().data(), xs.data(), sums.data(), counts.data()}, n, o);
      else
        cpu = traverse_cpu(t.view(), test::IntervalVisitor<false>{t.view(), t.payload().data(), xs.data(), sums.data(), counts.data()}, n, o);
      EXPECT_EQ(gpu.order, cpu.schedule.order) << (guided ? "guided" : "unguided") << ", depth " << d;
      EXPECT_EQ(gpu.counts, counts);
      EXPECT_EQ(gpu.sums, sums);
    }
}

// Auto's trial sample gathered on the device (queries in device memory) is the host's gather at
// block_sample's rows: of the last run's schedule (sorted) and of the input order.
TEST(AutoChoiceGpu, TheDeviceSampleIsTheHostGatherOfTheSameRows) {
  CANOPY_REQUIRE_GPU();
  using W = detail::KnnWorkload<KdTree>;
  const std::vector<float> pts = test::clustered_points(20000, 3, 6);
  const KdTree tree = KdTree::build(pts.data(), 20000, 3);
  const index_t n = 50000, m = 4100;
  const std::vector<float> qs = test::random_points(n, 3, 7);
  const W w(3, 4);
  const std::unique_ptr<GpuPart<W>> part = make_gpu_part<W>(tree);
  ASSERT_TRUE(part->gathers_samples());
  DeviceBuffer<float> queries, sample;
  DeviceBuffer<index_t> ids;
  DeviceBuffer<float> dist;
  const stream_t s = part->stream();  // the buffers are allocated in its order, and freed before it goes
  queries.reserve(qs.size(), "queries", s);
  ids.reserve(static_cast<std::size_t>(n) * 4, "ids", s);
  dist.reserve(static_cast<std::size_t>(n) * 4, "dist", s);
  sample.reserve(static_cast<std::size_t>(m) * 3, "sample", s);
  copy_memory(queries.get(), qs.data(), qs.size() * sizeof(float), s);
  CallData call;
  call.queries = queries.get();
  call.n = n;
  call.outputs[0] = ids.get();
  call.outputs[1] = dist.get();
  TraversalOptions opt;
  opt.schedule = ScheduleKind::LeafSort;
  opt.executor = ExecutorKind::Independent;
  opt.keep_schedule = true;
  TraversalStats st;
  part->run(w, W::host_view(tree), call, opt, st);
  ASSERT_EQ(st.schedule.order.size(), static_cast<std::size_t>(n));
  const SampleRuns runs = sample_runs(n, m, kAutoBlocks);
  for (bool sorted : {true, false}) {
    const std::vector<index_t> rows = block_sample(sorted ? st.schedule.order.data() : nullptr, n, m, kAutoBlocks);
    ASSERT_EQ(rows.size(), static_cast<std::size_t>(runs.size()));
    part->gather_sample(queries.get(), 3, runs, sorted, sample.get());
    std::vector<float> got(rows.size() * 3);
    copy_memory(got.data(), sample.get(), got.size() * sizeof(float), s);
    std::vector<float> want;
    for (index_t r : rows) want.insert(want.end(), qs.begin() + r * 3, qs.begin() + r * 3 + 3);
    EXPECT_EQ(got, want) << (sorted ? "sorted" : "input order");
  }
}

// Auto: a size class's first call runs the prior with no trial, its second pays for the trial,
// the next calls reuse the pick; every call says what it ran and its results equal the
// reference. 1.25 * 2^20 queries take the sampled trial, 3,000 the whole-call one.
TEST(AutoChoiceGpu, PicksOnceAndRemembersThePickPerSizeClass) {
  CANOPY_REQUIRE_GPU();
  AutoChoice::forget_all();
  const std::vector<float> pts = test::clustered_points(20000, 3, 4);
  const KdTree tree = KdTree::build(pts.data(), 20000, 3);
  const index_t big = kAutoSample + kAutoSample / 4;
  const std::vector<float> qs = test::random_points(big, 3, 5);
  const float radius = test::radius_for(tree, std::vector<float>(qs.begin(), qs.begin() + 30000), 8);
  PointCorrelation pc(tree, Device::Gpu);
  AutoPick small{ScheduleKind::Auto, ExecutorKind::Auto};  // the 3,000-query class's pick
  for (index_t n : {big, index_t{3000}}) {
    PcOptions ref;
    ref.radius = radius;
    ref.schedule = ScheduleKind::InputOrder;
    ref.executor = ExecutorKind::Independent;
    const std::vector<index_t> want = pc.run(qs.data(), n, ref).counts;
    PcOptions o;
    o.radius = radius;
    const PcResult first = pc.run(qs.data(), n, o);
    EXPECT_EQ(first.counts, want);
    EXPECT_EQ(first.auto_trial_ms, 0.0) << n;
    EXPECT_EQ(first.schedule_kind, ScheduleKind::LeafSort) << "the prior";
    EXPECT_EQ(first.executor_kind, ExecutorKind::FsmLockstep) << "the prior";
    const PcResult second = pc.run(qs.data(), n, o);
    EXPECT_EQ(second.counts, want);
    EXPECT_GT(second.auto_trial_ms, 0.0) << n;
    EXPECT_TRUE(second.schedule.order.empty()) << "the trial's schedule is not kept unless asked for";
    const PcResult third = pc.run(qs.data(), n, o);
    EXPECT_EQ(third.counts, want);
    EXPECT_EQ(third.auto_trial_ms, 0.0) << n;
    EXPECT_NE(third.schedule_kind, ScheduleKind::Auto);
    EXPECT_NE(third.executor_kind, ExecutorKind::Auto);
    const PcResult fourth = pc.run(qs.data(), n, o);
    EXPECT_EQ(fourth.schedule_kind, third.schedule_kind);
    EXPECT_EQ(fourth.executor_kind, third.executor_kind);
    small = {third.schedule_kind, third.executor_kind};
  }
  // The picks are kept per tree shape (height and size class), not per tree object
  // (AutoChoice, docs/api.md): another tree of the same shape, built over other points (a
  // simulation's rebuilt tree), runs the 3,000-query class's settled pick on its first calls,
  // with its own tree's results; a pick kept per object would run the prior, then a trial.
  const std::vector<float> moved = test::clustered_points(20000, 3, 6);
  ASSERT_NE(moved, pts);
  const KdTree rebuilt = KdTree::build(moved.data(), 20000, 3);
  ASSERT_EQ(rebuilt.height(), tree.height());
  ASSERT_EQ(rebuilt.node_count(), tree.node_count());
  ASSERT_NE(rebuilt.points(), tree.points()) << "a different tree";
  const auto reference = [&](PointCorrelation& api, index_t n) {
    PcOptions ref;
    ref.radius = radius;
    ref.schedule = ScheduleKind::InputOrder;
    ref.executor = ExecutorKind::Independent;
    return api.run(qs.data(), n, ref).counts;
  };
  PointCorrelation again(rebuilt, Device::Gpu);
  const std::vector<index_t> want = reference(again, 3000);
  ASSERT_NE(want, reference(pc, 3000)) << "the other tree should count other neighbours";
  PcOptions o;
  o.radius = radius;
  for (int call = 0; call < 2; ++call) {
    const PcResult r = again.run(qs.data(), 3000, o);
    EXPECT_EQ(r.auto_trial_ms, 0.0) << "call " << call;
    EXPECT_EQ(r.schedule_kind, small.schedule) << "call " << call;
    EXPECT_EQ(r.executor_kind, small.executor) << "call " << call;
    EXPECT_EQ(r.counts, want) << "call " << call;
  }
  // A tree of another shape (fewer levels, another size class) has picks of its own: its first
  // call runs the prior, its second pays for a trial. A pick kept per workload alone would reuse
  // the settled one on both.
  const std::vector<float> fewer = test::clustered_points(2500, 3, 7);
  const KdTree small_tree = KdTree::build(fewer.data(), 2500, 3);
  ASSERT_LT(small_tree.height(), tree.height());
  PointCorrelation other(small_tree, Device::Gpu);
  const std::vector<index_t> other_want = reference(other, 3000);
  const PcResult prior = other.run(qs.data(), 3000, o);
  EXPECT_EQ(prior.auto_trial_ms, 0.0);
  EXPECT_EQ(prior.schedule_kind, ScheduleKind::LeafSort) << "the prior";
  EXPECT_EQ(prior.executor_kind, ExecutorKind::FsmLockstep) << "the prior";
  EXPECT_EQ(prior.counts, other_want);
  const PcResult trial = other.run(qs.data(), 3000, o);
  EXPECT_GT(trial.auto_trial_ms, 0.0) << "a new shape's second call pays for its own trial";
  EXPECT_EQ(trial.counts, other_want);
}

// bits_for, the radix sorts' end bit and the packed fields' width: the fewest bits (at least 1)
// that hold 0 .. max_value, for every 64-bit argument.
TEST(BitsFor, FewestBitsThatHoldEveryValueUpToTheArgument) {
  EXPECT_EQ(bits_for(0), 1);
  EXPECT_EQ(bits_for(1), 1);
  EXPECT_EQ(bits_for(2), 2);
  EXPECT_EQ(bits_for(3), 2);
  EXPECT_EQ(bits_for(4), 3);
  for (int b = 1; b < 64; ++b) {
    const std::uint64_t p = std::uint64_t{1} << b;
    EXPECT_EQ(bits_for(p - 1), b) << "2^" << b << " - 1";
    EXPECT_EQ(bits_for(p), b + 1) << "2^" << b;
    EXPECT_EQ(bits_for(p + 1), b + 1) << "2^" << b << " + 1";
  }
  EXPECT_EQ(bits_for(std::uint64_t{1} << 63), 64);
  EXPECT_EQ(bits_for((std::uint64_t{1} << 63) - 1), 63);
  EXPECT_EQ(bits_for(~std::uint64_t{0}), 64);
  static_assert(bits_for(255) == 8 && bits_for(256) == 9, "usable in constant expressions");
  // Every value up to the argument fits, and the argument itself needs the last bit.
  for (std::uint64_t m : {std::uint64_t{5}, std::uint64_t{1000}, std::uint64_t{1} << 40}) {
    const int b = bits_for(m);
    EXPECT_EQ(m >> b, 0u);
    EXPECT_NE(m >> (b - 1), 0u);
  }
}

// Auto's size class (traversal picks and forest choices alike): the counts 2^c .. 2^(c+1) - 1
// share class c, checked against a plain count of halvings.
TEST(BitsFor, SizeClassIsThePowerOfTwoBelow) {
  EXPECT_EQ(size_class(0), 0);
  EXPECT_EQ(size_class(1), 0);
  for (std::uint64_t n : {std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{100}, std::uint64_t{1023}, std::uint64_t{1024},
                          std::uint64_t{10000}, std::uint64_t{1} << 40, ~std::uint64_t{0}}) {
    int halvings = 0;
    for (std::uint64_t m = n; m > 1; m >>= 1) ++halvings;
    EXPECT_EQ(size_class(n), halvings) << n;
  }
}

}  // namespace
}  // namespace canopy
