// What canopy-bench forest-serve's serving loop (bench_forest_serve.cpp) hands its reporting
// (bench_forest_serve_report.cpp): one phase's calls and counters, and the statistics over them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/bench_forest.hpp"
#include "core/device.hpp"
#include "core/types.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace bench {
namespace serve {

// The first-call target of the issue: a never-seen size class's first call at most this much
// slower than the class's steady median.
constexpr double kFirstCallBudgetMs = 5.0;

// Auto's size class: floor(log2 n).
inline int size_class(index_t n) {
  int c = 0;
  while ((index_t{2} << c) <= n) ++c;
  return c;
}

// Files below a directory (0 when it does not exist), and those of Auto's choices.
struct CacheCount {
  int files = 0, choices = 0;
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

// One phase as it ran: what the serving loop measured, all the reporting needs.
struct PhaseResult {
  std::string name;
  bool own_process = false;
  CacheCount at_start, at_end;
  Device device = Device::Cpu;
  ForestLayout layout = ForestLayout::Csr;
  double build_ms = 0, calls_ms = 0, wall_ms = 0;
  std::vector<Call> calls;
  std::map<int, std::pair<ForestKernel, std::string>> last_schedule;  // per size class
  std::size_t checked = 0, mismatches = 0;
  std::string first_mismatch;
};

// The phase's tables (decades, size classes, the check) under its header line.
void print_phase(const ForestServeConfig& c, const PhaseResult& r);
nlohmann::json phase_json(const ForestServeConfig& c, const PhaseResult& r);
// The cold / warm side by side, once both ran in this process.
void print_cold_warm(const ForestServeConfig& c, const PhaseResult& cold, const PhaseResult& warm);
// The --json file: the run's settings and every phase.
void write_serve_json(const ForestServeConfig& c, const ForestWorkload& w, const std::string& cache_dir, bool temporary,
                      const std::vector<const PhaseResult*>& phases, bool identical);

}  // namespace serve
}  // namespace bench
}  // namespace canopy
