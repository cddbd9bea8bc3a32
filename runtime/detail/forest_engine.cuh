// Internal: ForestEngine<Layout>, the GPU side of forest inference for one layout. As in FIL,
// the layout is a template parameter and what differs between layouts is an `if constexpr`:
// the seed layouts launch executor/forest_kernels.cuh's kernels, the adaptive layout adds its
// own steps (AdaptiveSteps: schedule defaults, forest parts, row scheduling). Only .cu files
// include this.
#pragma once

#include <deque>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda.cuh"
#include "core/cuda_graph.cuh"
#include "executor/forest_adaptive_launch.cuh"
#include "executor/forest_kernels.cuh"
#include "layouts/device_copy.hpp"
#include "runtime/detail/forest_engine.hpp"
#include "runtime/detail/forest_trials.hpp"

namespace canopy {
namespace detail {

using gpu::GpuLimits;
GpuLimits current_gpu_limits();

// Per row: the outputs the adaptive strategies sum, and the bytes of one carried partial sum.
inline int sums_outputs(const ForestCommonView& c) { return c.leaf_width > 0 ? c.leaf_width : c.n_groups; }
inline std::size_t carry_size(const ForestCommonView& c) { return c.leaf_width > 0 ? sizeof(double) : sizeof(float); }
// More than 8 outputs per row: their registers leave room for one row and one tree per walk.
inline bool wide_sums(const ForestCommonView& c) { return sums_outputs(c) > 8; }

// What only the adaptive layout's engine has: the host facts its schedule defaults read, its
// strategies' launches over forest parts, row scheduling (the inspector and a radix sort) and
// the device buffers of both. Runs on the engine's stream (runtime/detail/forest_adaptive.cu).
class AdaptiveSteps {
 public:
  AdaptiveSteps(const AdaptiveForest& host, const AdaptiveForestView& device, const GpuLimits& gpu, cudaStream_t stream);

  // A strategy's schedule with its defaults resolved for a batch of n_rows; an Error for a
  // schedule this forest or GPU cannot take.
  ForestSchedule resolve(ForestKernel k, const ForestSchedule& s, index_t n_rows) const;
  // Bytes of nodes one part of a shared-forest strategy may take, beside its row tile.
  std::size_t part_budget(ForestKernel k, const ForestSchedule& s) const;
  // The parts: canonical tree ranges of at most part_bytes of nodes each.
  std::vector<std::pair<index_t, index_t>> parts(std::size_t part_bytes) const;
  void run(const gpu::AdaptiveBatch& b, ForestKernel k, const ForestSchedule& s);
  // Row scheduling: b's rows sorted by their inspector keys (top-tree depth `depth`); b then
  // reads them in execution order and writes each row's predictions through the order.
  void schedule_rows(int depth, gpu::AdaptiveBatch* b);

  const AdaptiveForest& host() const { return *host_; }
  const AdaptiveForestView& view() const { return view_; }
  const GpuLimits& gpu() const { return gpu_; }
  double mean_visits() const { return mean_visits_; }  // expected nodes per tree and row

 private:
  const AdaptiveForest* host_;  // the predictor's (it outlives the engine)
  AdaptiveForestView view_;     // device pointers
  GpuLimits gpu_;
  cudaStream_t stream_;
  double mean_visits_ = 0;
  int max_depth_ = 0;
  DeviceBuffer<unsigned char> carry_;  // splitting shared forest: sums between parts
  DeviceBuffer<std::uint64_t> keys_, keys_sorted_;
  DeviceBuffer<index_t> index_, order_;
  DeviceBuffer<float> rows_sorted_;  // row scheduling: the rows in execution order
  DeviceBuffer<unsigned char> sort_temp_;
};

// The seed layouts have no steps of their own.
struct NoSteps {
  template <class... Args>
  explicit NoSteps(const Args&...) {}
};

// What one call's launch depends on besides the engine's forest (GraphReplay's key). Calls with
// row scheduling (several launches and a sort) are never replayed.
struct ForestLaunchKey {
  ForestKernel kernel = ForestKernel::Direct;
  ForestSchedule schedule;
  const float* rows = nullptr;
  float* out = nullptr;
  index_t n_rows = 0;
  int width = 0;
  ForestOutput output = ForestOutput::Prob;
  bool f64 = false;
  bool operator==(const ForestLaunchKey& o) const {
    return kernel == o.kernel && schedule == o.schedule && rows == o.rows && out == o.out &&
           n_rows == o.n_rows && width == o.width && output == o.output && f64 == o.f64;
  }
};

template <class Layout>
class ForestEngine {
 public:
  static constexpr bool kAdaptive = std::is_same<Layout, AdaptiveForest>::value;
  using View = typename DeviceCopy<Layout>::View;
  using Steps = std::conditional_t<kAdaptive, AdaptiveSteps, NoSteps>;
  using Batch = std::conditional_t<kAdaptive, gpu::AdaptiveBatch, gpu::ForestBatch>;

  // Uploads the layout's arrays (its map_view) and waits for them.
  explicit ForestEngine(const Layout& layout);

  // `kernel` is the one to run: the adaptive layout's caller resolves Auto first; Auto on the
  // other layouts runs the direct kernel. The leaf output runs its own kernel, whatever
  // `kernel` says. width: floats per row of `out` (f64: out holds doubles, twice the values'
  // count). trials (adaptive layout): Auto's trial runs, timed after the call's kernel.
  void predict(const float* rows, index_t n_rows, float* out, int width, bool f64, ForestKernel kernel,
               const ForestRunOptions& opt, ForestTimes* times, ForestTrialRuns* trials = nullptr);

  // The pieces of a call, for the adaptive layout's row order and tuner.
  CallerStream on_caller_stream(stream_t caller) { return CallerStream(stream(), caller, caller_ready_, finished_); }
  // The rows where the kernels read them: `rows` itself when it is device memory, else a copy
  // in the engine's row buffer.
  const float* device_rows(const float* rows, index_t n_rows);
  // The engine's prediction buffer, with room for n values.
  float* out_buffer(std::size_t n);
  cudaStream_t stream() const { return stream_.get(); }
  void sync() const { stream_.sync(); }
  const View& view() const { return forest_.view(); }
  const GpuLimits& gpu() const { return gpu_; }
  Steps& steps() { return steps_; }

 private:
  // The leaf output: its tables uploaded on first use (most callers never ask for it).
  void predict_leaves(const float* rows, index_t n_rows, float* out);
  void predict_leaves_tables();  // their upload, once
  // The call's kernel(s) for batch b (the leaf output's too).
  void launch(const Batch& b, ForestKernel kernel, const ForestSchedule& schedule);
  // Auto's trials on b's rows (adaptive layout), each between its two events.
  void run_trials(const Batch& b, const ForestTrialRuns* trials);

  Stream stream_;  // first: everything below is freed on it before it goes
  const Layout* host_;  // the predictor's (it outlives the engine)
  GpuLimits gpu_;
  DeviceCopy<Layout> forest_;
  Steps steps_;
  Event caller_ready_, finished_;
  Event start_, uploaded_, scheduled_, computed_, done_;
  std::deque<Event> trial_events_;   // Auto's trials: a start and an end per run (Events do not move)
  DeviceBuffer<float> trial_out_;    // their predictions, never read
  std::vector<char> trial_ran_;      // per trial run: it launched
  GraphReplay<ForestLaunchKey> graphs_;
  DeviceBuffer<float> rows_, out_;
  bool leaf_table_ = false;
  DeviceBuffer<index_t> leaf_id_begin_, leaf_order_;
  DeviceBuffer<std::int32_t> leaf_source_id_, leaf_number_;
};

// Instantiated once each, in runtime/detail/forest_engine.cu.
extern template class ForestEngine<CsrForest>;
extern template class ForestEngine<ReorgForest>;
extern template class ForestEngine<HierarchicalForest>;
extern template class ForestEngine<AdaptiveForest>;

}  // namespace detail
}  // namespace canopy
