// canopy-bench forest-serve's reporting: the statistics over a phase's calls (percentiles and
// rows/s per batch-size decade and per size class, each class's first call against its steady
// median), its tables, the cold / warm summary and the JSON. The serving loop that measures the
// calls is bench_forest_serve.cpp.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "benchmarks/bench_common.hpp"
#include "benchmarks/bench_forest_serve.hpp"
#include "core/device.hpp"
#include "core/types.hpp"

namespace canopy {
namespace bench {
namespace serve {
namespace {

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
long long class_hi(int k, long long max_batch) { return std::min((2LL << k) - 1, std::max(1LL << k, max_batch)); }
std::string class_label(int k, long long max_batch) {
  const long long lo = 1LL << k, hi = class_hi(k, max_batch);
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

// A JSON number, or null where there is none (NaN, infinity).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

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

std::size_t steady_skip(const ForestServeConfig& c) { return static_cast<std::size_t>(std::max(0LL, c.steady_after)); }

// Calls of decade d (-1: all) from call `skip` on.
Stats decade_stats(const PhaseResult& r, int d, std::size_t skip, const Decades& dec) {
  std::vector<const Call*> out;
  for (std::size_t i = skip; i < r.calls.size(); ++i)
    if (d < 0 || dec.of(r.calls[i].n) == d) out.push_back(&r.calls[i]);
  return stats_of(out);
}

double latency_sum(const PhaseResult& r) {
  double s = 0;
  for (const Call& c : r.calls) s += c.ms;
  return s;
}

struct TuningCount {
  std::size_t prior = 0, refining = 0, tuned = 0, fixed = 0;
  double tuning_ms = 0;
};
TuningCount tuning_count(const PhaseResult& r) {
  TuningCount t;
  for (const Call& c : r.calls) {
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
std::vector<ClassInfo> class_infos(const ForestServeConfig& cfg, const PhaseResult& r) {
  const std::size_t skip = steady_skip(cfg);
  std::map<int, ClassInfo> by;
  std::map<int, std::vector<const Call*>> steady_calls;
  std::map<int, std::vector<double>> tuned_ms;
  for (std::size_t i = 0; i < r.calls.size(); ++i) {
    const Call& c = r.calls[i];
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
    const auto s = r.last_schedule.find(k);
    if (s != r.last_schedule.end())
      ci.choice = std::string(to_string(s->second.first)) + (s->second.second.empty() ? "" : " " + s->second.second);
    out.push_back(ci);
  }
  return out;
}

// The largest first-call excess over the size classes (NaN when no class has one).
double worst_excess(const ForestServeConfig& c, const PhaseResult& r) {
  double worst = NAN;
  for (const ClassInfo& k : class_infos(c, r))
    if (std::isfinite(k.excess()) && !(k.excess() <= worst)) worst = k.excess();
  return worst;
}

std::string device_line(const ForestServeConfig& c, const PhaseResult& r) {
  if (r.device == Device::Gpu) return "gpu, " + gpu_description();
  if (c.device == "cpu") return "cpu (--device cpu)";
  return "cpu (no GPU here: " + gpu_description() + "; the CPU executor runs every call)";
}

void print_classes(const ForestServeConfig& c, const PhaseResult& r) {
  std::printf("\n%-15s | %-29s | %-38s | %-20s | %8s %9s | %s\n", "size class",
              ("after the first " + std::to_string(steady_skip(c)) + " calls").c_str(), "first call of the class",
              "its later settled", "refining", "settled", "choice (last call)");
  std::printf("%-15s | %6s %9s %12s | %7s %6s %10s %-11s | %9s %10s | %8s %9s |\n", "rows", "calls", "p50 ms", "p99 ms",
              "call", "rows", "ms", "tuning", "p50 ms", "first-p50", "calls", "at call");
  const std::vector<ClassInfo> classes = class_infos(c, r);
  const ClassInfo* worst = nullptr;
  for (const ClassInfo& k : classes) {
    std::printf("%-15s | %6zu %9s %12s | %7zu %6lld %10.3f %-11s | %9s %10s | %8zu %9s | %s\n", class_label(k.k, c.max_batch).c_str(),
                k.steady.count, cell(k.steady.p50).c_str(), cell(k.steady.p99, 12).c_str(), k.first_call,
                static_cast<long long>(k.first_n), k.first_ms, to_string(k.first_tuning), cell(k.steady_median).c_str(),
                cell(k.excess(), 10).c_str(), k.refining, k.settled_at < 0 ? "never" : std::to_string(k.settled_at).c_str(),
                k.choice.c_str());
    if (std::isfinite(k.excess()) && (!worst || k.excess() > worst->excess())) worst = &k;
  }
  if (worst)
    std::printf("first call of every size class within %.0f ms of its steady median: %s (worst %+.3f ms, %s)\n",
                kFirstCallBudgetMs, worst->excess() <= kFirstCallBudgetMs ? "yes" : "NO", worst->excess(),
                class_label(worst->k, c.max_batch).c_str());
}

nlohmann::json classes_json(const ForestServeConfig& c, const PhaseResult& r, double& worst) {
  nlohmann::json out = nlohmann::json::array();
  for (const ClassInfo& k : class_infos(c, r)) {
    out.push_back({{"class", k.k},
                   {"lo", 1LL << k.k},
                   {"hi", class_hi(k.k, c.max_batch)},
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
  return out;
}

// Every call, for plots and for finding a tail's cause: rows, latency, where its schedule came
// from (to_string(ForestTuning)), the kernel, whether a graph replayed, GPU phases.
nlohmann::json per_call_json(const PhaseResult& r) {
  auto round4 = [](double v) { return std::round(v * 1e4) / 1e4; };
  nlohmann::json n = nlohmann::json::array(), ms = nlohmann::json::array(), tu = nlohmann::json::array(),
                 ke = nlohmann::json::array(), gr = nlohmann::json::array(), up = nlohmann::json::array(),
                 km = nlohmann::json::array(), dn = nlohmann::json::array();
  for (const Call& c : r.calls) {
    n.push_back(c.n);
    ms.push_back(round4(c.ms));
    tu.push_back(to_string(c.tuning));
    ke.push_back(to_string(c.kernel));
    gr.push_back(c.graph);
    up.push_back(round4(c.upload_ms));
    km.push_back(round4(c.kernel_ms));
    dn.push_back(round4(c.download_ms));
  }
  return {{"rows", n},   {"ms", ms},        {"tuning", tu},     {"kernel", ke},
          {"graph", gr}, {"upload_ms", up}, {"kernel_ms", km}, {"download_ms", dn}};
}

}  // namespace

void print_phase(const ForestServeConfig& c, const PhaseResult& r) {
  const Decades dec(c.min_batch, c.max_batch);
  const std::size_t skip = steady_skip(c);
  std::printf("device: %s; layout %s\n", device_line(c, r).c_str(), to_string(r.layout));
  std::printf("predictor built in %.1f ms; %zu call%s in %.1f ms (latency sum %.1f ms); phase wall %.1f ms\n", r.build_ms,
              r.calls.size(), r.calls.size() == 1 ? "" : "s", r.calls_ms, latency_sum(r), r.wall_ms);
  if (!r.calls.empty())
    std::printf("first call: %lld rows, %.3f ms (%s)\n", static_cast<long long>(r.calls[0].n), r.calls[0].ms,
                to_string(r.calls[0].tuning));
  const TuningCount tc = tuning_count(r);
  std::printf("tuning: %zu calls ran a prior, %zu refined (timed a trial, %.3f ms of trials in all), %zu tuned, %zu fixed\n",
              tc.prior, tc.refining, tc.tuning_ms, tc.tuned, tc.fixed);

  std::printf("\n%-15s | %-53s | after the first %zu calls\n", "", "all calls", skip);
  std::printf("%-15s | %6s %9s %9s %9s %12s | %6s %9s %9s %9s %12s\n", "batch rows", "calls", "p50 ms", "p99 ms", "max ms",
              "rows/s", "calls", "p50 ms", "p99 ms", "max ms", "rows/s");
  for (int d = dec.first; d <= dec.last; ++d)
    std::printf("%-15s | %s | %s\n", dec.label(d).c_str(), stats_cells(decade_stats(r, d, 0, dec)).c_str(),
                stats_cells(decade_stats(r, d, skip, dec)).c_str());
  std::printf("%-15s | %s | %s\n", "all", stats_cells(decade_stats(r, -1, 0, dec)).c_str(),
              stats_cells(decade_stats(r, -1, skip, dec)).c_str());

  print_classes(c, r);
  std::printf("checked %zu call%s against csr direct: %s\n", r.checked, r.checked == 1 ? "" : "s",
              r.mismatches == 0 ? "predictions identical"
                                : ("DIFFER in " + std::to_string(r.mismatches) + " (" + r.first_mismatch + ")").c_str());
  std::printf("cache after the phase: %d file%s, %d of Auto's choices\n", r.at_end.files, r.at_end.files == 1 ? "" : "s",
              r.at_end.choices);
}

nlohmann::json phase_json(const ForestServeConfig& c, const PhaseResult& r) {
  const Decades dec(c.min_batch, c.max_batch);
  const std::size_t skip = steady_skip(c);
  const TuningCount tc = tuning_count(r);
  nlohmann::json j{{"phase", r.name},
                   {"process", r.own_process ? "own" : "shared"},
                   {"device", to_string(r.device)},
                   {"layout", to_string(r.layout)},
                   {"cache_files_at_start", r.at_start.files},
                   {"cache_choices_at_start", r.at_start.choices},
                   {"cache_files_at_end", r.at_end.files},
                   {"cache_choices_at_end", r.at_end.choices},
                   {"build_ms", r.build_ms},
                   {"calls_ms", r.calls_ms},
                   {"latency_sum_ms", latency_sum(r)},
                   {"wall_ms", r.wall_ms}};
  if (!r.calls.empty())
    j["first_call"] = {{"rows", r.calls[0].n}, {"ms", r.calls[0].ms}, {"tuning", to_string(r.calls[0].tuning)}};
  j["tuning"] = {{"prior_calls", tc.prior}, {"refining_calls", tc.refining}, {"tuned_calls", tc.tuned},
                 {"fixed_calls", tc.fixed}, {"tuning_ms_total", tc.tuning_ms}};
  j["decades"] = nlohmann::json::array();
  for (int d = dec.first; d <= dec.last; ++d)
    j["decades"].push_back({{"rows", dec.label(d)},
                            {"lo", pow10(d)},
                            {"hi", dec.hi(d)},
                            {"all", stats_json(decade_stats(r, d, 0, dec))},
                            {"steady", stats_json(decade_stats(r, d, skip, dec))}});
  j["overall"] = {{"all", stats_json(decade_stats(r, -1, 0, dec))}, {"steady", stats_json(decade_stats(r, -1, skip, dec))}};
  double worst = -INFINITY;
  j["classes"] = classes_json(c, r, worst);
  j["worst_first_excess_ms"] = num(worst);
  j["first_calls_within_budget"] = !std::isfinite(worst) || worst <= kFirstCallBudgetMs;
  j["checked_calls"] = r.checked;
  j["mismatches"] = r.mismatches;
  if (r.mismatches > 0) j["first_mismatch"] = r.first_mismatch;
  j["per_call"] = per_call_json(r);
  return j;
}

void print_cold_warm(const ForestServeConfig& c, const PhaseResult& cold, const PhaseResult& warm) {
  const Decades dec(c.min_batch, c.max_batch);
  auto first_ms = [](const PhaseResult& r) { return r.calls.empty() ? NAN : r.calls[0].ms; };
  auto steady_p99 = [&](const PhaseResult& r, int d) { return cell(decade_stats(r, d, steady_skip(c), dec).p99, 12); };
  std::printf("\n%-28s %12s %12s\n", "cold / warm", "cold", "warm");
  std::printf("%-28s %12.1f %12.1f\n", "predictor built, ms", cold.build_ms, warm.build_ms);
  std::printf("%-28s %12.3f %12.3f\n", "first call, ms", first_ms(cold), first_ms(warm));
  std::printf("%-28s %12zu %12zu\n", "refining calls", tuning_count(cold).refining, tuning_count(warm).refining);
  std::printf("%-28s %12s %12s\n", "worst first-call excess, ms", cell(worst_excess(c, cold), 12).c_str(),
              cell(worst_excess(c, warm), 12).c_str());
  for (int d = dec.first; d <= dec.last; ++d)
    std::printf("%-28s %12s %12s\n", ("p99 ms " + dec.label(d)).c_str(), steady_p99(cold, d).c_str(),
                steady_p99(warm, d).c_str());
  std::printf("%-28s %12.1f %12.1f\n", "phase wall, ms", cold.wall_ms, warm.wall_ms);
}

void write_serve_json(const ForestServeConfig& c, const ForestWorkload& w, const std::string& cache_dir, bool temporary,
                      const std::vector<const PhaseResult*>& phases, bool identical) {
  nlohmann::json j = forest_json_header("forest-serve", c, w);
  j["calls"] = c.calls;
  j["min_batch"] = c.min_batch;
  j["max_batch"] = c.max_batch;
  j["seed"] = c.seed;
  j["steady_after"] = c.steady_after;
  j["check_every"] = c.check_every;
  j["first_call_budget_ms"] = kFirstCallBudgetMs;
  j["cache_dir"] = cache_dir;
  j["cache_dir_temporary"] = temporary;
  j["phases"] = nlohmann::json::array();
  for (const PhaseResult* r : phases) j["phases"].push_back(phase_json(c, *r));
  j["identical"] = identical;
  write_json(c.json, j, 1);
}

}  // namespace serve
}  // namespace bench
}  // namespace canopy
