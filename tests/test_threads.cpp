// One API object, many host threads (issue 35): 8 threads x 50 calls on ONE object of each kind
// (point correlation, nearest neighbours, Barnes-Hut, a custom traversal, a forest predictor)
// give what the same calls give one after another, and so do threads that each make their own
// objects over one shared tree (a GPU-built tree's lazy host copy included). Each kind on the
// CPU and, the same test body, on the GPU (skipped without one). The calls vary their inputs
// and options (Auto's and depth auto's trials, every schedule, cpu calls on a gpu object), so
// the objects' kept state (buffers, streams, events, Auto's picks, top-trees) is exercised
// from several threads at once. scripts/sanitize.sh --thread runs the CPU ones under
// ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "layouts/graph_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/custom.hpp"
#include "runtime/forest_predictor.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"
#include "tests/interval_tree.hpp"
#include "tests/require_gpu.hpp"
#include "tests/shared_traverser.hpp"
#include "tests/test_forest_util.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

constexpr int kThreads = 8;
constexpr int kCalls = 50;

// A call's results as bytes: equal means bit for bit.
using Bytes = std::vector<unsigned char>;
template <class T>
void append(Bytes& b, const std::vector<T>& v) {
  const std::size_t at = b.size();
  b.resize(at + v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data() + at, v.data(), v.size() * sizeof(T));
}

// call(v) for each of `variants` variants one after another, then kThreads threads started
// together, thread t's i-th call running variant (t + i) % variants: every call must give its
// variant's serial result. A call that throws fails the test with its message.
void expect_threads_equal_serial(int variants, const std::function<Bytes(int)>& call) {
  std::vector<Bytes> serial;
  for (int v = 0; v < variants; ++v) serial.push_back(call(v));
  std::atomic<int> ready{0};
  std::vector<std::string> errors(kThreads);
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::string> first(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      try {
        for (int i = 0; i < kCalls; ++i) {
          const int v = (t + i) % variants;
          if (call(v) != serial[static_cast<std::size_t>(v)] && mismatches[t]++ == 0)
            first[t] = "call " + std::to_string(i) + " (variant " + std::to_string(v) + ")";
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t << ": the first at " << first[t];
  }
}

// The inputs every test shares, made once (on the main thread).
struct Points {
  std::vector<float> points = test::clustered_points(3000, 3, 35);
  std::vector<float> queries[2] = {test::random_points(400, 3, 36), test::clustered_points(300, 3, 37)};
  index_t n(int i) const { return static_cast<index_t>(queries[i].size() / 3); }
};
const Points& points() {
  static const Points p;
  return p;
}

// The options of variant v: every schedule and Auto, depth auto, on `device`; on the GPU one
// variant runs on the CPU (the object's host view, made then, is shared with its GPU calls).
TraversalOptions options(int v, Device device) {
  TraversalOptions o;
  o.device = device;
  switch (v % 6) {
    case 0: break;  // Auto: a trial on the shape's second call, then the settled pick
    case 1: o.schedule = ScheduleKind::Hybrid; o.depth = kAutoDepth; break;
    case 2: o.schedule = ScheduleKind::LeafSort; o.executor = ExecutorKind::Independent; break;
    case 3: o.schedule = ScheduleKind::HybridKey; o.executor = ExecutorKind::FsmLockstep; break;
    case 4: o.schedule = ScheduleKind::InputOrder; o.executor = ExecutorKind::Independent; break;
    default:
      o.schedule = device == Device::Gpu ? ScheduleKind::HybridDevice : ScheduleKind::Hybrid;
      o.executor = ExecutorKind::Independent;
      if (device == Device::Gpu) o.pipeline = true, o.chunk = 64;
      break;
  }
  if (device == Device::Gpu && v == 7) o.device = Device::Cpu;
  return o;
}
constexpr int kVariants = 8;

// The variants of a workload's call on one object the threads share: run(v, o) calls it with
// variant v's options o (their traversal part from options()) and gives the bytes to compare.
template <class Opts, class Run>
void expect_variants_equal_serial(Device device, Run run) {
  expect_threads_equal_serial(kVariants, [&](int v) {
    Opts o;
    static_cast<TraversalOptions&>(o) = options(v, device);
    return run(v, o);
  });
}

KdTree kd_tree(Device build) {
  KdTreeOptions o;
  o.device = build;
  return KdTree::build(points().points.data(), 3000, 3, o);
}

void pc_on_one_object(Device device) {
  const KdTree tree = kd_tree(device);
  PointCorrelation pc(tree, device);
  expect_variants_equal_serial<PcOptions>(device, [&](int v, PcOptions& o) {
    o.radius = v % 2 ? 0.05f : 0.12f;
    const std::vector<float>& q = points().queries[v % 2];
    Bytes b;
    append(b, pc.run(q.data(), points().n(v % 2), o).counts);
    return b;
  });
}

void knn_on_one_object(Device device) {
  const KdTree tree = kd_tree(device);
  NearestNeighbors nn(tree, device);
  expect_variants_equal_serial<KnnOptions>(device, [&](int v, KnnOptions& o) {
    o.k = 1 + v % 5;
    const std::vector<float>& q = points().queries[v % 2];
    const KnnResult r = nn.run(q.data(), points().n(v % 2), o);
    Bytes b;
    append(b, r.indices);
    append(b, r.distances);
    return b;
  });
}

void bh_on_one_object(Device device) {
  const index_t n = 1500;
  const std::vector<float> xyz = test::clustered_points(n, 3, 38);
  std::vector<float> mass(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) mass[i] = 1.0f + static_cast<float>(i % 7);
  OctreeOptions oo;
  oo.device = device;
  const Octree tree = Octree::build(xyz.data(), mass.data(), n, oo);
  BarnesHut bh(tree, device);
  expect_variants_equal_serial<BhOptions>(device, [&](int v, BhOptions& o) {
    o.theta = v % 2 ? 0.5f : 0.8f;
    // Every other variant a range of the bodies (run(opt, first, count, forces)).
    const index_t first = v % 2 ? 0 : 100 + 37 * v, count = v % 2 ? n : 600;
    std::vector<float> forces(static_cast<std::size_t>(count) * 3);
    bh.run(o, first, count, forces.data());
    Bytes b;
    append(b, forces);
    return b;
  });
}

// The custom traversal's tree and queries.
struct Intervals {
  test::RandomTree rt = test::random_interval_tree(4000, 5, 39);
  GraphTree<test::Interval> tree = test::build_interval_tree(rt);
  std::vector<float> xs[2] = {test::random_points(500, 1, 40), test::random_points(333, 1, 41)};
};
const Intervals& intervals() {
  static const Intervals i;
  return i;
}

// The custom options: no LeafSort (a custom traversal has no sort key).
TraversalOptions custom_options(int v, Device device) {
  TraversalOptions o = options(v, device);
  if (o.schedule == ScheduleKind::LeafSort) o.schedule = ScheduleKind::HybridKey;
  o.device = device;
  return o;
}

Bytes interval_bytes(const test::IntervalResults& r) {
  Bytes b;
  append(b, r.counts);
  append(b, r.sums);
  return b;
}

TEST(Threads, CustomTraversalsOverOneTreeOnTheCpuEqualSerialCalls) {
  const Intervals& in = intervals();
  expect_threads_equal_serial(kVariants, [&](int v) {
    const std::vector<float>& xs = in.xs[v % 2];
    const index_t n = static_cast<index_t>(xs.size());
    test::IntervalResults r;
    r.counts.assign(xs.size(), -1);
    r.sums.assign(xs.size(), -1);
    const bool guided = v % 3 == 0;
    const TraversalOptions o = custom_options(v, Device::Cpu);
    auto run = [&](auto visitor) {
      visitor.tree = in.tree.view();
      visitor.iv = in.tree.payload().data();
      visitor.xs = xs.data();
      visitor.sums = r.sums.data();
      visitor.counts = r.counts.data();
      traverse_cpu(in.tree.view(), visitor, n, o);
    };
    if (guided)
      run(test::IntervalVisitor<true>{});
    else
      run(test::IntervalVisitor<false>{});
    return interval_bytes(r);
  });
}

TEST(Threads, OneTraverserOnTheGpuEqualsSerialCalls) {
  CANOPY_REQUIRE_GPU();
  const Intervals& in = intervals();
  test::SharedTraverser t(in.tree);
  expect_threads_equal_serial(kVariants, [&](int v) {
    // (custom_options keeps every call on the GPU: the Traverser's visitor holds device pointers)
    return interval_bytes(t.run(in.xs[v % 2], v % 3 == 0, custom_options(v, Device::Gpu)));
  });
}

TEST(Threads, OnePointCorrelationOnTheCpuEqualsSerialCalls) { pc_on_one_object(Device::Cpu); }
TEST(Threads, OneNearestNeighborsOnTheCpuEqualsSerialCalls) { knn_on_one_object(Device::Cpu); }
TEST(Threads, OneBarnesHutOnTheCpuEqualsSerialCalls) { bh_on_one_object(Device::Cpu); }

TEST(Threads, OnePointCorrelationOnTheGpuEqualsSerialCalls) {
  CANOPY_REQUIRE_GPU();
  pc_on_one_object(Device::Gpu);
}
TEST(Threads, OneNearestNeighborsOnTheGpuEqualsSerialCalls) {
  CANOPY_REQUIRE_GPU();
  knn_on_one_object(Device::Gpu);
}
TEST(Threads, OneBarnesHutOnTheGpuEqualsSerialCalls) {
  CANOPY_REQUIRE_GPU();
  bh_on_one_object(Device::Gpu);
}

// Threads that each make their own objects over one shared tree, and read the tree's arrays,
// while the others run: on the GPU the tree is left on the device by its GPU build, and the
// first CPU call (any thread's) copies its host arrays.
void objects_over_a_shared_tree(Device device) {
  const KdTree tree = kd_tree(device);
  if (device == Device::Gpu) {
    ASSERT_TRUE(tree.on_device());
  }
  expect_threads_equal_serial(kVariants, [&](int v) {
    const Device where = v % 2 ? Device::Cpu : device;
    Bytes b;
    const std::vector<float>& q = points().queries[v % 2];
    if (v % 4 < 2) {
      PointCorrelation pc(tree, where);
      PcOptions o;
      o.device = where;
      o.radius = 0.08f;
      append(b, pc.run(q.data(), points().n(v % 2), o).counts);
    } else {
      NearestNeighbors nn(tree, where);
      KnnOptions o;
      o.device = where;
      o.k = 3;
      const KnnResult r = nn.run(q.data(), points().n(v % 2), o);
      append(b, r.indices);
      append(b, r.distances);
    }
    if (v == 5) append(b, tree.points());  // the host copy (made once, by whichever thread)
    append(b, std::vector<int>{tree.height(), tree.dims(), static_cast<int>(tree.size())});
    return b;
  });
}

TEST(Threads, ObjectsOverOneSharedTreeOnTheCpuEqualSerialCalls) { objects_over_a_shared_tree(Device::Cpu); }
TEST(Threads, ObjectsOverOneSharedTreeOnTheGpuEqualSerialCalls) {
  CANOPY_REQUIRE_GPU();
  objects_over_a_shared_tree(Device::Gpu);
}

// One predictor, every output (float32 and float64), batches of several sizes; on the GPU the
// default (adaptive, Auto: online tuning, replayed graphs) and named kernels.
void forest_on_one_predictor(Device device) {
  const Forest& f = forest_test::model("xgb_letter");
  const ForestData& d = forest_test::rows("letter_rows");
  ForestConfig c;
  c.device = device;
  c.cache_dir = "none";
  ForestPredictor p(f, c);
  const ForestOutput outputs[] = {ForestOutput::Prob, ForestOutput::Margin, ForestOutput::Class, ForestOutput::Leaf};
  const index_t sizes[] = {d.n_rows, 1, 97, 33};
  expect_threads_equal_serial(kVariants, [&](int v) {
    ForestRunOptions o;
    o.output = outputs[v % 4];
    if (device == Device::Gpu && v == 6) o.kernel = ForestKernel::Direct;
    const index_t n = std::min(d.n_rows, sizes[(v / 2) % 4]);
    const int width = p.output_width(o.output);
    Bytes b;
    if (v % 3 == 1 && o.output != ForestOutput::Leaf) {
      std::vector<double> out(static_cast<std::size_t>(n * width));
      p.predict_f64(d.values.data(), n, o, out.data());
      append(b, out);
    } else {
      std::vector<float> out(static_cast<std::size_t>(n * width));
      p.predict(d.values.data(), n, o, out.data());
      append(b, out);
    }
    return b;
  });
}

TEST(Threads, OneForestPredictorOnTheCpuEqualsSerialCalls) { forest_on_one_predictor(Device::Cpu); }
TEST(Threads, OneForestPredictorOnTheGpuEqualsSerialCalls) {
  CANOPY_REQUIRE_GPU();
  forest_on_one_predictor(Device::Gpu);
}

}  // namespace
}  // namespace canopy
