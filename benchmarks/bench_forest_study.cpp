// canopy-bench forest-study: the adaptive layout's strategies, the performance model, the tuner,
// and the gain of each technique alone (Tahoe's Figure 8), on one model and one data file.
// Times are GPU time with the rows already on the device (CUDA events around the kernels; with
// row scheduling, the inspector and the sort are added in); every variant's predictions are
// compared bit for bit with the first one (csr direct).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/checks.hpp"
#include "runtime/forest_predictor.hpp"
#include "io/forest_data.hpp"

namespace canopy {
namespace bench {
namespace {

struct Timed {
  double ms = 0;           // kernel (+ row scheduling), median
  double schedule_ms = 0;  // of which row scheduling
  ForestKernel kernel = ForestKernel::Direct;
  ForestSchedule schedule;
  bool identical = true;
};

Timed time_variant(ForestPredictor& p, const std::vector<float>& rows, index_t n, int width, const ForestRunOptions& run,
                   int repeat, const std::vector<float>& reference) {
  std::vector<float> out(static_cast<std::size_t>(n) * width);
  p.predict(rows.data(), n, out.data(), run);  // warm-up (and the model's parameters, once)
  Timed t;
  t.identical = reference.empty() || std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)) == 0;
  std::vector<double> total, sched;
  for (int r = 0; r < repeat; ++r) {
    const ForestTimes ft = p.predict(rows.data(), n, out.data(), run);
    total.push_back(ft.kernel_ms + ft.schedule_ms);
    sched.push_back(ft.schedule_ms);
    t.kernel = ft.kernel;
    t.schedule = ft.schedule;
  }
  t.ms = median(total);
  t.schedule_ms = median(sched);
  return t;
}

// A batch of n rows: the file's rows, then (past its end) a smoothed bootstrap of them: each
// repeated copy moves every feature by jitter x its standard deviation x a standard normal
// draw (deterministic), so a batch larger than the file holds distinct rows, as real batches
// do, instead of exact copies that row scheduling would group for free.
std::vector<float> study_batch(const ForestData& d, index_t n, double jitter) {
  const int F = d.n_features;
  std::vector<double> mean(static_cast<std::size_t>(F), 0), sq(static_cast<std::size_t>(F), 0), cnt(static_cast<std::size_t>(F), 0);
  for (index_t i = 0; i < d.n_rows; ++i)
    for (int f = 0; f < F; ++f) {
      const double x = d.row(i)[f];
      if (x != x) continue;
      mean[static_cast<std::size_t>(f)] += x;
      sq[static_cast<std::size_t>(f)] += x * x;
      cnt[static_cast<std::size_t>(f)] += 1;
    }
  std::vector<double> sd(static_cast<std::size_t>(F), 0);
  for (int f = 0; f < F; ++f) {
    const std::size_t k = static_cast<std::size_t>(f);
    if (cnt[k] < 2) continue;
    const double m = mean[k] / cnt[k];
    sd[k] = std::sqrt(std::max(0.0, sq[k] / cnt[k] - m * m));
  }
  std::vector<float> rows(static_cast<std::size_t>(n) * F);
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&state]() {  // splitmix64 -> (0, 1)
    state += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) / 9007199254740992.0;
  };
  for (index_t i = 0; i < n; ++i) {
    const float* src = d.row(i % d.n_rows);
    float* dst = &rows[static_cast<std::size_t>(i * F)];
    for (int f = 0; f < F; ++f) {
      dst[f] = src[f];
      if (i < d.n_rows || jitter <= 0 || src[f] != src[f]) continue;
      const double z = std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
      dst[f] = static_cast<float>(src[f] + jitter * sd[static_cast<std::size_t>(f)] * z);
    }
  }
  return rows;
}

std::string fmt_ns(double ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g ns/row", ns);
  return b;
}

double rows_per_s(index_t n, double ms) { return static_cast<double>(n) / (ms / 1000.0); }

// Ranks (1 = fastest) of the values, for the model's order against the measured one.
std::string order_of(const std::vector<std::pair<std::string, double>>& v) {
  std::vector<std::pair<std::string, double>> s = v;
  std::stable_sort(s.begin(), s.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  std::string out;
  for (const auto& e : s) {
    if (!std::isfinite(e.second)) continue;
    if (!out.empty()) out += " < ";
    out += e.first;
  }
  return out;
}

}  // namespace

void add_forest_study_options(CLI::App& app, ForestStudyConfig& c) {
  app.add_option("--model", c.model, "XGBoost JSON or Canopy forest JSON, plain or .gz")->required();
  app.add_option("--data", c.data, "CSV or CSV.gz with a header; every column but the label is a feature")->required();
  app.add_option("--label", c.label, "the label column, left out of the features");
  app.add_option("--batch", c.batch, "rows per batch, a list")->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs per variant (median)")->capture_default_str();
  app.add_option("--row-depth", c.row_depth, "row scheduling: top-tree depth of the inspector")->capture_default_str();
  app.add_option("--output", c.output, "margin, prob or class")->capture_default_str();
  app.add_option("--hardware-cache", c.hardware_cache, "the performance model's cache file (default: ~/.cache/canopy)");
  app.add_flag("--tune", c.tune, "print every schedule the tuner tried");
  app.add_option("--jitter", c.jitter,
                 "rows past the file's end: a smoothed bootstrap, each feature moved by this many standard deviations "
                 "x N(0,1) (0: exact repeats)")
      ->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
}

int run_forest_study(const ForestStudyConfig& c) {
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be at least 1");
  const std::vector<index_t> batches = parse_forest_batches(c.batch);
  const ForestOutput output = parse_forest_output(c.output);
  const Forest forest = Forest::load(c.model);
  const ForestData data = read_forest_csv(c.data, c.label);
  check_forest_data(data, c.data, forest);
  const int width = forest.output_width(output);
  if (resolve_device(Device::Auto) != Device::Gpu) throw Error("forest-study needs a GPU");
  std::printf("canopy-bench forest-study: %s\n  %s\ndata: %s, %lld rows (larger batches: smoothed bootstrap, jitter %.3g)\ngpu: %s\n",
              c.model.c_str(), forest.describe().c_str(), c.data.c_str(), static_cast<long long>(data.n_rows), c.jitter,
              gpu_description().c_str());

  // The predictors: csr (the baseline), and the adaptive layout with each rearrangement on or off.
  auto make = [&](ForestLayout layout, bool nodes, bool trees) {
    ForestConfig cfg;
    cfg.layout = layout;
    cfg.device = Device::Gpu;
    cfg.adaptive.node_rearrangement = nodes;
    cfg.adaptive.tree_rearrangement = trees;
    return std::make_unique<ForestPredictor>(forest, cfg);
  };
  auto csr = make(ForestLayout::Csr, false, false);
  auto plain = make(ForestLayout::Adaptive, false, false);
  auto nodes_only = make(ForestLayout::Adaptive, true, false);
  auto trees_only = make(ForestLayout::Adaptive, false, true);
  auto full = make(ForestLayout::Adaptive, true, true);
  const AdaptiveReport& rep = full->adaptive_report();
  std::printf("adaptive layout: %s; %.2f MiB (csr %.2f MiB)\n", rep.details.c_str(),
              static_cast<double>(full->footprint_bytes()) / (1 << 20), static_cast<double>(csr->footprint_bytes()) / (1 << 20));
  std::printf("tree rearrangement (SimHash + LSH, T_nodes 4, 128 bits, M 64): %.1f ms; per-thread sums of expected tree "
              "depths, trees dealt round-robin to %d threads: CV %.4f in model order, %.4f rearranged; expected nodes per "
              "tree and row %.2f\n",
              rep.similarity_ms, rep.threads, rep.cv_model_order, rep.cv_rearranged, rep.expected_visits);

  nlohmann::json j;
  j["model"] = c.model;
  j["model_description"] = forest.describe();
  j["jitter"] = c.jitter;
  j["gpu"] = gpu_description();
  j["adaptive"] = {{"details", rep.details},
                   {"similarity_ms", rep.similarity_ms},
                   {"cv_model_order", rep.cv_model_order},
                   {"cv_rearranged", rep.cv_rearranged},
                   {"footprint_bytes", full->footprint_bytes()},
                   {"csr_footprint_bytes", csr->footprint_bytes()}};
  j["batches"] = nlohmann::json::array();
  bool all_identical = true;
  const std::vector<ForestKernel> strategies = {ForestKernel::Direct, ForestKernel::SharedData, ForestKernel::SharedForest,
                                                ForestKernel::SplitSharedForest};
  for (index_t n : batches) {
    const std::vector<float> rows = study_batch(data, n, c.jitter);
    ForestRunOptions base;
    base.output = output;
    base.hardware_cache = c.hardware_cache;
    nlohmann::json jb;
    jb["batch"] = n;
    std::printf("\n== batch %lld ==\n", static_cast<long long>(n));

    std::vector<float> reference(static_cast<std::size_t>(n) * width);
    {
      ForestRunOptions r = base;
      r.kernel = ForestKernel::Direct;
      csr->predict(rows.data(), n, reference.data(), r);
    }
    auto run = [&](ForestPredictor& p, ForestKernel k, int depth, const ForestSchedule& s = {}) {
      ForestRunOptions r = base;
      r.kernel = k;
      r.row_schedule_depth = depth;
      r.schedule = s;
      const Timed t = time_variant(p, rows, n, width, r, c.repeat, reference);
      all_identical = all_identical && t.identical;
      return t;
    };
    auto line = [&](const std::string& name, const Timed& t, const std::string& note = "") {
      std::printf("  %-34s %10.4f ms %14.0f rows/s  %-5s %s%s\n", name.c_str(), t.ms, rows_per_s(n, t.ms),
                  t.identical ? "same" : "DIFF", t.schedule.describe().c_str(), note.empty() ? "" : ("  " + note).c_str());
      return nlohmann::json{{"variant", name},     {"ms", t.ms},
                            {"rows_per_s", rows_per_s(n, t.ms)}, {"schedule_ms", t.schedule_ms},
                            {"kernel", to_string(t.kernel)},     {"schedule", t.schedule.describe()},
                            {"identical", t.identical}};
    };

    // 1. Strategies (every technique of the format on), the model, auto and the tuner.
    std::printf("strategies (adaptive layout, node + tree rearrangement):\n");
    nlohmann::json js = nlohmann::json::array();
    js.push_back(line("csr direct", run(*csr, ForestKernel::Direct, 0)));
    const std::vector<ForestTrial> est = full->model_estimates(rows.data(), n, base);
    std::vector<std::pair<std::string, double>> model_rank, paper_rank, measured_rank;
    double best_strategy = INFINITY;
    std::string best_name;
    for (ForestKernel k : strategies) {
      double model_ns = INFINITY, paper_ns = INFINITY;
      for (const ForestTrial& e : est)
        if (e.kernel == k) {
          model_ns = e.model_ns_per_row;
          paper_ns = e.paper_ns_per_row;
        }
      model_rank.emplace_back(to_string(k), model_ns);
      paper_rank.emplace_back(to_string(k), paper_ns);
      try {
        const Timed t = run(*full, k, 0);
        js.push_back(line(to_string(k), t, "model " + (std::isfinite(model_ns) ? fmt_ns(model_ns) : std::string("infeasible")) +
                                                  ", paper " + (std::isfinite(paper_ns) ? fmt_ns(paper_ns) : std::string("infeasible"))));
        js.back()["model_ns_per_row"] = std::isfinite(model_ns) ? model_ns : -1.0;
        js.back()["paper_ns_per_row"] = std::isfinite(paper_ns) ? paper_ns : -1.0;
        measured_rank.emplace_back(to_string(k), t.ms);
        if (t.ms < best_strategy) {
          best_strategy = t.ms;
          best_name = to_string(k);
        }
      } catch (const Error& e) {
        std::printf("  %-34s skipped: %s\n", to_string(k), e.what());
        measured_rank.emplace_back(to_string(k), INFINITY);
      }
    }
    const Timed autot = run(*full, ForestKernel::Auto, 0);
    js.push_back(line("auto", autot, std::string("chose ") + to_string(autot.kernel)));
    std::vector<ForestTrial> trials = full->tune(rows.data(), n, base, std::max(3, c.repeat / 2));
    if (c.tune) {
      std::printf("  tuner (%zu schedules, kernel ms, fastest first):\n", trials.size());
      for (const ForestTrial& t : trials)
        std::printf("    %-20s %-60s %10.4f ms\n", to_string(t.kernel), t.schedule.describe().c_str(), t.kernel_ms);
    }
    const Timed tuned = run(*full, trials.front().kernel, 0, trials.front().schedule);
    js.push_back(line("tuned", tuned, std::string("best of ") + std::to_string(trials.size()) + " schedules: " + to_string(tuned.kernel)));
    const double auto_vs_best = autot.ms / best_strategy;
    std::printf("  model order:    %s\n  paper's order:  %s\n  measured order: %s\n  auto / best strategy (%s) = %.3f%s; auto vs csr direct: %.2fx\n",
                order_of(model_rank).c_str(), order_of(paper_rank).c_str(), order_of(measured_rank).c_str(), best_name.c_str(), auto_vs_best,
                auto_vs_best <= 1.10 ? " (within 10%)" : " (NOT within 10%)", js[0]["ms"].get<double>() / autot.ms);
    jb["strategies"] = js;
    jb["model_order"] = order_of(model_rank);
    jb["paper_order"] = order_of(paper_rank);
    jb["measured_order"] = order_of(measured_rank);
    jb["auto_over_best"] = auto_vs_best;
    jb["best_strategy"] = best_name;
    jb["auto_speedup_over_csr_direct"] = js[0]["ms"].get<double>() / autot.ms;

    // 2. Each technique alone against FIL's strategy on the plain format (Figure 8).
    std::printf("techniques alone (baseline: shared data on the format without rearrangement):\n");
    nlohmann::json jt = nlohmann::json::array();
    const Timed t_base = run(*plain, ForestKernel::SharedData, 0);
    auto gain = [&](const std::string& name, const Timed& t) {
      jt.push_back(line(name, t, "gain " + std::to_string(t_base.ms / t.ms).substr(0, 5) + "x"));
      jt.back()["gain"] = t_base.ms / t.ms;
    };
    gain("baseline", t_base);
    gain("node rearrangement", run(*nodes_only, ForestKernel::SharedData, 0));
    gain("tree rearrangement", run(*trees_only, ForestKernel::SharedData, 0));
    gain("strategy choice (auto)", run(*plain, ForestKernel::Auto, 0));
    gain("row scheduling", run(*plain, ForestKernel::SharedData, c.row_depth));
    gain("all (auto, both rearrangements, rows)", run(*full, ForestKernel::Auto, c.row_depth));
    jb["techniques"] = jt;

    // 3. Row scheduling per strategy: time and the warp emulator's nodes per warp.
    const std::vector<index_t> order = full->schedule_rows(rows.data(), n, c.row_depth);
    const double npw_plain = full->nodes_per_warp(rows.data(), n, nullptr);
    const double npw_sched = full->nodes_per_warp(rows.data(), n, order.data());
    std::printf("row scheduling (depth %d): nodes per warp %.0f -> %.0f (%.2fx fewer)\n", c.row_depth, npw_plain, npw_sched,
                npw_plain / npw_sched);
    nlohmann::json jr = nlohmann::json::array();
    for (ForestKernel k : strategies) {
      try {
        const Timed off = run(*full, k, 0);
        const Timed on = run(*full, k, c.row_depth);
        std::printf("  %-20s %10.4f ms -> %10.4f ms (%.4f of it scheduling): %.2fx\n", to_string(k), off.ms, on.ms,
                    on.schedule_ms, off.ms / on.ms);
        jr.push_back({{"strategy", to_string(k)}, {"ms_without", off.ms}, {"ms_with", on.ms}, {"schedule_ms", on.schedule_ms},
                      {"identical", on.identical && off.identical}});
      } catch (const Error& e) {
        std::printf("  %-20s skipped: %s\n", to_string(k), e.what());
      }
    }
    jb["row_scheduling"] = {{"depth", c.row_depth}, {"nodes_per_warp_without", npw_plain},
                            {"nodes_per_warp_with", npw_sched}, {"per_strategy", jr}};
    j["batches"].push_back(jb);
  }
  std::printf("\n%s\n", all_identical ? "every variant's predictions are bit-identical to csr direct's"
                                      : "SOME VARIANTS DIFFER from csr direct");
  if (!c.json.empty()) {
    std::ofstream f(c.json);
    if (!f) throw Error("--json " + c.json + ": cannot open for writing");
    f << j.dump(2) << "\n";
  }
  return all_identical ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
