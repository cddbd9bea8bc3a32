#include "benchmarks/bench_common.hpp"

#include <CLI/CLI.hpp>

#include "runtime/point_correlation.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

namespace canopy {
namespace bench {
namespace {

constexpr Variant kVariants[] = {
    {"independent", ExecutorKind::Independent, ScheduleKind::InputOrder},
    {"mask-lockstep", ExecutorKind::MaskLockstep, ScheduleKind::InputOrder},
    {"fsm-lockstep", ExecutorKind::FsmLockstep, ScheduleKind::InputOrder},
    {"sorted-independent", ExecutorKind::Independent, ScheduleKind::LeafSort},
    {"mask-lockstep-sorted", ExecutorKind::MaskLockstep, ScheduleKind::LeafSort},
    {"fsm-lockstep-sorted", ExecutorKind::FsmLockstep, ScheduleKind::LeafSort},
    {"hybrid", ExecutorKind::FsmLockstep, ScheduleKind::Hybrid},
    {"hybrid-independent", ExecutorKind::Independent, ScheduleKind::Hybrid},
    // The same schedule with the scheduler on the GPU: no matrix or order crosses PCIe.
    {"hybrid-gpu-sandpile", ExecutorKind::FsmLockstep, ScheduleKind::HybridDevice},
    {"hybrid-gpu-buckets", ExecutorKind::FsmLockstep, ScheduleKind::HybridDevice},
    // The compact-key schedule: a key per query, a radix sort, the depth following the queries.
    {"hybrid-key", ExecutorKind::FsmLockstep, ScheduleKind::HybridKey},
    {"hybrid-key-independent", ExecutorKind::Independent, ScheduleKind::HybridKey},
    // The API's default: the runtime's own pick (a prior, then a one-time trial).
    {"auto", ExecutorKind::Auto, ScheduleKind::Auto},
};

bool is_lockstep(ExecutorKind k) { return k == ExecutorKind::MaskLockstep || k == ExecutorKind::FsmLockstep; }
bool uses_depth(const Variant& v) { return uses_top_tree(v.schedule); }
bool is_auto(const Variant& v) { return v.schedule == ScheduleKind::Auto || v.executor == ExecutorKind::Auto; }

}  // namespace

std::vector<Variant> parse_variants(const std::string& list, bool guided) {
  std::vector<Variant> known;
  // The device scheduler is the sandpile for unguided traversals, the buckets for guided ones.
  for (const Variant& v : kVariants)
    if (v.schedule != ScheduleKind::HybridDevice || std::string(v.name) == (guided ? "hybrid-gpu-buckets" : "hybrid-gpu-sandpile"))
      known.push_back(v);
  if (list == "all") return known;
  std::vector<Variant> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    auto it = std::find_if(known.begin(), known.end(), [&](const Variant& v) { return name == v.name; });
    if (it == known.end()) {
      std::string names;
      for (const Variant& v : known) names += std::string(names.empty() ? "" : ", ") + v.name;
      throw Error("--variants: unknown variant '" + name + "' (known: " + names + ", or all)");
    }
    out.push_back(*it);
  }
  if (out.empty()) throw Error("--variants: the list is empty");
  return out;
}

void start_device(Device requested) {
  if (requested != Device::Cpu && gpu_available()) (void)gpu_free_memory();
}

std::string build_time_text(const BuildTimes& t) {
  char buf[128];
  if (t.runs > 1)
    std::snprintf(buf, sizeof buf, " in %.1f ms (median of %d builds; the first %.1f ms)", t.median_ms, t.runs, t.first_ms);
  else
    std::snprintf(buf, sizeof buf, " in %.1f ms", t.first_ms);
  return buf;
}

void add_build_json(nlohmann::json& j, const BuildTimes& t) {
  j["build_ms"] = t.median_ms;  // wall time from host points
  j["build_first_ms"] = t.first_ms;
  j["builds"] = t.runs;
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

std::vector<int> parse_depths(const std::string& spec) {
  std::vector<int> out;
  // "auto" among the depths: the automatic choice runs next to the fixed ones.
  std::string rest;
  std::size_t start = 0;
  while (start <= spec.size()) {
    const std::size_t end = std::min(spec.find(',', start), spec.size());
    const std::string part = spec.substr(start, end - start);
    if (part == "auto") out.push_back(kAutoDepth);
    else if (!part.empty()) rest += (rest.empty() ? "" : ",") + part;
    start = end + 1;
  }
  for (int c : parse_columns(rest)) {
    if (c < 1) throw Error("--depths: depth " + std::to_string(c) + " must be at least 1");
    out.push_back(c);
  }
  return out;
}

std::optional<GuidedProbe> parse_probe(const std::string& spec) {
  if (spec == "auto") return std::nullopt;
  for (GuidedProbe p : {GuidedProbe::Full, GuidedProbe::Lean, GuidedProbe::None})
    if (spec == to_string(p)) return p;
  throw Error("--probe '" + spec + "' is none of full, lean, none, auto");
}

int parse_depth(const std::string& spec) {
  if (spec == "auto") return kAutoDepth;
  char* end = nullptr;
  const long d = std::strtol(spec.c_str(), &end, 10);
  if (spec.empty() || *end != '\0' || d < 0 || d > 1000)
    throw Error("--depth '" + spec + "' is neither a depth (0 = the default) nor auto");
  return static_cast<int>(d);
}

void add_pipeline_options(CLI::App& app, PipelineArgs& args) {
  app.add_option("--pipeline", args.pipeline,
                 "on: the hybrid variants run pipelined (chunks overlapping inspection, scheduling and execution)")
      ->capture_default_str();
  app.add_option("--chunk", args.chunk, "queries per pipeline chunk (0: n / 8, at least 65,536)")->capture_default_str();
  app.add_option("--memory-budget", args.memory_budget_mib,
                 "MiB of GPU memory a call may use (0: no budget); a matrix that does not fit is chunked")
      ->capture_default_str();
  app.add_option("--inspector-first", args.inspector_first,
                 "on: the pipeline inspects on a high-priority stream (ahead of queued executor blocks); off: one "
                 "priority for all")
      ->capture_default_str();
  app.add_option("--ramp", args.ramp,
                 "on: with the CPU scheduler, the pipeline's first chunks are chunk / 8, / 4, / 2, so execution starts "
                 "early; off: equal chunks")
      ->capture_default_str();
}

PipelineSetting parse_pipeline(const PipelineArgs& args) {
  PipelineSetting p;
  if (args.pipeline == "on") p.on = true;
  else if (args.pipeline != "off") throw Error("--pipeline '" + args.pipeline + "' is neither on nor off");
  if (args.inspector_first == "off") p.inspector_first = false;
  else if (args.inspector_first != "on")
    throw Error("--inspector-first '" + args.inspector_first + "' is neither on nor off");
  if (args.ramp == "off") p.ramp = false;
  else if (args.ramp != "on") throw Error("--ramp '" + args.ramp + "' is neither on nor off");
  if (args.chunk < 0) throw Error("--chunk " + std::to_string(args.chunk) + " must be >= 0 (0: automatic)");
  if (!(args.memory_budget_mib >= 0))
    throw Error("--memory-budget " + std::to_string(args.memory_budget_mib) + " must be >= 0 MiB (0: none)");
  p.chunk = args.chunk;
  p.memory_budget = static_cast<std::size_t>(args.memory_budget_mib * 1048576.0);
  return p;
}

namespace {

const VariantRow* baseline(const Suite& s) {
  for (const VariantRow& r : s.rows)
    if (r.name == "mask-lockstep") return &r;
  return nullptr;
}

void print_header() {
  std::printf("\n%-22s %5s %10s %10s %10s %10s %12s %10s %20s %9s\n", "variant", "depth", "inspect", "schedule",
              "execute", "total", "nodes/warp", "max", "checksum", "speedup");
  std::printf("%-22s %5s %10s %10s %10s %10s %12s %10s %20s %9s\n", "", "", "ms", "ms", "ms", "ms", "mean", "", "",
              "vs mask");
  std::fflush(stdout);
}

// One row of the table, flushed: a crash in a later variant keeps the rows printed before it.
void print_row(const VariantRow& r, const VariantRow* base) {
  char depth[16] = "-", npw[32] = "-", npw_max[32] = "-", speed[32] = "-";
  if (r.depth) std::snprintf(depth, sizeof depth, r.auto_depth ? "a%d" : "%d", r.depth);
  if (r.nodes_per_warp > 0) {
    std::snprintf(npw, sizeof npw, "%.1f", r.nodes_per_warp);
    std::snprintf(npw_max, sizeof npw_max, "%lld", static_cast<long long>(r.nodes_per_warp_max));
  }
  if (base && r.total > 0) std::snprintf(speed, sizeof speed, "%.2fx", base->total / r.total);
  std::printf("%-22s %5s %10.3f %10.3f %10.3f %10.3f %12s %10s %20llu %9s%s\n", r.name.c_str(), depth, r.inspect,
              r.schedule, r.execute, r.total, npw, npw_max, static_cast<unsigned long long>(r.checksum), speed,
              r.same_results ? "" : "  RESULTS DIFFER");
  std::fflush(stdout);
}

}  // namespace

Suite run_suite(const std::vector<Variant>& variants, const std::vector<int>& sweep, int depth, Device device,
                int repeat, const RunFn& run, const PipelineSetting& pipeline) {
  Suite suite;
  suite.repeat = repeat;
  std::vector<std::uint64_t> reference;
  // The table is printed as the variants finish (print_suite adds the summary): a row waits only
  // for the baseline of its speedup column (mask-lockstep, when it is among the variants).
  const bool has_baseline = std::any_of(variants.begin(), variants.end(),
                                        [](const Variant& v) { return std::string(v.name) == "mask-lockstep"; });
  std::size_t printed = 0;
  print_header();
  suite.rows_printed = true;
  auto print_ready = [&] {
    const VariantRow* base = baseline(suite);
    if (has_baseline && !base) return;
    for (; printed < suite.rows.size(); ++printed) print_row(suite.rows[printed], base);
  };
  auto measure = [&](const Variant& var, int d) {
    TraversalOptions opt;
    opt.device = device;
    opt.executor = var.executor;
    opt.schedule = var.schedule;
    opt.depth = is_auto(var) ? 0 : d;
    opt.pipeline = pipeline.on && (uses_depth(var) || is_auto(var));
    opt.chunk = pipeline.chunk;
    opt.memory_budget = pipeline.memory_budget;
    opt.pipeline_inspector_first = pipeline.inspector_first;
    opt.pipeline_ramp = pipeline.ramp;
    // Untimed warm-up, which also measures nodes per warp with the emulator on its schedule.
    // Auto warms up twice: a shape's first call runs the prior, its second the trial (whose pick
    // and cost the row reports); the emulator then counts the pick's nodes.
    opt.count_nodes = is_lockstep(var.executor);
    if (is_auto(var)) run(opt);
    const Measured first = run(opt);
    opt.count_nodes = false;
    VariantRow row;
    row.name = var.name;
    const TraversalStats& ran = first.stats;
    // Auto's trial call ran under the prior: the pick is what the next call runs.
    Measured picked, counted;
    if (is_auto(var)) {
      picked = run(opt);
      row.auto_pick = true;
      row.pick_schedule = to_string(picked.stats.schedule_kind);
      row.pick_executor = to_string(picked.stats.executor_kind);
      row.auto_trial = ran.auto_trial_ms;
      row.auto_trial_call = ran.wall_ms - ran.auto_trial_ms;
      if (is_lockstep(picked.stats.executor_kind)) {
        opt.count_nodes = true;
        counted = run(opt);
        opt.count_nodes = false;
      }
    }
    const TraversalStats& pick = is_auto(var) ? picked.stats : ran;
    const TraversalStats& nodes = counted.stats.warp_nodes.empty() ? ran : counted.stats;
    const auto& wn = nodes.warp_nodes;
    row.nodes_per_warp = nodes.nodes_per_warp();
    if (!wn.empty()) row.nodes_per_warp_max = *std::max_element(wn.begin(), wn.end());
    row.depth = uses_depth(var) || (is_auto(var) && uses_top_tree(pick.schedule_kind)) ? pick.depth : 0;
    row.auto_depth = uses_depth(var) && d == kAutoDepth;
    row.depth_trial = ran.depth_trial_ms;
    row.checksum = first.checksum;
    if (reference.empty()) reference = first.result;
    row.same_results = first.result == reference;
    opt.measure_overlap = true;
    std::vector<double> ins, sch, exe, tot, only;
    for (int r = 0; r < repeat; ++r) {
      const Measured m = run(opt);
      row.same_results = row.same_results && m.result == reference;
      ins.push_back(m.stats.times.inspect_ms);
      sch.push_back(m.stats.times.schedule_ms);
      exe.push_back(m.stats.times.execute_ms);
      const PipelineStats& p = m.stats.pipeline;
      tot.push_back(p.chunks ? p.wall_ms : m.stats.times.total_ms());
      only.push_back(p.execute_only_ms);
      row.chunks = p.chunks;
      row.chunk = p.chunk;
    }
    row.inspect = median(ins);
    row.schedule = median(sch);
    row.execute = median(exe);
    row.total = median(tot);
    row.execute_only = median(only);
    suite.all_same = suite.all_same && row.same_results;
    suite.rows.push_back(row);
    print_ready();
  };
  std::vector<int> depths = sweep;
  if (depths.empty()) depths.push_back(depth);
  for (const Variant& var : variants)
    if (!uses_depth(var)) measure(var, depths.front());
  for (int d : depths)
    for (const Variant& var : variants)
      if (uses_depth(var)) measure(var, d);
  return suite;
}

void print_suite(const Suite& s) {
  const VariantRow* base = baseline(s);
  if (!s.rows_printed) {
    print_header();
    for (const VariantRow& r : s.rows) print_row(r, base);
  }
  std::printf("\nmedian of %d runs; every variant's results %s\n", s.repeat, s.all_same ? "identical" : "DIFFER");
  for (const VariantRow& r : s.rows)
    if (r.auto_pick)
      std::printf("%s: the runtime picked schedule %s, executor %s%s; its trial took %.1f ms once, %.2fx the call "
                  "it followed (%.1f ms wall; the timed runs reuse the pick)\n",
                  r.name.c_str(), r.pick_schedule.c_str(), r.pick_executor.c_str(),
                  r.depth ? (", depth " + std::to_string(r.depth)).c_str() : "", r.auto_trial,
                  r.auto_trial_call > 0 ? r.auto_trial / r.auto_trial_call : 0.0, r.auto_trial_call);
  for (const VariantRow& r : s.rows)
    if (r.auto_depth)
      std::printf("%s: depth auto chose %d; its trial took %.1f ms once (the timed runs reuse the choice)\n",
                  r.name.c_str(), r.depth, r.depth_trial);
  bool any = false;
  for (const VariantRow& r : s.rows) any = any || r.chunks > 0;
  if (!any) {
    std::fflush(stdout);
    return;
  }
  std::printf("\npipelined (inspect, schedule, execute above are busy times summed over chunks; total is the wall time)\n");
  std::printf("%-22s %5s %16s %10s %14s %12s\n", "variant", "depth", "chunks (largest)", "wall ms", "execute-only ms",
              "efficiency");
  for (const VariantRow& r : s.rows) {
    if (!r.chunks) continue;
    char cs[48];
    std::snprintf(cs, sizeof cs, "%lld (%lld)", static_cast<long long>(r.chunks), static_cast<long long>(r.chunk));
    std::printf("%-22s %5d %16s %10.3f %14.3f %12.3f\n", r.name.c_str(), r.depth, cs, r.total, r.execute_only,
                r.total > 0 ? r.execute_only / r.total : 0.0);
  }
  std::printf("efficiency = execute-only time of the same schedule / pipelined wall time\n");
  std::fflush(stdout);
}

int suite_depth(const Suite& s, int fallback) {
  for (const VariantRow& r : s.rows)
    if (r.depth) return r.depth;
  return fallback;
}

void print_device_line(Device used, Device requested) {
  if (used == Device::Gpu)
    std::printf("device: gpu, %s\n", gpu_description().c_str());
  else
    std::printf("device: cpu (%s; running the CPU executors: TBB for independent threads, the warp "
                "emulator for lockstep)\n",
                requested == Device::Cpu ? "requested" : gpu_description().c_str());
}

nlohmann::json suite_json(const Suite& s) {
  const VariantRow* base = baseline(s);
  nlohmann::json out = nlohmann::json::array();
  for (const VariantRow& r : s.rows) {
    nlohmann::json v{{"name", r.name},       {"inspect_ms", r.inspect}, {"schedule_ms", r.schedule},
                     {"execute_ms", r.execute}, {"total_ms", r.total},   {"checksum", r.checksum}};
    if (r.depth) v["depth"] = r.depth;
    if (r.auto_depth) {
      v["depth_auto"] = true;
      v["depth_trial_ms"] = r.depth_trial;
    }
    if (r.auto_pick) {
      v["auto_schedule"] = r.pick_schedule;
      v["auto_executor"] = r.pick_executor;
      v["auto_trial_ms"] = r.auto_trial;
      v["auto_trial_call_ms"] = r.auto_trial_call;
    }
    v["nodes_per_warp"] = r.nodes_per_warp > 0 ? nlohmann::json(r.nodes_per_warp) : nlohmann::json(nullptr);
    v["nodes_per_warp_max"] = r.nodes_per_warp > 0 ? nlohmann::json(r.nodes_per_warp_max) : nlohmann::json(nullptr);
    if (base && r.total > 0) v["speedup_vs_mask_lockstep"] = base->total / r.total;
    if (r.chunks) {
      v["pipeline"] = {{"chunks", r.chunks},
                       {"chunk", r.chunk},
                       {"wall_ms", r.total},
                       {"execute_only_ms", r.execute_only},
                       {"overlap_efficiency", r.total > 0 ? r.execute_only / r.total : 0.0}};
    }
    out.push_back(v);
  }
  return out;
}

void write_json(const std::string& path, const nlohmann::json& j, int indent) {
  std::ofstream out(path);
  if (!out) throw Error("--json " + path + ": cannot open for writing");
  out << j.dump(indent) << "\n";
}

void add_input_options(CLI::App& app, InputConfig& c, const InputHelp& help) {
  app.add_option("--points", c.points, help.points);
  app.add_option("--generate", c.generate, help.generate)->capture_default_str();
  app.add_option("--queries", c.queries, help.queries);
  app.add_option("--columns", c.columns, "columns to use, e.g. 0-6 or 0,2,4 (default: all)");
  app.add_option("--seed", c.seed, help.seed)->capture_default_str();
  app.add_option_function<std::uint64_t>(
      "--shuffle", [&c](std::uint64_t s) { c.shuffle_set = true; c.shuffle_seed = s; }, help.shuffle);
  app.add_flag("--skip-incomplete", c.skip_incomplete,
               "drop rows of --points / --queries files with an empty field in the chosen columns");
}

void report_skipped(const std::string& path, const PointSet& ps) {
  if (ps.skipped_incomplete > 0)
    std::printf("%s: %lld incomplete rows skipped\n", path.c_str(), static_cast<long long>(ps.skipped_incomplete));
}

void add_suite_options(CLI::App& app, SuiteConfig& c, const SuiteHelp& help) {
  app.add_option_function<std::string>("--depth", [&c](const std::string& d) { c.depth = parse_depth(d); }, help.depth);
  app.add_option("--depths", c.depths, "a depth sweep, e.g. 4-14 or 4-12,auto: the hybrid variants run at each depth");
  app.add_option("--leaf-size", c.leaf_size, help.leaf_size)->capture_default_str();
  app.add_option("--device", c.device, "auto, cpu or gpu")->capture_default_str();
  app.add_option("--variants", c.variants, help.variants)->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs per variant (the median is reported)")->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
  add_pipeline_options(app, c.pipeline);
}

Inputs load_inputs(const InputConfig& c, bool normalise, bool split) {
  Inputs in;
  in.source = c.points.empty() ? c.generate : c.points;
  ReadOptions ro;
  ro.skip_incomplete = c.skip_incomplete;
  PointSet all = c.points.empty() ? generate(c.generate, c.seed) : read_csv(c.points, c.columns, ro);
  report_skipped(c.points, all);
  const Ranges ranges = ranges_of(all);
  if (normalise) normalize(all, ranges);
  if (!c.queries.empty()) {
    // A generator spec instead of a file: independent queries (seed + 1), e.g. 4,000,000
    // against a 400,000-point tree.
    const bool generated = c.queries.rfind("uniform:", 0) == 0 || c.queries.rfind("plummer:", 0) == 0;
    in.queries = generated ? generate(c.queries, c.seed + 1) : read_csv(c.queries, c.columns, ro);
    report_skipped(c.queries, in.queries);
    if (in.queries.dims != all.dims)
      throw Error("--queries " + c.queries + " has " + std::to_string(in.queries.dims) + " columns, the points " +
                  std::to_string(all.dims));
    if (normalise) normalize(in.queries, ranges);
    in.points = std::move(all);
  } else if (split) {
    // The paper's setup for the nearest-neighbour workloads: a seeded random half builds the
    // tree, the other half queries it.
    std::mt19937_64 rng(c.seed ^ 0x9e3779b97f4a7c15ull);
    in.points.dims = in.queries.dims = all.dims;
    in.points.names = in.queries.names = all.names;
    for (index_t i = 0; i < all.size(); ++i) {
      PointSet& half = (rng() & 1) ? in.queries : in.points;
      half.coords.insert(half.coords.end(), all.data() + i * all.dims, all.data() + (i + 1) * all.dims);
    }
    if (in.points.size() == 0 || in.queries.size() == 0)
      throw Error(in.source + ": " + std::to_string(all.size()) +
                  " points are too few to split into a tree half and a query half");
  } else {
    in.queries = all;
    in.points = std::move(all);
  }
  if (c.shuffle_set) shuffle(in.queries, c.shuffle_seed);
  return in;
}

float parse_radius(const std::string& spec, const KdTree& tree, const PointSet& queries, std::uint64_t seed) {
  if (spec.rfind("auto:", 0) == 0) {
    const std::string k = spec.substr(5);
    char* end = nullptr;
    const double target = std::strtod(k.c_str(), &end);
    if (k.empty() || *end != '\0' || !(target > 0))
      throw Error("--radius " + spec + ": auto:K needs a positive mean count K");
    return estimate_radius(tree, queries.data(), queries.size(), target, seed);
  }
  char* end = nullptr;
  const float radius = std::strtof(spec.c_str(), &end);
  if (spec.empty() || *end != '\0') throw Error("--radius '" + spec + "' is neither a number nor auto:K");
  return radius;
}

}  // namespace bench
}  // namespace canopy
