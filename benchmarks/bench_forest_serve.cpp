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
//
// This file is the serving loop; the statistics, tables and JSON are
// bench_forest_serve_report.cpp.
#include <CLI/CLI.hpp>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "benchmarks/bench_forest.hpp"
#include "benchmarks/bench_forest_serve.hpp"
#include "core/device.hpp"
#include "core/timing.hpp"
#include "core/types.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace bench {
namespace {

namespace fs = std::filesystem;
using serve::Call;
using serve::CacheCount;
using serve::PhaseResult;

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

// Files below a directory (0 when it does not exist), and those of Auto's choices.
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

// One phase: a fresh default predictor, the calls, the check; what it measured is result().
class ServePhase {
 public:
  ServePhase(const ForestServeConfig& c, const ForestWorkload& w, const std::vector<index_t>& batches, std::string name,
             std::string cache_dir, bool own_process)
      : c_(c), w_(w), batches_(batches), cache_dir_(std::move(cache_dir)) {
    r_.name = std::move(name);
    r_.own_process = own_process;
  }

  void run() {
    r_.at_start = count_cache(cache_dir_);
    std::printf("\n== %s phase (%s; cache %s: %d file%s, %d of Auto's choices) ==\n", r_.name.c_str(),
                r_.own_process ? "a process of its own" : "this process", cache_dir_.c_str(), r_.at_start.files,
                r_.at_start.files == 1 ? "" : "s", r_.at_start.choices);
    if (r_.name == "warm" && r_.at_start.choices == 0)
      std::printf("note: the cache holds none of Auto's choices (the CPU tunes nothing; on a GPU the cold phase saved "
                  "none), so this phase starts as cold\n");
    std::fflush(stdout);

    const auto phase_start = std::chrono::steady_clock::now();
    ForestConfig cfg;  // the defaults, but for where the cache is and (--device) where it runs
    cfg.cache_dir = cache_dir_;
    cfg.device = parse_serve_device(c_.device);
    auto p = std::make_unique<ForestPredictor>(w_.forest, cfg);
    r_.build_ms = ms_since(phase_start);
    r_.device = p->device();
    ForestRunOptions run;  // the defaults, but for the output (and --graph)
    run.output = w_.output;
    run.graph = c_.graph == "on";

    const std::size_t F = static_cast<std::size_t>(w_.data.n_features), width = static_cast<std::size_t>(w_.width);
    const index_t max_n = *std::max_element(batches_.begin(), batches_.end());
    std::vector<float> rows(static_cast<std::size_t>(max_n) * F), out(static_cast<std::size_t>(max_n) * width);
    r_.calls.resize(batches_.size());
    std::size_t cursor = 0, pending_bytes = 0;
    const auto calls_start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < batches_.size(); ++i) {
      Call& call = r_.calls[i];
      call.n = batches_[i];
      call.first_row = cursor;
      cursor = (cursor + static_cast<std::size_t>(call.n)) % static_cast<std::size_t>(w_.data.n_rows);
      fill_batch(w_.data, call.first_row, call.n, rows.data());
      const auto t0 = std::chrono::steady_clock::now();
      const ForestTimes t = p->predict(rows.data(), call.n, run, out.data());
      call.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      call.tuning = t.tuning;
      call.tuning_ms = t.tuning_ms;
      call.kernel = t.kernel;
      call.graph = t.graph;
      call.upload_ms = t.upload_ms;
      call.kernel_ms = t.kernel_ms;
      call.download_ms = t.download_ms;
      if (i == 0) r_.layout = t.layout;
      r_.last_schedule[serve::size_class(call.n)] = {t.kernel, t.schedule.describe()};
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
    r_.calls_ms = ms_since(calls_start);
    r_.wall_ms = ms_since(phase_start);
    p.reset();  // Auto's choices saved, the device memory freed, before the next phase
    check_pending();
    r_.at_end = count_cache(cache_dir_);
  }

  bool identical() const { return r_.mismatches == 0; }
  const PhaseResult& result() const { return r_; }

 private:
  static Device parse_serve_device(const std::string& s) {
    if (s == "auto") return Device::Auto;
    if (s == "cpu") return Device::Cpu;
    if (s == "gpu") return Device::Gpu;
    throw Error("--device: '" + s + "' is not one of auto, cpu, gpu");
  }

  // The kept predictions against csr direct on the same device and the same rows.
  void check_pending() {
    if (pending_.empty()) return;
    if (!reference_) {
      ForestConfig cfg;
      cfg.layout = ForestLayout::Csr;
      cfg.device = r_.device;
      cfg.cache_dir = "none";
      reference_ = std::make_unique<ForestPredictor>(w_.forest, cfg);
    }
    ForestRunOptions r;
    r.output = w_.output;
    r.kernel = ForestKernel::Direct;
    const std::size_t F = static_cast<std::size_t>(w_.data.n_features), width = static_cast<std::size_t>(w_.width);
    std::vector<float> rows, ref;
    for (const Sample& s : pending_) {
      const Call& call = r_.calls[s.call];
      rows.resize(static_cast<std::size_t>(call.n) * F);
      ref.resize(static_cast<std::size_t>(call.n) * width);
      fill_batch(w_.data, call.first_row, call.n, rows.data());
      reference_->predict(rows.data(), call.n, r, ref.data());
      ++r_.checked;
      if (std::memcmp(ref.data(), s.out.data(), ref.size() * sizeof(float)) == 0) continue;
      if (r_.mismatches++ == 0) {
        std::size_t at = 0;
        while (at < ref.size() && std::memcmp(&ref[at], &s.out[at], sizeof(float)) == 0) ++at;
        char b[256];
        std::snprintf(b, sizeof b, "first: call %zu, %lld rows (%s, %s), value %zu: %.9g, csr direct %.9g", s.call,
                      static_cast<long long>(call.n), to_string(call.tuning), to_string(call.kernel), at,
                      static_cast<double>(s.out[at]), static_cast<double>(ref[at]));
        r_.first_mismatch = b;
      }
    }
    pending_.clear();
  }

  const ForestServeConfig& c_;
  const ForestWorkload& w_;
  const std::vector<index_t>& batches_;
  std::string cache_dir_;
  PhaseResult r_;
  std::vector<Sample> pending_;
  std::unique_ptr<ForestPredictor> reference_;
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
    serve::print_phase(c, done.back()->result());
    std::fflush(stdout);
  }


  bool identical = true;
  for (const auto& ph : done) identical = identical && ph->identical();
  if (done.size() == 2) serve::print_cold_warm(c, done[0]->result(), done[1]->result());
  std::printf("\n%s\n", identical ? "every checked call's predictions are identical to csr direct's"
                                  : "SOME CALLS' PREDICTIONS DIFFER from csr direct's");

  if (!c.json.empty()) {
    std::vector<const PhaseResult*> results;
    for (const auto& ph : done) results.push_back(&ph->result());
    serve::write_serve_json(c, w, dir, temp != nullptr, results, identical);
  }
  return identical ? 0 : 2;
}

}  // namespace bench
}  // namespace canopy
