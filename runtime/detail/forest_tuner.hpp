// Internal: Tahoe's performance model and a small auto-tuner over the adaptive layout's GPU
// engine. The model reads the GPU's hardware parameters (measured once, cached on disk), the
// warp emulator's coalescing ratios and each strategy's calibrated times (both from the first
// batch seen); the tuner times a grid of schedules around the model's choice. CUDA-free.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "layouts/forest_adaptive.hpp"
#include "runtime/forest_predictor.hpp"
#include "scheduler/forest_model.hpp"
#include "scheduler/forest_rows.hpp"

namespace canopy {
namespace gpu {
struct AdaptiveBatch;
}
namespace detail {

template <class Layout>
class ForestEngine;

class ForestTuner {
 public:
  // The engine must outlive the tuner.
  explicit ForestTuner(ForestEngine<AdaptiveForest>& engine) : engine_(engine) {}

  // Canopy's model (scheduler/forest_model.hpp) for this batch: every strategy, feasible and
  // fastest first (ForestPredictor::model_estimates). GPU work only on the first batch.
  std::vector<ForestTrial> estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt);
  // Every schedule of the grid that runs, timed on these rows, the fastest first
  // (ForestPredictor::tune).
  std::vector<ForestTrial> tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt, int repeat);
  // Auto's strategy and schedule for this batch. The model's pick, unless other strategies'
  // estimates come within a factor of 2 of it: then those (at most three) run on the batch
  // itself, medians of interleaved runs, and the fastest wins. Then, unless the caller set
  // schedule knobs, the winner's knobs are refined on the batch one at a time (each knob's
  // values against the best so far, the rest fixed), within about a quarter of a second of
  // GPU time. One noisy calibration cannot mislead it, and the check runs once per batch size
  // (its power of two) and row-scheduling depth; later batches of the class only look it up.
  // The schedule returned is unresolved (the knobs the check set; the engine fills the rest).
  std::pair<ForestKernel, ForestSchedule> choose(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt);

 private:
  // Each strategy's time per row on this forest with the GPU full, and its time for a small
  // batch (default schedules); zero for a strategy this forest cannot take.
  struct Calibration {
    ForestKernel kernel;
    double row_ns = 0;    // per row, the GPU full
    double small_ns = 0;  // a small batch, whole
  };
  const ForestHardware& hardware(const std::string& cache);
  // The first batch seen: the warp emulator's profile and the calibration, from these rows.
  void learn_from_first_batch(const float* rows, index_t n_rows, stream_t caller);
  void calibrate(const float* rows, index_t n_rows);
  // The model's view of one strategy's run of n_rows (default schedule).
  ForestShape shape(ForestKernel k, index_t n_rows) const;
  // The caller's rows on the device as the kernels read them (row scheduling applied), with
  // the engine's own output buffer: what tune() and choose() time.
  gpu::AdaptiveBatch device_batch(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt);

  ForestEngine<AdaptiveForest>& engine_;
  std::unique_ptr<ForestHardware> hardware_;
  std::string hardware_path_;
  std::unique_ptr<ForestAccessProfile> profile_;
  std::vector<Calibration> calibrated_;
  // choose(): (size class, row depth, caller's knobs) -> strategy and knobs
  std::map<std::tuple<int, int, bool>, std::pair<ForestKernel, ForestSchedule>> verified_;
};

}  // namespace detail
}  // namespace canopy
