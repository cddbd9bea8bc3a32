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
#include "io/dataset.hpp"
#include "runtime/point_correlation.hpp"

namespace canopy {
namespace bench {

void add_pc_options(CLI::App& app, PcConfig& c) {
  add_input_options(app, c.input,
                    {"CSV or CSV.gz with a header row (every dimension is normalised to [0,1])",
                     "generated points instead of a file: uniform:N:D",
                     "CSV(.gz) of queries, same columns, or a generator such as uniform:4000000:7 (default: the "
                     "points themselves)",
                     "seed of --generate and of the radius sample", "put the queries in a random order (seed)"});
  app.add_option("--radius", c.radius, "radius R, or auto:K for a mean count of about K")->capture_default_str();
  app.add_option("--output", c.output,
                 "counts (PointCorrelation::run), or lists: the neighbour lists (run_lists: a count pass, its "
                 "offsets, a fill over its schedule, each list sorted), every list's size checked against the counts")
      ->check(CLI::IsMember({"counts", "lists"}))
      ->capture_default_str();
  add_suite_options(app, c.suite,
                    {"top-tree depth of the inspector, or auto (a quick trial on a sample) (0 = "
                     "default: hybrid-key's follows the query count, the others 8)",
                     "most points per kd-tree leaf",
                     "comma list of independent, mask-lockstep, fsm-lockstep, sorted-independent, "
                     "mask-lockstep-sorted, fsm-lockstep-sorted, hybrid-key, hybrid-key-independent, auto, "
                     "hybrid, hybrid-independent, hybrid-gpu-sandpile; or all"});
}

namespace {

// One run of the counts.
Measured measure_counts(PointCorrelation& pc, const PointSet& queries, const PcOptions& opt) {
  PcResult r = pc.run(queries.data(), queries.size(), opt);
  Measured m;
  m.checksum = std::accumulate(r.counts.begin(), r.counts.end(), std::uint64_t{0},
                               [](std::uint64_t a, index_t b) { return a + static_cast<std::uint64_t>(b); });
  m.result.assign(r.counts.begin(), r.counts.end());
  m.stats = std::move(r);
  return m;
}

// The phases of a list call (ms): what the execute column sums.
struct ListPhases {
  double count = 0, scan = 0, fill = 0, sort = 0, copy = 0;
};

// One run of the lists (--output lists): each list's size must be its count; the result compared
// between variants is a hash per list. The execute column is the whole of what follows the
// schedule: the count pass's executor, the scan, the fill, the sort and the copies. The GPU's
// count pass cannot run the CPU emulator, so no nodes per warp. `last`: this run's phases.
Measured measure_lists(PointCorrelation& pc, const PointSet& queries, const PcOptions& opt,
                       const std::vector<index_t>& counts, ListPhases& last) {
  PcListOptions o(opt);
  o.count_nodes = false;
  PcListResult r = pc.run_lists(queries.data(), queries.size(), o);
  Measured m;
  m.checksum = static_cast<std::uint64_t>(r.total);
  m.result.resize(counts.size());
  for (std::size_t q = 0; q < counts.size(); ++q) {
    const index_t size = r.offsets[q + 1] - r.offsets[q];
    if (size != counts[q])
      throw Error("--output lists: query " + std::to_string(q) + "'s list holds " + std::to_string(size) +
                  " points, its count is " + std::to_string(counts[q]));
    m.result[q] = hash_words(r.indices.begin() + r.offsets[q], r.indices.begin() + r.offsets[q + 1]);
  }
  last = {r.times.execute_ms, r.scan_ms, r.fill_ms, r.sort_ms, r.copy_ms};
  r.times.execute_ms += r.scan_ms + r.fill_ms + r.sort_ms + r.copy_ms;
  m.stats = std::move(static_cast<TraversalStats&>(r));
  return m;
}

}  // namespace

int run_pc(const PcConfig& config) {
  PcConfig c = config;
  if (c.suite.repeat < 1) throw Error("--repeat " + std::to_string(c.suite.repeat) + " must be at least 1");
  const Device requested = parse_device(c.suite.device);
  if (resolve_device(requested) == Device::Cpu && !c.source_given && !c.repeat_given) {
    // The paper's 400,000 points take minutes per variant on a few CPU cores.
    c.input.generate = "uniform:50000:7";
    c.suite.repeat = 1;
    std::printf(
        "no GPU in use: the default workload shrinks to %s, one timed run per variant "
        "(pass --generate uniform:400000:7 --repeat 5 for the full size)\n",
        c.input.generate.c_str());
  }
  const std::vector<Variant> variants = parse_variants(c.suite.variants, false);
  const Inputs in = load_inputs(c.input, true, false);
  const PointSet& points = in.points;
  const PointSet& queries = in.queries;

  KdTreeOptions topt;
  topt.leaf_size = c.suite.leaf_size;
  topt.device = build_device(requested);
  start_device(requested);
  BuildTimes bt;
  const KdTree tree =
      timed_build(c.suite.repeat, [&] { return KdTree::build(points.data(), points.size(), points.dims, topt); }, bt);

  const float radius = parse_radius(c.radius, tree, queries, c.input.seed);

  PointCorrelation pc(tree, requested);
  const Device dev = pc.device();
  std::printf("canopy-bench pc: %s\n", in.source.c_str());
  print_device_line(dev, requested);
  std::printf("points %lld, queries %lld%s, dims %d, radius %.6g, tree: %d levels, leaf size %d, built on the %s%s\n",
              static_cast<long long>(points.size()), static_cast<long long>(queries.size()),
              c.input.shuffle_set ? " (shuffled)" : "", points.dims, radius, tree.height(), tree.leaf_size(),
              to_string(tree.built_on()), build_time_text(bt).c_str());

  const bool lists = c.output == "lists";
  std::vector<index_t> counts;
  ListPhases phases;
  if (lists) {
    PcOptions opt;
    opt.radius = radius;
    counts = pc.run(queries.data(), queries.size(), opt).counts;
    const index_t total = std::accumulate(counts.begin(), counts.end(), index_t{0});
    std::printf("output: neighbour lists (run_lists), %lld in all, each list's size checked against the counts; "
                "execute = count pass + scan + fill + sort + copies\n",
                static_cast<long long>(total));
  }
  const Suite suite = run_suite(
      variants, parse_depths(c.suite.depths), c.suite.depth, dev, c.suite.repeat,
      [&](const TraversalOptions& t) {
        PcOptions opt;
        static_cast<TraversalOptions&>(opt) = t;
        opt.radius = radius;
        return lists ? measure_lists(pc, queries, opt, counts, phases) : measure_counts(pc, queries, opt);
      },
      parse_pipeline(c.suite.pipeline));
  print_suite(suite);
  if (lists)
    std::printf("the last run's execute: count pass %.3f + scan %.3f + fill %.3f + sort %.3f + copies to the host %.3f ms\n",
                phases.count, phases.scan, phases.fill, phases.sort, phases.copy);

  if (!c.suite.json.empty()) {
    nlohmann::json j;
    j["workload"] = "pc";
    j["output"] = c.output;
    j["device"] = to_string(dev);
    j["device_name"] = dev == Device::Gpu ? gpu_description() : std::string("cpu");
    j["source"] = in.source;
    j["n_points"] = points.size();
    j["n_queries"] = queries.size();
    j["shuffled"] = c.input.shuffle_set;
    j["dims"] = points.dims;
    j["radius"] = radius;
    j["depth"] = suite_depth(suite, c.suite.depth);
    j["leaf_size"] = tree.leaf_size();
    j["built_on"] = to_string(tree.built_on());
    add_build_json(j, bt);
    j["repeat"] = c.suite.repeat;
    if (lists)
      j["list_phases_ms"] = {{"count", phases.count}, {"scan", phases.scan}, {"fill", phases.fill},
                             {"sort", phases.sort}, {"copy", phases.copy}};
    j["results_identical"] = suite.all_same;
    j["variants"] = suite_json(suite);
    write_json(c.suite.json, j);
  }
  return suite.all_same ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
