// Schedule soundness: whatever the schedule and executor, every query visits the same nodes
// in the same order (the recursive traversal of the paper's Figure 1) and gets the same count.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "executor/cpu_executor.hpp"
#include "gpu_trace.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "scheduler/schedule.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

constexpr int kCapacity = 4096;

// The reference: Figure 1's recursion, written independently of the executors.
void recurse(const KdTreeView& t, const float* q, float r2, node_id n, std::vector<node_id>& seq) {
  const bool go = test::ref_box_distance2(q, t.lo(n), t.hi(n), t.dims) <= r2;
  seq.push_back(go ? n : ~n);
  if (!go || t.is_leaf(n)) return;
  recurse(t, q, r2, n + 1, seq);
  recurse(t, q, r2, static_cast<node_id>(t.nodes[n].first), seq);
}

struct Fixture {
  std::vector<float> points, queries;
  int dims = 0;
  KdTree tree;
  float radius = 0;
  std::vector<std::vector<node_id>> reference;  // per query
  std::vector<index_t> counts;                  // brute force
  std::vector<std::pair<std::string, std::vector<index_t>>> schedules;
};

Fixture make_fixture(std::vector<float> points, int dims, double mean) {
  Fixture f;
  f.dims = dims;
  f.points = std::move(points);
  f.tree = KdTree::build(f.points.data(), static_cast<index_t>(f.points.size()) / dims, dims);
  // Queries: the points, shuffled, plus a few outside the data's box.
  const index_t n = static_cast<index_t>(f.points.size()) / dims;
  std::vector<index_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), index_t{0});
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(77));
  for (index_t i : perm) f.queries.insert(f.queries.end(), f.points.begin() + i * dims, f.points.begin() + (i + 1) * dims);
  for (int k = 0; k < 5; ++k)
    for (int d = 0; d < dims; ++d) f.queries.push_back(k % 2 ? -0.5f : 1.5f);
  const index_t m = static_cast<index_t>(f.queries.size()) / dims;
  f.radius = test::radius_for(f.tree, f.queries, mean);
  f.counts = test::brute_force_counts(f.points, f.queries, dims, f.radius);
  const KdTreeView v = f.tree.view();
  f.reference.resize(static_cast<std::size_t>(m));
  for (index_t q = 0; q < m; ++q) recurse(v, &f.queries[q * dims], f.radius * f.radius, 0, f.reference[q]);

  // Schedules: input order, the hybrid (sandpile) at two depths, the leaf sort, random, reversed.
  f.schedules.emplace_back("input", input_order(m).order);
  for (int depth : {3, std::min(8, f.tree.height())}) {
    const TopTree top = TopTree::build(v, depth);
    dispatch_dims(dims, [&](auto md) {
      PointCorrelationVisitor<decltype(md)::value> pc;
      pc.tree = v;
      pc.queries = f.queries.data();
      pc.radius2 = f.radius * f.radius;
      f.schedules.emplace_back("sandpile-d" + std::to_string(depth), sandpile(inspect_cpu(v, top.view(), pc, m).view()).order);
    });
  }
  std::vector<std::int64_t> keys(static_cast<std::size_t>(m));
  for (index_t q = 0; q < m; ++q) keys[q] = v.find_leaf(&f.queries[q * dims]);
  f.schedules.emplace_back("leaf-sort", sort_by_key(keys.data(), m).order);
  std::vector<index_t> rnd = input_order(m).order;
  std::shuffle(rnd.begin(), rnd.end(), std::mt19937_64(5));
  f.schedules.emplace_back("random", rnd);
  std::vector<index_t> rev = input_order(m).order;
  std::reverse(rev.begin(), rev.end());
  f.schedules.emplace_back("reversed", rev);
  return f;
}

void expect_traces(const Fixture& f, const std::vector<node_id>& trace, const std::vector<std::int32_t>& lengths,
                   const std::vector<index_t>& counts, const std::string& what) {
  const index_t m = static_cast<index_t>(f.reference.size());
  ASSERT_EQ(counts, f.counts) << what;
  for (index_t q = 0; q < m; ++q) {
    const auto& ref = f.reference[q];
    ASSERT_LE(static_cast<int>(ref.size()), kCapacity) << "raise kCapacity";
    ASSERT_EQ(lengths[q], static_cast<std::int32_t>(ref.size())) << what << ", query " << q;
    ASSERT_TRUE(std::equal(ref.begin(), ref.end(), trace.begin() + q * kCapacity)) << what << ", query " << q;
  }
}

struct CpuRun {
  std::vector<node_id> trace;
  std::vector<std::int32_t> lengths;
  std::vector<index_t> counts, warp_nodes;
};

// Runs the CPU executor (Independent) or the warp emulator (lockstep kinds) with tracing.
CpuRun run_cpu(const Fixture& f, const std::vector<index_t>& order, ExecutorKind kind) {
  const index_t m = static_cast<index_t>(f.reference.size());
  CpuRun r;
  r.trace.assign(static_cast<std::size_t>(m) * kCapacity, 0);
  r.lengths.assign(static_cast<std::size_t>(m), 0);
  r.counts.assign(static_cast<std::size_t>(m), -1);
  const KdTreeView v = f.tree.view();
  dispatch_dims(f.dims, [&](auto md) {
    TracingVisitor<PointCorrelationVisitor<decltype(md)::value>> tv;
    tv.inner.tree = v;
    tv.inner.queries = f.queries.data();
    tv.inner.counts = r.counts.data();
    tv.inner.radius2 = f.radius * f.radius;
    tv.trace = r.trace.data();
    tv.lengths = r.lengths.data();
    tv.capacity = kCapacity;
    if (kind == ExecutorKind::Independent)
      execute_cpu(v, tv, order.data(), m);
    else
      r.warp_nodes = emulate_lockstep(v, tv, order.data(), m,
                                      kind == ExecutorKind::MaskLockstep ? LockstepMode::Mask : LockstepMode::Fsm);
  });
  return r;
}

// Nodes a lockstep warp visits for an unguided traversal: the union of its lanes' visits.
std::vector<index_t> union_counts(const Fixture& f, const std::vector<index_t>& order) {
  std::vector<index_t> out;
  for (std::size_t w = 0; w * 32 < order.size(); ++w) {
    std::set<node_id> nodes;
    for (std::size_t i = w * 32; i < std::min(order.size(), w * 32 + 32); ++i)
      for (node_id n : f.reference[order[i]]) nodes.insert(n < 0 ? ~n : n);
    out.push_back(static_cast<index_t>(nodes.size()));
  }
  return out;
}

std::vector<Fixture>& fixtures() {
  static std::vector<Fixture> all = [] {
    std::vector<Fixture> v;
    v.push_back(make_fixture(test::clustered_points(3000, 3, 21), 3, 24));
    v.push_back(make_fixture(test::random_points(2000, 7, 22), 7, 16));
    v.push_back(make_fixture(test::real_points("cities_4k.csv", "").coords, 2, 30));
    v.push_back(make_fixture(test::random_points(700, 16, 23), 16, 8));
    return v;
  }();
  return all;
}

TEST(Soundness, CpuExecutorsVisitTheSameNodesUnderEverySchedule) {
  for (const Fixture& f : fixtures())
    for (const auto& [name, order] : f.schedules)
      for (ExecutorKind k : {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep}) {
        const CpuRun r = run_cpu(f, order, k);
        expect_traces(f, r.trace, r.lengths, r.counts, std::string("cpu ") + to_string(k) + ", " + name);
        if (k != ExecutorKind::Independent) {
          EXPECT_EQ(r.warp_nodes, union_counts(f, order)) << to_string(k) << ", " << name;
        }
      }
}

TEST(Soundness, GpuExecutorsVisitTheSameNodesUnderEverySchedule) {
  CANOPY_REQUIRE_GPU();
  for (const Fixture& f : fixtures())
    for (const auto& [name, order] : f.schedules)
      for (ExecutorKind k : {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep}) {
        const test::Traced g = test::run_traced_gpu(f.tree, f.queries, f.radius, order, k, kCapacity);
        expect_traces(f, g.trace, g.lengths, g.counts, std::string("gpu ") + to_string(k) + ", " + name);
        if (k != ExecutorKind::Independent) {
          // The instrumented kernel counts exactly what the emulator counts.
          EXPECT_EQ(g.warp_nodes, run_cpu(f, order, k).warp_nodes) << to_string(k) << ", " << name;
        }
      }
}

TEST(Soundness, GpuInputOrderNeedsNoOrderArray) {
  CANOPY_REQUIRE_GPU();
  const Fixture& f = fixtures()[0];
  for (ExecutorKind k : {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep}) {
    const test::Traced g = test::run_traced_gpu(f.tree, f.queries, f.radius, {}, k, kCapacity);
    expect_traces(f, g.trace, g.lengths, g.counts, std::string("gpu ") + to_string(k) + ", null order");
  }
}

TEST(WarpEmulator, GoodSchedulesVisitFewerNodes) {
  // Not a speed test: the divergence metric must respond to the schedule as the paper says.
  const Fixture& f = fixtures()[0];
  auto mean = [](const std::vector<index_t>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  const double random = mean(run_cpu(f, f.schedules[4].second, ExecutorKind::FsmLockstep).warp_nodes);
  const double hybrid = mean(run_cpu(f, f.schedules[2].second, ExecutorKind::FsmLockstep).warp_nodes);
  EXPECT_LT(hybrid * 2, random);
}

}  // namespace
}  // namespace canopy
