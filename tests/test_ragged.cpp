// Ragged results (runtime/ragged.hpp): PointCorrelation::run_lists against brute force on the
// CPU and the GPU for every schedule and executor, edge cases and errors, per-query radii, the
// memory budget's batches; a custom ragged visitor over a user tree; a visitor whose passes
// disagree; the batch planner.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/point_correlation.hpp"
#include "runtime/ragged.hpp"
#include "tests/ragged_visitors.hpp"
#include "test_errors.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

using Lists = std::vector<std::vector<index_t>>;

// For each query, the indices of the points within its radius (radii[q], or radius), ascending.
Lists brute_lists(const std::vector<float>& pts, const std::vector<float>& queries, int dims, float radius,
                  const std::vector<float>& radii = {}) {
  const index_t n = static_cast<index_t>(pts.size()) / dims, m = static_cast<index_t>(queries.size()) / dims;
  Lists out(static_cast<std::size_t>(m));
  for (index_t q = 0; q < m; ++q) {
    const float r = radii.empty() ? radius : radii[q];
    for (index_t i = 0; i < n; ++i)
      if (test::ref_point_distance2(&queries[q * dims], &pts[i * dims], dims) <= r * r) out[q].push_back(i);
  }
  return out;
}

// The result's lists (each sorted here when `sorted` is false) equal `want`.
template <class Result>
void expect_lists(const Result& r, const std::vector<index_t>& items, const Lists& want, bool sorted,
                  const std::string& what) {
  ASSERT_EQ(r.offsets.size(), want.size() + 1) << what;
  ASSERT_EQ(r.offsets.front(), 0) << what;
  ASSERT_EQ(r.offsets.back(), static_cast<index_t>(items.size())) << what;
  EXPECT_EQ(r.total, static_cast<index_t>(items.size())) << what;
  for (std::size_t q = 0; q < want.size(); ++q) {
    std::vector<index_t> got(items.begin() + r.offsets[q], items.begin() + r.offsets[q + 1]);
    if (sorted) {
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << what << ", query " << q;
    } else {
      std::sort(got.begin(), got.end());
    }
    ASSERT_EQ(got, want[q]) << what << ", query " << q;
  }
}

struct Variant {
  ScheduleKind schedule;
  ExecutorKind executor;
};
const Variant kVariants[] = {
    {ScheduleKind::InputOrder, ExecutorKind::Independent}, {ScheduleKind::InputOrder, ExecutorKind::FsmLockstep},
    {ScheduleKind::Hybrid, ExecutorKind::Independent},     {ScheduleKind::Hybrid, ExecutorKind::MaskLockstep},
    {ScheduleKind::HybridDevice, ExecutorKind::FsmLockstep}, {ScheduleKind::HybridKey, ExecutorKind::Independent},
    {ScheduleKind::HybridKey, ExecutorKind::FsmLockstep},  {ScheduleKind::LeafSort, ExecutorKind::Independent},
    {ScheduleKind::Auto, ExecutorKind::Auto},
};

std::string name(const Variant& v, Device d) {
  return std::string(to_string(d)) + " " + to_string(v.schedule) + " / " + to_string(v.executor);
}

// Every variant's lists equal brute force, their sizes run()'s counts; unsorted lists are the
// same on every variant (the kd-tree's leaf order), and the kept schedule is a permutation.
void expect_pc_lists(int dims, Device device) {
  const std::vector<float> pts = test::clustered_points(2000, dims, 300 + dims);
  const std::vector<float> queries = test::random_points(700, dims, 301 + dims);
  const KdTree tree = KdTree::build(pts.data(), 2000, dims);
  const float radius = test::radius_for(tree, queries, 20);
  const Lists want = brute_lists(pts, queries, dims, radius);
  PointCorrelation pc(tree, device);
  PcOptions po;
  po.radius = radius;
  po.device = device;
  const std::vector<index_t> counts = pc.run(queries.data(), 700, po).counts;
  std::vector<index_t> unsorted_reference;
  for (const Variant& v : kVariants) {
    PcListOptions o{po};
    o.schedule = v.schedule;
    o.executor = v.executor;
    o.keep_schedule = true;
    for (bool sorted : {true, false}) {
      o.sorted = sorted;
      const PcListResult r = pc.run_lists(queries.data(), 700, o);
      expect_lists(r, r.indices, want, sorted, name(v, device) + (sorted ? ", sorted" : ", unsorted"));
      for (index_t q = 0; q < 700; ++q) ASSERT_EQ(r.offsets[q + 1] - r.offsets[q], counts[q]) << name(v, device);
      EXPECT_EQ(r.device, device);
      EXPECT_EQ(r.fill_batches, 1);
      test::expect_permutation_with_buckets(r.schedule, 700);
      if (!sorted) {
        if (unsorted_reference.empty()) unsorted_reference = r.indices;
        EXPECT_EQ(r.indices, unsorted_reference) << name(v, device);
      }
    }
  }
  // The default call, no schedule kept (on the CPU one pass: ragged_cpu_one_pass) gives the same.
  PcListOptions d{po};
  for (bool sorted : {true, false}) {
    d.sorted = sorted;
    const PcListResult r = pc.run_lists(queries.data(), 700, d);
    const std::string what = std::string(to_string(device)) + " default call" + (sorted ? ", sorted" : ", unsorted");
    expect_lists(r, r.indices, want, sorted, what);
    for (index_t q = 0; q < 700; ++q) ASSERT_EQ(r.offsets[q + 1] - r.offsets[q], counts[q]) << what;
    EXPECT_EQ(r.fill_batches, 1);
    if (!sorted) {
      EXPECT_EQ(r.indices, unsorted_reference) << what;
    }
  }
}

void pc_lists_2d(Device d) { expect_pc_lists(2, d); }
void pc_lists_3d(Device d) { expect_pc_lists(3, d); }
void pc_lists_7d(Device d) { expect_pc_lists(7, d); }
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, EqualBruteForce2d, pc_lists_2d)
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, EqualBruteForce3d, pc_lists_3d)
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, EqualBruteForce7d, pc_lists_7d)

// Empty lists, a query whose list is every point, radius 0 over duplicated points, no queries.
void edge_cases(Device device) {
  std::vector<float> pts = test::random_points(300, 3, 7);
  std::copy(pts.begin(), pts.begin() + 30, pts.begin() + 30);  // points 10..19 repeat 0..9
  const KdTree tree = KdTree::build(pts.data(), 300, 3);
  PointCorrelation pc(tree, device);
  PcListOptions o;
  o.device = device;
  o.radius = 0.0f;
  const PcListResult zero = pc.run_lists(pts.data(), 300, o);
  expect_lists(zero, zero.indices, brute_lists(pts, pts, 3, 0.0f), true, "radius 0");
  EXPECT_EQ(zero.offsets[1] - zero.offsets[0], 2);  // point 0 and its copy, point 10
  const std::vector<float> far(60, 5.0f);
  o.radius = 0.5f;
  const PcListResult none = pc.run_lists(far.data(), 20, o);
  EXPECT_EQ(none.offsets, std::vector<index_t>(21, 0));
  EXPECT_TRUE(none.indices.empty());
  o.radius = 10.0f;
  const PcListResult all = pc.run_lists(pts.data(), 3, o);
  std::vector<index_t> every(300);
  for (index_t i = 0; i < 300; ++i) every[i] = i;
  for (int q = 0; q < 3; ++q)
    EXPECT_EQ(std::vector<index_t>(all.indices.begin() + all.offsets[q], all.indices.begin() + all.offsets[q + 1]), every);
  const PcListResult empty = pc.run_lists(pts.data(), 0, o);
  EXPECT_EQ(empty.offsets, std::vector<index_t>{0});
  EXPECT_TRUE(empty.indices.empty());
  EXPECT_EQ(empty.total, 0);
}
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, EdgeCases, edge_cases)

// Per-query radii: brute force with each query's own; all equal to r: radius r's lists exactly.
void per_query_radii(Device device) {
  const std::vector<float> pts = test::clustered_points(1500, 3, 21);
  const std::vector<float> queries = test::random_points(400, 3, 22);
  const KdTree tree = KdTree::build(pts.data(), 1500, 3);
  const float radius = test::radius_for(tree, queries, 15);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(0.0f, 2.0f * radius);
  std::vector<float> radii(400);
  for (float& r : radii) r = u(rng);
  radii[5] = 0.0f;
  PointCorrelation pc(tree, device);
  PcListOptions o;
  o.device = device;
  o.radii = radii.data();
  const PcListResult r = pc.run_lists(queries.data(), 400, o);
  expect_lists(r, r.indices, brute_lists(pts, queries, 3, 0.0f, radii), true, "per-query radii");
  const std::vector<float> same(400, radius);
  o.radii = same.data();
  o.sorted = false;
  const PcListResult a = pc.run_lists(queries.data(), 400, o);
  o.radii = nullptr;
  o.radius = radius;
  const PcListResult b = pc.run_lists(queries.data(), 400, o);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.indices, b.indices);
}
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, PerQueryRadii, per_query_radii)

// upper_from: the queries are the tree's points 300 .. 999 and each lists only the points of
// larger index (every pair of the self-join once), on every variant, sorted and not.
void upper_from(Device device) {
  const std::vector<float> pts = test::clustered_points(1000, 3, 31);
  const std::vector<float> queries(pts.begin() + 300 * 3, pts.end());
  const KdTree tree = KdTree::build(pts.data(), 1000, 3);
  const float radius = test::radius_for(tree, queries, 25);
  Lists want = brute_lists(pts, queries, 3, radius);
  std::size_t kept = 0, all = 0;
  for (std::size_t q = 0; q < want.size(); ++q) {
    all += want[q].size();
    want[q].erase(want[q].begin(), std::upper_bound(want[q].begin(), want[q].end(), index_t(300 + q)));
    kept += want[q].size();
  }
  ASSERT_GT(kept, 1000u);
  ASSERT_LT(kept, all);
  PointCorrelation pc(tree, device);
  PcListOptions o;
  o.device = device;
  o.radius = radius;
  o.upper_from = 300;
  for (const Variant& v : kVariants) {
    o.schedule = v.schedule;
    o.executor = v.executor;
    for (bool sorted : {true, false}) {
      o.sorted = sorted;
      const PcListResult r = pc.run_lists(queries.data(), 700, o);
      expect_lists(r, r.indices, want, sorted, name(v, device) + " upper_from");
    }
  }
  o.upper_from = -2;
  EXPECT_HAS(test::error_of([&] { pc.run_lists(queries.data(), 700, o); }), "upper_from = -2");
}
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, UpperFromListsEachPairOnce, upper_from)

void errors(Device device) {
  const std::vector<float> pts = test::random_points(500, 2, 4);
  const KdTree tree = KdTree::build(pts.data(), 500, 2);
  PointCorrelation pc(tree, device);
  PcListOptions o;
  o.device = device;
  o.radius = 0.1f;
  std::vector<float> bad = pts;
  bad[101] = std::nanf("");
  EXPECT_HAS(test::error_of([&] { pc.run_lists(bad.data(), 500, o); }), "query 50");
  EXPECT_HAS(test::error_of([&] { pc.run_lists(nullptr, 5, o); }), "null");
  std::vector<float> radii(500, 0.1f);
  radii[7] = -1.0f;
  o.radii = radii.data();
  EXPECT_HAS(test::error_of([&] { pc.run_lists(pts.data(), 500, o); }), "radii[7]");
  radii[7] = std::nanf("");
  EXPECT_HAS(test::error_of([&] { pc.run_lists(pts.data(), 500, o); }), "radii[7]");
  o.radii = nullptr;
  o.radius = -1.0f;
  EXPECT_HAS(test::error_of([&] { pc.run_lists(pts.data(), 500, o); }), "radius");
  o.radius = 0.1f;
  EXPECT_HAS(test::error_of([&] { pc.run_lists(pts.data(), 5, o, nullptr, [](index_t) { return nullptr; }); }),
             "offsets");
  std::vector<index_t> offsets(501);
  EXPECT_HAS(test::error_of([&] { pc.run_lists(pts.data(), 500, o, offsets.data(), [](index_t) { return nullptr; }); }),
             "item buffer");
  o.depth = tree.height() + 1;
  EXPECT_HAS(test::error_of([&] { pc.run_lists(pts.data(), 500, o); }), "deeper than the tree");
}
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, Errors, errors)

// The memory budget: lists larger than what it leaves are filled in batches (GPU), with the same
// lists; one query's list alone too large is an OutOfMemory naming it. The CPU ignores budgets.
void memory_budget(Device device) {
  const std::vector<float> pts = test::clustered_points(3000, 3, 41);
  const KdTree tree = KdTree::build(pts.data(), 3000, 3);
  const float radius = test::radius_for(tree, pts, 40);
  PointCorrelation pc(tree, device);
  PcListOptions o;
  o.device = device;
  o.radius = radius;
  o.schedule = ScheduleKind::InputOrder;  // no scheduling matrix: the budget is the lists'
  const PcListResult whole = pc.run_lists(pts.data(), 3000, o);
  const std::size_t held = tree.bytes() + 3000 * 3 * sizeof(float) + 3001 * 4 * sizeof(index_t);
  o.memory_budget = held + static_cast<std::size_t>(whole.total / 5) * 2 * sizeof(index_t);
  for (ScheduleKind s : {ScheduleKind::InputOrder, ScheduleKind::HybridKey}) {
    o.schedule = s;
    const PcListResult part = pc.run_lists(pts.data(), 3000, o);
    EXPECT_EQ(part.offsets, whole.offsets) << to_string(s);
    EXPECT_EQ(part.indices, whole.indices) << to_string(s);
    if (device == Device::Gpu) {
      EXPECT_GE(part.fill_batches, 5) << to_string(s);
    }
  }
  if (device == Device::Cpu) return;
  o.schedule = ScheduleKind::InputOrder;
  o.memory_budget = held + 2 * 2 * sizeof(index_t);  // two items
  const std::string e = test::error_of([&] { pc.run_lists(pts.data(), 3000, o); }, "an OutOfMemory");
  EXPECT_HAS(e, "more than the device memory left for a batch of items holds (2 items");
  EXPECT_THROW(pc.run_lists(pts.data(), 3000, o), OutOfMemory);
}
CANOPY_TEST_ON_CPU_AND_GPU(RaggedLists, MemoryBudgetBatches, memory_budget)

// ---- A custom ragged visitor: the leaves of an interval tree that hold each point -------------

// The leaves a recursive walk reaches, in its order (children in index order).
void reach(const GraphTreeView& t, const std::vector<test::Interval>& iv, float x, node_id n,
           std::vector<index_t>& out) {
  if (!(iv[n].lo <= x && x <= iv[n].hi)) return;
  if (t.is_leaf(n)) out.push_back(n);
  for (int i = 0; i < t.child_count(n); ++i) reach(t, iv, x, t.child(n, i), out);
}

struct IntervalFixture {
  GraphTree<test::Interval> tree = test::build_interval_tree(test::random_interval_tree(4000, 5, 51));
  std::vector<float> xs;
  Lists walk;  // the recursive walk's leaves per point, in its order
  IntervalFixture() {
    std::mt19937 rng(52);
    std::uniform_real_distribution<float> u(-0.05f, 1.05f);
    for (int i = 0; i < 2500; ++i) xs.push_back(u(rng));
    walk.resize(xs.size());
    for (std::size_t q = 0; q < xs.size(); ++q) reach(tree.view(), tree.payload(), xs[q], 0, walk[q]);
  }
};
const IntervalFixture& intervals() {
  static const IntervalFixture f;
  return f;
}

template <bool Guided>
RaggedResult<node_id> leaves_cpu(const RaggedOptions& opt) {
  const IntervalFixture& f = intervals();
  test::IntervalLeaves<Guided> v;
  v.tree = f.tree.view();
  v.iv = f.tree.payload().data();
  v.xs = f.xs.data();
  return traverse_ragged_cpu(f.tree.view(), v, static_cast<index_t>(f.xs.size()), opt);
}

// Unguided: each list is the recursive walk's, in its order, on every schedule and executor;
// guided: the same leaves (sorted: ascending).
void custom_visitor(Device device) {
  const IntervalFixture& f = intervals();
  Lists sorted_walk = f.walk;
  for (auto& l : sorted_walk) std::sort(l.begin(), l.end());
  for (const Variant& v : kVariants) {
    if (v.schedule == ScheduleKind::LeafSort) continue;  // no sort key
    for (bool guided : {false, true})
      for (bool sort : {false, true})
        for (bool device_outputs : {false, true}) {
          if (device == Device::Cpu && device_outputs) continue;
          RaggedOptions o;
          o.schedule = v.schedule;
          o.executor = v.executor;
          o.sort = sort;
          o.keep_schedule = true;
          const RaggedResult<node_id> r =
              device == Device::Gpu ? test::interval_leaves_gpu(f.tree, f.xs, guided, o, device_outputs)
                                    : (guided ? leaves_cpu<true>(o) : leaves_cpu<false>(o));
          const std::vector<index_t> items(r.items.begin(), r.items.end());
          const std::string what = name(v, device) + (guided ? ", guided" : "") + (sort ? ", sorted" : "");
          expect_lists(r, items, sort || guided ? sorted_walk : f.walk, sort, what);
          if (!guided && !sort) {
            for (std::size_t q = 0; q < f.walk.size(); ++q)
              ASSERT_EQ(std::vector<index_t>(items.begin() + r.offsets[q], items.begin() + r.offsets[q + 1]), f.walk[q])
                  << what << ", query " << q;
          }
          test::expect_permutation_with_buckets(r.schedule, static_cast<index_t>(f.xs.size()));
        }
  }
}
CANOPY_TEST_ON_CPU_AND_GPU(RaggedCustom, LeavesEqualTheRecursiveWalk, custom_visitor)

TEST(RaggedCustom, CpuRejectsTheGpu) {
  RaggedOptions o;
  o.device = Device::Gpu;
  EXPECT_HAS(test::error_of([&] { leaves_cpu<false>(o); }), "RaggedTraverser");
}

// A visitor that breaks the rule: each query emits one item in the count pass and two in the
// fill (told apart by a ticket per init). An error, and nothing written past the items.
struct Fickle {
  using Item = index_t;
  GraphTreeView tree;
  std::atomic<index_t>* tickets;
  index_t n;
  struct State {
    index_t emit;
  };
  State init(index_t) const { return {tickets->fetch_add(1) < n ? 1 : 2}; }
  bool descend(State&, node_id) const { return true; }
  template <class Emit>
  void leaf(State& s, node_id, Emit& emit) const {
    for (index_t i = 0; i < s.emit; ++i) emit(i);
  }
};

TEST(RaggedCustom, PassesThatDisagreeAreAnError) {
  const IntervalFixture& f = intervals();
  std::atomic<index_t> tickets{0};
  const Fickle v{f.tree.view(), &tickets, 100};
  RaggedOptions o;
  o.schedule = ScheduleKind::InputOrder;
  std::vector<index_t> offsets(101), items;
  const std::string e = test::error_of([&] {
    traverse_ragged_cpu(f.tree.view(), v, 100, o, offsets.data(), [&](index_t total) {
      items.assign(static_cast<std::size_t>(total) + 1, -7);  // one guard item past the end
      return items.data();
    });
  });
  EXPECT_HAS(e, "another number of items in the fill pass");
  ASSERT_FALSE(items.empty());
  EXPECT_EQ(items.back(), -7);
}

// ---- The batch planner ------------------------------------------------------------------------

TEST(RaggedBatches, PlanFitsTheCapacity) {
  const std::vector<index_t> counts{3, 0, 5, 2, 2, 0, 0, 7, 1};
  std::vector<index_t> off(counts.size() + 1);
  detail::exclusive_scan(counts.data(), static_cast<index_t>(counts.size()), off.data());
  EXPECT_EQ(off, (std::vector<index_t>{0, 3, 3, 8, 10, 12, 12, 12, 19, 20}));
  const std::vector<index_t> b = detail::ragged_batches(off.data(), 9, 7, 8, "test");
  EXPECT_EQ(b, (std::vector<index_t>{0, 2, 4, 7, 8, 9}));
  for (std::size_t i = 0; i + 1 < b.size(); ++i) EXPECT_LE(off[b[i + 1]] - off[b[i]], 7);
  EXPECT_EQ(detail::ragged_batches(off.data(), 9, 100, 8, "test"), (std::vector<index_t>{0, 9}));
  const std::string e = test::error_of([&] { detail::ragged_batches(off.data(), 9, 6, 8, "lists"); });
  EXPECT_HAS(e, "lists: query 7 has 7 items");
  // The order regrouped by batch, each batch keeping its queries' order.
  const std::vector<index_t> order{8, 3, 0, 6, 1, 4, 7, 2, 5};
  EXPECT_EQ(detail::split_order(order.data(), 9, b), (std::vector<index_t>{0, 1, 3, 2, 6, 4, 5, 7, 8}));
  EXPECT_EQ(detail::split_order(nullptr, 9, b), (std::vector<index_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(detail::ragged_batch_capacity(1000, 200, 0, 16), 50);
  EXPECT_EQ(detail::ragged_batch_capacity(100, 200, 0, 16), 0);
  EXPECT_EQ(detail::ragged_batch_capacity(0, 200, 1600, 10), 150);
  EXPECT_EQ(detail::ragged_batch_capacity(0, 0, 1600, 0), std::numeric_limits<std::int32_t>::max());
}

}  // namespace
}  // namespace canopy
