// canopy-bench forest-serve: the default forest predictor as a server calls it. One model, a
// stream of --calls predict() calls whose batch sizes are drawn log-uniformly from
// [--min-batch, --max-batch] (a fixed --seed, so every phase sees the same sequence), each batch
// the data file's next rows (cycled), copied into one reused host buffer before the call, as a
// server deserialises a request. The predictor is ForestPredictor(forest) with ForestConfig{}
// (cache_dir: --cache-dir) and ForestRunOptions{} (output: --output): nothing tuned by hand.
//
// Phases: cold (an empty cache directory) and warm (a fresh predictor reading what the cold
// phase saved there), in this process one after the other (--phase both), or each in its own
// process (--phase cold, then --phase warm with the same --cache-dir), which is what a restarted
// server sees. Per phase: each call's whole wall latency (steady_clock around predict()),
// percentiles and rows/s per batch-size decade and per size class (the power of two Auto
// tunes), over all calls and after the first --steady-after calls, and each class's first call
// against its steady median. Every --check-every-th call, and every call that ran a prior or
// timed a trial, is checked bit for bit against a csr direct predictor on the same batch (after
// the phase's calls, so the reference never runs between timed calls); any difference exits 2.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "benchmarks/bench_forest.hpp"
#include "core/device.hpp"
#include "core/timing.hpp"
#include "core/types.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace bench {
namespace {

namespace fs = std::filesystem;

// The first-call target of the issue: a never-seen size class's first call at most this much
// slower than the class's steady median.
constexpr double kFirstCallBudgetMs = 5.0;
// Outputs kept for the deferred check before they are checked mid-phase.
constexpr std::size_t kMaxPendingBytes = std::size_t{256} << 20;

// The batch sizes: log-uniform over [lo, hi] (floor of exp(U(log lo, log(hi + 1)))), from the
// top 53 bits of a 64-bit Mersenne twister so the sequence is the same on every platform.
std::vector<index_t> draw_batches(long long calls, long long lo, long long hi, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const double a = std::log(static_cast<double>(lo)), b = std::log(static_cast<double>(hi) + 1.0);
  std::vector<index_t> out(static_cast<std::size_t>(calls));
  for (index_t& n : out) {
    const double u = static_cast<double>(gen() >> 11) * (1.0 / 9007199254740992.0);
    const long long v = static_cast<long long>(std::floor(std::exp(a + u * (b - a))));
    n = static_cast<index_t>(std::clamp(v, lo, hi));
  }
  return out;
}

// Auto's size class: floor(log2 n).
int size_class(index_t n) {
  int c = 0;
  while ((index_t{2} << c) <= n) ++c;
  return c;
}

long long pow10(int d) {
  long long p = 1;
  while (d-- > 0) p *= 10;
  return p;
}

int digits_minus_one(long long n) {
  int d = 0;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

// The batch-size decades [10^d, 10^(d+1)); a --max-batch that is a power of ten (10,000) joins the
// decade below it, which then reads [1000,10000].
struct Decades {
  int first = 0, last = 0;
  long long max_batch = 0;
  Decades(long long lo, long long hi) : max_batch(hi) {
    first = digits_minus_one(lo);
    last = digits_minus_one(hi);
    if (last > first && pow10(last) == hi) --last;
  }
  int of(index_t n) const { return std::min(last, digits_minus_one(static_cast<long long>(n))); }
  bool closed(int d) const { return d == last && max_batch == pow10(d + 1); }
  long long hi(int d) const { return closed(d) ? max_batch : std::min(pow10(d + 1) - 1, max_batch); }
  std::string label(int d) const {
    return "[" + std::to_string(pow10(d)) + "," + std::to_string(pow10(d + 1)) + (closed(d) ? "]" : ")");
  }
};

// A size class's rows, [2^k, 2^(k+1) - 1], cut at the largest batch.
std::string class_label(int k, long long max_batch) {
  const long long lo = 1LL << k, hi = std::min((2LL << k) - 1, std::max(lo, max_batch));
  return lo == hi ? "[" + std::to_string(lo) + "]" : "[" + std::to_string(lo) + "," + std::to_string(hi) + "]";
}

// The nearest-rank percentile (p in (0, 100]) of v, which it sorts.
double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t k = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<std::size_t>(k, 1)) - 1];
}

bool settled(ForestTuning t) { return t == ForestTuning::Tuned || t == ForestTuning::Fixed; }

// Files below a directory (0 when it does not exist), and those of Auto's choices.
struct CacheCount {
  int files = 0, choices = 0;
};
CacheCount count_cache(const std::string& dir) {
  CacheCount c;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return c;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    ++c.files;
    if (it->path().string().find("forest_choices") != std::string::npos) ++c.choices;
  }
  return c;
}

// A temporary cache directory made for this run and removed at the end (also on an error).
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "canopy-serve-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw Error("forest-serve: cannot create a temporary directory " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct Call {
  index_t n = 0;
  std::size_t first_row = 0;  // the file row the batch starts at
  double ms = 0;              // wall latency of predict()
  double tuning_ms = 0;
  ForestTuning tuning = ForestTuning::Fixed;
  ForestKernel kernel = ForestKernel::Direct;
  bool graph = false;  // a replayed CUDA graph
  double upload_ms = 0, kernel_ms = 0, download_ms = 0;  // GPU phases (CUDA events)
};

// A call's predictions kept for the check against csr direct.
struct Sample {
  std::size_t call = 0;
  std::vector<float> out;
};

// The rows of a batch: the file's rows from `first`, cycling to the top.
void fill_batch(const ForestData& d, std::size_t first, index_t n, float* dst) {
  const std::size_t F = static_cast<std::size_t>(d.n_features), rows = static_cast<std::size_t>(d.n_rows);
  std::size_t r = first % rows;
  for (index_t i = 0; i < n;) {
    const std::size_t take = std::min<std::size_t>(rows - r, static_cast<std::size_t>(n - i));
    std::memcpy(dst + static_cast<std::size_t>(i) * F, d.row(static_cast<index_t>(r)), take * F * sizeof(float));
    i += static_cast<index_t>(take);
    r = 0;
  }
}

struct Stats {
  std::size_t count = 0;
  double p50 = NAN, p99 = NAN, max = NAN, rows_per_s = NAN;
};
Stats stats_of(const std::vector<const Call*>& calls) {
  Stats s;
  s.count = calls.size();
  if (calls.empty()) return s;
  std::vector<double> ms;
  double rows = 0, total = 0;
  for (const Call* c : calls) {
    ms.push_back(c->ms);
    rows += static_cast<double>(c->n);
    total += c->ms;
  }
  s.p50 = percentile(ms, 50);
  s.p99 = percentile(ms, 99);
  s.max = ms.back();
  s.rows_per_s = total > 0 ? rows / (total / 1000.0) : NAN;
  return s;
}
nlohmann::json stats_json(const Stats& s) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"calls", s.count}, {"p50_ms", num(s.p50)}, {"p99_ms", num(s.p99)}, {"max_ms", num(s.max)},
          {"rows_per_s", num(s.rows_per_s)}};
}
// A number in a table cell of `width` characters ("-" when there is none); g: %g, else %f.
std::string cell(double v, int width = 9, int precision = 3, bool g = false) {
  char b[64];
  if (!std::isfinite(v)) std::snprintf(b, sizeof b, "%*s", width, "-");
  else if (g) std::snprintf(b, sizeof b, "%*.*g", width, precision, v);
  else std::snprintf(b, sizeof b, "%*.*f", width, precision, v);
  return b;
}
std::string stats_cells(const Stats& s) {
  char b[128];
  std::snprintf(b, sizeof b, "%6zu %s %s %s %s", s.count, cell(s.p50).c_str(), cell(s.p99).c_str(), cell(s.max).c_str(),
                cell(s.rows_per_s, 12, 4, true).c_str());
  return b;
}

// One phase: a fresh default predictor, the calls, the statistics, the check.
class ServePhase {
 public:
  ServePhase(const ForestServeConfig& c, const ForestWorkload& w, const std::vector<index_t>& batches, std::string name,
             std::string cache_dir, bool own_process)
      : c_(c), w_(w), batches_(batches), name_(std::move(name)), cache_dir_(std::move(cache_dir)), own_process_(own_process) {}

  void run() {
    at_start_ = count_cache(cache_dir_);
    std::printf("\n== %s phase (%s; cache %s: %d file%s, %d of Auto's choices) ==\n", name_.c_str(),
                own_process_ ? "a process of its own" : "this process", cache_dir_.c_str(), at_start_.files,
                at_start_.files == 1 ? "" : "s", at_start_.choices);
    if (name_ == "warm" && at_start_.choices == 0)
      std::printf("note: the cache holds none of Auto's choices (the CPU tunes nothing; on a GPU the cold phase saved "
                  "none), so this phase starts as cold\n");
    std::fflush(stdout);

    const auto phase_start = std::chrono::steady_clock::now();
    ForestConfig cfg;  // the defaults, but for where the cache is and (--device) where it runs
    cfg.cache_dir = cache_dir_;
    cfg.device = parse_serve_device(c_.device);
    auto p = std::make_unique<ForestPredictor>(w_.forest, cfg);
    build_ms_ = ms_since(phase_start);
    device_ = p->device();
    ForestRunOptions run;  // the defaults, but for the output (and --graph)
    run.output = w_.output;
    run.graph = c_.graph == "on";

    const std::size_t F = static_cast<std::size_t>(w_.data.n_features), width = static_cast<std::size_t>(w_.width);
    const index_t max_n = *std::max_element(batches_.begin(), batches_.end());
    std::vector<float> rows(static_cast<std::size_t>(max_n) * F), out(static_cast<std::size_t>(max_n) * width);
    calls_.resize(batches_.size());
    std::size_t cursor = 0, pending_bytes = 0;
    const auto calls_start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < batches_.size(); ++i) {
      Call& call = calls_[i];
      call.n = batches_[i];
      call.first_row = cursor;
      cursor = (cursor + static_cast<std::size_t>(call.n)) % static_cast<std::size_t>(w_.data.n_rows);
      fill_batch(w_.data, call.first_row, call.n, rows.data());
      const auto t0 = std::chrono::steady_clock::now();
      const ForestTimes t = p->predict(rows.data(), call.n, out.data(), run);
      call.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      call.tuning = t.tuning;
      call.tuning_ms = t.tuning_ms;
      call.kernel = t.kernel;
      call.graph = t.graph;
      call.upload_ms = t.upload_ms;
      call.kernel_ms = t.kernel_ms;
      call.download_ms = t.download_ms;
      if (i == 0) layout_ = t.layout;
      last_schedule_[size_class(call.n)] = {t.kernel, t.schedule.describe()};
      const bool sample = (c_.check_every > 0 && i % static_cast<std::size_t>(c_.check_every) == 0) ||
                          t.tuning == ForestTuning::Prior || t.tuning == ForestTuning::Refining;
      if (sample) {
        pending_.push_back({i, std::vector<float>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(call.n * width))});
        pending_bytes += static_cast<std::size_t>(call.n) * width * sizeof(float);
        if (pending_bytes > kMaxPendingBytes) {  // rare: check now rather than hold more
          check_pending();
          pending_bytes = 0;
        }
      }
    }
    calls_ms_ = ms_since(calls_start);
    wall_ms_ = ms_since(phase_start);
    p.reset();  // Auto's choices saved, the device memory freed, before the next phase
    check_pending();
    at_end_ = count_cache(cache_dir_);
  }

  bool identical() const { return mismatches_ == 0; }

  void print() const {
    const Decades dec(c_.min_batch, c_.max_batch);
    const std::size_t skip = static_cast<std::size_t>(std::max(0LL, c_.steady_after));
    std::printf("device: %s; layout %s\n", device_line().c_str(), to_string(layout_));
    std::printf("predictor built in %.1f ms; %zu call%s in %.1f ms (latency sum %.1f ms); phase wall %.1f ms\n", build_ms_,
                calls_.size(), calls_.size() == 1 ? "" : "s", calls_ms_, latency_sum(), wall_ms_);
    if (!calls_.empty())
      std::printf("first call: %lld rows, %.3f ms (%s)\n", static_cast<long long>(calls_[0].n), calls_[0].ms,
                  to_string(calls_[0].tuning));
    const TuningCount tc = tuning_count();
    std::printf("tuning: %zu calls ran a prior, %zu refined (timed a trial, %.3f ms of trials in all), %zu tuned, %zu fixed\n",
                tc.prior, tc.refining, tc.tuning_ms, tc.tuned, tc.fixed);

    std::printf("\n%-15s | %-53s | after the first %zu calls\n", "", "all calls", skip);
    std::printf("%-15s | %6s %9s %9s %9s %12s | %6s %9s %9s %9s %12s\n", "batch rows", "calls", "p50 ms", "p99 ms", "max ms",
                "rows/s", "calls", "p50 ms", "p99 ms", "max ms", "rows/s");
    for (int d = dec.first; d <= dec.last; ++d)
      std::printf("%-15s | %s | %s\n", dec.label(d).c_str(), stats_cells(stats_of(select(d, 0, dec))).c_str(),
                  stats_cells(stats_of(select(d, skip, dec))).c_str());
    std::printf("%-15s | %s | %s\n", "all", stats_cells(stats_of(select(-1, 0, dec))).c_str(),
                stats_cells(stats_of(select(-1, skip, dec))).c_str());

    std::printf("\n%-15s | %-29s | %-38s | %-20s | %8s %9s | %s\n", "size class",
                ("after the first " + std::to_string(skip) + " calls").c_str(), "first call of the class",
                "its later settled", "refining", "settled", "choice (last call)");
    std::printf("%-15s | %6s %9s %12s | %7s %6s %10s %-11s | %9s %10s | %8s %9s |\n", "rows", "calls", "p50 ms", "p99 ms",
                "call", "rows", "ms", "tuning", "p50 ms", "first-p50", "calls", "at call");
    const std::vector<ClassInfo> classes = class_infos();
    const ClassInfo* worst = nullptr;
    for (const ClassInfo& k : classes) {
      std::printf("%-15s | %6zu %9s %12s | %7zu %6lld %10.3f %-11s | %9s %10s | %8zu %9s | %s\n", class_label(k.k, c_.max_batch).c_str(),
                  k.steady.count, cell(k.steady.p50).c_str(), cell(k.steady.p99, 12).c_str(), k.first_call,
                  static_cast<long long>(k.first_n), k.first_ms, to_string(k.first_tuning), cell(k.steady_median).c_str(),
                  cell(k.excess(), 10).c_str(), k.refining, k.settled_at < 0 ? "never" : std::to_string(k.settled_at).c_str(),
                  k.choice.c_str());
      if (std::isfinite(k.excess()) && (!worst || k.excess() > worst->excess())) worst = &k;
    }
    if (worst)
      std::printf("first call of every size class within %.0f ms of its steady median: %s (worst %+.3f ms, %s)\n",
                  kFirstCallBudgetMs, worst->excess() <= kFirstCallBudgetMs ? "yes" : "NO", worst->excess(),
                  class_label(worst->k, c_.max_batch).c_str());
    std::printf("checked %zu call%s against csr direct: %s\n", checked_, checked_ == 1 ? "" : "s",
                mismatches_ == 0 ? "predictions identical" : ("DIFFER in " + std::to_string(mismatches_) + " (" + first_mismatch_ + ")").c_str());
    std::printf("cache after the phase: %d file%s, %d of Auto's choices\n", at_end_.files, at_end_.files == 1 ? "" : "s",
                at_end_.choices);
  }

  nlohmann::json json() const {
    const Decades dec(c_.min_batch, c_.max_batch);
    const std::size_t skip = static_cast<std::size_t>(std::max(0LL, c_.steady_after));
    const TuningCount tc = tuning_count();
    nlohmann::json j;
    j["phase"] = name_;
    j["process"] = own_process_ ? "own" : "shared";
    j["device"] = to_string(device_);
    j["layout"] = to_string(layout_);
    j["cache_files_at_start"] = at_start_.files;
    j["cache_choices_at_start"] = at_start_.choices;
    j["cache_files_at_end"] = at_end_.files;
    j["cache_choices_at_end"] = at_end_.choices;
    j["build_ms"] = build_ms_;
    j["calls_ms"] = calls_ms_;
    j["latency_sum_ms"] = latency_sum();
    j["wall_ms"] = wall_ms_;
    if (!calls_.empty())
      j["first_call"] = {{"rows", calls_[0].n}, {"ms", calls_[0].ms}, {"tuning", to_string(calls_[0].tuning)}};
    j["tuning"] = {{"prior_calls", tc.prior}, {"refining_calls", tc.refining}, {"tuned_calls", tc.tuned},
                   {"fixed_calls", tc.fixed}, {"tuning_ms_total", tc.tuning_ms}};
    j["decades"] = nlohmann::json::array();
    for (int d = dec.first; d <= dec.last; ++d)
      j["decades"].push_back({{"rows", dec.label(d)},
                              {"lo", pow10(d)},
                              {"hi", dec.hi(d)},
                              {"all", stats_json(stats_of(select(d, 0, dec)))},
                              {"steady", stats_json(stats_of(select(d, skip, dec)))}});
    j["overall"] = {{"all", stats_json(stats_of(select(-1, 0, dec)))}, {"steady", stats_json(stats_of(select(-1, skip, dec)))}};
    j["classes"] = nlohmann::json::array();
    double worst = -INFINITY;
    for (const ClassInfo& k : class_infos()) {
      auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
      j["classes"].push_back({{"class", k.k},
                              {"lo", 1LL << k.k},
                              {"hi", std::min((2LL << k.k) - 1, std::max(1LL << k.k, c_.max_batch))},
                              {"calls", k.calls},
                              {"steady", stats_json(k.steady)},
                              {"first_call", k.first_call},
                              {"first_rows", k.first_n},
                              {"first_ms", k.first_ms},
                              {"first_tuning", to_string(k.first_tuning)},
                              {"steady_median_ms", num(k.steady_median)},
                              {"first_excess_ms", num(k.excess())},
                              {"prior_calls", k.prior},
                              {"refining_calls", k.refining},
                              {"tuning_ms", k.tuning_ms},
                              {"settled_at_call", k.settled_at},
                              {"choice", k.choice}});
      if (std::isfinite(k.excess())) worst = std::max(worst, k.excess());
    }
    j["worst_first_excess_ms"] = std::isfinite(worst) ? nlohmann::json(worst) : nlohmann::json(nullptr);
    j["first_calls_within_budget"] = !std::isfinite(worst) || worst <= kFirstCallBudgetMs;
    j["checked_calls"] = checked_;
    j["mismatches"] = mismatches_;
    if (mismatches_ > 0) j["first_mismatch"] = first_mismatch_;
    // Every call, for plots and for finding a tail's cause: rows, latency, where its schedule
    // came from (to_string(ForestTuning)), the kernel, whether a graph replayed, GPU phases.
    auto round4 = [](double v) { return std::round(v * 1e4) / 1e4; };
    nlohmann::json n = nlohmann::json::array(), ms = nlohmann::json::array(), tu = nlohmann::json::array(),
                   ke = nlohmann::json::array(), gr = nlohmann::json::array(), up = nlohmann::json::array(),
                   km = nlohmann::json::array(), dn = nlohmann::json::array();
    for (const Call& c : calls_) {
      n.push_back(c.n);
      ms.push_back(round4(c.ms));
      tu.push_back(to_string(c.tuning));
      ke.push_back(to_string(c.kernel));
      gr.push_back(c.graph);
      up.push_back(round4(c.upload_ms));
      km.push_back(round4(c.kernel_ms));
      dn.push_back(round4(c.download_ms));
    }
    j["per_call"] = {{"rows", n},   {"ms", ms},        {"tuning", tu},     {"kernel", ke},
                     {"graph", gr}, {"upload_ms", up}, {"kernel_ms", km}, {"download_ms", dn}};
    return j;
  }

  // For the summary of both phases.
  const std::string& name() const { return name_; }
  double worst_excess() const {
    double worst = NAN;
    for (const ClassInfo& k : class_infos())
      if (std::isfinite(k.excess()) && !(k.excess() <= worst)) worst = k.excess();
    return worst;
  }
  std::size_t refining() const { return tuning_count().refining; }
  double first_ms() const { return calls_.empty() ? NAN : calls_[0].ms; }
  double build_ms() const { return build_ms_; }
  double wall_ms() const { return wall_ms_; }
  Stats steady(int decade) const {
    const Decades dec(c_.min_batch, c_.max_batch);
    return stats_of(select(decade, static_cast<std::size_t>(std::max(0LL, c_.steady_after)), dec));
  }

 private:
  struct TuningCount {
    std::size_t prior = 0, refining = 0, tuned = 0, fixed = 0;
    double tuning_ms = 0;
  };
  TuningCount tuning_count() const {
    TuningCount t;
    for (const Call& c : calls_) {
      t.tuning_ms += c.tuning_ms;
      switch (c.tuning) {
        case ForestTuning::Prior: ++t.prior; break;
        case ForestTuning::Refining: ++t.refining; break;
        case ForestTuning::Tuned: ++t.tuned; break;
        case ForestTuning::Fixed: ++t.fixed; break;
      }
    }
    return t;
  }

  struct ClassInfo {
    int k = 0;
    std::size_t calls = 0;
    Stats steady;                 // the class's calls after the first --steady-after
    std::size_t first_call = 0;   // index of its first call
    index_t first_n = 0;
    double first_ms = 0;
    ForestTuning first_tuning = ForestTuning::Fixed;
    double steady_median = NAN;   // median of its later calls that ran tuned (or fixed)
    std::size_t prior = 0, refining = 0;
    double tuning_ms = 0;
    long long settled_at = -1;    // the first call of the class that ran tuned (or fixed)
    std::string choice;
    double excess() const { return first_ms - steady_median; }
  };
  std::vector<ClassInfo> class_infos() const {
    const std::size_t skip = static_cast<std::size_t>(std::max(0LL, c_.steady_after));
    std::map<int, ClassInfo> by;
    std::map<int, std::vector<const Call*>> steady_calls;
    std::map<int, std::vector<double>> tuned_ms;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      const Call& c = calls_[i];
      const int k = size_class(c.n);
      auto [it, fresh] = by.try_emplace(k);
      ClassInfo& ci = it->second;
      if (fresh) {
        ci.k = k;
        ci.first_call = i;
        ci.first_n = c.n;
        ci.first_ms = c.ms;
        ci.first_tuning = c.tuning;
      } else if (settled(c.tuning)) {
        tuned_ms[k].push_back(c.ms);
      }
      ++ci.calls;
      ci.prior += c.tuning == ForestTuning::Prior;
      ci.refining += c.tuning == ForestTuning::Refining;
      ci.tuning_ms += c.tuning_ms;
      if (ci.settled_at < 0 && settled(c.tuning)) ci.settled_at = static_cast<long long>(i);
      if (i >= skip) steady_calls[k].push_back(&c);
    }
    std::vector<ClassInfo> out;
    for (auto& [k, ci] : by) {
      ci.steady = stats_of(steady_calls[k]);
      ci.steady_median = percentile(tuned_ms[k], 50);
      const auto s = last_schedule_.find(k);
      if (s != last_schedule_.end())
        ci.choice = std::string(to_string(s->second.first)) + (s->second.second.empty() ? "" : " " + s->second.second);
      out.push_back(ci);
    }
    return out;
  }

  // Calls of decade d (-1: all) from call `skip` on.
  std::vector<const Call*> select(int d, std::size_t skip, const Decades& dec) const {
    std::vector<const Call*> out;
    for (std::size_t i = skip; i < calls_.size(); ++i)
      if (d < 0 || dec.of(calls_[i].n) == d) out.push_back(&calls_[i]);
    return out;
  }

  double latency_sum() const {
    double s = 0;
    for (const Call& c : calls_) s += c.ms;
    return s;
  }

  static Device parse_serve_device(const std::string& s) {
    if (s == "auto") return Device::Auto;
    if (s == "cpu") return Device::Cpu;
    if (s == "gpu") return Device::Gpu;
    throw Error("--device: '" + s + "' is not one of auto, cpu, gpu");
  }

  std::string device_line() const {
    if (device_ == Device::Gpu) return "gpu, " + gpu_description();
    if (c_.device == "cpu") return "cpu (--device cpu)";
    return "cpu (no GPU here: " + gpu_description() + "; the CPU executor runs every call)";
  }

  // The kept predictions against csr direct on the same device and the same rows.
  void check_pending() {
    if (pending_.empty()) return;
    if (!reference_) {
      ForestConfig cfg;
      cfg.layout = ForestLayout::Csr;
      cfg.device = device_;
      cfg.cache_dir = "none";
      reference_ = std::make_unique<ForestPredictor>(w_.forest, cfg);
    }
    ForestRunOptions r;
    r.output = w_.output;
    r.kernel = ForestKernel::Direct;
    const std::size_t F = static_cast<std::size_t>(w_.data.n_features), width = static_cast<std::size_t>(w_.width);
    std::vector<float> rows, ref;
    for (const Sample& s : pending_) {
      const Call& call = calls_[s.call];
      rows.resize(static_cast<std::size_t>(call.n) * F);
      ref.resize(static_cast<std::size_t>(call.n) * width);
      fill_batch(w_.data, call.first_row, call.n, rows.data());
      reference_->predict(rows.data(), call.n, ref.data(), r);
      ++checked_;
      if (std::memcmp(ref.data(), s.out.data(), ref.size() * sizeof(float)) == 0) continue;
      if (mismatches_++ == 0) {
        std::size_t at = 0;
        while (at < ref.size() && std::memcmp(&ref[at], &s.out[at], sizeof(float)) == 0) ++at;
        char b[256];
        std::snprintf(b, sizeof b, "first: call %zu, %lld rows (%s, %s), value %zu: %.9g, csr direct %.9g", s.call,
                      static_cast<long long>(call.n), to_string(call.tuning), to_string(call.kernel), at,
                      static_cast<double>(s.out[at]), static_cast<double>(ref[at]));
        first_mismatch_ = b;
      }
    }
    pending_.clear();
  }

  const ForestServeConfig& c_;
  const ForestWorkload& w_;
  const std::vector<index_t>& batches_;
  std::string name_, cache_dir_;
  bool own_process_;
  CacheCount at_start_, at_end_;
  Device device_ = Device::Cpu;
  ForestLayout layout_ = ForestLayout::Csr;
  double build_ms_ = 0, calls_ms_ = 0, wall_ms_ = 0;
  std::vector<Call> calls_;
  std::map<int, std::pair<ForestKernel, std::string>> last_schedule_;
  std::vector<Sample> pending_;
  std::unique_ptr<ForestPredictor> reference_;
  std::size_t checked_ = 0, mismatches_ = 0;
  std::string first_mismatch_;
};

}  // namespace

void add_forest_serve_options(CLI::App& app, ForestServeConfig& c) {
  app.add_option("--model", c.model, "XGBoost JSON or UBJSON (Booster.save_model) or Canopy forest JSON, plain or .gz")->required();
  app.add_option("--data", c.data, "CSV or CSV.gz with a header; every column but the label is a feature; rows are cycled")
      ->required();
  app.add_option("--label", c.label, "the label column (name or 0-based index), left out of the features");
  app.add_option("--output", c.output, "margin, prob, class or leaf (ForestRunOptions::output)")->capture_default_str();
  app.add_option("--calls", c.calls, "predict() calls per phase")->capture_default_str();
  app.add_option("--graph", c.graph, "GPU: ForestRunOptions::graph (on: calls that keep coming back replay a CUDA graph)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--min-batch", c.min_batch, "smallest batch (rows); sizes are log-uniform in [min, max]")->capture_default_str();
  app.add_option("--max-batch", c.max_batch, "largest batch (rows)")->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the batch sizes (every phase draws the same sequence)")->capture_default_str();
  app.add_option("--cache-dir", c.cache_dir,
                 "ForestConfig::cache_dir (and CANOPY_CACHE_DIR) of the phases; cold needs it empty (default: a fresh "
                 "temporary directory, removed at the end)");
  app.add_option("--phase", c.phase,
                 "cold (empty cache), warm (the cache a cold phase filled; needs --cache-dir), or both in this process")
      ->check(CLI::IsMember({"cold", "warm", "both"}))
      ->capture_default_str();
  app.add_option("--device", c.device, "ForestConfig::device: auto, cpu or gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
      ->capture_default_str();
  app.add_option("--steady-after", c.steady_after, "the steady statistics leave out the calls before this one")
      ->capture_default_str();
  app.add_option("--check-every", c.check_every,
                 "check every n-th call (and every call that ran a prior or a trial) against csr direct; 0: only those")
      ->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
}

int run_forest_serve(const ForestServeConfig& c) {
  if (c.calls < 1) throw Error("--calls " + std::to_string(c.calls) + " must be at least 1");
  if (c.min_batch < 1 || c.max_batch < c.min_batch)
    throw Error("--min-batch " + std::to_string(c.min_batch) + " / --max-batch " + std::to_string(c.max_batch) +
                ": need 1 <= min <= max");
  if (c.check_every < 0) throw Error("--check-every must be >= 0");
  if (c.phase == "warm" && c.cache_dir.empty())
    throw Error("--phase warm needs --cache-dir: the directory a cold phase (--phase cold --cache-dir DIR) filled");

  // The cache directory: given, or a fresh one of ours. The process's CANOPY_CACHE_DIR points
  // there too, so the performance model's hardware parameters (forest_hardware.json) are cold
  // in a cold phase as well.
  std::unique_ptr<TempDir> temp;
  std::string dir = c.cache_dir;
  if (dir.empty()) {
    temp = std::make_unique<TempDir>();
    dir = temp->path();
  }
  if (c.phase != "warm") {
    const CacheCount at = count_cache(dir);
    if (at.files > 0)
      throw Error("--phase " + c.phase + ": the cache directory " + dir + " holds " + std::to_string(at.files) +
                  (at.files == 1 ? " file" : " files") + "; a cold phase needs an empty (or new) one");
  } else {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw Error("--phase warm: the cache directory " + dir + " does not exist");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("--cache-dir " + dir + ": cannot create it: " + ec.message());
  setenv("CANOPY_CACHE_DIR", dir.c_str(), 1);

  const ForestWorkload w = load_forest_workload(c);
  const std::vector<index_t> batches = draw_batches(c.calls, c.min_batch, c.max_batch, c.seed);
  std::printf("canopy-bench forest-serve: %s\n  %s (loaded in %.0f ms)\n", c.model.c_str(), w.forest.describe().c_str(),
              w.load_ms);
  std::printf("data: %s, %lld rows x %d features (read in %.0f ms), cycled; output %s\n", c.data.c_str(),
              static_cast<long long>(w.data.n_rows), w.data.n_features, w.read_ms, c.output.c_str());
  std::printf("%lld calls per phase, batches log-uniform in [%lld, %lld] rows (seed %llu), rows on the host; "
              "ForestConfig{} and ForestRunOptions{}; cache %s%s\n",
              c.calls, c.min_batch, c.max_batch, static_cast<unsigned long long>(c.seed), dir.c_str(),
              temp ? " (temporary)" : "");

  std::vector<std::string> phases;
  if (c.phase == "both" || c.phase == "cold") phases.push_back("cold");
  if (c.phase == "both" || c.phase == "warm") phases.push_back("warm");
  std::vector<std::unique_ptr<ServePhase>> done;
  for (const std::string& name : phases) {
    done.push_back(std::make_unique<ServePhase>(c, w, batches, name, dir, c.phase != "both"));
    done.back()->run();
    done.back()->print();
    std::fflush(stdout);
  }

  bool identical = true;
  for (const auto& ph : done) identical = identical && ph->identical();
  if (done.size() == 2) {
    const Decades dec(c.min_batch, c.max_batch);
    std::printf("\n%-28s %12s %12s\n", "cold / warm", "cold", "warm");
    std::printf("%-28s %12.1f %12.1f\n", "predictor built, ms", done[0]->build_ms(), done[1]->build_ms());
    std::printf("%-28s %12.3f %12.3f\n", "first call, ms", done[0]->first_ms(), done[1]->first_ms());
    std::printf("%-28s %12zu %12zu\n", "refining calls", done[0]->refining(), done[1]->refining());
    std::printf("%-28s %12s %12s\n", "worst first-call excess, ms", cell(done[0]->worst_excess(), 12).c_str(),
                cell(done[1]->worst_excess(), 12).c_str());
    for (int d = dec.first; d <= dec.last; ++d)
      std::printf("%-28s %12s %12s\n", ("p99 ms " + dec.label(d)).c_str(), cell(done[0]->steady(d).p99, 12).c_str(),
                  cell(done[1]->steady(d).p99, 12).c_str());
    std::printf("%-28s %12.1f %12.1f\n", "phase wall, ms", done[0]->wall_ms(), done[1]->wall_ms());
  }
  std::printf("\n%s\n", identical ? "every checked call's predictions are identical to csr direct's"
                                  : "SOME CALLS' PREDICTIONS DIFFER from csr direct's");

  if (!c.json.empty()) {
    nlohmann::json j;
    j["workload"] = "forest-serve";
    j["model"] = c.model;
    j["model_description"] = w.forest.describe();
    j["data"] = c.data;
    j["rows_in_file"] = w.data.n_rows;
    j["features"] = w.data.n_features;
    j["output"] = c.output;
    j["calls"] = c.calls;
    j["min_batch"] = c.min_batch;
    j["max_batch"] = c.max_batch;
    j["seed"] = c.seed;
    j["steady_after"] = c.steady_after;
    j["check_every"] = c.check_every;
    j["first_call_budget_ms"] = kFirstCallBudgetMs;
    j["cache_dir"] = dir;
    j["cache_dir_temporary"] = temp != nullptr;
    j["gpu"] = gpu_available() ? gpu_description() : std::string("none");
    j["phases"] = nlohmann::json::array();
    for (const auto& ph : done) j["phases"].push_back(ph->json());
    j["identical"] = identical;
    std::ofstream f(c.json);
    if (!f) throw Error("--json " + c.json + ": cannot open for writing");
    f << j.dump(1) << "\n";
  }
  return identical ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
