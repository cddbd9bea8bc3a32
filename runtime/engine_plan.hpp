// The engine's plan of a call, CUDA-free and not templated (runtime/engine.cpp defines it): the
// option checks, the memory budget's batches and chunks, HybridKey's depth rule, and the trials'
// samples and options. runtime/engine.hpp runs the plans.
#pragma once

#include <cstddef>
#include <vector>

#include "core/device.hpp"
#include "core/types.hpp"
#include "executor/executor.hpp"
#include "runtime/options.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

// The pipeline's first chunk is chunk / kPipelineRamp (TraversalOptions::pipeline_ramp).
constexpr index_t kPipelineRamp = 8;

// Checks the options every workload shares and starts a call's statistics: a depth outside
// 0..height, a negative row_cap, device gpu on an object made for the cpu (`who` names it), are
// errors. Depth 0 becomes default_depth capped at the height, or kDefaultPositionalDepth for
// guided rows without a probe on a built-in tree (a custom tree's fan-out is unknown: a deeper
// top-tree could have millions of leaves).
TraversalStats begin_call(const TraversalOptions& opt, Device held, const char* who, int height, int default_depth,
                          bool guided, bool builtin_tree);

// How a GPU run of n queries is carried out under the options and the memory budget.
struct RunPlan {
  bool pipelined = false;
  index_t chunk = 0;
};
// fixed_bytes: the tree, queries and results on the device; per_query_bytes: what the pipeline
// holds per query of a chunk (pipeline_bytes_per_query); free_bytes: the device's free memory.
// Errors name the sizes: a budget (or device) too small for the tree, or for the tree plus the
// queries and results, or for one query's matrix row.
RunPlan plan_run(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t fixed_bytes,
                 std::size_t per_query_bytes, std::size_t free_bytes);
// Queries per call when the queries and results themselves (per_query_bytes each) do not fit
// the memory budget beside the tree (tree_bytes): batches that leave room for their whole
// matrix (matrix_bytes_per_query). n when there is no budget or the queries and results fit
// (the matrix is then chunked instead); an error naming the sizes when not even one query fits.
index_t budget_batch(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t per_query_bytes,
                     std::size_t matrix_bytes_per_query);
// Appends one batch's statistics (the queries first .. first + batch) to the whole call's.
void append_batch(TraversalStats& all, TraversalStats&& part, index_t first, bool first_batch);

// A pipeline's chunks, as boundaries 0, ..., n (a pipelined schedule's buckets are its chunks):
// of `chunk` queries each, or with `ramp` (and more than one chunk) of chunk / kPipelineRamp,
// doubling up to `chunk`.
std::vector<index_t> chunk_boundaries(index_t n, index_t chunk, bool ramp);
// Whether a pipelined run under `opt` ramps its chunks (TraversalOptions::pipeline_ramp).
inline bool pipeline_ramps(const TraversalOptions& opt) {
  return opt.pipeline_ramp && opt.schedule == ScheduleKind::Hybrid;
}
// Device bytes per query of a chunk the pipeline's two buffer slots need under schedule `kind`;
// row_entries: the top-leaves (unguided) or the entries per guided row (GuidedRows::width).
std::size_t pipeline_bytes_per_query(ScheduleKind kind, bool guided, index_t row_entries);

// HybridKey's top-tree depth for n queries: the shallowest depth whose top-tree has at least
// n / kKeyQueriesPerLeaf top-leaves (n / kHintedKeyQueriesPerLeaf for a key with a home hint),
// else the tree's height. leaves: top_leaves_by_depth(tree).
int key_depth(const std::vector<index_t>& leaves, index_t n, bool hinted);

// m query indices spread evenly over 0..n-1 (all of them when m >= n): row i is i * n / m.
std::vector<index_t> spread_sample(index_t n, index_t m);
// The rows of a row-major [n][dims] array at `rows`.
std::vector<float> gather_rows(const float* data, int dims, const std::vector<index_t>& rows);
// The options of one trial run at `depth`: nothing kept, nothing counted.
TraversalOptions trial_options(const TraversalOptions& opt, int depth);
// A run's total time: the wall time when pipelined, else inspect + schedule + execute.
double run_ms(const TraversalStats& s);

}  // namespace canopy
