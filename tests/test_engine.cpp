// The traversal engine (runtime/engine.hpp, engine.cuh, pipeline.cuh) under every workload:
// pipelined results equal unpipelined ones bit for bit for every workload and chunk size,
// memory budgets chunk instead of failing, concurrent calls from several threads agree with
// serial ones, depth auto, and the library-use guarantees: no work ever runs on the legacy
// default stream, a steady-state call allocates and frees nothing, and a caller's stream is
// honoured, device queries written on it included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <tuple>

#include "core/device_buffer.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/engine.hpp"
#include "runtime/knn.hpp"
#include "runtime/options.hpp"
#include "runtime/point_correlation.hpp"
#include "tests/interval_tree.hpp"
#include "tests/require_gpu.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_errors.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

using Words = std::vector<std::uint64_t>;

std::uint64_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct Inputs {
  PointSet covtype = test::real_points("covtype_4k.csv", "0-6");
  std::vector<float> tree_points, queries;  // kNN: halves of covtype_4k, 1,500 queries
  std::vector<float> pc_queries;            // 1,500 covtype points
  std::vector<float> xyz, mass;             // 1,500 Plummer bodies
  int dims = 7;
  Inputs() {
    tree_points.assign(covtype.coords.begin(), covtype.coords.begin() + 2000 * dims);
    queries.assign(covtype.coords.begin() + 2000 * dims, covtype.coords.begin() + 3500 * dims);
    pc_queries.assign(covtype.coords.begin(), covtype.coords.begin() + 1500 * dims);
    xyz = generate("plummer:1500", 3).coords;
    mass.assign(1500, 1.0f / 1500);
  }
};
const Inputs& inputs() {
  static const Inputs in;
  return in;
}

// Each workload as "options -> result words (+ the stats)".
struct Workload {
  std::string name;
  index_t n;
  std::function<Words(const TraversalOptions&, TraversalStats*)> run;
};

struct Objects {
  KdTree pc_tree, kd;
  BallTree ball;
  VpTree vp;
  Octree oct;
  float radius = 0;
  Objects()
      : pc_tree(KdTree::build(inputs().covtype.data(), inputs().covtype.size(), 7)),
        kd(KdTree::build(inputs().tree_points.data(), 2000, 7)),
        ball(BallTree::build(inputs().tree_points.data(), 2000, 7)),
        vp(VpTree::build(inputs().tree_points.data(), 2000, 7)),
        oct(Octree::build(inputs().xyz.data(), inputs().mass.data(), 1500)) {
    radius = estimate_radius(pc_tree, inputs().pc_queries.data(), 1500, 32.0);
  }
};
const Objects& objects() {
  static const Objects o;
  return o;
}

// An interval tree and its stabbing queries: a custom visitor (tests/interval_tree.hpp).
struct Intervals {
  GraphTree<test::Interval> tree = test::build_interval_tree(test::random_interval_tree(3000, 4, 41));
  std::vector<float> xs;
  Intervals() {
    xs.resize(1200);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  }
};
const Intervals& intervals() {
  static const Intervals in;
  return in;
}

// The API objects of one host thread.
struct Apis {
  PointCorrelation pc{objects().pc_tree};
  NearestNeighbors kd{objects().kd}, ball{objects().ball}, vp{objects().vp};
  BarnesHut bh{objects().oct};

  std::vector<Workload> workloads() {
    std::vector<Workload> w;
    w.push_back({"pc", 1500, [this](const TraversalOptions& t, TraversalStats* st) {
                   PcOptions o;
                   static_cast<TraversalOptions&>(o) = t;
                   o.radius = objects().radius;
                   PcResult r = pc.run(inputs().pc_queries.data(), 1500, o);
                   if (st) *st = r;
                   return Words(r.counts.begin(), r.counts.end());
                 }});
    for (auto [name, api] : {std::pair<const char*, NearestNeighbors*>{"knn kd", &kd}, {"knn ball", &ball}, {"knn vp", &vp}}) {
      w.push_back({name, 1500, [api = api](const TraversalOptions& t, TraversalStats* st) {
                     KnnOptions o;
                     static_cast<TraversalOptions&>(o) = t;
                     o.k = 5;
                     KnnResult r = api->run(inputs().queries.data(), 1500, o);
                     if (st) *st = r;
                     Words out(r.indices.begin(), r.indices.end());
                     for (float d : r.distances) out.push_back(bits(d));
                     return out;
                   }});
    }
    w.push_back({"bh", 1500, [this](const TraversalOptions& t, TraversalStats* st) {
                   BhOptions o;
                   static_cast<TraversalOptions&>(o) = t;
                   BhResult r = bh.run(o);
                   if (st) *st = r;
                   Words out;
                   for (float f : r.forces) out.push_back(bits(f));
                   return out;
                 }});
    return w;
  }
};

void expect_chunked_permutation(const std::vector<index_t>& order, const std::vector<index_t>& bounds) {
  ASSERT_EQ(static_cast<index_t>(order.size()), bounds.back());
  for (std::size_t c = 0; c + 1 < bounds.size(); ++c) {
    std::vector<index_t> part(order.begin() + bounds[c], order.begin() + bounds[c + 1]);
    std::sort(part.begin(), part.end());
    for (std::size_t i = 0; i < part.size(); ++i) ASSERT_EQ(part[i], bounds[c] + static_cast<index_t>(i));
  }
}

// Equal pieces of `chunk` queries (batches, or chunks without the ramp).
void expect_chunked_permutation(const std::vector<index_t>& order, index_t n, index_t chunk) {
  expect_chunked_permutation(order, chunk_boundaries(n, chunk, false));
}

TEST(PipelineGpu, PipelinedResultsEqualUnpipelinedBitForBitForEveryWorkloadAndChunkSize) {
  CANOPY_REQUIRE_GPU();
  Apis apis;
  for (Workload& w : apis.workloads()) {
    const TraversalOptions base = test::options_on(Device::Gpu, ScheduleKind::Hybrid);
    const Words reference = w.run(base, nullptr);
    // Hybrid with ramped and with equal chunks; the device schedulers do not ramp.
    const std::pair<ScheduleKind, bool> runs[] = {{ScheduleKind::Hybrid, true},
                                                  {ScheduleKind::Hybrid, false},
                                                  {ScheduleKind::HybridDevice, true},
                                                  {ScheduleKind::HybridKey, true}};
    for (const auto& [s, ramp] : runs) {
      // Under a sanitizer, chunks of one query and of a warp are chunks of 31's kernels 1,500 times.
      std::vector<index_t> chunks{index_t{1}, index_t{31}, index_t{32}, index_t{1000}, w.n + 5};
      if (test::under_tool()) chunks = {index_t{31}, index_t{1000}, w.n + 5};
      for (index_t chunk : chunks) {
        SCOPED_TRACE(w.name + ", " + to_string(s) + (ramp ? ", ramp" : "") + ", chunk " + std::to_string(chunk));
        TraversalOptions o = base;
        o.schedule = s;
        o.pipeline = true;
        o.chunk = chunk;
        o.keep_schedule = true;
        o.measure_overlap = true;
        o.pipeline_inspector_first = chunk != 31;  // both stream priorities
        o.pipeline_ramp = ramp;
        TraversalStats st;
        EXPECT_EQ(w.run(o, &st), reference);
        const index_t c = std::min(chunk, w.n);
        const std::vector<index_t> bounds = chunk_boundaries(w.n, c, pipeline_ramps(o));
        index_t largest = 0;  // a ramp's last chunk may stop short of c
        for (std::size_t i = 1; i < bounds.size(); ++i) largest = std::max(largest, bounds[i] - bounds[i - 1]);
        EXPECT_EQ(st.pipeline.chunk, largest);
        EXPECT_EQ(st.pipeline.chunks, static_cast<index_t>(bounds.size()) - 1);
        if (!pipeline_ramps(o)) {
          EXPECT_EQ(st.pipeline.chunks, (w.n + c - 1) / c);
        }
        EXPECT_GT(st.pipeline.wall_ms, 0.0);
        EXPECT_GT(st.pipeline.execute_only_ms, 0.0);
        expect_chunked_permutation(st.schedule.order, bounds);
      }
    }
  }
}

TEST(PipelineGpu, CustomVisitorsPipelineToo) {
  CANOPY_REQUIRE_GPU();
  for (bool guided : {false, true}) {
    const GraphTree<test::Interval> t = test::build_interval_tree(test::random_interval_tree(3000, guided ? 10 : 4, 41));
    std::vector<float> xs(1200);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
    TraversalOptions o;
    o.schedule = ScheduleKind::Hybrid;
    o.depth = 4;
    const test::IntervalRun ref = test::run_interval_gpu(t, xs, guided, o, 1024);
    for (index_t chunk : {index_t{1}, index_t{31}, index_t{32}, index_t{1000}, index_t{5000}}) {
      for (ScheduleKind s : {ScheduleKind::Hybrid, ScheduleKind::HybridDevice, ScheduleKind::HybridKey}) {
        o.schedule = s;
        o.pipeline = true;
        o.chunk = chunk;
        o.keep_schedule = true;
        const test::IntervalRun r = test::run_interval_gpu(t, xs, guided, o, 1024);
        EXPECT_EQ(r.counts, ref.counts);
        EXPECT_EQ(r.sums, ref.sums);
        if (!guided) {
          EXPECT_EQ(r.trace, ref.trace);  // unguided: the same visits in the same order
        }
        const index_t n = static_cast<index_t>(xs.size());
        expect_chunked_permutation(r.order, chunk_boundaries(n, std::min(chunk, n), pipeline_ramps(o)));
      }
    }
  }
}

TEST(PipelineGpu, ABudgetTooSmallForTheMatrixChunksAndOneTooSmallForTheTreeIsAnError) {
  CANOPY_REQUIRE_GPU();
  Apis apis;
  Workload pc = apis.workloads()[0];
  TraversalOptions o = test::options_on(Device::Gpu, ScheduleKind::Hybrid);
  o.depth = 8;
  const Words reference = pc.run(o, nullptr);
  const std::size_t fixed = objects().pc_tree.bytes() + 1500 * (7 * sizeof(float) + sizeof(index_t));
  const TopTree top = TopTree::build(objects().pc_tree.view(), 8);
  o.memory_budget = fixed + 40 * pipeline_bytes_per_query(ScheduleKind::Hybrid, false, top.size());
  TraversalStats st;
  EXPECT_EQ(pc.run(o, &st), reference);  // pipeline off, but the matrix does not fit: chunks
  EXPECT_EQ(st.pipeline.chunk, 40);
  EXPECT_EQ(st.pipeline.chunks, static_cast<index_t>(chunk_boundaries(1500, 40, pipeline_ramps(o)).size()) - 1);
  o.memory_budget = objects().pc_tree.bytes() / 2;
  try {
    pc.run(o, nullptr);
    ADD_FAILURE() << "a budget smaller than the tree was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the tree needs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("memory_budget"), std::string::npos) << e.what();
  }
}

TEST(PipelineGpu, QueriesAndResultsThatDoNotFitTheBudgetRunInBatches) {
  CANOPY_REQUIRE_GPU();
  Apis apis;
  std::vector<Workload> w = apis.workloads();
  TraversalOptions o = test::options_on(Device::Gpu, ScheduleKind::Hybrid);
  o.depth = 8;
  const Words pc_ref = w[0].run(o, nullptr), knn_ref = w[1].run(o, nullptr);
  const std::size_t pc_row = pipeline_bytes_per_query(ScheduleKind::Hybrid, false, TopTree::build(objects().pc_tree.view(), 8).size());
  const std::size_t knn_row = pipeline_bytes_per_query(ScheduleKind::Hybrid, true, TopTree::build(objects().kd.view(), 8).size());
  o.keep_schedule = true;
  TraversalStats st;
  ASSERT_LT(200 * (7 * sizeof(float) + sizeof(index_t) + pc_row), 1500 * (7 * sizeof(float) + sizeof(index_t)));
  o.memory_budget = objects().pc_tree.bytes() + 200 * (7 * sizeof(float) + sizeof(index_t) + pc_row);
  EXPECT_EQ(w[0].run(o, &st), pc_ref);
  expect_chunked_permutation(st.schedule.order, 1500, 200);  // batches of 200, each scheduled alone
  const std::size_t knn_data = 7 * sizeof(float) + 5 * (sizeof(float) + sizeof(index_t));
  ASSERT_LT(30 * (knn_data + knn_row), 1500 * knn_data);  // the queries and results do not fit
  o.memory_budget = objects().kd.bytes() + 30 * (knn_data + knn_row);
  EXPECT_EQ(w[1].run(o, &st), knn_ref);
  expect_chunked_permutation(st.schedule.order, 1500, 30);
}

TEST(PipelineGpu, ConcurrentCallsFromSeveralThreadsEqualSerialCalls) {
  CANOPY_REQUIRE_GPU();
  std::vector<Words> serial;
  {
    Apis apis;
    for (Workload& w : apis.workloads()) {
      TraversalOptions o;
      o.device = Device::Gpu;
      serial.push_back(w.run(o, nullptr));
    }
  }
  constexpr int kThreads = 4;
  const int rounds = test::under_tool() ? 1 : 3;
  std::vector<std::vector<Words>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Apis apis;  // one set of API objects per thread, the trees shared
        for (int round = 0; round < rounds; ++round)
          for (Workload& w : apis.workloads()) {
            TraversalOptions o;
            o.device = Device::Gpu;
            o.pipeline = (round + t) % 2 == 1;
            o.chunk = 97 + t;
            // Both schedulers: in round 2, or (one round under a sanitizer) on the even threads.
            const bool host = rounds == 3 ? round == 2 : t % 2 == 0;
            o.schedule = host ? ScheduleKind::Hybrid : ScheduleKind::HybridDevice;
            got[t].push_back(w.run(o, nullptr));
          }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[t], "");
    ASSERT_EQ(got[t].size(), static_cast<std::size_t>(rounds) * serial.size());
    for (std::size_t i = 0; i < got[t].size(); ++i) EXPECT_EQ(got[t][i], serial[i % serial.size()]) << "thread " << t;
  }
}

// Custom visitors on the GPU, unguided and guided, through one kept Traverser each.
struct CustomApis {
  test::IntervalGpu unguided{intervals().tree}, guided{intervals().tree};
  std::vector<Workload> workloads() {
    std::vector<Workload> w;
    for (auto [name, api, g] : {std::tuple<const char*, test::IntervalGpu*, bool>{"custom", &unguided, false},
                                {"custom guided", &guided, true}}) {
      w.push_back({name, 1200, [api = api, g = g](const TraversalOptions& t, TraversalStats*) {
                     TraversalOptions o = t;
                     o.count_nodes = false;
                     const test::IntervalRun r = api->run(intervals().xs, g, o, 64);
                     Words out(r.counts.begin(), r.counts.end());
                     out.insert(out.end(), r.sums.begin(), r.sums.end());
                     return out;
                   }});
    }
    return w;
  }
};

// f(workload, options) for every workload, custom visitors included, under every schedule it
// takes, pipelined or not, on the GPU.
template <class F>
void for_every_gpu_run(F&& f) {
  Apis apis;
  CustomApis custom;
  std::vector<Workload> all = apis.workloads();
  for (Workload& w : custom.workloads()) all.push_back(w);
  for (Workload& w : all)
    for (ScheduleKind s : {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridDevice,
                           ScheduleKind::LeafSort, ScheduleKind::HybridKey, ScheduleKind::Auto})
      for (bool pipelined : {false, true}) {
        if (s == ScheduleKind::LeafSort && w.name.rfind("custom", 0) == 0) continue;  // no sort key
        SCOPED_TRACE(w.name + ", " + to_string(s) + (pipelined ? ", pipelined" : ""));
        TraversalOptions o;
        o.device = Device::Gpu;
        o.schedule = s;
        o.pipeline = pipelined;
        o.chunk = 500;
        f(w, o);
      }
}

TEST(PipelineGpu, NoWorkRunsOnTheLegacyDefaultStream) {
  CANOPY_REQUIRE_GPU();
  // The probe itself: work on the legacy stream waits for the spinning kernel.
  EXPECT_FALSE(test::finishes_beside_a_blocking_stream(test::legacy_stream_work, 2.0));
  for_every_gpu_run([](Workload& w, TraversalOptions o) {
    o.keep_schedule = true;
    // Warm: every buffer exists, and Auto's one-time trial (a shape's second call, which
    // allocates its sample) has run; alone in a process this test met the trial in its count.
    w.run(o, nullptr);
    const Words reference = w.run(o, nullptr);
    Words got;
    EXPECT_TRUE(test::finishes_beside_a_blocking_stream([&] { got = w.run(o, nullptr); }, 20.0));
    EXPECT_EQ(got, reference);
  });
}

TEST(PipelineGpu, ASteadyStateCallAllocatesAndFreesNothing) {
  CANOPY_REQUIRE_GPU();
  for_every_gpu_run([](Workload& w, const TraversalOptions& o) {
    // Warm: every buffer exists, and Auto's one-time trial (a shape's second call, which
    // allocates its sample) has run; alone in a process this test met the trial in its count.
    w.run(o, nullptr);
    const Words reference = w.run(o, nullptr);
    test::expect_allocates_nothing([&] { EXPECT_EQ(w.run(o, nullptr), reference); });
  });
}

// Queries a program writes into device memory on its own stream, then hands to Canopy with that
// stream: the call must read them after the write (a late kernel, so reading early would see the
// zeros that were there before).
TEST(PipelineGpu, DeviceQueriesWrittenOnTheCallersStreamAreReadAfterThem) {
  CANOPY_REQUIRE_GPU();
  Apis apis;
  void* s = test::make_stream();
  const std::vector<float>& pq = inputs().pc_queries;
  const std::vector<float>& kq = inputs().queries;
  PcOptions po;
  po.device = Device::Gpu;
  po.radius = objects().radius;
  const PcResult pref = apis.pc.run(pq.data(), 1500, po);
  KnnOptions ko;
  ko.device = Device::Gpu;
  ko.k = 5;
  const KnnResult kref = apis.kd.run(kq.data(), 1500, ko);
  const std::size_t pbytes = pq.size() * sizeof(float), kbytes = kq.size() * sizeof(float);
  float* p_src = static_cast<float*>(test::device_alloc(pbytes));
  float* k_src = static_cast<float*>(test::device_alloc(kbytes));
  float* p_dst = static_cast<float*>(test::device_alloc(pbytes));
  float* k_dst = static_cast<float*>(test::device_alloc(kbytes));
  copy_memory(p_src, pq.data(), pbytes);
  copy_memory(k_src, kq.data(), kbytes);
  const std::vector<float> zeros(std::max(pq.size(), kq.size()), 0.0f);
  std::vector<index_t> counts(1500), idx(1500 * 5);
  std::vector<float> dist(1500 * 5);
  po.stream = static_cast<stream_t>(s);
  ko.stream = static_cast<stream_t>(s);
  for (ScheduleKind kind : {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridDevice,
                            ScheduleKind::LeafSort, ScheduleKind::HybridKey, ScheduleKind::Auto})
    for (bool pipelined : {false, true})
      for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE(std::string(to_string(kind)) + (pipelined ? ", pipelined" : "") + ", round " + std::to_string(round));
        po.schedule = ko.schedule = kind;
        po.pipeline = ko.pipeline = pipelined;
        po.chunk = ko.chunk = 500;
        copy_memory(p_dst, zeros.data(), pbytes);
        copy_memory(k_dst, zeros.data(), kbytes);
        test::copy_after_delay(p_dst, p_src, pbytes, 20.0, s);
        apis.pc.run(p_dst, 1500, po, counts.data());
        EXPECT_EQ(counts, pref.counts);
        test::copy_after_delay(k_dst, k_src, kbytes, 20.0, s);
        apis.kd.run(k_dst, 1500, ko, idx.data(), dist.data());
        EXPECT_EQ(idx, kref.indices);
        EXPECT_EQ(dist, kref.distances);
      }
  test::sync_stream(s);
  for (void* p : {static_cast<void*>(p_src), static_cast<void*>(k_src), static_cast<void*>(p_dst), static_cast<void*>(k_dst)})
    test::device_free(p);
  test::destroy_stream(s);
}

TEST(PipelineGpu, TheCallersStreamIsHonoured) {
  CANOPY_REQUIRE_GPU();
  Apis apis;
  void* s = test::make_stream();
  CustomApis custom;
  std::vector<Workload> all = apis.workloads();
  for (Workload& w : custom.workloads()) all.push_back(w);
  for (Workload& w : all) {
    TraversalOptions o;
    o.device = Device::Gpu;
    const Words reference = w.run(o, nullptr);
    o.stream = static_cast<stream_t>(s);
    for (bool pipelined : {false, true}) {
      o.pipeline = pipelined;
      o.chunk = 256;
      EXPECT_EQ(w.run(o, nullptr), reference) << w.name;
      test::sync_stream(s);
    }
  }
  test::destroy_stream(s);
}

void results_land_in_the_callers_buffers(Device device) {
  Apis apis;
  const std::vector<float>& pq = inputs().pc_queries;
  const std::vector<float>& kq = inputs().queries;
  const bool gpu = device == Device::Gpu;
  PcOptions po;
  po.device = device;
  po.radius = objects().radius;
  const PcResult pref = apis.pc.run(pq.data(), 1500, po);
  KnnOptions ko;
  ko.device = device;
  ko.k = 5;
  const KnnResult kref = apis.kd.run(kq.data(), 1500, ko);
  // Queries and outputs in host memory, or (on the GPU) in device memory.
  const float* pcq = pq.data();
  const float* knq = kq.data();
  std::vector<index_t> counts(1500), idx(1500 * 5);
  std::vector<float> dist(1500 * 5);
  index_t* c_out = counts.data();
  index_t* i_out = idx.data();
  float* d_out = dist.data();
  std::vector<void*> owned;
  if (gpu) {
    auto upload = [&](const void* src, std::size_t bytes) {
      void* d = test::device_alloc(bytes);
      copy_memory(d, src, bytes);
      owned.push_back(d);
      return d;
    };
    pcq = static_cast<const float*>(upload(pq.data(), pq.size() * sizeof(float)));
    knq = static_cast<const float*>(upload(kq.data(), kq.size() * sizeof(float)));
    c_out = static_cast<index_t*>(test::device_alloc(counts.size() * sizeof(index_t)));
    i_out = static_cast<index_t*>(test::device_alloc(idx.size() * sizeof(index_t)));
    d_out = static_cast<float*>(test::device_alloc(dist.size() * sizeof(float)));
    owned.insert(owned.end(), {c_out, i_out, d_out});
    EXPECT_TRUE(is_device_pointer(c_out));
  }
  const TraversalStats ps = apis.pc.run(pcq, 1500, po, c_out);
  const TraversalStats ks = apis.kd.run(knq, 1500, ko, i_out, d_out);
  EXPECT_EQ(ps.device, device);
  EXPECT_EQ(ks.device, device);
  if (gpu) {
    copy_memory(counts.data(), c_out, counts.size() * sizeof(index_t));
    copy_memory(idx.data(), i_out, idx.size() * sizeof(index_t));
    copy_memory(dist.data(), d_out, dist.size() * sizeof(float));
  }
  EXPECT_EQ(counts, pref.counts);
  EXPECT_EQ(idx, kref.indices);
  EXPECT_EQ(dist, kref.distances);
  for (void* p : owned) test::device_free(p);
}

TEST(PipelineGpu, ResultsLandInTheCallersDeviceBuffers) {
  CANOPY_REQUIRE_GPU();
  results_land_in_the_callers_buffers(Device::Gpu);
}

// --- the CPU side ---------------------------------------------------------------------------

TEST(Pipeline, ResultsLandInTheCallersHostBuffers) { results_land_in_the_callers_buffers(Device::Cpu); }


TEST(Pipeline, OnTheCpuThePipelineOptionChangesNothing) {
  Apis apis;
  for (Workload& w : apis.workloads()) {
    TraversalOptions o = test::options_on(Device::Cpu, ScheduleKind::Hybrid);
    const Words reference = w.run(o, nullptr);
    o.pipeline = true;
    o.chunk = 31;
    TraversalStats st;
    EXPECT_EQ(w.run(o, &st), reference) << w.name;
    EXPECT_EQ(st.pipeline.chunks, 0);
  }
}

void auto_depth_picks_a_candidate_and_remembers_it(Device device) {
  Apis apis;
  for (Workload& w : apis.workloads()) {
    SCOPED_TRACE(w.name);
    TraversalOptions o = test::options_on(device, ScheduleKind::Hybrid);
    o.executor = ExecutorKind::FsmLockstep;  // depth auto's trial is per executor
    const Words reference = w.run(o, nullptr);
    o.depth = kAutoDepth;
    TraversalStats first, second;
    EXPECT_EQ(w.run(o, &first), reference);
    EXPECT_GT(first.depth_trial_ms, 0.0);
    const int def = w.name == "bh" ? kDefaultOctreeDepth : kDefaultTopTreeDepth;
    EXPECT_GE(first.depth, std::max(1, def - 3));
    EXPECT_LE(first.depth, def + 3);
    EXPECT_EQ(w.run(o, &second), reference);
    EXPECT_EQ(second.depth, first.depth);
    EXPECT_EQ(second.depth_trial_ms, 0.0);  // remembered
    o.schedule = ScheduleKind::InputOrder;  // nothing to choose: no trial
    EXPECT_EQ(w.run(o, &second), reference);
    EXPECT_EQ(second.depth_trial_ms, 0.0);
  }
}

CANOPY_TEST_ON_CPU_AND_GPU(AutoDepth, PicksACandidateDepthGivesTheSameResultsAndRemembersItsChoice,
                           auto_depth_picks_a_candidate_and_remembers_it)

// Auto, depth auto and a memory budget together give the fixed options' results on the shape's
// first call (the prior), its second (the trial, on the GPU where Auto has several candidates)
// and its third (the settled pick).
void auto_depth_auto_and_a_budget_give_the_fixed_results(Device device) {
  AutoChoice::forget_all();
  Apis apis;
  std::vector<Workload> ws = apis.workloads();
  const std::size_t pc_data = 7 * sizeof(float) + sizeof(index_t);
  const std::size_t knn_data = 7 * sizeof(float) + 5 * (sizeof(float) + sizeof(index_t));
  // Half the queries and results beside the tree: batches on the GPU (Barnes-Hut holds its bodies).
  const std::vector<std::size_t> budgets{
      objects().pc_tree.bytes() + 750 * pc_data, objects().kd.bytes() + 750 * knn_data,
      objects().ball.bytes() + 750 * knn_data, objects().vp.bytes() + 750 * knn_data, std::size_t{1} << 30};
  ASSERT_EQ(budgets.size(), ws.size());
  for (std::size_t i = 0; i < ws.size(); ++i) {
    SCOPED_TRACE(ws[i].name);
    const Words reference =
        ws[i].run(test::options_on(device, ScheduleKind::InputOrder, ExecutorKind::Independent), nullptr);
    for (ScheduleKind s : {ScheduleKind::Auto, ScheduleKind::Hybrid, ScheduleKind::HybridKey}) {
      TraversalOptions o = test::options_on(device, s);
      o.depth = kAutoDepth;
      o.memory_budget = budgets[i];
      for (int call = 1; call <= 3; ++call) {
        TraversalStats st;
        EXPECT_EQ(ws[i].run(o, &st), reference) << "schedule " << static_cast<int>(s) << ", call " << call;
        // (kNN with a fixed schedule has one candidate on the GPU: independent threads.)
        const bool choice = s == ScheduleKind::Auto || ws[i].name.rfind("knn", 0) != 0;
        EXPECT_EQ(st.auto_trial_ms > 0, device == Device::Gpu && call == 2 && choice) << "call " << call;
        if (s == ScheduleKind::Hybrid && call == 1) {
          EXPECT_GT(st.depth_trial_ms, 0.0);
        }
      }
    }
  }
}

CANOPY_TEST_ON_CPU_AND_GPU(AutoPlan, AutoDepthAutoAndABudgetGiveTheFixedOptionsResults,
                           auto_depth_auto_and_a_budget_give_the_fixed_results)

// A call's data is checked before its options resolve: a bad query is an error under Auto (the
// shape's second call included, whose trial would run) and under depth auto.
void bad_queries_are_an_error_however_the_options_resolve(Device device) {
  AutoChoice::forget_all();
  Apis apis;
  std::vector<float> bad = inputs().pc_queries;
  bad[700 * 7 + 3] = std::nanf("");
  for (ScheduleKind s : {ScheduleKind::Auto, ScheduleKind::Hybrid, ScheduleKind::HybridKey})
    for (int depth : {0, kAutoDepth}) {
      SCOPED_TRACE("schedule " + std::to_string(static_cast<int>(s)) + ", depth " + std::to_string(depth));
      PcOptions o;
      static_cast<TraversalOptions&>(o) = test::options_on(device, s);
      o.depth = depth;
      o.radius = objects().radius;
      apis.pc.run(inputs().pc_queries.data(), 1500, o);  // the shape's first call
      const std::string e = test::error_of([&] { apis.pc.run(bad.data(), 1500, o); });
      EXPECT_HAS(e, "query 700 has a non-finite coordinate");
      EXPECT_HAS(e, "in dimension 3");
    }
}

CANOPY_TEST_ON_CPU_AND_GPU(AutoPlan, BadQueriesAreAnErrorUnderAutoAndDepthAuto,
                           bad_queries_are_an_error_however_the_options_resolve)

TEST(Pipeline, ChunksRampUpByDoublingFromAnEighthAndCoverTheQueriesOnce) {
  using B = std::vector<index_t>;
  EXPECT_EQ(chunk_boundaries(100, 16, true), (B{0, 2, 6, 14, 30, 46, 62, 78, 94, 100}));
  EXPECT_EQ(chunk_boundaries(100, 16, false), (B{0, 16, 32, 48, 64, 80, 96, 100}));
  EXPECT_EQ(chunk_boundaries(16, 16, true), (B{0, 16}));  // one chunk: nothing to overlap
  EXPECT_EQ(chunk_boundaries(5, 1, true), (B{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(chunk_boundaries(10, 4, true), (B{0, 1, 3, 7, 10}));  // 4 / 8 rounds up to 1
  EXPECT_EQ(chunk_boundaries(0, 4, true), (B{0}));
  EXPECT_EQ(chunk_boundaries(4000000, 500000, true).size(), 12u);  // 62.5k, 125k, 250k, 7 x 500k, 62.5k
}

TEST(Pipeline, RunPlansChunkWithinTheBudgetAndNameTheSizesWhenNothingFits) {
  TraversalOptions o;
  RunPlan p = plan_run(o, 1000000, 1 << 20, 2 << 20, 100, std::size_t{1} << 34);
  EXPECT_FALSE(p.pipelined);
  o.pipeline = true;
  p = plan_run(o, 1000000, 1 << 20, 2 << 20, 100, std::size_t{1} << 34);
  EXPECT_TRUE(p.pipelined);
  EXPECT_EQ(p.chunk, 125000);  // n / 8
  p = plan_run(o, 100000, 1 << 20, 2 << 20, 100, std::size_t{1} << 34);
  EXPECT_EQ(p.chunk, 65536);  // at least 65,536
  o.chunk = 1000;
  EXPECT_EQ(plan_run(o, 500, 0, 0, 100, 1 << 30).chunk, 500);  // never more than n
  o.pipeline = false;
  o.chunk = 0;
  o.memory_budget = (2 << 20) + 100 * 300;  // room for 300 queries' rows
  p = plan_run(o, 1000000, 1 << 20, 2 << 20, 100, std::size_t{1} << 34);
  EXPECT_TRUE(p.pipelined);
  EXPECT_EQ(p.chunk, 300);
  o.memory_budget = (2 << 20) + 50;
  EXPECT_THROW(plan_run(o, 1000, 1 << 20, 2 << 20, 100, 1 << 30), Error);
  o.memory_budget = 1 << 19;
  EXPECT_THROW(plan_run(o, 1000, 1 << 20, 2 << 20, 100, 1 << 30), OutOfMemory);
  try {
    plan_run(o, 1000, 1 << 20, 2 << 20, 100, 1 << 30);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the tree needs 1 MiB of GPU memory, more than the memory budget"),
              std::string::npos)
        << e.what();
  }
  o.memory_budget = (1 << 20) + 10;
  EXPECT_THROW(plan_run(o, 1000, 1 << 20, 2 << 20, 100, 1 << 30), Error);  // tree fits, queries do not
}

}  // namespace
}  // namespace canopy

namespace canopy {
namespace {

// wall_ms is the whole call's wall clock: at least the sum of its phases (timed inside it, on
// the CPU with the same host clock), and an Auto trial's cost is inside it too.
TEST(CallStats, WallTimeCoversThePhasesAndTheTrials) {
  AutoChoice::forget_all();
  Apis apis;
  for (Workload& w : apis.workloads()) {
    SCOPED_TRACE(w.name);
    for (int call = 1; call <= 2; ++call) {
      TraversalStats st;
      TraversalOptions o = test::options_on(Device::Cpu, ScheduleKind::Hybrid);
      o.depth = kAutoDepth;
      w.run(o, &st);
      EXPECT_GT(st.wall_ms, 0.0);
      EXPECT_GE(st.wall_ms, st.times.total_ms() + st.depth_trial_ms);
    }
  }
}

}  // namespace
}  // namespace canopy
