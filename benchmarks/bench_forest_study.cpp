// canopy-bench forest-study: the adaptive layout's strategies, the performance model, the tuner,
// and the gain of each technique alone (Tahoe's Figure 8), on one model and one data file.
// Times are GPU time with the rows already on the device (CUDA events around the kernels; with
// row scheduling, the inspector and the sort are added in); every variant's predictions are
// compared bit for bit with the first one (csr direct). The `default` row is what a caller who
// sets nothing gets: ForestPredictor(forest) and ForestRunOptions{} (only the output set), in
// steady state. Auto variants (default, auto and the techniques' auto) tune a size class online
// on their own calls, so each is first called on its batch until a call runs settled.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_forest.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace bench {
namespace {

// Calls an Auto variant gets to settle its size class before it is timed anyway.
constexpr int kSettleCap = 3000;

struct Timed {
  double ms = 0;           // kernel (+ row scheduling), median
  double schedule_ms = 0;  // of which row scheduling
  double call_ms = 0;      // the whole predict() call (rows on the host), median
  ForestLayout layout = ForestLayout::Csr;
  ForestKernel kernel = ForestKernel::Direct;
  ForestSchedule schedule;
  ForestTuning tuning = ForestTuning::Fixed;  // of the timed calls (the last one)
  bool identical = true;
  // Auto: the calls before the timing, until one ran settled (neither a prior nor a trial).
  bool is_auto = false;
  int settle_calls = 0;       // calls that ran a prior or timed a trial first
  bool settled = true;        // false: still not settled after kSettleCap calls
  double first_ms = 0;        // the first call's whole wall time
  ForestTuning first_tuning = ForestTuning::Fixed;
  double settle_tuning_ms = 0;  // the trials' GPU time over those calls
  double build_ms = -1;       // the predictor's construction (the default row's own predictor)
};

bool same_bits(const std::vector<float>& out, const std::vector<float>& reference) {
  return reference.empty() || std::memcmp(out.data(), reference.data(), out.size() * sizeof(float)) == 0;
}

Timed time_variant(ForestPredictor& p, const std::vector<float>& rows, index_t n, int width, const ForestRunOptions& run,
                   int repeat, const std::vector<float>& reference) {
  std::vector<float> out(static_cast<std::size_t>(n) * width);
  Timed t;
  if (run.kernel == ForestKernel::Auto) {
    // Online tuning: a class's first call runs a prior, later ones time one other schedule each
    // (Refining) until it settles (Tuned). Every one of these calls is checked too.
    t.is_auto = true;
    t.settled = false;
    for (int i = 0; i < kSettleCap && !t.settled; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const ForestTimes ft = p.predict(rows.data(), n, run, out.data());
      const double ms = ms_since(t0);
      if (i == 0) {
        t.first_ms = ms;
        t.first_tuning = ft.tuning;
      }
      t.identical = t.identical && same_bits(out, reference);
      t.settle_tuning_ms += ft.tuning_ms;
      t.settled = ft.tuning != ForestTuning::Prior && ft.tuning != ForestTuning::Refining;
      t.settle_calls = t.settled ? i : i + 1;
    }
  }
  p.predict(rows.data(), n, run, out.data());  // warm-up (and the model's parameters, once)
  t.identical = t.identical && same_bits(out, reference);
  std::vector<double> total, sched, call;
  // A batch of up to 10,000 rows runs in microseconds, and single runs vary by tens of percent
  // (clocks, launch jitter): at least 100 runs, so that the median is steady from run to run.
  const int runs = n <= 10000 ? std::max(repeat, 100) : repeat;
  for (int r = 0; r < runs; ++r) {
    const ForestTimes ft = p.predict(rows.data(), n, run, out.data());
    total.push_back(ft.kernel_ms + ft.schedule_ms);
    sched.push_back(ft.schedule_ms);
    call.push_back(ft.wall_ms);
    t.layout = ft.layout;
    t.kernel = ft.kernel;
    t.schedule = ft.schedule;
    t.tuning = ft.tuning;
  }
  t.identical = t.identical && same_bits(out, reference);
  t.ms = median(total);
  t.schedule_ms = median(sched);
  t.call_ms = median(call);
  return t;
}

// "settled after 12 calls (online tuning; first call 3.2 ms, prior; trials 1.1 ms)" for an Auto
// variant, "" for the others.
std::string settle_note(const Timed& t) {
  if (!t.is_auto) return "";
  char trials[48] = "";
  if (t.settle_tuning_ms > 0) std::snprintf(trials, sizeof trials, "; trials %.3f ms", t.settle_tuning_ms);
  char b[200];
  std::snprintf(b, sizeof b, "%s %d call%s (online tuning; first call %.3f ms, %s%s)",
                t.settled ? "settled after" : "NOT settled after", t.settle_calls, t.settle_calls == 1 ? "" : "s", t.first_ms,
                to_string(t.first_tuning), trials);
  return b;
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

// The predictors: csr (the baseline), and the adaptive layout with each rearrangement on or off.
struct StudyPredictors {
  std::unique_ptr<ForestPredictor> csr, plain, nodes_only, trees_only, full;
};

StudyPredictors make_predictors(const Forest& forest) {
  auto make = [&](ForestLayout layout, bool nodes, bool trees) {
    ForestConfig cfg;
    cfg.layout = layout;
    cfg.device = Device::Gpu;
    cfg.adaptive.node_rearrangement = nodes;
    cfg.adaptive.tree_rearrangement = trees;
    return std::make_unique<ForestPredictor>(forest, cfg);
  };
  StudyPredictors p;
  p.csr = make(ForestLayout::Csr, false, false);
  p.plain = make(ForestLayout::Adaptive, false, false);
  p.nodes_only = make(ForestLayout::Adaptive, true, false);
  p.trees_only = make(ForestLayout::Adaptive, false, true);
  p.full = make(ForestLayout::Adaptive, true, true);
  return p;
}

const std::vector<ForestKernel> kStrategies = {ForestKernel::Direct, ForestKernel::SharedData, ForestKernel::SharedForest,
                                               ForestKernel::SplitSharedForest};

// One batch of the study: its rows, csr direct's predictions that every variant is held to,
// and the three sections, each a step of its own.
class StudyBatch {
 public:
  StudyBatch(const ForestStudyConfig& c, const ForestWorkload& w, const StudyPredictors& p, index_t n)
      : c_(c), w_(w), p_(p), n_(n), rows_(forest_batch(w.data, n, c.jitter)) {
    base_.output = w.output;
    base_.hardware_cache = c.hardware_cache;
    base_.graph = c.graph == "on";
    reference_.resize(static_cast<std::size_t>(n) * w.width);
    ForestRunOptions r = base_;
    r.kernel = ForestKernel::Direct;
    p.csr->predict(rows_.data(), n, r, reference_.data());
  }

  // Every variant's predictions equalled csr direct's.
  bool identical() const { return identical_; }

  // 1. Strategies (every technique of the format on), the model, auto and the tuner.
  void strategies(nlohmann::json& jb) {
    std::printf("strategies (adaptive layout, node + tree rearrangement):\n");
    nlohmann::json js = nlohmann::json::array();
    js.push_back(line("csr direct", run(*p_.csr, ForestKernel::Direct, 0)));
    const Timed deft = default_call();
    js.push_back(line("default", deft,
                      std::string(to_string(deft.layout)) + ", " + to_string(deft.kernel) + ", " + to_string(deft.tuning) + "; " +
                          settle_note(deft) + "; built in " + std::to_string(static_cast<long long>(deft.build_ms)) + " ms"));
    const std::vector<ForestTrial> est = p_.full->model_estimates(rows_.data(), n_, base_);
    std::vector<std::pair<std::string, double>> model_rank, paper_rank, measured_rank;
    double best_strategy = INFINITY;
    std::string best_name;
    for (ForestKernel k : kStrategies) {
      double model_ns = INFINITY, paper_ns = INFINITY;
      for (const ForestTrial& e : est)
        if (e.kernel == k) {
          model_ns = e.model_ns_per_row;
          paper_ns = e.paper_ns_per_row;
        }
      model_rank.emplace_back(to_string(k), model_ns);
      paper_rank.emplace_back(to_string(k), paper_ns);
      try {
        const Timed t = run(*p_.full, k, 0);
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
    const Timed autot = run(*p_.full, ForestKernel::Auto, 0);
    js.push_back(line("auto", autot, std::string("chose ") + to_string(autot.kernel) + ", " + to_string(autot.tuning) + "; " +
                                         settle_note(autot)));
    std::vector<ForestTrial> trials = p_.full->tune(rows_.data(), n_, base_, std::max(3, c_.repeat / 2));
    if (c_.tune) {
      std::printf("  tuner (%zu schedules, kernel ms, fastest first):\n", trials.size());
      for (const ForestTrial& t : trials)
        std::printf("    %-20s %-60s %10.4f ms\n", to_string(t.kernel), t.schedule.describe().c_str(), t.kernel_ms);
    }
    const Timed tuned = run(*p_.full, trials.front().kernel, 0, trials.front().schedule);
    js.push_back(line("tuned", tuned, std::string("best of ") + std::to_string(trials.size()) + " schedules: " + to_string(tuned.kernel)));
    const double auto_vs_best = autot.ms / best_strategy;
    const double auto_vs_tuned = autot.ms / tuned.ms;
    std::printf("  model order:    %s\n  paper's order:  %s\n  measured order: %s\n  auto / best strategy (%s) = %.3f%s; auto / tuned = %.3f%s; auto vs csr direct: %.2fx\n",
                order_of(model_rank).c_str(), order_of(paper_rank).c_str(), order_of(measured_rank).c_str(), best_name.c_str(), auto_vs_best,
                auto_vs_best <= 1.10 ? " (within 10%)" : " (NOT within 10%)", auto_vs_tuned,
                auto_vs_tuned <= 1.10 ? " (within 10%)" : " (NOT within 10%)", js[0]["ms"].get<double>() / autot.ms);
    jb["strategies"] = js;
    jb["model_order"] = order_of(model_rank);
    jb["paper_order"] = order_of(paper_rank);
    jb["measured_order"] = order_of(measured_rank);
    jb["auto_over_best"] = auto_vs_best;
    jb["auto_over_tuned"] = auto_vs_tuned;
    jb["best_strategy"] = best_name;
    jb["auto_speedup_over_csr_direct"] = js[0]["ms"].get<double>() / autot.ms;
    const double default_vs_tuned = deft.ms / tuned.ms;
    std::printf("  default / tuned = %.3f%s; default / auto = %.3f; default vs csr direct: %.2fx\n", default_vs_tuned,
                default_vs_tuned <= 1.10 ? " (within 10%)" : " (NOT within 10%)", deft.ms / autot.ms,
                js[0]["ms"].get<double>() / deft.ms);
    jb["default_over_tuned"] = default_vs_tuned;
    jb["default_over_auto"] = deft.ms / autot.ms;
    jb["default_speedup_over_csr_direct"] = js[0]["ms"].get<double>() / deft.ms;
  }

  // 2. Each technique alone against FIL's strategy on the plain format (Figure 8).
  void techniques(nlohmann::json& jb) {
    std::printf("techniques alone (baseline: shared data on the format without rearrangement):\n");
    nlohmann::json jt = nlohmann::json::array();
    const Timed t_base = run(*p_.plain, ForestKernel::SharedData, 0);
    auto gain = [&](const std::string& name, const Timed& t) {
      jt.push_back(line(name, t, "gain " + std::to_string(t_base.ms / t.ms).substr(0, 5) + "x"));
      jt.back()["gain"] = t_base.ms / t.ms;
    };
    gain("baseline", t_base);
    gain("node rearrangement", run(*p_.nodes_only, ForestKernel::SharedData, 0));
    gain("tree rearrangement", run(*p_.trees_only, ForestKernel::SharedData, 0));
    gain("strategy choice (auto)", run(*p_.plain, ForestKernel::Auto, 0));
    gain("row scheduling", run(*p_.plain, ForestKernel::SharedData, c_.row_depth));
    gain("all (auto, both rearrangements, rows)", run(*p_.full, ForestKernel::Auto, c_.row_depth));
    jb["techniques"] = jt;
  }

  // 3. Row scheduling per strategy: time and the warp emulator's nodes per warp.
  void row_scheduling(nlohmann::json& jb) {
    ForestPredictor& full = *p_.full;
    const std::vector<index_t> order = full.schedule_rows(rows_.data(), n_, c_.row_depth);
    const double npw_plain = full.nodes_per_warp(rows_.data(), n_, nullptr);
    const double npw_sched = full.nodes_per_warp(rows_.data(), n_, order.data());
    std::printf("row scheduling (depth %d): nodes per warp %.0f -> %.0f (%.2fx fewer)\n", c_.row_depth, npw_plain, npw_sched,
                npw_plain / npw_sched);
    nlohmann::json jr = nlohmann::json::array();
    for (ForestKernel k : kStrategies) {
      try {
        const Timed off = run(full, k, 0);
        const Timed on = run(full, k, c_.row_depth);
        std::printf("  %-20s %10.4f ms -> %10.4f ms (%.4f of it scheduling): %.2fx\n", to_string(k), off.ms, on.ms,
                    on.schedule_ms, off.ms / on.ms);
        jr.push_back({{"strategy", to_string(k)}, {"ms_without", off.ms}, {"ms_with", on.ms}, {"schedule_ms", on.schedule_ms},
                      {"identical", on.identical && off.identical}});
      } catch (const Error& e) {
        std::printf("  %-20s skipped: %s\n", to_string(k), e.what());
      }
    }
    jb["row_scheduling"] = {{"depth", c_.row_depth}, {"nodes_per_warp_without", npw_plain},
                            {"nodes_per_warp_with", npw_sched}, {"per_strategy", jr}};
  }

 private:
  // What a caller who sets nothing gets: a fresh ForestPredictor(forest) (ForestConfig{}: the
  // layout, device and cache directory all defaults) called with ForestRunOptions{} but for the
  // output, settled on the batch and then timed like the other rows. The study's --graph and
  // --hardware-cache do not apply to it.
  Timed default_call() {
    const auto t0 = std::chrono::steady_clock::now();
    ForestPredictor p(w_.forest);
    const double build_ms = ms_since(t0);
    ForestRunOptions r;
    r.output = w_.output;
    Timed t = time_variant(p, rows_, n_, w_.width, r, c_.repeat, reference_);
    t.build_ms = build_ms;
    identical_ = identical_ && t.identical;
    return t;
  }

  Timed run(ForestPredictor& p, ForestKernel k, int depth, const ForestSchedule& s = {}) {
    ForestRunOptions r = base_;
    r.kernel = k;
    r.row_schedule_depth = depth;
    r.schedule = s;
    const Timed t = time_variant(p, rows_, n_, w_.width, r, c_.repeat, reference_);
    identical_ = identical_ && t.identical;
    return t;
  }

  nlohmann::json line(const std::string& name, const Timed& t, const std::string& note = "") const {
    std::printf("  %-34s %10.4f ms %14.0f rows/s  %-5s %s%s\n", name.c_str(), t.ms, rows_per_s(n_, t.ms),
                t.identical ? "same" : "DIFF", t.schedule.describe().c_str(), note.empty() ? "" : ("  " + note).c_str());
    nlohmann::json j{{"variant", name},
                     {"ms", t.ms},
                     {"rows_per_s", rows_per_s(n_, t.ms)},
                     {"schedule_ms", t.schedule_ms},
                     {"call_ms", t.call_ms},
                     {"layout", to_string(t.layout)},
                     {"kernel", to_string(t.kernel)},
                     {"schedule", t.schedule.describe()},
                     {"tuning", to_string(t.tuning)},
                     {"identical", t.identical}};
    if (t.is_auto) {
      j["warmup"] = "online";  // called on the batch until settled (not optimize())
      j["settle_calls"] = t.settle_calls;
      j["settled"] = t.settled;
      j["first_call_ms"] = t.first_ms;
      j["first_tuning"] = to_string(t.first_tuning);
      j["settle_tuning_ms"] = t.settle_tuning_ms;
    }
    if (t.build_ms >= 0) j["build_ms"] = t.build_ms;
    return j;
  }

  const ForestStudyConfig& c_;
  const ForestWorkload& w_;
  const StudyPredictors& p_;
  index_t n_;
  std::vector<float> rows_;
  ForestRunOptions base_;
  std::vector<float> reference_;
  bool identical_ = true;
};

}  // namespace

void add_forest_study_options(CLI::App& app, ForestStudyConfig& c) {
  add_forest_input_options(app, c);
  app.add_option("--hardware-cache", c.hardware_cache, "the performance model's cache file (default: ~/.cache/canopy)");
  app.add_flag("--tune", c.tune, "print every schedule the tuner tried");
  app.add_option("--jitter", c.jitter,
                 "rows past the file's end: a smoothed bootstrap, each feature moved by this many standard deviations "
                 "x N(0,1) (0: exact repeats)")
      ->capture_default_str();
}

int run_forest_study(const ForestStudyConfig& c) {
  const ForestWorkload w = load_forest_workload(c);
  if (resolve_device(Device::Auto) != Device::Gpu) throw Error("forest-study needs a GPU");
  std::printf("canopy-bench forest-study: %s\n  %s\ndata: %s, %lld rows (larger batches: smoothed bootstrap, jitter %.3g)\ngpu: %s\n",
              c.model.c_str(), w.forest.describe().c_str(), c.data.c_str(), static_cast<long long>(w.data.n_rows), c.jitter,
              gpu_description().c_str());
  std::printf("default: ForestPredictor(forest) with ForestConfig{} and ForestRunOptions{} (output %s), a fresh one per "
              "batch; every Auto variant is called on its batch until a call runs settled (online tuning, at most %d "
              "calls), then timed\n",
              c.output.c_str(), kSettleCap);
  const StudyPredictors p = make_predictors(w.forest);
  const AdaptiveReport& rep = p.full->adaptive_report();
  std::printf("adaptive layout: %s; %.2f MiB (csr %.2f MiB)\n", rep.details.c_str(),
              static_cast<double>(p.full->footprint_bytes()) / (1 << 20), static_cast<double>(p.csr->footprint_bytes()) / (1 << 20));
  std::printf("tree rearrangement (SimHash + LSH, T_nodes 4, 128 bits, M 64): %.1f ms; per-thread sums of expected tree "
              "depths, trees dealt round-robin to %d threads: CV %.4f in model order, %.4f rearranged; expected nodes per "
              "tree and row %.2f\n",
              rep.similarity_ms, rep.threads, rep.cv_model_order, rep.cv_rearranged, rep.expected_visits);

  nlohmann::json j;
  j["model"] = c.model;
  j["model_description"] = w.forest.describe();
  j["jitter"] = c.jitter;
  j["gpu"] = gpu_description();
  j["adaptive"] = {{"details", rep.details},
                   {"similarity_ms", rep.similarity_ms},
                   {"cv_model_order", rep.cv_model_order},
                   {"cv_rearranged", rep.cv_rearranged},
                   {"footprint_bytes", p.full->footprint_bytes()},
                   {"csr_footprint_bytes", p.csr->footprint_bytes()}};
  j["batches"] = nlohmann::json::array();
  bool all_identical = true;
  for (index_t n : w.batches) {
    std::printf("\n== batch %lld ==\n", static_cast<long long>(n));
    StudyBatch batch(c, w, p, n);
    nlohmann::json jb;
    jb["batch"] = n;
    batch.strategies(jb);
    batch.techniques(jb);
    batch.row_scheduling(jb);
    j["batches"].push_back(jb);
    all_identical = all_identical && batch.identical();
  }
  std::printf("\n%s\n", all_identical ? "every variant's predictions are bit-identical to csr direct's"
                                      : "SOME VARIANTS DIFFER from csr direct");
  if (!c.json.empty()) write_json(c.json, j);
  return all_identical ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
