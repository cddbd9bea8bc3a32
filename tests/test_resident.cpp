// Trees left on the device by their GPU build: the engines read them in place, with no host
// round trip; the host copies are made on first use, equal bit for bit to the CPU build's; the
// results are the CPU tree's.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "layouts/ball_tree.hpp"
#include "io/dataset.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"
#include "tests/require_gpu.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// kNN over a GPU-built tree against the same call over the CPU-built tree: equal results, and no
// host copy made by the GPU calls; then a CPU call on the same object, which makes it.
template <class Tree, class Options>
void expect_knn_in_place(const std::vector<float>& pts, index_t n, const std::vector<float>& queries, index_t m,
                         const std::string& what) {
  Options cpu_options, gpu_options;
  cpu_options.device = Device::Cpu;
  gpu_options.device = Device::Gpu;
  const Tree cpu = Tree::build(pts.data(), n, 3, cpu_options);
  const Tree gpu = Tree::build(pts.data(), n, 3, gpu_options);
  ASSERT_TRUE(gpu.on_device()) << what;
  ASSERT_FALSE(gpu.host_ready()) << what;
  EXPECT_EQ(gpu.size(), n) << what;
  EXPECT_EQ(gpu.bytes(), cpu.bytes()) << what;
  NearestNeighbors reference(cpu, Device::Gpu), in_place(gpu, Device::Gpu);
  for (ScheduleKind s : {ScheduleKind::Auto, ScheduleKind::LeafSort, ScheduleKind::HybridKey, ScheduleKind::Hybrid}) {
    KnnOptions o;
    o.k = 5;
    o.schedule = s;
    const KnnResult want = reference.run(queries.data(), m, o);
    const KnnResult got = in_place.run(queries.data(), m, o);
    EXPECT_EQ(got.indices, want.indices) << what << ", " << to_string(s);
    EXPECT_TRUE(same_bits(got.distances, want.distances)) << what << ", " << to_string(s);
  }
  EXPECT_FALSE(gpu.host_ready()) << what << ": a GPU call copied the tree to the host";
  KnnOptions on_cpu;
  on_cpu.k = 5;
  on_cpu.device = Device::Cpu;
  const KnnResult want = reference.run(queries.data(), m, on_cpu);
  const KnnResult got = in_place.run(queries.data(), m, on_cpu);
  EXPECT_EQ(got.indices, want.indices) << what << ", on the CPU";
  EXPECT_TRUE(gpu.host_ready()) << what;
  EXPECT_TRUE(same_bits(gpu.points(), cpu.points()) && gpu.point_ids() == cpu.point_ids()) << what;
}

TEST(TreesOnTheDevice, KnnReadsThemInPlace) {
  CANOPY_REQUIRE_GPU();
  const index_t n = 60000, m = 3000;
  const std::vector<float> pts = test::clustered_points(n, 3, 51), queries = test::random_points(m, 3, 52);
  expect_knn_in_place<KdTree, KdTreeOptions>(pts, n, queries, m, "kd-tree");
  expect_knn_in_place<BallTree, BallTreeOptions>(pts, n, queries, m, "ball tree");
  expect_knn_in_place<VpTree, VpTreeOptions>(pts, n, queries, m, "vp-tree");
}

TEST(TreesOnTheDevice, PointCorrelationFromDevicePoints) {
  CANOPY_REQUIRE_GPU();
  const index_t n = 50000;
  const std::vector<float> pts = test::random_points(n, 3, 53);
  float* d = static_cast<float*>(test::device_alloc(pts.size() * sizeof(float)));
  copy_memory(d, pts.data(), pts.size() * sizeof(float));
  const KdTree cpu = KdTree::build(pts.data(), n, 3, {8, Device::Cpu});
  const KdTree gpu = KdTree::build(d, n, 3);  // device points: the GPU build, left there
  ASSERT_TRUE(gpu.on_device());
  PcOptions o;
  o.radius = 0.03f;
  const PcResult want = PointCorrelation(cpu, Device::Gpu).run(pts.data(), n, o);
  PointCorrelation pc(gpu, Device::Gpu);
  index_t* counts = static_cast<index_t*>(test::device_alloc(static_cast<std::size_t>(n) * sizeof(index_t)));
  pc.run(d, n, o, counts);  // queries and results in device memory
  std::vector<index_t> got(static_cast<std::size_t>(n));
  copy_memory(got.data(), counts, got.size() * sizeof(index_t));
  EXPECT_EQ(got, want.counts);
  EXPECT_FALSE(gpu.host_ready());
  test::device_free(counts);
  test::device_free(d);
}

TEST(TreesOnTheDevice, CopiesAndHostArraysEqualTheCpuTree) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(40000, 3, 54);
  const KdTree cpu = KdTree::build(pts.data(), 40000, 3, {8, Device::Cpu});
  const KdTree gpu = KdTree::build_on_gpu(pts.data(), 40000, 3);
  const KdTree copy = gpu;  // makes the host copies first
  EXPECT_TRUE(gpu.host_ready());
  for (const KdTree* t : {&gpu, &copy}) {
    EXPECT_TRUE(same_bits(t->nodes(), cpu.nodes()));
    EXPECT_TRUE(same_bits(t->boxes(), cpu.boxes()));
    EXPECT_TRUE(same_bits(t->points(), cpu.points()));
    EXPECT_EQ(t->point_ids(), cpu.point_ids());
  }
  KdTree moved = KdTree::build_on_gpu(pts.data(), 40000, 3);
  KdTree target = std::move(moved);
  EXPECT_TRUE(target.on_device());
  EXPECT_TRUE(same_bits(target.boxes(), cpu.boxes()));
}

// Barnes-Hut over an octree left on the device: the bodies' original order made there, the
// forces bitwise those over the CPU-built tree, no host copy until a CPU call.
TEST(TreesOnTheDevice, BarnesHutReadsTheOctreeInPlace) {
  CANOPY_REQUIRE_GPU();
  const PointSet p = generate("plummer:50000", 55);
  const index_t n = p.size();
  const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
  const Octree cpu = Octree::build(p.data(), mass.data(), n, {8, 20, Device::Cpu});
  const Octree gpu = Octree::build_on_gpu(p.data(), mass.data(), n);
  ASSERT_TRUE(gpu.on_device());
  ASSERT_FALSE(gpu.host_ready());
  EXPECT_EQ(gpu.size(), n);
  EXPECT_EQ(gpu.bytes(), cpu.bytes());
  BarnesHut reference(cpu, Device::Gpu), in_place(gpu, Device::Gpu);
  for (ScheduleKind s : {ScheduleKind::Auto, ScheduleKind::LeafSort, ScheduleKind::Hybrid}) {
    BhOptions o;
    o.schedule = s;
    EXPECT_TRUE(same_bits(in_place.run(o).forces, reference.run(o).forces)) << to_string(s);
  }
  EXPECT_FALSE(gpu.host_ready()) << "a GPU call copied the octree to the host";
  BhOptions on_cpu;
  on_cpu.device = Device::Cpu;
  EXPECT_TRUE(same_bits(in_place.run(on_cpu).forces, reference.run(on_cpu).forces));
  EXPECT_TRUE(gpu.host_ready());
  EXPECT_TRUE(same_bits(gpu.bodies(), cpu.bodies()) && same_bits(gpu.com(), cpu.com()) &&
              same_bits(gpu.cubes(), cpu.cubes()) && gpu.body_ids() == cpu.body_ids());
}

}  // namespace
}  // namespace canopy
