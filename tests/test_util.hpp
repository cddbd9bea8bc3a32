// Shared helpers of the test suite: inputs and independent references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "layouts/kdtree.hpp"
#include "require_gpu.hpp"
#include "tests/test_points.hpp"
#include "runtime/point_correlation.hpp"
#include "io/dataset.hpp"
#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "runtime/options.hpp"
#include "runtime/pc_visitor.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace test {

inline std::string data_path(const std::string& name) { return std::string(CANOPY_TEST_DATA) + "/" + name; }

// Set (CANOPY_UNDER_TOOL=1) where compute-sanitizer runs the tests (scripts/gpu-run.sh
// sanitize): tests that repeat the same kernels hundreds of times (chunks of one query, rounds)
// repeat them fewer times there, every kernel and configuration still run at least once.
inline bool under_tool() {
  const char* v = std::getenv("CANOPY_UNDER_TOOL");
  return v && *v && std::string(v) != "0";
}

// A small subset of a real set, normalised to the unit cube like the benchmark does.
inline PointSet real_points(const std::string& file, const std::string& columns) {
  PointSet ps = read_csv(data_path(file), columns);
  normalize_unit_cube(ps);
  return ps;
}

// A generator spec's set, checked to be n points of `dims` and seeded: the same set again for the
// same seed (3), another for another (4).
inline PointSet expect_seeded_set(const std::string& spec, index_t n, int dims) {
  const PointSet a = generate(spec, 3), b = generate(spec, 3), c = generate(spec, 4);
  EXPECT_EQ(a.size(), n) << spec;
  EXPECT_EQ(a.dims, dims) << spec;
  EXPECT_EQ(a.coords, b.coords) << spec;
  EXPECT_NE(a.coords, c.coords) << spec;
  return a;
}

// The workload's distances on unpadded rows (copied into 16-wide zero-padded arrays, which
// give the same value as any narrower padding).
inline float ref_point_distance2(const float* q, const float* p, int dims) {
  float qq[kMaxDims], pp[kMaxDims];
  load_query(q, dims, qq);
  load_query(p, dims, pp);
  return point_distance2(qq, pp);
}
inline float ref_box_distance2(const float* q, const float* lo, const float* hi, int dims) {
  float qq[kMaxDims], l[kMaxDims], h[kMaxDims];
  load_query(q, dims, qq);
  load_query(lo, dims, l);
  load_query(hi, dims, h);
  return box_distance2(qq, l, h);
}

// Brute-force point correlation: for each query, the points within the radius.
inline std::vector<index_t> brute_force_counts(const std::vector<float>& points, const std::vector<float>& queries,
                                               int dims, float radius) {
  const index_t n = static_cast<index_t>(points.size()) / dims, m = static_cast<index_t>(queries.size()) / dims;
  std::vector<index_t> counts(static_cast<std::size_t>(m), 0);
  const float r2 = radius * radius;
  for (index_t q = 0; q < m; ++q)
    for (index_t i = 0; i < n; ++i)
      if (ref_point_distance2(&queries[q * dims], &points[i * dims], dims) <= r2) ++counts[q];
  return counts;
}

// A radius giving a mean count of about `mean` over the queries.
inline float radius_for(const KdTree& tree, const std::vector<float>& queries, double mean) {
  return estimate_radius(tree, queries.data(), static_cast<index_t>(queries.size()) / tree.dims(), mean, 3, 512);
}
// Options (a workload's, or the traversal's own) naming a call's device, schedule and executor
// (Auto, the default, unless named); the callers set the rest.
template <class Options = TraversalOptions>
Options options_on(Device d, ScheduleKind s, ExecutorKind e = ExecutorKind::Auto) {
  Options o;
  o.device = d;
  o.schedule = s;
  o.executor = e;
  return o;
}

// A steady-state call: call() allocates and frees no device or pinned memory (memory_events()).
inline void expect_allocates_nothing(const std::function<void()>& call) {
  const MemoryEvents before = memory_events();
  call();
  const MemoryEvents after = memory_events();
  EXPECT_EQ(after.device_allocations, before.device_allocations);
  EXPECT_EQ(after.device_frees, before.device_frees);
  EXPECT_EQ(after.pinned_allocations, before.pinned_allocations);
  EXPECT_EQ(after.pinned_frees, before.pinned_frees);
}

// A schedule of n queries: a permutation of 0..n-1, its bucket offsets running from 0 to n.
inline void expect_permutation_with_buckets(const Schedule& s, index_t n) {
  ASSERT_EQ(s.size(), n);
  std::vector<index_t> sorted = s.order;
  std::sort(sorted.begin(), sorted.end());
  for (index_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "the schedule is not a permutation";
  ASSERT_GE(s.bucket_offsets.size(), 2u);
  EXPECT_EQ(s.bucket_offsets.front(), 0);
  EXPECT_EQ(s.bucket_offsets.back(), n);
}

}  // namespace test
}  // namespace canopy
