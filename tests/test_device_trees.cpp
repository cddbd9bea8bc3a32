// Trees left on the device by their GPU build (build() from kGpuBuildMinPoints points up, a GPU
// builder, or device points) through every public option: each call equals the same call over
// the CPU-built tree, which the GPU build equals bit for bit (results, and where the order is
// fixed the schedule and the warps' node counts). GPU calls copy nothing to the host; the paths
// that read the tree there (count_nodes, device cpu, copies, accessors, the quality tools) copy
// it once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "io/dataset.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/custom.hpp"
#include "runtime/pc_visitor.hpp"
#include "runtime/bh_visitor.hpp"
#include "runtime/engine.hpp"
#include "runtime/knn.hpp"
#include "runtime/knn_visitor.hpp"
#include "runtime/point_correlation.hpp"
#include "runtime/schedule_quality.hpp"
#include "tests/device_trees_gpu.hpp"
#include "tests/require_gpu.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

constexpr index_t kPoints = 40000;  // build()'s Auto builds on the GPU from kGpuBuildMinPoints
constexpr index_t kQueries = 2048;
static_assert(kPoints >= kGpuBuildMinPoints, "the trees must be built on the GPU");

const ScheduleKind kSchedules[] = {ScheduleKind::InputOrder, ScheduleKind::LeafSort, ScheduleKind::Hybrid,
                                   ScheduleKind::HybridDevice, ScheduleKind::HybridKey};
const ExecutorKind kExecutors[] = {ExecutorKind::Independent, ExecutorKind::MaskLockstep,
                                   ExecutorKind::FsmLockstep};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::string label(const TraversalOptions& o) {
  std::string s = std::string(to_string(o.device)) + " " + to_string(o.schedule) + " " + to_string(o.executor);
  if (o.depth == kAutoDepth) s += " depth auto";
  if (o.pipeline) s += " pipelined";
  if (o.count_nodes) s += " count_nodes";
  if (o.gpu_count_nodes) s += " gpu_count_nodes";
  if (o.keep_schedule) s += " keep_schedule";
  return s;
}

// What the options fix besides the results: the order that ran, its buckets and the node counts
// (Auto's and depth auto's picks are timed, so their order is not fixed).
void expect_same_stats(const TraversalStats& got, const TraversalStats& want, const TraversalOptions& o,
                       const std::string& what) {
  const bool fixed = o.schedule != ScheduleKind::Auto && o.executor != ExecutorKind::Auto && o.depth != kAutoDepth;
  if (o.keep_schedule || o.count_nodes) {
    EXPECT_EQ(got.schedule.order.size(), want.schedule.order.size()) << what;
  }
  if (!fixed) return;
  EXPECT_EQ(got.schedule.order, want.schedule.order) << what;
  EXPECT_EQ(got.schedule.bucket_offsets, want.schedule.bucket_offsets) << what;
  EXPECT_EQ(got.warp_nodes, want.warp_nodes) << what;
  EXPECT_EQ(got.gpu_warp_nodes, want.gpu_warp_nodes) << what;
  if (o.count_nodes) {
    EXPECT_FALSE(got.warp_nodes.empty()) << what;
  }
  if (o.gpu_count_nodes && o.executor != ExecutorKind::Independent) {
    EXPECT_FALSE(got.gpu_warp_nodes.empty()) << what;
  }
}

// The GPU calls of the options every workload offers, none of which reads the tree on the host:
// each schedule and executor (the schedule kept, the GPU's node counts), the pipeline, depth auto
// and Auto (twice: a shape's second call runs the trial).
std::vector<TraversalOptions> gpu_options() {
  std::vector<TraversalOptions> all;
  for (ScheduleKind s : kSchedules)
    for (ExecutorKind e : kExecutors) {
      TraversalOptions o = test::options_on(Device::Gpu, s, e);
      o.keep_schedule = true;
      o.gpu_count_nodes = e != ExecutorKind::Independent;
      all.push_back(o);
    }
  TraversalOptions o = test::options_on(Device::Gpu, ScheduleKind::Hybrid, ExecutorKind::FsmLockstep);
  o.pipeline = true;
  o.chunk = 512;
  o.keep_schedule = true;
  all.push_back(o);
  o.pipeline = false;
  o.depth = kAutoDepth;
  all.push_back(o);
  TraversalOptions automatic;
  automatic.keep_schedule = true;
  all.push_back(automatic);
  all.push_back(automatic);
  return all;
}

// The calls that read the tree on the host: count_nodes on the GPU (the emulator), then each
// schedule and executor on the CPU with the schedule kept and the nodes counted (`every`; else
// one of each kind, for a second tree of the same workload).
std::vector<TraversalOptions> host_options(bool every = true) {
  std::vector<TraversalOptions> all;
  if (!every) {
    TraversalOptions o = test::options_on(Device::Gpu, ScheduleKind::Hybrid, ExecutorKind::FsmLockstep);
    o.count_nodes = true;
    all.push_back(o);
    o.device = Device::Cpu;
    o.keep_schedule = true;
    all.push_back(o);
    return all;
  }
  for (ScheduleKind s : {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridKey})
    for (ExecutorKind e : kExecutors) {
      TraversalOptions o = test::options_on(Device::Gpu, s, e);
      o.count_nodes = true;
      o.gpu_count_nodes = e != ExecutorKind::Independent;
      all.push_back(o);
    }
  for (ScheduleKind s : kSchedules)
    for (ExecutorKind e : kExecutors) {
      TraversalOptions o = test::options_on(Device::Cpu, s, e);
      o.keep_schedule = true;
      o.count_nodes = true;
      all.push_back(o);
    }
  return all;
}

// kNN over a tree on the device against the same over the CPU-built tree, through every option.
template <class Tree>
void expect_knn_equal(const Tree& cpu, const Tree& gpu, const std::vector<float>& queries, const std::string& what) {
  ASSERT_EQ(cpu.built_on(), Device::Cpu) << what;
  ASSERT_EQ(gpu.built_on(), Device::Gpu) << what;
  ASSERT_TRUE(gpu.on_device()) << what;
  ASSERT_FALSE(gpu.host_ready()) << what;
  const index_t m = static_cast<index_t>(queries.size() / 3);
  NearestNeighbors want_nn(cpu, Device::Gpu), got_nn(gpu, Device::Gpu);
  auto both = [&](const TraversalOptions& t) {
    KnnOptions o;
    static_cast<TraversalOptions&>(o) = t;
    o.k = 4;
    const std::string w = what + ", " + label(t);
    const KnnResult want = want_nn.run(queries.data(), m, o);
    const KnnResult got = got_nn.run(queries.data(), m, o);
    EXPECT_EQ(got.indices, want.indices) << w;
    EXPECT_TRUE(same_bits(got.distances, want.distances)) << w;
    expect_same_stats(got, want, t, w);
  };
  for (const TraversalOptions& t : gpu_options()) both(t);
  EXPECT_FALSE(gpu.host_ready()) << what << ": a GPU call copied the tree to the host";
  for (const TraversalOptions& t : host_options()) both(t);
  EXPECT_TRUE(gpu.host_ready()) << what;
  EXPECT_TRUE(same_bits(gpu.nodes(), cpu.nodes()) && same_bits(gpu.points(), cpu.points()) &&
              gpu.point_ids() == cpu.point_ids())
      << what << ": the host copy differs from the CPU build";
  // An object made for the CPU over the tree on the device.
  KnnOptions o;
  o.k = 4;
  EXPECT_EQ(NearestNeighbors(gpu, Device::Cpu).run(queries.data(), m, o).indices,
            NearestNeighbors(cpu, Device::Cpu).run(queries.data(), m, o).indices)
      << what << ", an object made for the CPU";
}

TEST(DeviceTrees, KdTreeBuiltOnTheGpuTakesEveryOption) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(kPoints, 3, 61), queries = test::random_points(kQueries, 3, 62);
  const KdTree cpu = KdTree::build(pts.data(), kPoints, 3, {8, Device::Cpu});
  expect_knn_equal(cpu, KdTree::build(pts.data(), kPoints, 3), queries, "kd-tree, build()");
  KdTreeGpuBuilder builder;
  expect_knn_equal(cpu, builder.build(pts.data(), kPoints, 3), queries, "kd-tree, a builder");
}

TEST(DeviceTrees, BallTreeFromDevicePointsTakesEveryOption) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(kPoints, 3, 63), queries = test::random_points(kQueries, 3, 64);
  float* d = static_cast<float*>(test::device_alloc(pts.size() * sizeof(float)));
  copy_memory(d, pts.data(), pts.size() * sizeof(float));
  BallTreeOptions on_cpu;
  on_cpu.device = Device::Cpu;
  const BallTree cpu = BallTree::build(pts.data(), kPoints, 3, on_cpu);
  const BallTree gpu = BallTree::build(d, kPoints, 3);
  test::device_free(d);  // the tree holds its own arrays
  expect_knn_equal(cpu, gpu, queries, "ball tree, device points");
}

TEST(DeviceTrees, VpTreeBuiltOnTheGpuTakesEveryOption) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::clustered_points(kPoints, 3, 65), queries = test::random_points(kQueries, 3, 66);
  VpTreeOptions on_cpu;
  on_cpu.device = Device::Cpu;
  const VpTree cpu = VpTree::build(pts.data(), kPoints, 3, on_cpu);
  expect_knn_equal(cpu, VpTree::build(pts.data(), kPoints, 3), queries, "vp-tree, build()");
}

// Point correlation over a kd-tree built from device points, the queries and counts in device
// memory too (count_nodes then copies the queries to the host, as it does for any tree).
TEST(DeviceTrees, PointCorrelationTakesEveryOption) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(kPoints, 3, 67);
  float* d = static_cast<float*>(test::device_alloc(pts.size() * sizeof(float)));
  copy_memory(d, pts.data(), pts.size() * sizeof(float));
  const KdTree cpu = KdTree::build(pts.data(), kPoints, 3, {8, Device::Cpu});
  const KdTree gpu = KdTree::build(d, kPoints, 3);
  ASSERT_TRUE(gpu.on_device());
  ASSERT_FALSE(gpu.host_ready());
  const index_t m = kQueries;  // the first points are the queries
  index_t* counts = static_cast<index_t*>(test::device_alloc(static_cast<std::size_t>(m) * sizeof(index_t)));
  const std::vector<index_t> unset(static_cast<std::size_t>(m), -1);
  PointCorrelation want_pc(cpu, Device::Gpu), got_pc(gpu, Device::Gpu);
  auto both = [&](const TraversalOptions& t) {
    PcOptions o;
    static_cast<TraversalOptions&>(o) = t;
    o.radius = 0.05f;
    copy_memory(counts, unset.data(), unset.size() * sizeof(index_t));
    const PcResult want = want_pc.run(pts.data(), m, o);
    const TraversalStats got = got_pc.run(d, m, o, counts);
    std::vector<index_t> got_counts(static_cast<std::size_t>(m));
    copy_memory(got_counts.data(), counts, got_counts.size() * sizeof(index_t));
    EXPECT_EQ(got_counts, want.counts) << label(t);
    expect_same_stats(got, want, t, label(t));
  };
  for (const TraversalOptions& t : gpu_options()) both(t);
  EXPECT_FALSE(gpu.host_ready()) << "a GPU call copied the kd-tree to the host";
  for (const TraversalOptions& t : host_options()) both(t);
  EXPECT_TRUE(gpu.host_ready());
  EXPECT_TRUE(same_bits(gpu.boxes(), cpu.boxes()) && same_bits(gpu.points(), cpu.points()));
  test::device_free(counts);
  test::device_free(d);
}

// Barnes-Hut over octrees built on the GPU (build() and a builder), on a range of the bodies
// (each body's walk is its own, so a range keeps the CPU's calls short).
TEST(DeviceTrees, BarnesHutTakesEveryOption) {
  CANOPY_REQUIRE_GPU();
  const PointSet p = generate("plummer:40000", 68);
  const index_t n = p.size();
  ASSERT_GE(n, kGpuBuildMinPoints);
  const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
  const Octree cpu = Octree::build(p.data(), mass.data(), n, {8, 20, Device::Cpu});
  OctreeGpuBuilder builder;
  const Octree built = Octree::build(p.data(), mass.data(), n);
  const Octree from_builder = builder.build(p.data(), mass.data(), n);
  const index_t first = 1000, count = 1024;
  for (const Octree* gpu : {&built, &from_builder}) {
    const bool every = gpu == &built;
    const std::string what = gpu == &built ? "octree, build()" : "octree, a builder";
    ASSERT_EQ(gpu->built_on(), Device::Gpu) << what;
    ASSERT_TRUE(gpu->on_device()) << what;
    ASSERT_FALSE(gpu->host_ready()) << what;
    BarnesHut want_bh(cpu, Device::Gpu), got_bh(*gpu, Device::Gpu);
    std::vector<float> want_f(static_cast<std::size_t>(count) * 3), got_f(want_f.size());
    auto both = [&](const TraversalOptions& t) {
      BhOptions o;
      static_cast<TraversalOptions&>(o) = t;
      const std::string w = what + ", " + label(t);
      std::fill(got_f.begin(), got_f.end(), -1.0f);
      const TraversalStats want = want_bh.run(o, first, count, want_f.data());
      const TraversalStats got = got_bh.run(o, first, count, got_f.data());
      EXPECT_TRUE(same_bits(got_f, want_f)) << w;
      expect_same_stats(got, want, t, w);
    };
    for (const TraversalOptions& t : gpu_options()) both(t);
    EXPECT_FALSE(gpu->host_ready()) << what << ": a GPU call copied the octree to the host";
    for (const TraversalOptions& t : host_options(every)) both(t);
    EXPECT_TRUE(gpu->host_ready()) << what;
    EXPECT_TRUE(same_bits(gpu->bodies(), cpu.bodies()) && same_bits(gpu->com(), cpu.com()) &&
                same_bits(gpu->cubes(), cpu.cubes()) && gpu->body_ids() == cpu.body_ids())
        << what;
    BhOptions o;
    std::fill(got_f.begin(), got_f.end(), -1.0f);
    BarnesHut(*gpu, Device::Cpu).run(o, first, count, got_f.data());
    BarnesHut(cpu, Device::Cpu).run(o, first, count, want_f.data());
    EXPECT_TRUE(same_bits(got_f, want_f)) << what << ", an object made for the CPU";
  }
}

// The same points built into a kd-tree on the CPU (the reference) and one the GPU build leaves
// on the device (each built in place: no copy or move between them and the test).
struct CpuAndGpuTrees {
  KdTree cpu, gpu;
};
CpuAndGpuTrees cpu_and_gpu_trees(const std::vector<float>& pts) {
  return {KdTree::build(pts.data(), kPoints, 3, {8, Device::Cpu}), KdTree::build(pts.data(), kPoints, 3)};
}

// The k-NN options of the checks below: k neighbours in the Hybrid schedule.
KnnOptions hybrid_knn(int k) {
  KnnOptions o;
  o.k = k;
  o.schedule = ScheduleKind::Hybrid;
  return o;
}

// A copy (and a copy-assignment) of a tree on the device: the host copy made once, the copy
// still reading the device arrays on the GPU, its results the CPU tree's.
TEST(DeviceTrees, CopiesOfTreesOnTheDevice) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(kPoints, 3, 69), queries = test::random_points(kQueries, 3, 70);
  const auto [cpu, gpu] = cpu_and_gpu_trees(pts);
  ASSERT_FALSE(gpu.host_ready());
  const KdTree copy = gpu;
  KdTree assigned = KdTree::build(pts.data(), 1000, 3, {8, Device::Cpu});
  assigned = gpu;
  EXPECT_TRUE(gpu.host_ready());
  KnnOptions o = hybrid_knn(3);
  o.executor = ExecutorKind::FsmLockstep;
  o.count_nodes = true;
  const KnnResult want = NearestNeighbors(cpu, Device::Gpu).run(queries.data(), kQueries, o);
  for (const KdTree* t : {&copy, static_cast<const KdTree*>(&assigned)}) {
    EXPECT_TRUE(t->on_device() && t->host_ready());
    EXPECT_EQ(t->bytes(), cpu.bytes());
    EXPECT_TRUE(same_bits(t->boxes(), cpu.boxes()) && same_bits(t->points(), cpu.points()) &&
                t->point_ids() == cpu.point_ids());
    const KnnResult got = NearestNeighbors(*t, Device::Gpu).run(queries.data(), kQueries, o);
    EXPECT_EQ(got.indices, want.indices);
    EXPECT_EQ(got.warp_nodes, want.warp_nodes);
  }
  const Octree body_tree = Octree::build_on_gpu(pts.data(), std::vector<float>(kPoints, 1.0f).data(), kPoints);
  const Octree body_copy = body_tree;
  EXPECT_TRUE(body_copy.on_device() && body_copy.host_ready());
  EXPECT_TRUE(same_bits(body_copy.bodies(), body_tree.bodies()) && same_bits(body_copy.com(), body_tree.com()));
}

// The quality tools over a tree on the device (its view() copies it to the host): the measure of
// a kept schedule is the CPU tree's.
TEST(DeviceTrees, ScheduleQualityOverTreesOnTheDevice) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::clustered_points(kPoints, 3, 71), queries = test::random_points(kQueries, 3, 72);
  const auto [cpu, gpu] = cpu_and_gpu_trees(pts);
  ASSERT_FALSE(gpu.host_ready());
  KnnOptions o = hybrid_knn(4);
  o.keep_schedule = true;
  const KnnResult r = NearestNeighbors(gpu, Device::Gpu).run(queries.data(), kQueries, o);
  ASSERT_EQ(r.schedule.order.size(), static_cast<std::size_t>(kQueries));
  std::vector<float> dist(static_cast<std::size_t>(kQueries) * 4);
  std::vector<index_t> index(dist.size());
  auto quality = [&](const KdTree& t) {
    const KdTreeView v = t.view();
    return measure_schedule(v, make_knn_visitor<4>(v, queries.data(), 4, dist.data(), index.data()),
                            r.schedule.order.data(), kQueries);
  };
  const ScheduleQuality want = quality(cpu), got = quality(gpu);
  EXPECT_GT(want.warp_union, 0);
  EXPECT_EQ(got.delta, want.delta);
  EXPECT_EQ(got.warp_union, want.warp_union);

  const PointSet p = generate("plummer:40000", 73);
  const std::vector<float> mass(static_cast<std::size_t>(p.size()), 1.0f);
  const Octree ocpu = Octree::build(p.data(), mass.data(), p.size(), {8, 20, Device::Cpu});
  const Octree ogpu = Octree::build(p.data(), mass.data(), p.size());
  ASSERT_FALSE(ogpu.host_ready());
  std::vector<float> forces(static_cast<std::size_t>(kQueries) * 3);
  auto bh_quality = [&](const Octree& t) {
    BarnesHutVisitor v;
    v.tree = t.view();
    v.bodies_xyz = p.data();
    v.masses = mass.data();
    v.forces = forces.data();
    return measure_schedule(v.tree, v, nullptr, kQueries);
  };
  const ScheduleQuality bh_want = bh_quality(ocpu), bh_got = bh_quality(ogpu);
  EXPECT_GT(bh_want.warp_union, 0);
  EXPECT_EQ(bh_got.delta, bh_want.delta);
  EXPECT_EQ(bh_got.warp_union, bh_want.warp_union);
}

// A custom traversal over a kd-tree on the device: the Traverser cuts its top-tree from the
// tree's topology_view() and reads the device arrays in place, copying nothing to the host.
TEST(DeviceTrees, CustomTraversalOverATreeOnTheDevice) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(kPoints, 3, 75), queries = test::random_points(kQueries, 3, 76);
  const auto [cpu, gpu] = cpu_and_gpu_trees(pts);
  ASSERT_TRUE(gpu.on_device());
  PcOptions reference;
  reference.radius = 0.05f;
  reference.device = Device::Cpu;
  const std::vector<index_t> want = PointCorrelation(cpu, Device::Cpu).run(queries.data(), kQueries, reference).counts;
  for (ScheduleKind s : {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridDevice,
                         ScheduleKind::HybridKey, ScheduleKind::Auto})
    for (ExecutorKind e : kExecutors) {
      TraversalOptions o;
      o.schedule = s;
      o.executor = e;
      o.keep_schedule = true;
      o.gpu_count_nodes = e != ExecutorKind::Independent && s != ScheduleKind::Auto;
      EXPECT_EQ(test::traverser_point_correlation(gpu, queries, 0.05f, o), want) << label(o);
    }
  EXPECT_FALSE(gpu.host_ready()) << "a custom GPU traversal copied the tree to the host";
}

// A GPU build leaves even the nodes on the device: a GPU call under the leaf sort or the input
// order (the default's first call) copies nothing; the first top-tree (a hybrid schedule, or the
// compact key's depth in Auto's trial) brings the nodes alone, equal to the CPU build's.
TEST(DeviceTrees, TheNodesComeToTheHostOnlyForATopTree) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> pts = test::random_points(kPoints, 3, 81), queries = test::random_points(kQueries, 3, 82);
  const KdTree cpu = KdTree::build(pts.data(), kPoints, 3, {8, Device::Cpu});
  const KdTree gpu = KdTree::build(pts.data(), kPoints, 3);
  ASSERT_TRUE(gpu.on_device());
  EXPECT_EQ(gpu.shape_view().nodes, nullptr) << "the build brought the nodes back";
  EXPECT_EQ(gpu.node_count(), cpu.node_count());
  EXPECT_EQ(gpu.shape_view().n_nodes, cpu.node_count());
  EXPECT_EQ(gpu.shape_view().height, cpu.height());
  NearestNeighbors want_nn(cpu, Device::Gpu), got_nn(gpu, Device::Gpu);
  auto both = [&](ScheduleKind schedule, const char* what) {
    KnnOptions o;
    o.k = 5;
    o.schedule = schedule;
    const KnnResult want = want_nn.run(queries.data(), kQueries, o), got = got_nn.run(queries.data(), kQueries, o);
    EXPECT_EQ(got.indices, want.indices) << what;
    EXPECT_TRUE(same_bits(got.distances, want.distances)) << what;
    return got;
  };
  AutoChoice::forget_all();
  both(ScheduleKind::Auto, "the default's first call");
  both(ScheduleKind::LeafSort, "leaf sort");
  both(ScheduleKind::InputOrder, "input order");
  EXPECT_EQ(gpu.shape_view().nodes, nullptr) << "a call without a top-tree fetched the nodes";
  // The compact key at depth 0 (as Auto's trial runs it): its depth needs the nodes' levels
  // (EngineState::fetch_nodes), then its cut.
  both(ScheduleKind::HybridKey, "the compact key");
  EXPECT_NE(gpu.shape_view().nodes, nullptr) << "the compact key ran without the nodes";
  EXPECT_FALSE(gpu.host_ready()) << "the nodes came with the other arrays";
  EXPECT_TRUE(same_bits(gpu.nodes(), cpu.nodes()));
  // A fresh tree: a fixed hybrid schedule's cut alone fetches them (run_fixed).
  const KdTree fresh = KdTree::build(pts.data(), kPoints, 3);
  NearestNeighbors fresh_nn(fresh, Device::Gpu);
  KnnOptions o;
  o.k = 5;
  o.schedule = ScheduleKind::Hybrid;
  o.depth = 6;
  EXPECT_EQ(fresh_nn.run(queries.data(), kQueries, o).indices, want_nn.run(queries.data(), kQueries, o).indices);
  EXPECT_NE(fresh.shape_view().nodes, nullptr);
  EXPECT_TRUE(same_bits(fresh.nodes(), cpu.nodes()));
  EXPECT_FALSE(fresh.host_ready());
  // Memory-budget batches size themselves from a top-tree cut on the host, whatever the schedule.
  const KdTree budgeted = KdTree::build(pts.data(), kPoints, 3);
  NearestNeighbors budget_nn(budgeted, Device::Gpu);
  o.schedule = ScheduleKind::LeafSort;
  o.depth = 0;
  const KnnResult whole = want_nn.run(queries.data(), kQueries, o);
  o.memory_budget = budgeted.bytes() + 50000;  // about 960 queries' data and results a batch
  const KnnResult batched = budget_nn.run(queries.data(), kQueries, o);
  EXPECT_EQ(batched.indices, whole.indices);
  EXPECT_TRUE(same_bits(batched.distances, whole.distances));
  EXPECT_NE(budgeted.shape_view().nodes, nullptr);
}

// The rule the engines follow (no GPU needed): only the CPU run and count_nodes' emulator read
// the whole tree on the host; no other option of a GPU call does.
TEST(DeviceTrees, OnlyCpuPathsReadTheHostTree) {
  TraversalOptions o;
  EXPECT_FALSE(detail::call_reads_host_tree(Device::Gpu, o));
  EXPECT_TRUE(detail::call_reads_host_tree(Device::Cpu, o));
  o.keep_schedule = true;
  o.gpu_count_nodes = true;
  o.pipeline = true;
  o.depth = kAutoDepth;
  o.schedule = ScheduleKind::LeafSort;
  o.executor = ExecutorKind::FsmLockstep;
  EXPECT_FALSE(detail::call_reads_host_tree(Device::Gpu, o));
  o.count_nodes = true;
  EXPECT_TRUE(detail::call_reads_host_tree(Device::Gpu, o));
  o.count_nodes = false;
  o.device = Device::Cpu;
  EXPECT_TRUE(detail::call_reads_host_tree(Device::Gpu, o));
}

// A host-built tree is not on the device: its topology view is its whole view, and copies of it
// stay on the host (the same paths as above, with nothing to copy).
TEST(DeviceTrees, HostTreesHaveNothingToFetch) {
  const std::vector<float> pts = test::random_points(5000, 3, 74);
  const KdTree t = KdTree::build(pts.data(), 5000, 3, {8, Device::Cpu});
  EXPECT_FALSE(t.on_device());
  EXPECT_TRUE(t.host_ready());
  const KdTreeView full = t.view(), top = t.topology_view();
  EXPECT_EQ(top.points, full.points);
  EXPECT_EQ(top.boxes, full.boxes);
  EXPECT_EQ(top.point_ids, full.point_ids);
  const KdTree copy = t;
  EXPECT_FALSE(copy.on_device());
  EXPECT_TRUE(same_bits(copy.boxes(), t.boxes()) && copy.point_ids() == t.point_ids());
}

// A CPU walk over a view whose arrays are still on the device (what topology_view() of a
// GPU-built tree gives) is an Error naming the cure, not a read of null pointers.
TEST(DeviceTrees, CpuWalkOverAViewWithoutHostArraysIsAnError) {
  const std::vector<float> pts = test::random_points(5000, 3, 73);
  const KdTree t = KdTree::build(pts.data(), 5000, 3, {8, Device::Cpu});
  KdTreeView v = t.view();
  v.points = nullptr;  // as topology_view() leaves it for a tree on the device
  std::vector<index_t> counts(10);
  PointCorrelationVisitor<4> pc{v, pts.data(), counts.data(), 0.01f};
  try {
    traverse_cpu(v, pc, 10);
    ADD_FAILURE() << "traverse_cpu walked a view without its points";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tree.view()"), std::string::npos) << e.what();
  }
  pc.tree = t.view();
  traverse_cpu(t.view(), pc, 10);  // the same walk with the host arrays: no error
  const std::vector<float> xyz = test::random_points(3000, 3, 72);
  const std::vector<float> mass(3000, 1.0f);
  const Octree o = Octree::build(xyz.data(), mass.data(), 3000);
  OctreeView ov = o.view();
  ov.bodies = nullptr;
  EXPECT_THROW(detail::require_host_arrays(ov, "a test"), Error);
  EXPECT_NO_THROW(detail::require_host_arrays(o.view(), "a test"));
}

}  // namespace
}  // namespace canopy
