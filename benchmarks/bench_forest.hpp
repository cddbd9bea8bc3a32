// What canopy-bench forest and forest-study share: their common options, the model and data
// file loaded and checked, and the batches cut from the file.
#pragma once

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

// A batch of n rows: the file's rows, then (past its end) copies of them. jitter > 0 makes the
// copies a smoothed bootstrap: each feature moved by jitter x its standard deviation x a
// standard normal draw (deterministic), so a batch larger than the file holds distinct rows,
// as real batches do, instead of exact copies that row scheduling would group for free.
std::vector<float> forest_batch(const ForestData& d, index_t n, double jitter = 0);

}  // namespace bench
}  // namespace canopy
