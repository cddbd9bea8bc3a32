// canopy-bench nn | knn | bt | vp | bh: the guided nearest-neighbour workloads on the kd-tree,
// ball tree and vp-tree, and Barnes-Hut on an octree; every variant on the same tree and
// queries, results compared exactly (by digests of their words) and sampled against brute force.
#include <CLI/CLI.hpp>

#include <tbb/parallel_for.h>

#include <chrono>
#include <cstdio>
#include <limits>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/bits.hpp"
#include "core/checks.hpp"
#include "core/rounding.hpp"
#include "core/timing.hpp"
#include "layouts/geometry.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/knn.hpp"

namespace canopy {
namespace bench {
namespace {

// `samples` queries spread evenly over the query set and their k smallest (squared distance,
// index) pairs by brute force, in the library's arithmetic (point_distance2 over padded rows), as
// the results give them: distances (square roots) and indices, padded with (inf, -1) past n.
struct BruteSample {
  std::vector<index_t> queries;
  std::vector<index_t> index;  // [sample][k]
  std::vector<float> dist;     // [sample][k]
};
BruteSample brute_force_sample(const PointSet& points, const PointSet& queries, int k, int samples) {
  BruteSample b;
  const index_t m = queries.size(), n = points.size();
  const int dims = points.dims;
  samples = static_cast<int>(std::min<index_t>(samples, m));
  for (int s = 0; s < samples; ++s) b.queries.push_back(static_cast<index_t>(static_cast<double>(s) * m / samples));
  b.index.assign(static_cast<std::size_t>(samples) * k, -1);
  b.dist.assign(static_cast<std::size_t>(samples) * k, std::numeric_limits<float>::infinity());
  tbb::parallel_for(0, samples, [&](int s) {
    float q[kMaxDims], p[kMaxDims];
    load_query(queries.data() + b.queries[s] * dims, dims, q);
    std::priority_queue<std::pair<float, index_t>> best;  // the k smallest so far, largest on top
    for (index_t i = 0; i < n; ++i) {
      load_query(points.data() + i * dims, dims, p);
      const std::pair<float, index_t> c(point_distance2(q, p), i);
      if (static_cast<int>(best.size()) < k) {
        best.push(c);
      } else if (c < best.top()) {
        best.pop();
        best.push(c);
      }
    }
    for (int j = static_cast<int>(best.size()) - 1; j >= 0; --j) {
      b.index[static_cast<std::size_t>(s) * k + j] = best.top().second;
      b.dist[static_cast<std::size_t>(s) * k + j] = sqrt_rn(best.top().first);
      best.pop();
    }
  });
  return b;
}

// The sampled rows of a result against brute force; throws naming the first query that differs.
void check_against_brute_force(const BruteSample& b, const KnnResult& r, int k) {
  for (std::size_t s = 0; s < b.queries.size(); ++s)
    for (int j = 0; j < k; ++j) {
      const std::size_t want = s * k + j, got = static_cast<std::size_t>(b.queries[s]) * k + j;
      if (r.indices[got] != b.index[want] || float_to_bits(r.distances[got]) != float_to_bits(b.dist[want]))
        throw Error("query " + std::to_string(b.queries[s]) + ": neighbour " + std::to_string(j) + " is (" +
                    std::to_string(r.indices[got]) + ", " + std::to_string(r.distances[got]) +
                    "), brute force gives (" + std::to_string(b.index[want]) + ", " + std::to_string(b.dist[want]) + ")");
    }
}

int finish(const TraversalBenchConfig& c, const Suite& suite, nlohmann::json j) {
  print_suite(suite);
  if (!c.suite.json.empty()) {
    j["depth"] = suite_depth(suite, c.suite.depth);
    j["repeat"] = c.suite.repeat;
    j["results_identical"] = suite.all_same;
    j["variants"] = suite_json(suite);
    write_json(c.suite.json, j);
  }
  return suite.all_same ? 0 : 2;
}

template <class Tree>
int run_knn(const TraversalBenchConfig& c, const Inputs& in, Device requested, const char* tree_name) {
  const int k = c.k > 0 ? c.k : (c.workload == "knn" ? 8 : 1);
  start_device(requested);
  BuildTimes bt;
  const Tree tree = timed_build(c.suite.repeat, [&] {
    if constexpr (std::is_same_v<Tree, KdTree>) {
      KdTreeOptions o;
      o.leaf_size = c.suite.leaf_size;
      o.device = build_device(requested);
      return KdTree::build(in.points.data(), in.points.size(), in.points.dims, o);
    } else if constexpr (std::is_same_v<Tree, BallTree>) {
      BallTreeOptions o;
      o.leaf_size = c.suite.leaf_size;
      o.device = build_device(requested);
      return BallTree::build(in.points.data(), in.points.size(), in.points.dims, o);
    } else {
      VpTreeOptions o;
      o.leaf_size = c.suite.leaf_size;
      o.device = build_device(requested);
      return VpTree::build(in.points.data(), in.points.size(), in.points.dims, o);
    }
  }, bt);
  NearestNeighbors nn(tree, requested);
  const Device dev = nn.device();
  const std::optional<GuidedProbe> probe = parse_probe(c.probe);
  if (c.row_cap < 0) throw Error("--row-cap " + std::to_string(c.row_cap) + " must be >= 0 (0: the probe's default)");
  TraversalOptions shown;  // the rows the hybrid variants use
  shown.probe = probe;
  shown.row_cap = c.row_cap;
  const PipelineSetting pipeline = parse_pipeline(c.suite.pipeline);
  shown.pipeline = pipeline.on;
  const GuidedRows rows = guided_rows(shown, dev);
  std::printf("canopy-bench %s: %s, %s, k = %d\n", c.workload.c_str(), in.source.c_str(), tree_name, k);
  print_device_line(dev, requested);
  std::printf("tree points %lld, queries %lld%s, dims %d, tree: %d levels, leaf size %d, built on the %s%s\n",
              static_cast<long long>(in.points.size()), static_cast<long long>(in.queries.size()),
              c.input.shuffle_set ? " (shuffled)" : "", in.points.dims, tree.height(), tree.leaf_size(),
              to_string(tree.built_on()), build_time_text(bt).c_str());
  std::printf("guided inspector rows: probe %s, row cap %s\n", to_string(rows.probe),
              rows.cap > 0 ? std::to_string(rows.cap).c_str() : "none");
  if (c.check < 0) throw Error("--check " + std::to_string(c.check) + " must be >= 0 (0: no brute-force check)");
  const auto tb = std::chrono::steady_clock::now();
  const BruteSample brute = brute_force_sample(in.points, in.queries, k, c.check);
  const double brute_ms = ms_since(tb);
  bool brute_checked = false;
  const Suite suite = run_suite(
      parse_variants(c.suite.variants, true), parse_depths(c.suite.depths), c.suite.depth, dev, c.suite.repeat,
      [&](const TraversalOptions& t) {
        KnnOptions opt;
        static_cast<TraversalOptions&>(opt) = t;
        opt.k = k;
        opt.probe = probe;
        opt.row_cap = c.row_cap;
        KnnResult r = nn.run(in.queries.data(), in.queries.size(), opt);
        if (!brute_checked) {  // the first run; the others must equal it word for word
          check_against_brute_force(brute, r, k);
          brute_checked = true;
        }
        Measured m;
        const std::size_t n = r.indices.size();
        set_result_digests(m, 2 * n, [&](std::size_t i) {
          return i < n ? static_cast<std::uint64_t>(r.indices[i]) : float_to_bits(r.distances[i - n]);
        });
        m.stats = std::move(r);
        return m;
      },
      pipeline);
  if (!brute.queries.empty())
    std::printf("brute force: %zu sampled queries' %d neighbours equal the first run's (%.0f ms on the host)\n",
                brute.queries.size(), k, brute_ms);
  nlohmann::json j;
  j["workload"] = c.workload;
  j["tree"] = tree_name;
  j["device"] = to_string(dev);
  j["device_name"] = dev == Device::Gpu ? gpu_description() : std::string("cpu");
  j["source"] = in.source;
  j["n_points"] = in.points.size();
  j["n_queries"] = in.queries.size();
  j["shuffled"] = c.input.shuffle_set;
  j["dims"] = in.points.dims;
  j["k"] = k;
  j["brute_force_checked"] = brute.queries.size();
  j["probe"] = to_string(rows.probe);
  j["row_cap"] = rows.cap;
  j["leaf_size"] = tree.leaf_size();
  j["built_on"] = to_string(tree.built_on());
  add_build_json(j, bt);
  return finish(c, suite, j);
}

int run_bh(const TraversalBenchConfig& c, const Inputs& in, Device requested) {
  if (in.points.dims != 3)
    throw Error("bh: the bodies need 3 coordinates, " + in.source + " has " + std::to_string(in.points.dims) +
                " (use --columns to pick three)");
  const index_t n = in.points.size();
  const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
  OctreeOptions o;
  o.leaf_size = c.suite.leaf_size;
  o.device = build_device(requested);
  start_device(requested);
  const auto t0 = std::chrono::steady_clock::now();
  const Octree tree = Octree::build(in.points.data(), mass.data(), n, o);
  const double build_ms = ms_since(t0);
  BarnesHut bh(tree, requested);
  const Device dev = bh.device();
  std::printf("canopy-bench bh: %s, theta %.3g, softening %.3g\n", in.source.c_str(), c.theta, c.softening);
  print_device_line(dev, requested);
  std::printf("bodies %lld (equal masses 1/N)%s, octree: %d levels, %d nodes, leaf size %d, built on the %s in %.1f ms\n",
              static_cast<long long>(n), c.input.shuffle_set ? " (shuffled)" : "", tree.height(), tree.node_count(),
              tree.leaf_size(), to_string(tree.built_on()), build_ms);
  const Suite suite = run_suite(
      parse_variants(c.suite.variants, false), parse_depths(c.suite.depths), c.suite.depth, dev, c.suite.repeat,
      [&](const TraversalOptions& t) {
        BhOptions opt;
        static_cast<TraversalOptions&>(opt) = t;
        opt.theta = c.theta;
        opt.softening = c.softening;
        BhResult r = bh.run(opt);
        Measured m;
        set_result_digests(m, r.forces.size(), [&](std::size_t i) { return float_to_bits(r.forces[i]); });
        m.stats = std::move(r);
        return m;
      },
      parse_pipeline(c.suite.pipeline));
  nlohmann::json j;
  j["workload"] = "bh";
  j["device"] = to_string(dev);
  j["device_name"] = dev == Device::Gpu ? gpu_description() : std::string("cpu");
  j["source"] = in.source;
  j["n_bodies"] = n;
  j["shuffled"] = c.input.shuffle_set;
  j["theta"] = c.theta;
  j["softening"] = c.softening;
  j["leaf_size"] = tree.leaf_size();
  j["height"] = tree.height();
  return finish(c, suite, j);
}

}  // namespace

void add_traversal_options(CLI::App& app, TraversalBenchConfig& c) {
  add_input_options(
      app, c.input,
      {"CSV or CSV.gz with a header row (nn family: normalised to [0,1])",
       "generated points instead of a file: uniform:N:D or plummer:N (default uniform:400000:7; bh: "
       "plummer:1000000)",
       "nn family: CSV(.gz) of queries against all the points, or a generator such as "
       "uniform:4000000:7 (default: a seeded random half of the points builds the tree, the other half "
       "queries it)",
       "seed of --generate and of the tree/query split", "put the queries (bh: bodies) in a random order (seed)"});
  app.add_option("--k", c.k, "neighbours per query (default 1 for nn, bt, vp; 8 for knn)");
  app.add_option("--check", c.check,
                 "nn family: queries (spread evenly) whose neighbours the first run must share with brute force "
                 "(0: none)")
      ->capture_default_str();
  app.add_option("--theta", c.theta, "bh: opening angle")->capture_default_str();
  app.add_option("--softening", c.softening, "bh: softening length epsilon")->capture_default_str();
  add_suite_options(app, c.suite,
                    {"top-tree depth of the inspector, or auto (a quick trial on a sample) (0 = "
                     "default: hybrid-key's follows the query count; the others 8, bh 4, 12 for guided rows with "
                     "probe none)",
                     "most points (bodies) per leaf",
                     "comma list of independent, mask-lockstep, fsm-lockstep, sorted-independent, "
                     "mask-lockstep-sorted, fsm-lockstep-sorted, hybrid-key, hybrid-key-independent, auto, "
                     "hybrid, hybrid-independent, hybrid-gpu-sandpile (bh) or "
                     "hybrid-gpu-buckets (nn, knn, bt, vp); or all"});
  app.add_option("--probe", c.probe,
                 "nn family: how the guided inspector bounds a query's top-tree walk: full, lean, none, or auto "
                 "(full; "
                 "none when pipelined)")
      ->capture_default_str();
  app.add_option("--row-cap", c.row_cap, "nn family: most top-leaves per guided row (0: all; 32 with probe none)")
      ->capture_default_str();
}

int run_traversal(const TraversalBenchConfig& config) {
  TraversalBenchConfig c = config;
  if (c.suite.repeat < 1) throw Error("--repeat " + std::to_string(c.suite.repeat) + " must be at least 1");
  const bool bh = c.workload == "bh";
  if (c.input.generate.empty()) c.input.generate = bh ? "plummer:1000000" : "uniform:400000:7";
  const Device requested = parse_device(c.suite.device);
  if (resolve_device(requested) == Device::Cpu && !c.source_given && !c.repeat_given) {
    c.input.generate = bh ? "plummer:50000" : "uniform:50000:7";
    c.suite.repeat = 1;
    std::printf("no GPU in use: the default workload shrinks to %s, one timed run per variant\n",
                c.input.generate.c_str());
  }
  if (bh && !c.input.queries.empty()) throw Error("--queries: bh computes the force on its own bodies");
  const Inputs in = load_inputs(c.input, !bh, !bh);
  if (bh) return run_bh(c, in, requested);
  if (c.workload == "bt") return run_knn<BallTree>(c, in, requested, "ball tree");
  if (c.workload == "vp") return run_knn<VpTree>(c, in, requested, "vantage-point tree");
  return run_knn<KdTree>(c, in, requested, "kd-tree");
}

}  // namespace bench
}  // namespace canopy
