// Nearest neighbours (k = 1) and k nearest neighbours on the kd-tree, ball tree and vp-tree:
// exact equality with brute force for every executor, schedule and device, the soundness of
// guided scheduling, and bad input (the guided inspector and scheduler: test_knn_guided.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "executor/cpu_executor.hpp"
#include "gpu_trace.hpp"
#include "inspector/inspector.hpp"
#include "runtime/engine.hpp"
#include "runtime/knn.hpp"
#include "runtime/knn_visitor.hpp"
#include "scheduler/guided.hpp"
#include "knn_workload.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

using namespace knn_test;

struct Neighbours {
  std::vector<index_t> indices;
  std::vector<float> distances;
};

// Every query against every point; the k smallest (squared distance, index), ascending.
Neighbours brute_knn(const std::vector<float>& points, const std::vector<float>& queries, int dims, int k) {
  const index_t n = static_cast<index_t>(points.size()) / dims, m = static_cast<index_t>(queries.size()) / dims;
  Neighbours out;
  std::vector<std::pair<float, index_t>> all(static_cast<std::size_t>(n));
  for (index_t q = 0; q < m; ++q) {
    for (index_t i = 0; i < n; ++i) all[i] = {test::ref_point_distance2(&queries[q * dims], &points[i * dims], dims), i};
    std::partial_sort(all.begin(), all.begin() + k, all.end());
    for (int j = 0; j < k; ++j) {
      out.indices.push_back(all[j].second);
      out.distances.push_back(std::sqrt(all[j].first));
    }
  }
  return out;
}

constexpr ExecutorKind kExecutors[] = {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep};
constexpr ScheduleKind kSchedules[] = {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridDevice,
                                       ScheduleKind::LeafSort, ScheduleKind::HybridKey};

template <class Tree>
void expect_all_variants_exact(const std::vector<float>& points, const std::vector<float>& queries, int dims, int k,
                               Device device, int depth = 0) {
  const Tree tree = build_tree<Tree>(points, dims);
  const Neighbours ref = brute_knn(points, queries, dims, k);
  NearestNeighbors nn(tree, device);
  const index_t m = static_cast<index_t>(queries.size()) / dims;
  for (ExecutorKind e : kExecutors) {
    for (ScheduleKind s : kSchedules) {
      KnnOptions opt = test::options_on<KnnOptions>(device, s, e);
      opt.k = k;
      opt.depth = depth;
      const KnnResult r = nn.run(queries.data(), m, opt);
      ASSERT_EQ(r.indices, ref.indices) << to_string(nn.tree_kind()) << " dims " << dims << " k " << k << " "
                                        << to_string(e) << " " << to_string(s) << " on " << to_string(r.device);
      ASSERT_EQ(r.distances, ref.distances) << to_string(nn.tree_kind()) << " " << to_string(e) << " " << to_string(s);
    }
  }
}

template <class Tree>
void exact_in_every_dimension(Device device) {
  for (int dims : {2, 3, 7, 16}) {
    const std::vector<float> points = test::clustered_points(1200, dims, 10 + dims);
    const std::vector<float> queries = make_queries(points, dims, 200, 20 + dims);
    // The kd-tree's heap at every k, on the GPU in shared memory (k = 64: over 48 KiB a block, the
    // opt-in), at k = 150 in the index rows (a block's heaps would take over kMaxVisitorShared);
    // ball and vp trees: the list in the rows at k <= 8, the heap above.
    for (int k : {1, 2, 8, 9, 30, 64, 150}) expect_all_variants_exact<Tree>(points, queries, dims, k, device);
  }
}

// The heap asks the executor kernels for k keys a thread, through any wrapper; the list in the
// results asks for nothing.
TEST(KnnHeap, SharedMemoryRequest) {
  const std::vector<float> points = test::random_points(100, 3, 1);
  const KdTree tree = build_tree<KdTree>(points, 3);
  const auto heap = make_knn_visitor<4, KdTreeView, true>(tree.view(), points.data(), 30, nullptr, nullptr);
  EXPECT_EQ(shared_bytes_per_thread(heap), 30 * sizeof(std::uint64_t));
  EXPECT_EQ(shared_bytes_per_thread(ForwardingVisitor<decltype(heap)>{heap}), 30 * sizeof(std::uint64_t));
  EXPECT_EQ(shared_bytes_per_thread(make_knn_visitor<4>(tree.view(), points.data(), 30, nullptr, nullptr)), 0u);
}

// The heap's sift against a sorted reference: after every replacement of the root the slots
// hold the k smallest keys seen, the root the largest of them, at every stride.
TEST(KnnHeap, SiftKeepsTheKSmallest) {
  std::mt19937 rng(7);
  for (int k : {1, 2, 3, 7, 30, 64}) {
    for (int stride : {1, 3}) {
      std::vector<std::uint64_t> h(static_cast<std::size_t>(k * stride), ~std::uint64_t{0});
      std::vector<std::uint64_t> seen;
      for (int i = 0; i < 500; ++i) {
        const std::uint64_t c = rng() % 1000;  // repeats included
        seen.push_back(c);
        if (c < h[0]) knn_heap_sift(h.data(), stride, k, c);
        std::vector<std::uint64_t> want = seen, got;
        std::sort(want.begin(), want.end());
        want.resize(std::min<std::size_t>(want.size(), static_cast<std::size_t>(k)));
        for (int j = 0; j < k; ++j)
          if (h[static_cast<std::size_t>(j * stride)] != ~std::uint64_t{0}) got.push_back(h[static_cast<std::size_t>(j * stride)]);
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, want) << "k " << k << " after " << i + 1;
        for (int j = 1; j < k; ++j) ASSERT_GE(h[0], h[static_cast<std::size_t>(j * stride)]);
      }
    }
  }
}

CANOPY_TEST_ON_CPU_AND_GPU(KnnExact, KdTree, exact_in_every_dimension<KdTree>)
CANOPY_TEST_ON_CPU_AND_GPU(KnnExact, BallTree, exact_in_every_dimension<BallTree>)
CANOPY_TEST_ON_CPU_AND_GPU(KnnExact, VpTree, exact_in_every_dimension<VpTree>)

template <class Tree>
void exact_on_real_data(Device device) {
  for (auto [file, cols] : {std::pair<const char*, const char*>{"covtype_4k.csv", "0-6"}, {"cities_4k.csv", ""}}) {
    const PointSet ps = test::real_points(file, cols);
    std::vector<float> build, query;
    split_halves(ps, build, query);
    for (int k : {1, 8}) expect_all_variants_exact<Tree>(build, query, ps.dims, k, device);
  }
}

// Leaf sizes other than the default (one point, a few, more than 8, 40: the sizes a leaf loop
// taking points in chunks of 4 or 8 would split unevenly) give the brute-force answer under
// every executor.
void exact_at_every_leaf_size(Device device) {
  for (int dims : {3, 7}) {
    const std::vector<float> points = test::clustered_points(1500, dims, 40 + dims);
    const std::vector<float> queries = make_queries(points, dims, 200, 50 + dims);
    const index_t m = static_cast<index_t>(queries.size()) / dims;
    for (int leaf : {1, 3, 13, 40}) {
      KdTreeOptions o;
      o.leaf_size = leaf;
      const KdTree tree = KdTree::build(points.data(), static_cast<index_t>(points.size()) / dims, dims, o);
      NearestNeighbors nn(tree, device);
      for (int k : {1, 9, 30}) {
        const Neighbours ref = brute_knn(points, queries, dims, k);
        for (ExecutorKind e : kExecutors) {
          KnnOptions opt = test::options_on<KnnOptions>(device, ScheduleKind::LeafSort, e);
          opt.k = k;
          const KnnResult r = nn.run(queries.data(), m, opt);
          ASSERT_EQ(r.indices, ref.indices) << "dims " << dims << " leaf " << leaf << " k " << k << " " << to_string(e);
          ASSERT_EQ(r.distances, ref.distances) << "dims " << dims << " leaf " << leaf << " k " << k;
        }
      }
    }
  }
}
TEST(KnnHeap, ExactAtEveryLeafSizeCpu) { exact_at_every_leaf_size(Device::Cpu); }
TEST(KnnHeap, ExactAtEveryLeafSizeGpu) {
  CANOPY_REQUIRE_GPU();
  exact_at_every_leaf_size(Device::Gpu);
}

TEST(KnnExact, RealSubsetsCpu) {
  exact_on_real_data<KdTree>(Device::Cpu);
  exact_on_real_data<BallTree>(Device::Cpu);
  exact_on_real_data<VpTree>(Device::Cpu);
}
TEST(KnnExact, RealSubsetsGpu) {
  CANOPY_REQUIRE_GPU();
  exact_on_real_data<KdTree>(Device::Gpu);
  exact_on_real_data<BallTree>(Device::Gpu);
  exact_on_real_data<VpTree>(Device::Gpu);
}

// Every depth of the top-tree gives the same answer (the schedule changes, nothing else).
TEST(KnnExact, EveryDepth) {
  const std::vector<float> points = test::clustered_points(600, 3, 3);
  const std::vector<float> queries = make_queries(points, 3, 150, 4);
  const KdTree tree = build_tree<KdTree>(points, 3);
  for (int d = 1; d <= tree.height(); ++d) {
    expect_all_variants_exact<KdTree>(points, queries, 3, 4, Device::Cpu, d);
    expect_all_variants_exact<VpTree>(points, queries, 3, 4, Device::Cpu, std::min(d, VpTree::build(points.data(), 600, 3).height()));
  }
}

// Every way of forming guided rows (probe, row cap) gives the brute-force answer on both
// devices and every hybrid schedule, pipelined or not; the run reports the rows it used, and
// rows without a probe take the deeper default top-tree.
TEST(KnnExact, EveryProbeAndRowCap) {
  const std::vector<float> points = test::clustered_points(3000, 7, 5);
  const std::vector<float> queries = make_queries(points, 7, 700, 6);
  const Neighbours ref = brute_knn(points, queries, 7, 8);
  const KdTree kd = build_tree<KdTree>(points, 7);
  const BallTree ball = build_tree<BallTree>(points, 7);
  for (Device dev : {Device::Cpu, Device::Gpu}) {
    if (dev == Device::Gpu && !gpu_available()) continue;
    for (int which = 0; which < 2; ++which) {
      NearestNeighbors nn = which == 0 ? NearestNeighbors(kd, dev) : NearestNeighbors(ball, dev);
      for (GuidedProbe probe : {GuidedProbe::Full, GuidedProbe::Lean, GuidedProbe::None}) {
        for (index_t cap : {0, 1, 4}) {
          for (ScheduleKind s : {ScheduleKind::Hybrid, ScheduleKind::HybridDevice}) {
            for (bool pipeline : {false, true}) {
              KnnOptions opt;
              opt.k = 8;
              opt.device = dev;
              opt.schedule = s;
              opt.probe = probe;
              opt.row_cap = cap;
              opt.pipeline = pipeline;
              opt.chunk = 300;
              const KnnResult r = nn.run(queries.data(), 700, opt);
              const std::string what = std::string(to_string(nn.tree_kind())) + " " + to_string(probe) + " cap " +
                                       std::to_string(cap) + " " + to_string(s) + (pipeline ? " pipelined" : "") +
                                       " on " + to_string(dev);
              ASSERT_EQ(r.indices, ref.indices) << what;
              ASSERT_EQ(r.distances, ref.distances) << what;
              EXPECT_EQ(r.rows.probe, probe) << what;
              EXPECT_EQ(r.rows.cap, cap > 0 ? cap : probe == GuidedProbe::None ? kDefaultPositionalRowCap : 0);
              const int def = probe == GuidedProbe::None ? kDefaultPositionalDepth : kDefaultTopTreeDepth;
              EXPECT_EQ(r.depth, std::min(def, nn.height())) << what;
            }
          }
        }
      }
    }
  }
}

// The options' defaults: the paper's full probe, except pipelined on the GPU, where the
// inspector shares the GPU with the executor and rows without a probe are cheaper.
TEST(GuidedRowsOption, DefaultsCapsAndErrors) {
  TraversalOptions o;
  for (Device d : {Device::Cpu, Device::Gpu}) {
    EXPECT_EQ(guided_rows(o, d).probe, GuidedProbe::Full);
    EXPECT_EQ(guided_rows(o, d).cap, 0);
    EXPECT_EQ(guided_default_depth(o, d), kDefaultTopTreeDepth);
  }
  o.pipeline = true;
  EXPECT_EQ(guided_rows(o, Device::Cpu).probe, GuidedProbe::Full) << "nothing is pipelined on the CPU";
  EXPECT_EQ(guided_rows(o, Device::Gpu).probe, GuidedProbe::None);
  EXPECT_EQ(guided_rows(o, Device::Gpu).cap, kDefaultPositionalRowCap);
  EXPECT_EQ(guided_default_depth(o, Device::Gpu), kDefaultPositionalDepth);
  // Custom trees (any fan-out) keep the full probe by default, and depth 0 stays 8 whatever the
  // probe: a depth-12 top-tree of a wide tree could have millions of leaves.
  EXPECT_EQ(guided_rows(o, Device::Gpu, false).probe, GuidedProbe::Full);
  {
    TraversalOptions none;
    none.probe = GuidedProbe::None;
    none.schedule = ScheduleKind::HybridDevice;  // begin_call takes resolved kinds
    none.executor = ExecutorKind::FsmLockstep;
    TraversalStats builtin = begin_call(none, Device::Cpu, "test", 20, kDefaultTopTreeDepth, true, true);
    const TraversalStats custom = begin_call(none, Device::Cpu, "test", 20, kDefaultTopTreeDepth, true, false);
    const TraversalStats unguided = begin_call(none, Device::Cpu, "test", 20, kDefaultTopTreeDepth, false, true);
    EXPECT_EQ(builtin.depth, kDefaultPositionalDepth);
    EXPECT_EQ(custom.depth, kDefaultTopTreeDepth);
    EXPECT_EQ(custom.rows.probe, GuidedProbe::None);
    EXPECT_EQ(custom.rows.cap, kDefaultPositionalRowCap);
    EXPECT_EQ(unguided.depth, kDefaultTopTreeDepth);
    builtin = begin_call(none, Device::Cpu, "test", 9, kDefaultTopTreeDepth, true, true);
    EXPECT_EQ(builtin.depth, 9) << "capped at the tree's height";
  }
  o.probe = GuidedProbe::Lean;
  EXPECT_EQ(guided_rows(o, Device::Gpu).probe, GuidedProbe::Lean);
  EXPECT_EQ(guided_rows(o, Device::Gpu).cap, 0);
  EXPECT_EQ(guided_default_depth(o, Device::Gpu), kDefaultTopTreeDepth);
  o.row_cap = 5;
  EXPECT_EQ(guided_rows(o, Device::Gpu).cap, 5);
  EXPECT_EQ(guided_rows(o, Device::Gpu).width(3), 3);
  EXPECT_EQ(guided_rows(o, Device::Gpu).width(64), 5);
  EXPECT_EQ(GuidedRows{}.width(64), 64);
  o.row_cap = -1;
  try {
    guided_rows(o, Device::Cpu);
    FAIL() << "a negative row_cap must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row_cap = -1"), std::string::npos) << e.what();
  }
  const std::vector<float> points = test::random_points(100, 2, 15);
  const KdTree tree = build_tree<KdTree>(points, 2);
  NearestNeighbors nn(tree, Device::Cpu);
  KnnOptions opt;
  opt.k = 3;
  opt.row_cap = -2;
  EXPECT_THROW(nn.run(points.data(), 10, opt), Error);
}

TEST(KnnDegenerate, IdenticalPointsLineOnePointDuplicateQueries) {
  const Device devices[] = {Device::Cpu, Device::Gpu};
  for (Device dev : devices) {
    if (dev == Device::Gpu && !gpu_available()) continue;
    // All points identical: every distance ties, the lowest indices win.
    std::vector<float> same(300 * 3, 0.25f);
    std::vector<float> q = test::random_points(40, 3, 9);
    std::copy_n(same.begin(), 3, q.begin());
    expect_all_variants_exact<KdTree>(same, q, 3, 8, dev);
    expect_all_variants_exact<KdTree>(same, q, 3, 30, dev);
    expect_all_variants_exact<BallTree>(same, q, 3, 8, dev);
    expect_all_variants_exact<VpTree>(same, q, 3, 8, dev);
    // Points on a line in 7-d.
    std::vector<float> line(500 * 7);
    for (int i = 0; i < 500; ++i)
      for (int d = 0; d < 7; ++d) line[i * 7 + d] = static_cast<float>(i % 97) / 97.0f * (d + 1) / 7.0f;
    const std::vector<float> lq = make_queries(line, 7, 60, 10);
    expect_all_variants_exact<KdTree>(line, lq, 7, 8, dev);
    expect_all_variants_exact<BallTree>(line, lq, 7, 8, dev);
    expect_all_variants_exact<VpTree>(line, lq, 7, 8, dev);
    // One point: k = 1 only.
    const std::vector<float> one = {0.5f, 0.5f};
    const std::vector<float> oq = test::random_points(33, 2, 11);
    expect_all_variants_exact<KdTree>(one, oq, 2, 1, dev);
    expect_all_variants_exact<BallTree>(one, oq, 2, 1, dev);
    expect_all_variants_exact<VpTree>(one, oq, 2, 1, dev);
    // Duplicate queries get identical answers.
    const std::vector<float> pts = test::random_points(400, 2, 12);
    std::vector<float> dq;
    for (int i = 0; i < 70; ++i) dq.insert(dq.end(), {0.3f, 0.7f});
    expect_all_variants_exact<KdTree>(pts, dq, 2, 8, dev);
    expect_all_variants_exact<VpTree>(pts, dq, 2, 8, dev);
  }
}

// k equal to the number of points returns every point, sorted; a larger k is an error.
TEST(KnnErrors, KAtAndBeyondTheTreeSize) {
  const std::vector<float> points = test::random_points(50, 3, 13);
  const std::vector<float> queries = test::random_points(10, 3, 14);
  expect_all_variants_exact<KdTree>(points, queries, 3, 50, Device::Cpu);
  expect_all_variants_exact<BallTree>(points, queries, 3, 50, Device::Cpu);
  const KdTree tree = build_tree<KdTree>(points, 3);
  NearestNeighbors nn(tree, Device::Cpu);
  KnnOptions opt;
  opt.k = 51;
  try {
    nn.run(queries.data(), 10, opt);
    FAIL() << "k > n must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("k = 51 is outside 1..50"), std::string::npos) << e.what();
  }
  opt.k = 0;
  EXPECT_THROW(nn.run(queries.data(), 10, opt), Error);
}

TEST(KnnErrors, BadQueriesDepthAndDevice) {
  const std::vector<float> points = test::random_points(100, 2, 15);
  const VpTree tree = build_tree<VpTree>(points, 2);
  NearestNeighbors nn(tree, Device::Cpu);
  KnnOptions opt;
  opt.k = 3;
  std::vector<float> q = {0.1f, 0.2f, NAN, 0.4f};
  try {
    nn.run(q.data(), 2, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("query 1 has a non-finite coordinate"), std::string::npos) << e.what();
  }
  q[2] = 0.3f;
  opt.depth = tree.height() + 1;
  try {
    nn.run(q.data(), 2, opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is deeper than the tree"), std::string::npos) << e.what();
  }
  opt.depth = 0;
  opt.device = Device::Gpu;
  EXPECT_THROW(nn.run(q.data(), 2, opt), Error);  // created for the CPU
  EXPECT_TRUE(nn.run(q.data(), 0, KnnOptions{}).indices.empty());
}

// --- Soundness -------------------------------------------------------------------------------

constexpr int kCapacity = 512;

struct CpuTrace {
  std::vector<node_id> trace;
  std::vector<std::int32_t> lengths;
  std::vector<float> dist;
  std::vector<index_t> index;
};

template <class View, class Inner>
CpuTrace trace_cpu(const View& view, const Inner& inner, index_t m, int k, const std::vector<index_t>& order,
                   bool lockstep) {
  CpuTrace t;
  t.trace.assign(static_cast<std::size_t>(m) * kCapacity, 0);
  t.lengths.assign(m, 0);
  t.dist.assign(static_cast<std::size_t>(m) * k, 0);
  t.index.assign(static_cast<std::size_t>(m) * k, 0);
  TracingVisitor<Inner> v;
  v.inner = inner;
  v.inner.dist = t.dist.data();
  v.inner.index = t.index.data();
  v.trace = t.trace.data();
  v.lengths = t.lengths.data();
  v.capacity = kCapacity;
  if (lockstep)
    emulate_lockstep(view, v, order.empty() ? nullptr : order.data(), m, LockstepMode::Fsm);
  else
    execute_cpu(view, v, order.empty() ? nullptr : order.data(), m);
  return t;
}

// The recursive traversal of the paper's Figure 1 with the query's own child order.
template <class View, class V>
void reference_visits(const View& tree, const V& v, typename V::State& s, node_id n, std::vector<node_id>& out) {
  const bool go = v.descend(s, n);
  out.push_back(go ? n : ~n);
  if (!go) return;
  if (tree.is_leaf(n)) {
    v.leaf(s, n);
    return;
  }
  const int first = v.first_child(s, n);
  for (int i = 0; i < tree.child_count(n); ++i) reference_visits(tree, v, s, tree.child(n, visit_rank_child(first, i)), out);
}

template <class Tree>
void guided_soundness(int dims) {
  const index_t m = 300;
  const int k = 8;
  on_knn_workload<Tree>(dims, 2000, m, k, 30 + dims, [&](const std::vector<float>& points,
                                                          const std::vector<float>& queries, const Tree& tree,
                                                          const auto& view, const auto& v) {
    // Schedules: input, reversed, random, guided, greedy-leaf sorted.
    std::vector<std::vector<index_t>> orders(5, std::vector<index_t>(m));
    std::iota(orders[0].begin(), orders[0].end(), 0);
    std::reverse_copy(orders[0].begin(), orders[0].end(), orders[1].begin());
    orders[2] = orders[0];
    std::shuffle(orders[2].begin(), orders[2].end(), std::mt19937_64(3));
    const TopTree top = TopTree::build(view, std::min(6, view.height));
    const GuidedMatrix gm = inspect_cpu_guided(view, top.view(), v, m);
    orders[3] = guided_schedule(gm.view(), top.parents().data()).order;
    std::vector<std::int64_t> keys(m);
    for (index_t i = 0; i < m; ++i) keys[i] = greedy_leaf(view, v, i);
    orders[4] = sort_by_key(keys.data(), m).order;

    const CpuTrace base = trace_cpu(view, v, m, k, {}, false);
    for (index_t q = 0; q < m; ++q) {
      std::vector<node_id> ref;
      auto s = v.init(q);
      reference_visits(view, v, s, 0, ref);
      ASSERT_EQ(base.lengths[q], static_cast<std::int32_t>(ref.size()));
      ASSERT_TRUE(std::equal(ref.begin(), ref.end(), base.trace.begin() + q * kCapacity)) << "query " << q;
    }
    const Neighbours bf = brute_knn(points, queries, dims, k);
    for (const auto& order : orders) {
      const CpuTrace t = trace_cpu(view, v, m, k, order, false);
      EXPECT_EQ(t.trace, base.trace) << "independent executor: visits depend on the schedule";
      EXPECT_EQ(t.lengths, base.lengths);
      EXPECT_EQ(t.index, bf.indices);
      // Lockstep: the vote may reorder a query's visits, never change its result.
      const CpuTrace l = trace_cpu(view, v, m, k, order, true);
      EXPECT_EQ(l.index, bf.indices);
      if (gpu_available()) {
        const test::KnnTraced g = test::run_traced_knn_gpu(tree, queries, k, order, ExecutorKind::Independent, kCapacity);
        EXPECT_EQ(g.trace, base.trace) << "GPU independent executor visits differ from the CPU";
        EXPECT_EQ(g.lengths, base.lengths);
        EXPECT_EQ(g.indices, bf.indices);
        for (ExecutorKind e : {ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep}) {
          const test::KnnTraced gl = test::run_traced_knn_gpu(tree, queries, k, order, e, kCapacity);
          EXPECT_EQ(gl.indices, bf.indices);
          EXPECT_EQ(gl.distances, bf.distances);
          // The GPU warp takes the same votes as the emulator: the same visits, the same counts.
          TracingVisitor<std::decay_t<decltype(v)>> tv;
          std::vector<node_id> tr(static_cast<std::size_t>(m) * kCapacity);
          std::vector<std::int32_t> ln(m);
          tv.inner = v;
          tv.trace = tr.data();
          tv.lengths = ln.data();
          tv.capacity = kCapacity;
          const std::vector<index_t> emu = emulate_lockstep(view, tv, order.data(), m, lockstep_mode(e));
          EXPECT_EQ(gl.warp_nodes, emu) << to_string(e);
          EXPECT_EQ(gl.trace, tr) << to_string(e);
        }
      }
    }
  });
}

TEST(KnnSoundness, KdTree) {
  guided_soundness<KdTree>(2);
  guided_soundness<KdTree>(7);
}
TEST(KnnSoundness, BallTree) {
  guided_soundness<BallTree>(2);
  guided_soundness<BallTree>(7);
}
TEST(KnnSoundness, VpTree) {
  guided_soundness<VpTree>(2);
  guided_soundness<VpTree>(7);
}

}  // namespace
}  // namespace canopy
