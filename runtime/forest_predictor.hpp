// Canopy's public API for decision-forest inference. Compiles with a plain C++ compiler.
//
//   canopy::Forest model = canopy::Forest::load("model.json");  // XGBoost JSON / UBJSON or Canopy JSON
//   canopy::ForestPredictor predictor(model);                     // the defaults are the fast path
//   std::vector<float> out(n * predictor.output_width(canopy::ForestOutput::Prob));
//   canopy::ForestTimes t = predictor.predict(rows, n, out.data());
//
// The defaults (ForestLayout::Auto, ForestKernel::Auto) run the fastest layout and strategy
// this machine has, with the same bits as every other layout and kernel: on the GPU the
// adaptive layout, whose strategy and schedule are chosen per batch-size class (a prior at
// once, refined on the calls' own batches at most one extra kernel run per call, or by
// optimize(), and kept in the cache directory for the next process; docs/forests.md, "What
// runs when"). A layout or kernel named in ForestConfig / ForestRunOptions runs as named.
//
// rows are row-major float32 [n][n_features], NaN = missing. On the GPU, rows and out may be
// host or device memory. ForestOutput::Leaf (XGBoost's pred_leaf) runs on either device; on
// the GPU it has a kernel of its own (a thread per row and tree), whatever run.kernel says.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "executor/forest_schedule.hpp"
#include "layouts/forest.hpp"
#include "layouts/forest_layouts.hpp"
#include "core/types.hpp"
#include "core/device.hpp"

namespace canopy {

// The adaptive layout's build options.
struct AdaptiveConfig {
  bool node_rearrangement = true;  // the more probable child first
  bool tree_rearrangement = true;  // SimHash + LSH order for the shared-data strategy's copy
  int token_nodes = 4;             // SimHash: nodes per token (T_nodes)
  int hash_bits = 128;             // SimHash: fingerprint bits (L_hash)
  int chunks = 64;                 // LSH: chunks per fingerprint (M)
};

// What building the adaptive layout did (ForestPredictor::adaptive_report()).
struct AdaptiveReport {
  double similarity_ms = 0;      // SimHash + LSH + ordering, wall clock
  double build_ms = 0;           // the whole layout, wall clock
  int threads = 0;               // threads the trees are dealt to round-robin (a warp's lanes)
  double cv_model_order = 0;     // coefficient of variation of the per-thread sums of the trees'
                                 // expected depths (training-weighted path lengths), model order
  double cv_rearranged = 0;      // the same in the SimHash + LSH order
  double expected_visits = 0;    // mean nodes a row visits per tree (training weights)
  std::string details;
};

struct ForestConfig {
  // Auto: the adaptive layout on the GPU, the CPU's fastest layout on the CPU (layout()).
  ForestLayout layout = ForestLayout::Auto;
  Device device = Device::Auto;
  // Where Auto keeps its choices per model, GPU and batch-size class (forest_choices/ below
  // it): empty takes $CANOPY_CACHE_DIR, else $XDG_CACHE_HOME/canopy, else ~/.cache/canopy;
  // "none" keeps nothing on disk.
  std::string cache_dir;
  HierarchicalOptions hierarchical;  // used by ForestLayout::Hierarchical
  AdaptiveConfig adaptive;           // used by ForestLayout::Adaptive
};

struct ForestRunOptions {
  ForestOutput output = ForestOutput::Prob;
  // Auto: on the adaptive layout the strategy and schedule chosen for the batch's size class;
  // on the other layouts the direct kernel. The CPU ignores the kernel.
  ForestKernel kernel = ForestKernel::Auto;
  // Adaptive layout: the strategy's parameters. With ForestKernel::Auto and every knob left at
  // its default, auto chooses the knobs too; knobs the caller sets are kept.
  ForestSchedule schedule;
  // Auto: a size class not yet tuned refines its choice on the calls' own batches, each call
  // timing at most one other schedule (one more kernel run, into a scratch buffer) until the
  // class is settled. Off: untuned classes run their prior until optimize() or the cache
  // tunes them.
  bool online_tuning = true;
  // Adaptive layout on the GPU: > 0 turns on inspector-scheduled rows: the inspector walks the
  // first `row_schedule_depth` levels of the leading trees for every row, and rows with equal
  // top-leaf signatures run in the same warps. Predictions are unchanged, bit for bit.
  int row_schedule_depth = 0;
  // The performance model's hardware parameters (Auto): this cache file, or the default
  // (see scheduler/forest_model.hpp) when empty.
  std::string hardware_cache;
  // A cudaStream_t of the caller's (null: Canopy's own non-blocking stream only). The call's
  // GPU work starts after the work queued there, and the stream waits for the call's work.
  // On the GPU, rows and out may then be device memory the caller's stream writes and reads.
  stream_t stream = nullptr;
  // GPU: a call whose kernel, schedule, rows, sizes and buffers came in at least 3 of the
  // recent calls (the last 32 distinct ones) replays a CUDA graph of its launch (captured at its
  // 4th), so the GPU runs the call's event records and kernel back to back. Off: every call
  // launches directly.
  bool graph = true;
};

// Where a call's strategy and schedule came from.
enum class ForestTuning {
  Fixed,     // named by the caller (or the layout has one kernel; the CPU)
  Prior,     // Auto, a size class not tuned yet: its choice so far (the prior: the nearest tuned class's choice, else the rule)
  Refining,  // Auto, the class being tuned on the calls' batches: this call ran or previewed another schedule
  Tuned,     // Auto, the class's tuned choice (online, optimize() or the cache)
};
const char* to_string(ForestTuning t);

struct ForestTimes {
  double upload_ms = 0;    // GPU: the rows to the device (CUDA events)
  double schedule_ms = 0;  // GPU: inspector + sort of the rows (row scheduling), CUDA events
  double kernel_ms = 0;    // GPU: the kernel (CUDA events); CPU: the executor (wall clock)
  double download_ms = 0;  // GPU: the predictions back (CUDA events)
  double tuning_ms = 0;    // GPU: Auto's trial of another schedule in this call: its kernel or preview (CUDA events)
  double wall_ms = 0;      // wall clock of the whole predict() call
  ForestLayout layout = ForestLayout::Csr;     // the predictor's layout (Auto resolved)
  ForestKernel kernel = ForestKernel::Direct;  // the kernel that ran (Auto resolved)
  ForestSchedule schedule;                     // its parameters, defaults resolved (adaptive)
  ForestTuning tuning = ForestTuning::Fixed;   // where kernel and schedule came from
  bool graph = false;                          // GPU: the launch ran as a replayed CUDA graph
};

// What optimize() settled for one batch size.
struct ForestTuned {
  index_t batch_size = 0;
  ForestKernel kernel = ForestKernel::Direct;
  ForestSchedule schedule;  // resolved for batch_size
  double kernel_ms = 0;     // its kernel time on the batch (median)
  int trials = 0;           // trial runs it took (0: the class was tuned already)
};

// One schedule the tuner tried, and its kernel time (median).
struct ForestTrial {
  ForestKernel kernel = ForestKernel::Direct;
  ForestSchedule schedule;
  double kernel_ms = 0;
  double model_ns_per_row = 0;  // Canopy's model: the batch's estimated time / rows (inf: infeasible)
  double paper_ns_per_row = 0;  // equations 1-7 as printed (inf: infeasible)
};

namespace detail {
class ForestGpu;
}

// Several host threads may call one predictor at once. On the GPU its calls take turns on the
// predictor's lock (its GPU buffers, events, stream, replayed graphs and Auto's state are one
// set); on the CPU they run side by side (the layout is read-only). Threads whose GPU calls
// should overlap each take a predictor (they may share the Forest).
class ForestPredictor {
 public:
  // Builds the layout from `forest` (which need not outlive the predictor) and, on the GPU,
  // uploads it. Device::Auto picks the GPU when there is one.
  explicit ForestPredictor(const Forest& forest, const ForestConfig& config = {});
  ~ForestPredictor();
  ForestPredictor(const ForestPredictor&) = delete;
  ForestPredictor& operator=(const ForestPredictor&) = delete;

  Device device() const;
  ForestLayout layout() const;
  int n_features() const;
  // Values per row of an output kind (the Class output of a regressor is an Error).
  int output_width(ForestOutput out) const;
  // Bytes of the layout's arrays (the same on the host and the device).
  std::size_t footprint_bytes() const;
  // Whether predict() accepts this kernel here (always true on the CPU, which ignores it).
  bool supports(ForestKernel k) const;
  // Layout details for reports, e.g. "subtree depth 6, root depth 9, 1234 subtrees".
  std::string layout_details() const;

  // rows: [n_rows][n_features()]; out: [n_rows][output_width(opt.output)]. Inputs, options,
  // outputs, as every call (docs/api.md); without options, the default call.
  ForestTimes predict(const float* rows, index_t n_rows, const ForestRunOptions& opt, float* out);
  ForestTimes predict(const float* rows, index_t n_rows, float* out) { return predict(rows, n_rows, {}, out); }
  // The same with float64 results (Margin, Prob, Class): a random forest's float64 sums as
  // scikit-learn computes them, bit for bit; an XGBoost model's float32 results, widened.
  // (A name of its own: an overload on the output's type would make predict(.., nullptr)
  // ambiguous.)
  ForestTimes predict_f64(const float* rows, index_t n_rows, const ForestRunOptions& opt, double* out);
  ForestTimes predict_f64(const float* rows, index_t n_rows, double* out) { return predict_f64(rows, n_rows, {}, out); }

  // Auto, now rather than on the callers' time: tunes the size class of each batch size on
  // batches cut from `rows` (repeated when a batch is larger), then saves the choices in the
  // cache directory. Classes tuned already are looked up. Nothing to tune on the CPU or when
  // opt.kernel names a kernel: an empty result.
  std::vector<ForestTuned> optimize(const float* rows, index_t n_rows, const std::vector<index_t>& batch_sizes,
                                    const ForestRunOptions& opt = {});

  // Adaptive layout on the GPU. The performance model's estimates for this batch, one per
  // strategy (infeasible: infinite), fastest first, from the hardware parameters of
  // opt.hardware_cache; the rows feed the warp emulator's coalescing ratios (first call only).
  std::vector<ForestTrial> model_estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt = {});
  // A small auto-tuner: times a grid of schedules around the model's choice on these rows
  // (kernel time, median of `repeat`) and returns every trial, the fastest first.
  std::vector<ForestTrial> tune(const float* rows, index_t n_rows, const ForestRunOptions& opt = {}, int repeat = 3);
  const AdaptiveReport& adaptive_report() const;

  // Adaptive layout, row scheduling on its own: the execution order predict() uses with
  // row_schedule_depth = depth (order[i] = the row run at position i). GPU: the inspector
  // kernel and a radix sort, after the work queued on `stream` (as ForestRunOptions::stream);
  // CPU: scheduler/forest_rows.hpp's reference, the same order.
  std::vector<index_t> schedule_rows(const float* rows, index_t n_rows, int depth, stream_t stream = nullptr);
  // The warp emulator (scheduler/forest_rows.hpp): distinct nodes per warp of 32 rows taken in
  // `order` (null: as given), summed over trees, averaged over up to max_warps warps.
  double nodes_per_warp(const float* rows, index_t n_rows, const index_t* order, index_t max_warps = 1024) const;

 private:
  ForestTimes run(const float* rows, index_t n_rows, float* out, bool f64, const ForestRunOptions& opt);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canopy
