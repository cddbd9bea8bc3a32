// canopy-bench e2e: what an analytics call waits for, end to end: the points already in device
// memory, the kd-tree built on the GPU, the queries (the points themselves, or a generated set
// such as jz-tree's benchmark uses) answered into device buffers. The default call (Auto; a
// shape's first call runs Auto's prior) and the call with Auto's usual pick fixed are timed
// apart, and so is the default's second query on the same tree, the one that pays Auto's
// one-time trial. scripts/e2e_baselines.py times scipy and cupyx on the same inputs.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "benchmarks/device_array.cuh"
#include "core/cuda.cuh"
#include "core/device.hpp"
#include "core/timing.hpp"
#include "io/dataset.hpp"
#include "layouts/kdtree.hpp"
#include "runtime/engine.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"

namespace canopy {
namespace bench {

void add_e2e_options(CLI::App& app, E2eConfig& c) {
  add_source_options(app, c.source);
  app.add_option("--queries", c.queries, "separate queries from a generator spec (e.g. uniform:1000000:3, seed + 1); "
                 "default: the points themselves");
  app.add_option("--workload", c.workload, "pc (radius counts, --radius) or knn")->capture_default_str();
  app.add_option("--radius", c.radius, "pc: the radius, or auto:M for a mean count of M")->capture_default_str();
  app.add_option("--k", c.k, "knn: neighbours per query")->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed calls (the median is reported)")->capture_default_str();
  app.add_option("--json", c.json, "write the times to this file");
}

int run_e2e(const E2eConfig& c) {
  if (!gpu_available()) throw Error("canopy-bench e2e needs a GPU: " + gpu_description());
  if (c.workload != "pc" && c.workload != "knn") throw Error("--workload must be pc or knn");
  if (c.k < 1) throw Error("--k must be at least 1, not " + std::to_string(c.k));
  const PointSet ps = load_source(c.source);
  const index_t n = ps.size();
  const int dims = ps.dims;
  const int k = c.k;
  const PointSet qs = c.queries.empty() ? PointSet{} : generate(c.queries, c.source.seed + 1);
  if (!c.queries.empty() && qs.dims != dims)
    throw Error("--queries " + c.queries + " has " + std::to_string(qs.dims) + " dimensions, the points " +
                std::to_string(dims));
  const PointSet& query_set = c.queries.empty() ? ps : qs;
  const index_t m = query_set.size();
  if (c.workload == "knn" && k > n) throw Error("--k " + std::to_string(k) + " is larger than the " + std::to_string(n) + " points");
  // The radius (pc) from a CPU tree, before any timing.
  float radius = 0;
  if (c.workload == "pc")
    radius = parse_radius(c.radius, KdTree::build(ps.data(), n, dims), query_set, c.source.seed);
  std::printf("e2e %s: %lld points, %d-d (%s), %lld queries (%s)%s\n", c.workload.c_str(), static_cast<long long>(n),
              dims, c.source.points.empty() ? c.source.generate.c_str() : c.source.points.c_str(),
              static_cast<long long>(m), c.queries.empty() ? "the points" : c.queries.c_str(),
              c.workload == "pc" ? (", radius " + std::to_string(radius)).c_str() : (", k " + std::to_string(k)).c_str());

  DeviceArray<float> points(ps.coords.size());
  copy_memory(points.p, ps.data(), ps.coords.size() * sizeof(float));
  DeviceArray<float> separate(qs.coords.size());
  if (!c.queries.empty()) copy_memory(separate.p, qs.data(), qs.coords.size() * sizeof(float));
  const float* queries = c.queries.empty() ? points.p : separate.p;
  DeviceArray<index_t> counts_or_ids(static_cast<std::size_t>(m) * (c.workload == "pc" ? 1 : k));
  DeviceArray<float> dist(c.workload == "pc" ? 1 : static_cast<std::size_t>(m) * k);

  struct Times {
    std::vector<double> total, build;
  } fixed, deflt;
  std::vector<double> second_query;  // the default's second call: the trial's
  for (int r = 0; r <= c.repeat; ++r) {  // run 0 warms up
    for (int variant = 0; variant < 2; ++variant) {
      Times& t = variant ? fixed : deflt;
      AutoChoice::forget_all();  // every default call is a shape's first call
      CANOPY_CUDA_CHECK(cudaDeviceSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      KdTreeGpuBuilder builder;
      const KdTree tree = builder.build(points.p, n, dims);
      const double build_ms = ms_since(t0);
      // The call; for the default, the call's total so far and then a second call, timed apart.
      auto query = [&](auto&& call) {
        call();
        CANOPY_CUDA_CHECK(cudaDeviceSynchronize());
        t.total.push_back(ms_since(t0));
        if (variant) return;
        const auto t1 = std::chrono::steady_clock::now();
        call();
        CANOPY_CUDA_CHECK(cudaDeviceSynchronize());
        second_query.push_back(ms_since(t1));
      };
      // The fixed variant: the leaf sort with the workload's best executor.
      auto options = [&](auto o, ExecutorKind executor) {
        if (variant) {
          o.schedule = ScheduleKind::LeafSort;
          o.executor = executor;
        }
        return o;
      };
      if (c.workload == "pc") {
        PointCorrelation pc(tree, Device::Gpu);
        PcOptions o = options(PcOptions{}, ExecutorKind::FsmLockstep);
        o.radius = radius;
        query([&] { pc.run(queries, m, o, counts_or_ids.p); });
      } else {
        NearestNeighbors nn(tree, Device::Gpu);
        KnnOptions o = options(KnnOptions{}, ExecutorKind::Independent);
        o.k = k;
        query([&] { nn.run(queries, m, o, counts_or_ids.p, dist.p); });
      }
      t.build.push_back(build_ms);
      if (r == 0) {  // the warm-up's times go
        t.total.clear();
        t.build.clear();
        if (!variant) second_query.clear();
      }
    }
  }
  // What a CPU path (count_nodes, Device::Cpu, the quality tools) pays once on such a tree: the
  // host copy of its arrays, never made by the GPU calls above.
  std::vector<double> host_copy;
  std::size_t tree_bytes = 0;
  for (int r = 0; r < c.repeat; ++r) {
    KdTreeGpuBuilder builder;
    const KdTree tree = builder.build(points.p, n, dims);
    CANOPY_CUDA_CHECK(cudaDeviceSynchronize());
    if (tree.host_ready()) throw Error("e2e: the GPU build or its calls made the host copy; only a CPU path may");
    tree_bytes = tree.bytes();
    const auto t0 = std::chrono::steady_clock::now();
    tree.view();
    host_copy.push_back(ms_since(t0));
  }
  const char* pick = c.workload == "pc" ? "leaf-sort + fsm-lockstep" : "leaf-sort + independent";
  std::printf("| call | total ms (build + query) | of which the build (GPU; the tree stays there) |\n| --- | ---: | ---: |\n");
  std::printf("| default (auto: a shape's first call runs its prior) | %.1f | %.1f |\n", median(deflt.total),
              median(deflt.build));
  std::printf("| %s fixed | %.1f | %.1f |\n", pick, median(fixed.total), median(fixed.build));
  std::printf("\nThe default's second query on the same tree (Auto's one-time trial): %.1f ms\n", median(second_query));
  std::printf("A CPU path's first use of the tree (its one host copy: %.1f MiB): %.1f ms\n",
              static_cast<double>(tree_bytes) / (1 << 20), median(host_copy));
  if (!c.json.empty())
    write_json(c.json, {{"workload", c.workload}, {"n", n}, {"queries", m}, {"dims", dims}, {"radius", radius}, {"k", k},
                        {"default_ms", median(deflt.total)}, {"second_query_ms", median(second_query)}, {"fixed_ms", median(fixed.total)},
                        {"build_ms", median(fixed.build)}, {"host_copy_ms", median(host_copy)},
                        {"tree_bytes", tree_bytes}});
  return 0;
}

}  // namespace bench
}  // namespace canopy
