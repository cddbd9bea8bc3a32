// canopy-bench pc: point correlation, every variant on the same tree, queries and radius.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "runtime/point_correlation.hpp"
#include "io/dataset.hpp"

namespace canopy {
namespace bench {

void add_pc_options(CLI::App& app, PcConfig& c) {
  app.add_option("--points", c.points, "CSV or CSV.gz with a header row (every dimension is normalised to [0,1])");
  app.add_option("--generate", c.generate, "generated points instead of a file: uniform:N:D")->capture_default_str();
  app.add_option("--queries", c.queries, "CSV(.gz) of queries, same columns, or a generator such as uniform:4000000:7 (default: the points themselves)");
  app.add_option("--columns", c.columns, "columns to use, e.g. 0-6 or 0,2,4 (default: all)");
  app.add_option("--seed", c.seed, "seed of --generate and of the radius sample")->capture_default_str();
  app.add_option_function<std::uint64_t>("--shuffle", [&c](std::uint64_t s) { c.shuffle_set = true; c.shuffle_seed = s; },
                                         "put the queries in a random order (seed)");
  app.add_option("--radius", c.radius, "radius R, or auto:K for a mean count of about K")->capture_default_str();
  app.add_option_function<std::string>(
      "--depth", [&c](const std::string& d) { c.depth = parse_depth(d); },
      "top-tree depth of the inspector, or auto (a quick trial on a sample) (0 = default)");
  app.add_option("--depths", c.depths, "a depth sweep, e.g. 4-14 or 4-12,auto: the hybrid variants run at each depth");
  app.add_option("--leaf-size", c.leaf_size, "most points per kd-tree leaf")->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu or gpu")->capture_default_str();
  app.add_option("--variants", c.variants,
                 "comma list of independent, mask-lockstep, fsm-lockstep, mask-lockstep-sorted, "
                 "fsm-lockstep-sorted, hybrid, independent-hybrid, hybrid-gpu-sandpile; or all")
      ->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs per variant (the median is reported)")->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
  add_pipeline_options(app, c.pipeline);
}

int run_pc(const PcConfig& config) {
  PcConfig c = config;
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be at least 1");
  const Device requested = parse_device(c.device);
  if (resolve_device(requested) == Device::Cpu && !c.source_given && !c.repeat_given) {
    // The paper's 400,000 points take minutes per variant on a few CPU cores.
    c.generate = "uniform:50000:7";
    c.repeat = 1;
    std::printf("no GPU in use: the default workload shrinks to %s, one timed run per variant "
                "(pass --generate uniform:400000:7 --repeat 5 for the full size)\n",
                c.generate.c_str());
  }
  const std::vector<Variant> variants = parse_variants(c.variants, false);
  const Inputs in = load_inputs({c.points, c.generate, c.queries, c.columns, c.seed, c.shuffle_set, c.shuffle_seed},
                                true, false);
  const PointSet& points = in.points;
  const PointSet& queries = in.queries;

  KdTreeOptions topt;
  topt.leaf_size = c.leaf_size;
  const auto t0 = std::chrono::steady_clock::now();
  const KdTree tree = KdTree::build(points.data(), points.size(), points.dims, topt);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const float radius = parse_radius(c.radius, tree, queries, c.seed);

  PointCorrelation pc(tree, requested);
  const Device dev = pc.device();
  std::printf("canopy-bench pc: %s\n", in.source.c_str());
  print_device_line(dev, requested);
  std::printf("points %lld, queries %lld%s, dims %d, radius %.6g, tree: %d levels, leaf size %d, built in %.1f ms\n",
              static_cast<long long>(points.size()), static_cast<long long>(queries.size()),
              c.shuffle_set ? " (shuffled)" : "", points.dims, radius, tree.height(), tree.leaf_size(), build_ms);

  const Suite suite = run_suite(variants, parse_depths(c.depths), c.depth, dev, c.repeat, [&](const TraversalOptions& t) {
    PcOptions opt;
    static_cast<TraversalOptions&>(opt) = t;
    opt.radius = radius;
    PcResult r = pc.run(queries.data(), queries.size(), opt);
    Measured m;
    m.checksum = std::accumulate(r.counts.begin(), r.counts.end(), std::uint64_t{0},
                                 [](std::uint64_t a, index_t b) { return a + static_cast<std::uint64_t>(b); });
    m.result.assign(r.counts.begin(), r.counts.end());
    m.stats = std::move(r);
    return m;
  }, parse_pipeline(c.pipeline));
  print_suite(suite);

  if (!c.json.empty()) {
    nlohmann::json j;
    j["workload"] = "pc";
    j["device"] = to_string(dev);
    j["device_name"] = dev == Device::Gpu ? gpu_description() : std::string("cpu");
    j["source"] = in.source;
    j["n_points"] = points.size();
    j["n_queries"] = queries.size();
    j["shuffled"] = c.shuffle_set;
    j["dims"] = points.dims;
    j["radius"] = radius;
    j["depth"] = suite_depth(suite, c.depth);
    j["leaf_size"] = tree.leaf_size();
    j["repeat"] = c.repeat;
    j["results_identical"] = suite.all_same;
    j["variants"] = suite_json(suite);
    write_json(c.json, j);
  }
  return suite.all_same ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
