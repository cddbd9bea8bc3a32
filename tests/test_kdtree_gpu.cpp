// The kd-tree's definition by its points alone (what lets a GPU build give the same tree), and
// KdTree::build_on_gpu, BallTree::build_on_gpu and VpTree::build_on_gpu against the CPU builds,
// bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "io/dataset.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "tests/require_gpu.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_util.hpp"
#include "tests/tree_walk.hpp"

namespace canopy {
namespace {

// Points with ties everywhere: few distinct values per dimension, signed zeros among them.
std::vector<float> tied_points(index_t n, int dims, int distinct) {
  std::vector<float> p(static_cast<std::size_t>(n) * dims);
  for (index_t i = 0; i < n; ++i)
    for (int d = 0; d < dims; ++d) {
      const int v = static_cast<int>((i * 7919 + d * 104729) % distinct);
      p[i * dims + d] = v == 0 ? ((i % 2) ? -0.0f : 0.0f) : static_cast<float>(v) * 0.25f - 0.5f;
    }
  return p;
}

// Walks the tree from the root over point ranges (child 0 takes the first n / 2) and checks the
// definition against the input: a leaf's ids ascend; an inner node's children split its points at
// the median in (coordinate, index) order of its split dimension; a box is the min and max of the
// node's points, zero stored as +0.
void expect_defined_by_points(const KdTree& t, const float* pts, int dims) {
  const KdTreeView v = t.view();
  struct Item {
    node_id n;
    index_t begin, count;
  };
  std::vector<Item> stack{{0, 0, t.size()}};
  index_t leaves_points = 0;
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    for (int d = 0; d < dims; ++d) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (index_t i = it.begin; i < it.begin + it.count; ++i) {
        lo = std::min(lo, pts[v.point_ids[i] * dims + d]);
        hi = std::max(hi, pts[v.point_ids[i] * dims + d]);
      }
      ASSERT_EQ(lo, v.lo(it.n)[d]) << "node " << it.n;
      ASSERT_EQ(hi, v.hi(it.n)[d]) << "node " << it.n;
      if (lo == 0) {
        ASSERT_FALSE(std::signbit(v.lo(it.n)[d])) << "node " << it.n;
      }
      if (hi == 0) {
        ASSERT_FALSE(std::signbit(v.hi(it.n)[d])) << "node " << it.n;
      }
    }
    if (v.is_leaf(it.n)) {
      ASSERT_EQ(v.nodes[it.n].first, it.begin);
      ASSERT_EQ(v.nodes[it.n].count, it.count);
      for (index_t i = it.begin + 1; i < it.begin + it.count; ++i)
        ASSERT_LT(v.point_ids[i - 1], v.point_ids[i]) << "leaf " << it.n;
      leaves_points += it.count;
      continue;
    }
    const int d = v.nodes[it.n].split_dim;
    const index_t half = it.count / 2;
    auto key_less = [&](index_t a, index_t b) {
      const float ca = pts[a * dims + d], cb = pts[b * dims + d];
      return ca < cb || (ca == cb && a < b);
    };
    index_t left_max = v.point_ids[it.begin], right_min = v.point_ids[it.begin + half];
    for (index_t i = it.begin; i < it.begin + half; ++i)
      if (key_less(left_max, v.point_ids[i])) left_max = v.point_ids[i];
    for (index_t i = it.begin + half; i < it.begin + it.count; ++i)
      if (key_less(v.point_ids[i], right_min)) right_min = v.point_ids[i];
    ASSERT_TRUE(key_less(left_max, right_min)) << "node " << it.n << " is not split at its median";
    stack.push_back({v.child(it.n, 1), it.begin + half, it.count - half});
    stack.push_back({v.child(it.n, 0), it.begin, half});
  }
  EXPECT_EQ(leaves_points, t.size());
}

TEST(KdTreeDefinition, ANodesPointsFollowFromThePointsAlone) {
  for (int dims : {1, 3, 7}) {
    const std::vector<float> a = test::clustered_points(5000, dims, 3);
    expect_defined_by_points(KdTree::build(a.data(), 5000, dims, {8, Device::Cpu}), a.data(), dims);
    const std::vector<float> b = tied_points(40000, dims, 3);  // large enough for the parallel split
    expect_defined_by_points(KdTree::build(b.data(), 40000, dims, {4, Device::Cpu}), b.data(), dims);
  }
}

TEST(KdTreeGpu, NeedsADevice) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  const std::vector<float> p = test::random_points(10, 3, 1);
  try {
    KdTree::build_on_gpu(p.data(), 10, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
  }
}

// The message f() throws, or "no error".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// What a failed comparison of two builds names: the input, its size and the leaf size.
std::string build_label(const std::string& what, index_t n, int dims, int leaf_size) {
  return what + " (n " + std::to_string(n) + ", dims " + std::to_string(dims) + ", leaf " + std::to_string(leaf_size) +
         ")";
}

void expect_gpu_equals_cpu(const std::vector<float>& p, index_t n, int dims, int leaf_size, const std::string& what) {
  KdTreeOptions o;
  o.leaf_size = leaf_size;
  o.device = Device::Cpu;
  const KdTree cpu = KdTree::build(p.data(), n, dims, o);
  GpuBuildStats st;
  const KdTree gpu = KdTree::build_on_gpu(p.data(), n, dims, o, &st);
  test::expect_same_tree(gpu, cpu, build_label(what, n, dims, leaf_size));
  EXPECT_GT(st.build_ms, 0.0);
}

TEST(KdTreeGpu, EqualsTheCpuTreeOnEveryGenerator) {
  CANOPY_REQUIRE_GPU();
  for (index_t n : {1, 2, 7, 8, 9, 1000, 65537}) {
    expect_gpu_equals_cpu(test::random_points(n, 3, 5), n, 3, 8, "uniform");
    expect_gpu_equals_cpu(test::clustered_points(n, 7, 6), n, 7, 8, "clustered");
  }
  for (int dims : {1, 2, 5, 16}) expect_gpu_equals_cpu(test::clustered_points(3000, dims, 7), 3000, dims, 8, "dims");
  for (int leaf : {1, 3, 32}) expect_gpu_equals_cpu(test::random_points(5000, 3, 8), 5000, 3, leaf, "leaf sizes");
  const PointSet pl = generate("plummer:20000", 9);
  expect_gpu_equals_cpu(pl.coords, pl.size(), pl.dims, 8, "plummer");
  const PointSet u = generate("uniform:1000003:3", 10);
  expect_gpu_equals_cpu(u.coords, u.size(), u.dims, 8, "uniform:1000003:3");
}

// A large tree's points go up and its nodes come back through page-locked staging (above
// detail::kStagedCopyMin): the tree equals the CPU's, from a one-off build and from a builder's
// second build, which reuses the slots it kept.
TEST(KdTreeGpu, StagedCopiesOfALargeTreeEqualTheCpuTree) {
  CANOPY_REQUIRE_GPU();
  const PointSet u = generate("uniform:5000003:3", 12);
  const index_t n = u.size();
  ASSERT_GE(u.coords.size() * sizeof(float), detail::kStagedCopyMin);
  KdTreeOptions o;
  o.device = Device::Cpu;
  const KdTree cpu = KdTree::build(u.coords.data(), n, 3, o);
  ASSERT_GE(cpu.nodes().size() * sizeof(KdNode), detail::kStagedCopyMin);
  test::expect_same_tree(KdTree::build_on_gpu(u.coords.data(), n, 3, o), cpu, "a one-off build");
  KdTreeGpuBuilder builder;
  const PointSet other = generate("uniform:5000003:3", 13);
  test::expect_same_tree(builder.build(other.coords.data(), n, 3, o), KdTree::build(other.coords.data(), n, 3, o),
                         "a builder's first build");
  test::expect_same_tree(builder.build(u.coords.data(), n, 3, o), cpu, "the builder's second build");
}

// The staged copies alone: every byte there and back, at sizes around the 8 MiB slots, with
// slots made per copy and with kept ones.
TEST(StagedCopy, EveryByteGoesThereAndBack) {
  CANOPY_REQUIRE_GPU();
  const std::size_t slot = std::size_t{8} << 20;
  detail::StagingSlots kept;
  for (std::size_t bytes : {std::size_t{1}, slot - 1, slot, slot + 1, 3 * slot + 12345}) {
    for (bool keep : {false, true}) {
      std::vector<unsigned char> src(bytes), back(bytes, 0);
      for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
      void* d = test::device_alloc(bytes);
      detail::staged_to_device(d, src.data(), bytes, nullptr, keep ? &kept : nullptr);
      detail::staged_to_host(back.data(), d, bytes, nullptr, keep ? &kept : nullptr);
      test::device_free(d);
      EXPECT_TRUE(back == src) << bytes << " bytes, " << (keep ? "kept" : "own") << " slots";
    }
  }
}

// Freed slots' blocks are lent to the next slots (the pool in layouts/resident.cu): a new
// object's first staged copy allocates no page-locked memory where an earlier one's slots were
// freed, and copies through lent blocks still move every byte.
TEST(StagedCopy, FreedSlotsAreLentToTheNext) {
  CANOPY_REQUIRE_GPU();
  const std::size_t bytes = std::size_t{20} << 20;  // (past the 8 MiB slot: both slots in use)
  std::vector<unsigned char> src(bytes), back(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>((i * 2654435761u) >> 11);
  void* d = test::device_alloc(bytes);
  { detail::StagingSlots first; detail::staged_to_device(d, src.data(), bytes, nullptr, &first); }
  const MemoryEvents before = memory_events();
  for (int round = 0; round < 5; ++round) {
    detail::StagingSlots next;
    detail::staged_to_host(back.data(), d, bytes, nullptr, &next);
    EXPECT_TRUE(back == src) << "round " << round;
    std::fill(back.begin(), back.end(), 0);
  }
  EXPECT_EQ(memory_events().pinned_allocations, before.pinned_allocations);
  test::device_free(d);
}

// The stream-ordered pool keeps freed device memory for the next allocation (core/device_buffer.cu):
// a block freed and synchronised stays spare, counts as free for Canopy, and a new buffer of the
// same size takes it instead of growing the pool.
TEST(DevicePool, FreedMemoryIsKeptForTheNextBuffer) {
  CANOPY_REQUIRE_GPU();
  const std::size_t bytes = std::size_t{192} << 20;
  void* s = test::make_stream();
  {
    detail::DeviceMemory m;
    m.reserve(bytes, "a test block", static_cast<stream_t>(s));
  }
  test::sync_stream(s);
  const std::size_t spare = pool_spare_bytes();
  EXPECT_GE(spare, bytes);
  EXPECT_GE(gpu_free_memory(), spare);
  {
    detail::DeviceMemory m;
    m.reserve(bytes, "a test block", static_cast<stream_t>(s));
    test::sync_stream(s);
    EXPECT_LE(pool_spare_bytes() + bytes, spare);
  }
  test::sync_stream(s);
  test::destroy_stream(s);
}

TEST(KdTreeGpu, EqualsTheCpuTreeWithManyEqualPoints) {
  CANOPY_REQUIRE_GPU();
  expect_gpu_equals_cpu(std::vector<float>(3 * 5000, 0.5f), 5000, 3, 8, "all equal");
  expect_gpu_equals_cpu(tied_points(20000, 3, 3), 20000, 3, 8, "three values, signed zeros");
  expect_gpu_equals_cpu(tied_points(7777, 4, 2), 7777, 4, 1, "two values, leaf 1");
}

TEST(KdTreeGpu, EqualsTheCpuTreeOnRealData) {
  CANOPY_REQUIRE_GPU();
  const PointSet cov = test::real_points("covtype_4k.csv", "0-6");
  expect_gpu_equals_cpu(cov.coords, cov.size(), cov.dims, 8, "covtype");
  const PointSet cities = test::real_points("cities_4k.csv", "");
  expect_gpu_equals_cpu(cities.coords, cities.size(), cities.dims, 8, "cities");
}

TEST(KdTreeGpu, BuildsFromDevicePoints) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> p = test::clustered_points(20000, 3, 11);
  void* d = test::device_alloc(p.size() * sizeof(float));
  copy_memory(d, p.data(), p.size() * sizeof(float));
  GpuBuildStats st;
  const KdTree gpu = KdTree::build_on_gpu(static_cast<const float*>(d), 20000, 3, {}, &st);
  test::device_free(d);
  test::expect_same_tree(gpu, KdTree::build(p.data(), 20000, 3, {8, Device::Cpu}), "device input");
  EXPECT_EQ(st.upload_ms, 0.0);
}

TEST(KdTreeGpu, BadInputGivesTheCpuBuildsErrors) {
  CANOPY_REQUIRE_GPU();
  std::vector<float> p = test::random_points(100, 3, 12);
  p[41 * 3 + 2] = std::nanf("");
  EXPECT_EQ(error_of([&] { KdTree::build_on_gpu(p.data(), 100, 3); }), error_of([&] { KdTree::build(p.data(), 100, 3); }));
  EXPECT_NE(error_of([&] { KdTree::build_on_gpu(p.data(), 100, 3); }).find("point 41"), std::string::npos);
  EXPECT_EQ(error_of([&] { KdTree::build_on_gpu(p.data(), 0, 3); }), error_of([&] { KdTree::build(p.data(), 0, 3); }));
  EXPECT_EQ(error_of([&] { KdTree::build_on_gpu(nullptr, 10, 3); }), error_of([&] { KdTree::build(nullptr, 10, 3); }));
  EXPECT_EQ(error_of([&] { KdTree::build_on_gpu(p.data(), 5, 17); }), error_of([&] { KdTree::build(p.data(), 5, 17); }));
  EXPECT_EQ(error_of([&] { KdTree::build_on_gpu(p.data(), 10, 3, {0}); }),
            error_of([&] { KdTree::build(p.data(), 10, 3, {0}); }));
}

void expect_gpu_ball_equals_cpu(const std::vector<float>& p, index_t n, int dims, int leaf_size,
                                const std::string& what) {
  BallTreeOptions o;
  o.leaf_size = leaf_size;
  o.device = Device::Cpu;
  const BallTree cpu = BallTree::build(p.data(), n, dims, o);
  const BallTree gpu = BallTree::build_on_gpu(p.data(), n, dims, o);
  test::expect_same_tree(gpu, cpu, build_label(what, n, dims, leaf_size));
}

// The inputs both metric trees' GPU builds are checked on, each handed to
// check(points, n, dims, leaf size, what); the seeds run from `seed` to seed + 2.
template <class Check>
void check_metric_tree_inputs(std::uint64_t seed, Check check) {
  for (index_t n : {1, 2, 7, 8, 9, 1000, 65537}) check(test::clustered_points(n, 5, seed), n, 5, 8, "clustered");
  for (int dims : {1, 2, 3, 8, 16}) check(test::random_points(20000, dims, seed + 1), 20000, dims, 8, "dims");
  for (int leaf : {1, 32}) check(test::random_points(5000, 3, seed + 2), 5000, 3, leaf, "leaf sizes");
  check(tied_points(20000, 3, 3), 20000, 3, 8, "ties and signed zeros");
  const PointSet cov = test::real_points("covtype_4k.csv", "0-6");
  check(cov.coords, cov.size(), cov.dims, 8, "covtype");
}

TEST(BallTreeGpu, EqualsTheCpuTree) {
  CANOPY_REQUIRE_GPU();
  check_metric_tree_inputs(13, expect_gpu_ball_equals_cpu);
  const PointSet u = generate("uniform:1000003:3", 16);  // nodes of many fold blocks
  expect_gpu_ball_equals_cpu(u.coords, u.size(), u.dims, 8, "uniform:1000003:3");
}

TEST(BallTreeGpu, BadInputGivesTheCpuBuildsErrors) {
  CANOPY_REQUIRE_GPU();
  std::vector<float> p = test::random_points(100, 3, 17);
  p[7 * 3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(error_of([&] { BallTree::build_on_gpu(p.data(), 100, 3); }), error_of([&] { BallTree::build(p.data(), 100, 3); }));
  EXPECT_EQ(error_of([&] { BallTree::build_on_gpu(p.data(), 0, 3); }), error_of([&] { BallTree::build(p.data(), 0, 3); }));
  EXPECT_EQ(error_of([&] { BallTree::build_on_gpu(p.data(), 10, 0); }), error_of([&] { BallTree::build(p.data(), 10, 0); }));
}

// The GPU vp-tree against the CPU's, from host or device points.
void expect_gpu_vp_equals_cpu(const std::vector<float>& p, index_t n, int dims, int leaf_size, const std::string& what,
                              bool from_device = false) {
  VpTreeOptions o;
  o.leaf_size = leaf_size;
  o.device = Device::Cpu;
  const VpTree cpu = VpTree::build(p.data(), n, dims, o);
  const std::size_t bytes = p.size() * sizeof(float);
  float* d = nullptr;
  if (from_device) {
    d = static_cast<float*>(test::device_alloc(bytes));
    copy_memory(d, p.data(), bytes);
  }
  const VpTree gpu = VpTree::build_on_gpu(from_device ? d : p.data(), n, dims, o);
  if (d) test::device_free(d);
  test::expect_same_tree(gpu, cpu, build_label(what, n, dims, leaf_size));
}

TEST(VpTreeGpu, EqualsTheCpuTree) {
  CANOPY_REQUIRE_GPU();
  check_metric_tree_inputs(23, [](const std::vector<float>& p, index_t n, int dims, int leaf, const std::string& what) {
    expect_gpu_vp_equals_cpu(p, n, dims, leaf, what);
  });
  // Many equal points: equal distances everywhere, the vantage point among its duplicates.
  expect_gpu_vp_equals_cpu(std::vector<float>(3000 * 2, 1.5f), 3000, 2, 8, "all points equal");
  for (const char* spec : {"uniform:1000003:3", "uniform:200000:7", "plummer:100000"}) {
    const PointSet g = generate(spec, 26);
    expect_gpu_vp_equals_cpu(g.coords, g.size(), g.dims, 8, spec);
  }
  expect_gpu_vp_equals_cpu(test::random_points(30000, 4, 27), 30000, 4, 8, "device input", true);
}

TEST(VpTreeGpu, NeedsADevice) {
  if (gpu_available()) GTEST_SKIP() << "a GPU is present";
  const std::vector<float> p = test::random_points(10, 3, 1);
  EXPECT_NE(error_of([&] { VpTree::build_on_gpu(p.data(), 10, 3); }).find("vp-tree: build_on_gpu needs a CUDA device"),
            std::string::npos);
}

TEST(VpTreeGpu, BadInputGivesTheCpuBuildsErrors) {
  CANOPY_REQUIRE_GPU();
  std::vector<float> p = test::random_points(100, 3, 28);
  p[9 * 3 + 1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of([&] { VpTree::build_on_gpu(p.data(), 100, 3); }), error_of([&] { VpTree::build(p.data(), 100, 3); }));
  EXPECT_EQ(error_of([&] { VpTree::build_on_gpu(p.data(), 0, 3); }), error_of([&] { VpTree::build(p.data(), 0, 3); }));
  EXPECT_EQ(error_of([&] { VpTree::build_on_gpu(p.data(), 10, 17); }), error_of([&] { VpTree::build(p.data(), 10, 17); }));
  VpTreeOptions o;
  o.leaf_size = 0;
  EXPECT_EQ(error_of([&] { VpTree::build_on_gpu(p.data(), 10, 3, o); }), error_of([&] { VpTree::build(p.data(), 10, 3, o); }));
}

// Device::Auto (the default) builds on the GPU from kGpuBuildMinPoints up when one is present,
// and says where it ran; the tree is the CPU's either way. Device input needs the GPU build.
TEST(TreeBuildDevice, AutoPicksTheGpuForLargeInputsWhenOneIsPresent) {
  const index_t big = kGpuBuildMinPoints, small = kGpuBuildMinPoints - 1;
  const std::vector<float> p = test::random_points(big, 3, 41);
  const Device want = gpu_available() ? Device::Gpu : Device::Cpu;
  EXPECT_EQ(KdTree::build(p.data(), big, 3).built_on(), want);
  EXPECT_EQ(BallTree::build(p.data(), big, 3).built_on(), want);
  EXPECT_EQ(VpTree::build(p.data(), big, 3).built_on(), want);
  const std::vector<float> mass(static_cast<std::size_t>(big), 1.0f);
  EXPECT_EQ(Octree::build(p.data(), mass.data(), big).built_on(), want);
  EXPECT_EQ(KdTree::build(p.data(), small, 3).built_on(), Device::Cpu);
  EXPECT_EQ(Octree::build(p.data(), mass.data(), small).built_on(), Device::Cpu);
  EXPECT_EQ(KdTree::build(p.data(), big, 3, {8, Device::Cpu}).built_on(), Device::Cpu);
  if (!gpu_available()) {
    EXPECT_NE(error_of([&] { KdTree::build(p.data(), 10, 3, {8, Device::Gpu}); }).find("needs a CUDA device"),
              std::string::npos);
    return;
  }
  const KdTree cpu = KdTree::build(p.data(), big, 3, {8, Device::Cpu});
  const KdTree gpu = KdTree::build(p.data(), big, 3);
  test::expect_same_tree(gpu, cpu, "Device::Auto over the size threshold");
  EXPECT_EQ(KdTree::build(p.data(), 10, 3, {8, Device::Gpu}).built_on(), Device::Gpu);
  // Points in device memory: the GPU build, even below the size threshold; a CPU build refuses.
  float* d = static_cast<float*>(test::device_alloc(p.size() * sizeof(float)));
  copy_memory(d, p.data(), p.size() * sizeof(float));
  EXPECT_EQ(VpTree::build(d, 1000, 3).built_on(), Device::Gpu);
  EXPECT_NE(error_of([&] { KdTree::build(d, 1000, 3, {8, Device::Cpu}); }).find("kd-tree: the points are in device memory"),
            std::string::npos);
  test::device_free(d);
}

}  // namespace
}  // namespace canopy
