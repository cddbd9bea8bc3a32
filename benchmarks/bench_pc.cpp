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
#include "runtime/canopy.hpp"
#include "runtime/dataset.hpp"

namespace canopy {
namespace bench {
namespace {

struct Variant {
  const char* name;
  ExecutorKind executor;
  ScheduleKind schedule;
};

constexpr Variant kVariants[] = {
    {"independent", ExecutorKind::Independent, ScheduleKind::InputOrder},
    {"mask-lockstep", ExecutorKind::MaskLockstep, ScheduleKind::InputOrder},
    {"fsm-lockstep", ExecutorKind::FsmLockstep, ScheduleKind::InputOrder},
    {"mask-lockstep-sorted", ExecutorKind::MaskLockstep, ScheduleKind::LeafSort},
    {"fsm-lockstep-sorted", ExecutorKind::FsmLockstep, ScheduleKind::LeafSort},
    {"hybrid", ExecutorKind::FsmLockstep, ScheduleKind::Hybrid},
    {"independent-hybrid", ExecutorKind::Independent, ScheduleKind::Hybrid},
    // The same schedule with the sandpile on the GPU: no matrix or order crosses PCIe.
    {"hybrid-gpu-sandpile", ExecutorKind::FsmLockstep, ScheduleKind::HybridDevice},
};

std::vector<Variant> parse_variants(const std::string& list) {
  if (list == "all") return {std::begin(kVariants), std::end(kVariants)};
  std::vector<Variant> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    auto it = std::find_if(std::begin(kVariants), std::end(kVariants),
                           [&](const Variant& v) { return name == v.name; });
    if (it == std::end(kVariants)) {
      std::string known;
      for (const Variant& v : kVariants) known += std::string(known.empty() ? "" : ", ") + v.name;
      throw Error("--variants: unknown variant '" + name + "' (known: " + known + ", or all)");
    }
    out.push_back(*it);
  }
  if (out.empty()) throw Error("--variants: the list is empty");
  return out;
}

Device parse_device(const std::string& s) {
  if (s == "auto") return Device::Auto;
  if (s == "cpu") return Device::Cpu;
  if (s == "gpu") return Device::Gpu;
  throw Error("--device: '" + s + "' is not one of auto, cpu, gpu");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool is_lockstep(ExecutorKind k) { return k != ExecutorKind::Independent; }
bool uses_depth(const Variant& v) {
  return v.schedule == ScheduleKind::Hybrid || v.schedule == ScheduleKind::HybridDevice;
}

// "4-14" or "6,8,10" (empty: no sweep).
std::vector<int> parse_depths(const std::string& spec) {
  std::vector<int> out;
  for (int c : parse_columns(spec)) {
    if (c < 1) throw Error("--depths: depth " + std::to_string(c) + " must be at least 1");
    out.push_back(c);
  }
  return out;
}

struct Row {
  std::string name;
  double inspect = 0, schedule = 0, execute = 0, total = 0;
  double nodes_per_warp = 0;
  index_t nodes_per_warp_max = 0;
  std::uint64_t checksum = 0;
  bool same_results = true;
  int depth = 0;
};

}  // namespace

void add_pc_options(CLI::App& app, PcConfig& c) {
  app.add_option("--points", c.points, "CSV or CSV.gz with a header row (every dimension is normalised to [0,1])");
  app.add_option("--generate", c.generate, "generated points instead of a file: uniform:N:D")->capture_default_str();
  app.add_option("--queries", c.queries, "CSV(.gz) of queries, same columns (default: the points themselves)");
  app.add_option("--columns", c.columns, "columns to use, e.g. 0-6 or 0,2,4 (default: all)");
  app.add_option("--seed", c.seed, "seed of --generate and of the radius sample")->capture_default_str();
  app.add_option_function<std::uint64_t>("--shuffle", [&c](std::uint64_t s) { c.shuffle_set = true; c.shuffle_seed = s; },
                                         "put the queries in a random order (seed)");
  app.add_option("--radius", c.radius, "radius R, or auto:K for a mean count of about K")->capture_default_str();
  app.add_option("--depth", c.depth, "top-tree depth of the inspector (0 = default)")->capture_default_str();
  app.add_option("--depths", c.depths, "a depth sweep, e.g. 4-14: the hybrid variants run at each depth");
  app.add_option("--leaf-size", c.leaf_size, "most points per kd-tree leaf")->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu or gpu")->capture_default_str();
  app.add_option("--variants", c.variants,
                 "comma list of independent, mask-lockstep, fsm-lockstep, mask-lockstep-sorted, "
                 "fsm-lockstep-sorted, hybrid, independent-hybrid, hybrid-gpu-sandpile; or all")
      ->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs per variant (the median is reported)")->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
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
  const std::vector<Variant> variants = parse_variants(c.variants);

  PointSet points = c.points.empty() ? generate(c.generate, c.seed) : read_csv(c.points, c.columns);
  const Ranges ranges = ranges_of(points);
  normalize(points, ranges);
  PointSet queries = points;
  if (!c.queries.empty()) {
    queries = read_csv(c.queries, c.columns);
    if (queries.dims != points.dims)
      throw Error("--queries " + c.queries + " has " + std::to_string(queries.dims) + " columns, the points " +
                  std::to_string(points.dims));
    normalize(queries, ranges);
  }
  if (c.shuffle_set) shuffle(queries, c.shuffle_seed);

  KdTreeOptions topt;
  topt.leaf_size = c.leaf_size;
  const auto t0 = std::chrono::steady_clock::now();
  const KdTree tree = KdTree::build(points.data(), points.size(), points.dims, topt);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  float radius = 0;
  if (c.radius.rfind("auto:", 0) == 0) {
    const std::string k = c.radius.substr(5);
    char* end = nullptr;
    const double target = std::strtod(k.c_str(), &end);
    if (k.empty() || *end != '\0' || !(target > 0))
      throw Error("--radius " + c.radius + ": auto:K needs a positive mean count K");
    radius = estimate_radius(tree, queries.data(), queries.size(), target, c.seed);
  } else {
    char* end = nullptr;
    radius = std::strtof(c.radius.c_str(), &end);
    if (c.radius.empty() || *end != '\0')
      throw Error("--radius '" + c.radius + "' is neither a number nor auto:K");
  }

  PointCorrelation pc(tree, requested);
  const Device dev = pc.device();
  const std::string source = c.points.empty() ? c.generate : c.points;
  std::printf("canopy-bench pc: %s\n", source.c_str());
  if (dev == Device::Gpu)
    std::printf("device: gpu, %s\n", gpu_description().c_str());
  else
    std::printf("device: cpu (%s; running the CPU executors: TBB for independent threads, the warp "
                "emulator for lockstep)\n",
                requested == Device::Cpu ? "requested" : gpu_description().c_str());
  std::printf("points %lld, queries %lld%s, dims %d, radius %.6g, tree: %d levels, leaf size %d, built in %.1f ms\n",
              static_cast<long long>(points.size()), static_cast<long long>(queries.size()),
              c.shuffle_set ? " (shuffled)" : "", points.dims, radius, tree.height(), tree.leaf_size(), build_ms);

  // Variants that schedule with the inspector run once per depth of the sweep; the others
  // do not depend on the depth and run once.
  std::vector<int> depths = parse_depths(c.depths);
  if (depths.empty()) depths.push_back(c.depth);
  std::vector<Row> rows;
  std::vector<index_t> reference;
  bool all_same = true;
  auto measure = [&](const Variant& var, int depth) {
    PcOptions opt;
    opt.radius = radius;
    opt.device = dev;
    opt.executor = var.executor;
    opt.schedule = var.schedule;
    opt.depth = depth;
    // Untimed warm-up, which also measures nodes per warp with the emulator on its schedule.
    opt.count_nodes = is_lockstep(var.executor);
    const PcResult first = pc.run(queries.data(), queries.size(), opt);
    opt.count_nodes = false;
    Row row;
    row.name = var.name;
    row.nodes_per_warp = first.nodes_per_warp();
    if (!first.warp_nodes.empty())
      row.nodes_per_warp_max = *std::max_element(first.warp_nodes.begin(), first.warp_nodes.end());
    row.depth = uses_depth(var) ? first.depth : 0;
    row.checksum = std::accumulate(first.counts.begin(), first.counts.end(), std::uint64_t{0},
                                   [](std::uint64_t a, index_t b) { return a + static_cast<std::uint64_t>(b); });
    if (reference.empty()) reference = first.counts;
    row.same_results = first.counts == reference;
    std::vector<double> ins, sch, exe, tot;
    for (int r = 0; r < c.repeat; ++r) {
      const PcResult res = pc.run(queries.data(), queries.size(), opt);
      row.same_results = row.same_results && res.counts == reference;
      ins.push_back(res.times.inspect_ms);
      sch.push_back(res.times.schedule_ms);
      exe.push_back(res.times.execute_ms);
      tot.push_back(res.times.total_ms());
    }
    row.inspect = median(ins);
    row.schedule = median(sch);
    row.execute = median(exe);
    row.total = median(tot);
    all_same = all_same && row.same_results;
    rows.push_back(row);
  };
  for (const Variant& var : variants)
    if (!uses_depth(var)) measure(var, depths.front());
  for (int depth : depths)
    for (const Variant& var : variants)
      if (uses_depth(var)) measure(var, depth);

  const auto base = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.name == "mask-lockstep"; });
  std::printf("\n%-22s %5s %10s %10s %10s %10s %12s %10s %16s %9s\n", "variant", "depth", "inspect", "schedule",
              "execute", "total", "nodes/warp", "max", "checksum", "speedup");
  std::printf("%-22s %5s %10s %10s %10s %10s %12s %10s %16s %9s\n", "", "", "ms", "ms", "ms", "ms", "mean", "", "",
              "vs mask");
  for (const Row& r : rows) {
    char depth[16] = "-", npw[32] = "-", npw_max[32] = "-", speed[32] = "-";
    if (r.depth) std::snprintf(depth, sizeof depth, "%d", r.depth);
    if (r.nodes_per_warp > 0) {
      std::snprintf(npw, sizeof npw, "%.1f", r.nodes_per_warp);
      std::snprintf(npw_max, sizeof npw_max, "%lld", static_cast<long long>(r.nodes_per_warp_max));
    }
    if (base != rows.end() && r.total > 0) std::snprintf(speed, sizeof speed, "%.2fx", base->total / r.total);
    std::printf("%-22s %5s %10.3f %10.3f %10.3f %10.3f %12s %10s %16llu %9s%s\n", r.name.c_str(), depth, r.inspect,
                r.schedule, r.execute, r.total, npw, npw_max, static_cast<unsigned long long>(r.checksum), speed,
                r.same_results ? "" : "  RESULTS DIFFER");
  }
  const int used_depth = [&] {
    for (const Row& r : rows)
      if (r.depth) return r.depth;
    return c.depth;
  }();
  std::printf("\nmedian of %d runs; every variant's results %s\n", c.repeat, all_same ? "identical" : "DIFFER");

  if (!c.json.empty()) {
    nlohmann::json j;
    j["workload"] = "pc";
    j["device"] = to_string(dev);
    j["device_name"] = dev == Device::Gpu ? gpu_description() : std::string("cpu");
    j["source"] = source;
    j["n_points"] = points.size();
    j["n_queries"] = queries.size();
    j["shuffled"] = c.shuffle_set;
    j["dims"] = points.dims;
    j["radius"] = radius;
    j["depth"] = used_depth;
    j["leaf_size"] = tree.leaf_size();
    j["repeat"] = c.repeat;
    j["results_identical"] = all_same;
    j["variants"] = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json v{{"name", r.name},       {"inspect_ms", r.inspect}, {"schedule_ms", r.schedule},
                       {"execute_ms", r.execute}, {"total_ms", r.total},   {"checksum", r.checksum}};
      if (r.depth) v["depth"] = r.depth;
      v["nodes_per_warp"] = r.nodes_per_warp > 0 ? nlohmann::json(r.nodes_per_warp) : nlohmann::json(nullptr);
      v["nodes_per_warp_max"] = r.nodes_per_warp > 0 ? nlohmann::json(r.nodes_per_warp_max) : nlohmann::json(nullptr);
      if (base != rows.end() && r.total > 0) v["speedup_vs_mask_lockstep"] = base->total / r.total;
      j["variants"].push_back(v);
    }
    std::ofstream out(c.json);
    if (!out) throw Error("--json " + c.json + ": cannot open for writing");
    out << j.dump(2) << "\n";
  }
  return all_same ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
