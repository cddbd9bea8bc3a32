// The public API: point-correlation counts equal a brute-force count for every variant, on
// the CPU and the GPU, and bad input is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "gpu_trace.hpp"
#include "stream_probe.hpp"
#include "runtime/point_correlation.hpp"
#include "test_errors.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

struct Variant {
  ExecutorKind executor;
  ScheduleKind schedule;
};

const Variant kAll[] = {
    {ExecutorKind::Independent, ScheduleKind::InputOrder},  {ExecutorKind::MaskLockstep, ScheduleKind::InputOrder},
    {ExecutorKind::FsmLockstep, ScheduleKind::InputOrder},  {ExecutorKind::MaskLockstep, ScheduleKind::LeafSort},
    {ExecutorKind::FsmLockstep, ScheduleKind::LeafSort},    {ExecutorKind::FsmLockstep, ScheduleKind::Hybrid},
    {ExecutorKind::Independent, ScheduleKind::Hybrid},      {ExecutorKind::MaskLockstep, ScheduleKind::Hybrid},
    {ExecutorKind::FsmLockstep, ScheduleKind::HybridDevice}, {ExecutorKind::Independent, ScheduleKind::HybridDevice},
    {ExecutorKind::FsmLockstep, ScheduleKind::HybridKey},    {ExecutorKind::Independent, ScheduleKind::HybridKey},
    {ExecutorKind::MaskLockstep, ScheduleKind::HybridKey},   {ExecutorKind::Auto, ScheduleKind::Auto},
};

std::string name(const Variant& v, Device d) {
  return std::string(to_string(d)) + " " + to_string(v.executor) + " / " + to_string(v.schedule);
}

// Every variant on `device` equals the brute-force count; with the GPU, the instrumented
// kernels' node counts equal the emulator's on the same schedule.
void expect_all_variants(const std::vector<float>& pts, const std::vector<float>& queries, int dims, float radius,
                         Device device, int depth = 0) {
  const KdTree tree = KdTree::build(pts.data(), static_cast<index_t>(pts.size()) / dims, dims);
  const std::vector<index_t> expect = test::brute_force_counts(pts, queries, dims, radius);
  PointCorrelation pc(tree, device);
  ASSERT_EQ(pc.device(), device);
  std::vector<index_t> hybrid_order, key_order;
  for (const Variant& v : kAll) {
    PcOptions o;
    o.radius = radius;
    o.device = device;
    o.executor = v.executor;
    o.schedule = v.schedule;
    o.depth = depth;
    o.count_nodes = v.executor == ExecutorKind::MaskLockstep || v.executor == ExecutorKind::FsmLockstep;
    o.gpu_count_nodes = device == Device::Gpu && o.count_nodes;
    o.keep_schedule = true;
    const PcResult r = pc.run(queries.data(), static_cast<index_t>(queries.size()) / dims, o);
    ASSERT_EQ(r.counts, expect) << name(v, device) << ", dims " << dims << ", radius " << radius;
    EXPECT_EQ(r.device, device);
    std::vector<index_t> order = r.schedule.order;
    std::sort(order.begin(), order.end());
    for (std::size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], static_cast<index_t>(i)) << name(v, device);
    ASSERT_EQ(order.size(), queries.size() / dims);
    EXPECT_EQ(r.schedule.bucket_offsets.front(), 0);
    EXPECT_EQ(r.schedule.bucket_offsets.back(), r.schedule.size());
    if (v.schedule == ScheduleKind::Hybrid || v.schedule == ScheduleKind::HybridDevice) {
      // Wherever the sandpile runs, the schedule is the same.
      if (hybrid_order.empty()) hybrid_order = r.schedule.order;
      EXPECT_EQ(r.schedule.order, hybrid_order) << name(v, device);
    }
    if (v.schedule == ScheduleKind::HybridKey) {
      // Whichever executor runs it, the key order is the same.
      if (key_order.empty()) key_order = r.schedule.order;
      EXPECT_EQ(r.schedule.order, key_order) << name(v, device);
    }
    if (v.schedule == ScheduleKind::Auto) {
      EXPECT_NE(r.schedule_kind, ScheduleKind::Auto);
      EXPECT_NE(r.executor_kind, ExecutorKind::Auto);
    } else {
      EXPECT_EQ(r.schedule_kind, v.schedule);
      EXPECT_EQ(r.executor_kind, v.executor);
    }
    if (o.gpu_count_nodes) {
      EXPECT_EQ(r.gpu_warp_nodes, r.warp_nodes) << name(v, device);
    }
  }
}

class CountsEqualBruteForce : public ::testing::TestWithParam<int> {};

void expect_counts_in_dims(int dims, Device device) {
  const std::vector<float> pts = test::clustered_points(2500, dims, 100 + dims);
  const KdTree tree = KdTree::build(pts.data(), 2500, dims);
  for (double mean : {1.0, 30.0}) expect_all_variants(pts, pts, dims, test::radius_for(tree, pts, mean), device);
  const std::vector<float> queries = test::random_points(1000, dims, 7);
  expect_all_variants(pts, queries, dims, test::radius_for(tree, queries, 10), device);
}

TEST_P(CountsEqualBruteForce, Cpu) { expect_counts_in_dims(GetParam(), Device::Cpu); }

TEST_P(CountsEqualBruteForce, Gpu) {
  CANOPY_REQUIRE_GPU();
  expect_counts_in_dims(GetParam(), Device::Gpu);
}

INSTANTIATE_TEST_SUITE_P(Dims, CountsEqualBruteForce, ::testing::Values(1, 2, 3, 4, 5, 7, 8, 9, 16));

TEST(CountsEqualBruteForceReal, CovtypeAndCities) {
  std::vector<Device> devices{Device::Cpu};
  if (gpu_available()) devices.push_back(Device::Gpu);
  for (auto [file, cols] : {std::pair<const char*, const char*>{"covtype_4k.csv", "0-6"}, {"cities_4k.csv", ""}}) {
    const PointSet ps = test::real_points(file, cols);
    const KdTree tree = KdTree::build(ps.data(), ps.size(), ps.dims);
    const float radius = test::radius_for(tree, ps.coords, 32);
    for (Device d : devices) expect_all_variants(ps.coords, ps.coords, ps.dims, radius, d);
  }
}

TEST(CountsEqualBruteForceEdge, ZeroAndHugeRadiusEveryDepth) {
  std::vector<Device> devices{Device::Cpu};
  if (gpu_available()) devices.push_back(Device::Gpu);
  std::vector<float> pts = test::clustered_points(600, 2, 3);  // has exact duplicates
  for (Device d : devices) {
    expect_all_variants(pts, pts, 2, 0.0f, d);    // a point counts itself and its duplicates
    expect_all_variants(pts, pts, 2, 10.0f, d);   // everything
    const KdTree tree = KdTree::build(pts.data(), 600, 2);
    for (int depth = 1; depth <= tree.height(); ++depth) expect_all_variants(pts, pts, 2, 0.05f, d, depth);
  }
}

TEST(CountsEqualBruteForceEdge, OnePointAndIdenticalPoints) {
  std::vector<Device> devices{Device::Cpu};
  if (gpu_available()) devices.push_back(Device::Gpu);
  for (Device d : devices) {
    expect_all_variants({0.5f, 0.5f}, {0.5f, 0.5f, 0.9f, 0.9f}, 2, 0.1f, d);
    expect_all_variants(std::vector<float>(3 * 200, 0.3f), test::random_points(77, 3, 1), 3, 0.4f, d);
  }
}

TEST(CountsEqualBruteForceEdge, LargeBatchAcrossWarpsAndBlocks) {
  // 40,000 queries: many blocks, a partial last warp, counts above 2^8.
  std::vector<Device> devices{Device::Cpu};
  if (gpu_available()) devices.push_back(Device::Gpu);
  const std::vector<float> pts = test::random_points(5003, 3, 9);
  const std::vector<float> queries = test::random_points(40001, 3, 10);
  const KdTree tree = KdTree::build(pts.data(), 5003, 3);
  const std::vector<index_t> expect = test::brute_force_counts(pts, queries, 3, 0.15f);
  for (Device d : devices) {
    PointCorrelation pc(tree, d);
    for (const Variant& v : kAll) {
      PcOptions o;
      o.radius = 0.15f;
      o.device = d;
      o.executor = v.executor;
      o.schedule = v.schedule;
      EXPECT_EQ(pc.run(queries.data(), 40001, o).counts, expect) << name(v, d);
    }
  }
}

using test::error_of;

// Several radii in one walk (run_radii): every column equals the brute-force count at its radius
// for every variant (radii 0, repeated, and past every point included), and a lockstep warp
// visits the nodes of the largest radius's run() (the instrumented GPU kernels agree).
void expect_radii(Device device) {
  for (int dims : {2, 3, 7}) {
    const std::vector<float> pts = test::clustered_points(2000, dims, 40 + dims);
    const std::vector<float> queries = test::random_points(700, dims, 50 + dims);
    const index_t m = 700;
    const KdTree tree = KdTree::build(pts.data(), 2000, dims);
    std::vector<float> radii = {0.0f, test::radius_for(tree, queries, 1), test::radius_for(tree, queries, 5)};
    radii.push_back(radii.back());
    radii.push_back(test::radius_for(tree, queries, 40));
    if (dims == 2) radii.push_back(1e6f);
    if (dims == 3)  // as many as a walk takes
      while (radii.size() < static_cast<std::size_t>(kMaxPcRadii)) radii.push_back(radii.back() * 1.05f);
    const int n_radii = static_cast<int>(radii.size());
    std::vector<std::vector<index_t>> expect;
    for (float r : radii) expect.push_back(test::brute_force_counts(pts, queries, dims, r));
    PointCorrelation pc(tree, device);
    for (const Variant& v : kAll) {
      PcOptions o;
      o.device = device;
      o.executor = v.executor;
      o.schedule = v.schedule;
      o.count_nodes = v.executor == ExecutorKind::MaskLockstep || v.executor == ExecutorKind::FsmLockstep;
      o.gpu_count_nodes = device == Device::Gpu && o.count_nodes;
      std::vector<index_t> counts(static_cast<std::size_t>(m * n_radii), -1);
      const TraversalStats st = pc.run_radii(queries.data(), m, radii.data(), n_radii, o, counts.data());
      for (int j = 0; j < n_radii; ++j)
        for (index_t i = 0; i < m; ++i)
          ASSERT_EQ(counts[static_cast<std::size_t>(i * n_radii + j)], expect[static_cast<std::size_t>(j)][i])
              << name(v, device) << ", dims " << dims << ", query " << i << ", radius " << radii[j];
      if (o.count_nodes && v.schedule != ScheduleKind::Auto) {
        o.radius = radii.back();
        EXPECT_EQ(st.warp_nodes, pc.run(queries.data(), m, o).warp_nodes) << name(v, device);
        if (o.gpu_count_nodes) EXPECT_EQ(st.gpu_warp_nodes, st.warp_nodes) << name(v, device);
      }
    }
  }
}

TEST(PcRadii, EqualBruteForceCpu) { expect_radii(Device::Cpu); }
TEST(PcRadii, EqualBruteForceGpu) {
  CANOPY_REQUIRE_GPU();
  expect_radii(Device::Gpu);
}

TEST(PcRadii, BadRadiiAreErrorsNamingThem) {
  const std::vector<float> pts = test::random_points(200, 2, 4);
  const KdTree tree = KdTree::build(pts.data(), 200, 2);
  PointCorrelation pc(tree, Device::Cpu);
  std::vector<index_t> counts(200 * 40);
  auto err = [&](std::vector<float> r, int n) {
    return error_of([&] { pc.run_radii(pts.data(), 200, r.data(), n, PcOptions{}, counts.data()); });
  };
  EXPECT_NE(err({0.1f}, 0).find("n_radii = 0"), std::string::npos);
  EXPECT_NE(err(std::vector<float>(33, 0.1f), 33).find("n_radii = 33 is outside 1..32"), std::string::npos);
  EXPECT_NE(err({0.1f, std::nanf("")}, 2).find("radii[1]"), std::string::npos);
  EXPECT_NE(err({-0.1f}, 1).find("radii[0]"), std::string::npos);
  const std::string down = err({0.2f, 0.1f}, 2);
  EXPECT_NE(down.find("non-decreasing"), std::string::npos) << down;
  EXPECT_NE(error_of([&] { pc.run_radii(pts.data(), 200, nullptr, 1, PcOptions{}, counts.data()); }).find("null"),
            std::string::npos);
  const float r = 0.1f;
  EXPECT_NE(error_of([&] { pc.run_radii(pts.data(), 200, &r, 1, PcOptions{}, nullptr); }).find("counts"),
            std::string::npos);
  // One radius: run()'s count.
  std::vector<index_t> one(200);
  pc.run_radii(pts.data(), 200, &r, 1, PcOptions{}, one.data());
  PcOptions o;
  o.radius = r;
  EXPECT_EQ(one, pc.run(pts.data(), 200, o).counts);
}

// run_radii_totals against run_radii's counts (brute-force-checked above): the column sums, and
// for each comparison exactly the queries whose two counts differ, with their counts.
void expect_totals(const PcRadiiTotals& t, const std::vector<index_t>& counts, index_t n, int m,
                   const std::vector<std::pair<int, int>>& compare, const std::string& what) {
  ASSERT_EQ(t.totals.size(), static_cast<std::size_t>(m)) << what;
  std::vector<index_t> rows;
  std::vector<std::uint32_t> flags;
  for (int j = 0; j < m; ++j) {
    std::int64_t sum = 0;
    for (index_t i = 0; i < n; ++i) sum += counts[static_cast<std::size_t>(i * m + j)];
    EXPECT_EQ(t.totals[j], sum) << what << ", radius " << j;
  }
  for (index_t i = 0; i < n; ++i) {
    std::uint32_t f = 0;
    for (std::size_t c = 0; c < compare.size(); ++c) {
      const index_t a = counts[static_cast<std::size_t>(i * m + compare[c].first)];
      const index_t b = compare[c].second < 0 ? 0 : counts[static_cast<std::size_t>(i * m + compare[c].second)];
      if (a != b) f |= 1u << c;
    }
    if (f) {
      rows.push_back(i);
      flags.push_back(f);
    }
  }
  ASSERT_EQ(t.rows, rows) << what;
  EXPECT_EQ(t.flags, flags) << what;
  ASSERT_EQ(t.row_counts.size(), rows.size() * m) << what;
  for (std::size_t k = 0; k < rows.size(); ++k)
    for (int j = 0; j < m; ++j)
      ASSERT_EQ(t.row_counts[k * m + j], counts[static_cast<std::size_t>(rows[k] * m + j)]) << what;
}

class PcRadiiTotalsOn : public ::testing::TestWithParam<Device> {};

TEST_P(PcRadiiTotalsOn, EqualRunRadii) {
  const Device device = GetParam();
  if (device == Device::Gpu) CANOPY_REQUIRE_GPU();
  for (int dims : {2, 3, 5}) {
    const index_t n = 3000;
    const std::vector<float> pts = test::clustered_points(4000, dims, 60 + dims);
    const std::vector<float> queries = test::random_points(n, dims, 70 + dims);
    const KdTree tree = KdTree::build(pts.data(), 4000, dims);
    std::vector<float> radii = {0.0f, test::radius_for(tree, queries, 2), test::radius_for(tree, queries, 6)};
    radii.push_back(radii.back() * 1.0001f);
    radii.push_back(test::radius_for(tree, queries, 30));
    const int m = static_cast<int>(radii.size());
    const std::vector<std::pair<int, int>> compare = {{3, 2}, {1, -1}, {4, 0}, {2, 2}, {0, -1}};
    PointCorrelation pc(tree, device);
    PcOptions o;
    o.device = device;
    std::vector<index_t> counts(static_cast<std::size_t>(n * m));
    pc.run_radii(queries.data(), n, radii.data(), m, o, counts.data());
    const PcRadiiTotals t = pc.run_radii_totals(queries.data(), n, radii.data(), m, o, compare);
    expect_totals(t, counts, n, m, compare, std::string(to_string(device)) + ", dims " + std::to_string(dims));
    EXPECT_FALSE(t.rows.empty());  // the shell between radii 2 and 3 holds points for some queries
    EXPECT_EQ(t.device, device);
    if (device == Device::Gpu) {  // queries in device memory
      const std::size_t bytes = queries.size() * sizeof(float);
      float* dq = static_cast<float*>(test::device_alloc(bytes));
      copy_memory(dq, queries.data(), bytes);
      const PcRadiiTotals d = pc.run_radii_totals(dq, n, radii.data(), m, o, compare);
      test::device_free(dq);
      expect_totals(d, counts, n, m, compare, "device queries, dims " + std::to_string(dims));
    }
    const PcRadiiTotals none = pc.run_radii_totals(queries.data(), n, radii.data(), m, o);  // no comparisons
    EXPECT_EQ(none.totals, t.totals);
    EXPECT_TRUE(none.rows.empty() && none.flags.empty() && none.row_counts.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PcRadiiTotalsOn, ::testing::Values(Device::Cpu, Device::Gpu),
                         [](const ::testing::TestParamInfo<Device>& i) { return std::string(to_string(i.param)); });

// More than 2^25 counts: batches of queries, their rows numbered for the whole call.
TEST(PcRadiiTotals, BatchesOfQueriesGpu) {
  CANOPY_REQUIRE_GPU();
  const index_t n = (index_t{1} << 20) + 4321;
  const int m = 32;
  const std::vector<float> pts = test::random_points(3000, 3, 8);
  const std::vector<float> queries = test::random_points(n, 3, 9);
  const KdTree tree = KdTree::build(pts.data(), 3000, 3);
  std::vector<float> radii(m);
  for (int j = 0; j < m; ++j) radii[j] = 0.002f * static_cast<float>(j + 1);
  PointCorrelation pc(tree, Device::Gpu);
  std::vector<index_t> counts(static_cast<std::size_t>(n) * m);
  pc.run_radii(queries.data(), n, radii.data(), m, PcOptions{}, counts.data());
  const std::vector<std::pair<int, int>> compare = {{20, 19}, {5, -1}};
  expect_totals(pc.run_radii_totals(queries.data(), n, radii.data(), m, PcOptions{}, compare), counts, n, m, compare,
                "batches");
}

TEST(PcRadiiTotals, BadCallsAreErrorsNamingThem) {
  const std::vector<float> pts = test::random_points(200, 2, 4);
  const KdTree tree = KdTree::build(pts.data(), 200, 2);
  PointCorrelation pc(tree, Device::Cpu);
  const std::vector<float> r = {0.1f, 0.2f};
  auto err = [&](std::vector<std::pair<int, int>> c) {
    return error_of([&] { pc.run_radii_totals(pts.data(), 200, r.data(), 2, PcOptions{}, c); });
  };
  EXPECT_NE(err({{0, 2}}).find("compare[0] = (0, 2)"), std::string::npos) << err({{0, 2}});
  EXPECT_NE(err({{1, 0}, {-1, 0}}).find("compare[1]"), std::string::npos);
  EXPECT_NE(err(std::vector<std::pair<int, int>>(33, {1, 0})).find("33 comparisons"), std::string::npos);
  const std::vector<float> down = {0.2f, 0.1f};
  EXPECT_NE(error_of([&] { pc.run_radii_totals(pts.data(), 200, down.data(), 2, PcOptions{}); }).find("non-decreasing"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pc.run_radii_totals(pts.data(), 200, r.data(), 0, PcOptions{}); }).find("n_radii = 0"),
            std::string::npos);
  const PcRadiiTotals empty = pc.run_radii_totals(pts.data(), 0, r.data(), 2, PcOptions{}, {{1, 0}});
  EXPECT_EQ(empty.totals, (std::vector<std::int64_t>{0, 0}));
  EXPECT_TRUE(empty.rows.empty());
}

TEST(RuntimeErrors, BadOptionsAndQueries) {
  const std::vector<float> pts = test::random_points(500, 2, 4);
  const KdTree tree = KdTree::build(pts.data(), 500, 2);
  PointCorrelation pc(tree, Device::Cpu);
  PcOptions o;
  o.radius = -1.0f;
  EXPECT_NE(error_of([&] { pc.run(pts.data(), 500, o); }).find("radius"), std::string::npos);
  o.radius = std::nanf("");
  EXPECT_NE(error_of([&] { pc.run(pts.data(), 500, o); }).find("radius"), std::string::npos);
  o.radius = std::numeric_limits<float>::infinity();
  EXPECT_NE(error_of([&] { pc.run(pts.data(), 500, o); }).find("radius"), std::string::npos);
  o.radius = 0.1f;
  o.depth = tree.height() + 1;
  const std::string deep = error_of([&] { pc.run(pts.data(), 500, o); });
  EXPECT_NE(deep.find("deeper than the tree"), std::string::npos) << deep;
  o.depth = 0;
  std::vector<float> bad = pts;
  bad[101] = std::nanf("");
  EXPECT_NE(error_of([&] { pc.run(bad.data(), 500, o); }).find("query 50"), std::string::npos);
  EXPECT_NE(error_of([&] { pc.run(nullptr, 5, o); }).find("null"), std::string::npos);
  EXPECT_TRUE(pc.run(pts.data(), 0, o).counts.empty());
  EXPECT_NE(error_of([&] { estimate_radius(tree, pts.data(), 500, 0.0); }).find("> 0"), std::string::npos);
}

TEST(RuntimeErrors, GpuRequestedWithoutOne) {
  if (gpu_available()) GTEST_SKIP() << "this machine has a GPU";
  const std::vector<float> pts = test::random_points(50, 2, 4);
  const KdTree tree = KdTree::build(pts.data(), 50, 2);
  EXPECT_NE(error_of([&] { PointCorrelation pc(tree, Device::Gpu); }).find("no CUDA device"), std::string::npos);
  PointCorrelation pc(tree);  // auto falls back to the CPU
  EXPECT_EQ(pc.device(), Device::Cpu);
}

TEST(RuntimeErrors, NotEnoughGpuMemoryNamesTheBuffer) {
  CANOPY_REQUIRE_GPU();
  const std::string e = error_of([] { test::allocate_device_bytes(std::size_t{1} << 52, "a 4 PiB buffer"); });
  EXPECT_NE(e.find("not enough GPU memory for a 4 PiB buffer"), std::string::npos) << e;
  EXPECT_THROW(test::allocate_device_bytes(std::size_t{1} << 52, "a 4 PiB buffer"), OutOfMemory);  // typed: Python's MemoryError
  test::allocate_device_bytes(1 << 20, "a small buffer");  // the device still works afterwards
}

TEST(EstimateRadius, BracketsTheTargetMean) {
  const std::vector<float> pts = test::clustered_points(3000, 3, 6);
  const KdTree tree = KdTree::build(pts.data(), 3000, 3);
  // Every 17th point is a duplicate, so the mean is already above 1 at radius 0: targets above it.
  for (double target : {3.0, 8.0, 32.0}) {
    // A sample as large as the queries uses every query, so the brute force sees the same set.
    const float r = estimate_radius(tree, pts.data(), 3000, target, 1, 3000);
    auto mean = [&](float radius) {
      const std::vector<index_t> c = test::brute_force_counts(pts, pts, 3, radius);
      return std::accumulate(c.begin(), c.end(), 0.0) / 3000.0;
    };
    EXPECT_GE(mean(r), target);
    EXPECT_LT(mean(r * (1.0f - 2e-4f)), target);
  }
}

TEST(Schedules, HybridGroupsQueriesBetterThanInputOrder) {
  // The divergence metric from the emulator drops when the hybrid schedule is used on
  // shuffled queries (the paper's Table 1 effect), at every depth from 4 up.
  PointSet ps = test::real_points("covtype_4k.csv", "0-6");
  shuffle(ps, 1);
  const KdTree tree = KdTree::build(ps.data(), ps.size(), ps.dims);
  PointCorrelation pc(tree, Device::Cpu);
  PcOptions o;
  o.radius = test::radius_for(tree, ps.coords, 32);
  o.count_nodes = true;
  o.schedule = ScheduleKind::InputOrder;
  const double input = pc.run(ps.data(), ps.size(), o).nodes_per_warp();
  for (int depth = 4; depth <= tree.height(); ++depth) {
    o.schedule = ScheduleKind::Hybrid;
    o.depth = depth;
    EXPECT_LT(pc.run(ps.data(), ps.size(), o).nodes_per_warp() * 2.0, input) << "depth " << depth;
  }
}

}  // namespace
}  // namespace canopy
