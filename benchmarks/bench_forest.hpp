// What canopy-bench forest, forest-study and forest-serve share: their common options, the model
// and data file loaded and checked, and the batches cut from the file; forest-serve's options.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "io/forest_data.hpp"
#include "layouts/forest.hpp"

namespace canopy {
namespace bench {

// --model, --data, --label, --batch, --repeat, --row-depth, --output, --json, --graph.
void add_forest_input_options(CLI::App& app, ForestInputs& c);

// "100,10000" -> row counts; "margin" / "prob" / "class".
std::vector<index_t> parse_forest_batches(const std::string& s);
ForestOutput parse_forest_output(const std::string& s);

// The inputs loaded: the model, the data file (checked against it), the batch sizes and the
// output, with the time each file took to read.
struct ForestWorkload {
  Forest forest;
  ForestData data;
  std::vector<index_t> batches;
  ForestOutput output = ForestOutput::Prob;
  int width = 1;  // values per row of the output
  double load_ms = 0, read_ms = 0;
};
ForestWorkload load_forest_workload(const ForestInputs& c);
// The --json keys forest and forest-serve share: workload, model, model_description, data,
// rows_in_file, features, output, gpu.
nlohmann::json forest_json_header(const char* workload, const ForestInputs& c, const ForestWorkload& w);

// A batch of n rows: the file's rows, then (past its end) copies of them. jitter > 0 makes the
// copies a smoothed bootstrap: each feature moved by jitter x its standard deviation x a
// standard normal draw (deterministic), so a batch larger than the file holds distinct rows,
// as real batches do, instead of exact copies that row scheduling would group for free.
std::vector<float> forest_batch(const ForestData& d, index_t n, double jitter = 0);

// canopy-bench forest-serve: the default predictor (ForestConfig{}, ForestRunOptions{}) under a
// stream of calls of random batch sizes, as a server sees them: per-call latency, from an empty
// cache (cold) and again from the cache the cold phase filled (warm), in this process or each
// phase in its own (benchmarks/bench_forest_serve.cpp).
struct ForestServeConfig : ForestInputs {
  ForestServeConfig() : ForestInputs("1", 1, 0) {}
  long long calls = 10000;       // predict() calls per phase
  long long min_batch = 1;       // batch sizes: log-uniform in [min_batch, max_batch]
  long long max_batch = 10000;
  std::uint64_t seed = 1;        // of the batch sizes (the same sequence in every phase)
  std::string cache_dir;         // "" = a fresh temporary directory, removed at the end
  std::string phase = "both";    // cold, warm or both (cold then warm in this process)
  std::string device = "auto";   // ForestConfig::device: auto, cpu or gpu
  long long steady_after = 100;  // the "steady" statistics leave out the calls before this one
  long long check_every = 100;   // every n-th call is checked against csr direct (and every
                                 // call that ran a prior or timed a trial)
};
void add_forest_serve_options(CLI::App& app, ForestServeConfig& c);
int run_forest_serve(const ForestServeConfig& c);

}  // namespace bench
}  // namespace canopy
