// Internal: the GPU side of forest inference, behind a CUDA-free interface. make_forest_gpu
// uploads one layout into a ForestEngine<Layout> (runtime/detail/forest_engine.cuh), which
// holds the device copy, the row and prediction buffers and its own non-blocking stream, and
// times each phase with CUDA events. Every call honours ForestRunOptions::stream.
#pragma once

#include <memory>
#include <vector>

#include "layouts/forest_adaptive.hpp"
#include "layouts/forest_layouts.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace detail {

class ForestGpu {
 public:
  virtual ~ForestGpu() = default;
  // Rows in, (row scheduling,) the kernel, predictions out; fills the times, the kernel that
  // ran and its schedule. rows and out may be host or device memory. width: floats per row
  // (f64: out holds doubles, twice the output's values).
  virtual void predict(const float* rows, index_t n_rows, float* out, int width, bool f64, const ForestRunOptions& opt,
                       ForestTimes* times) = 0;
  // Auto's tuning of these batch sizes now (ForestPredictor::optimize); the adaptive layout only.
  virtual std::vector<ForestTuned> optimize(const float* rows, index_t n_rows, const std::vector<index_t>& batch_sizes,
                                            int width, const ForestRunOptions& opt);
  // The adaptive layout's extras (the other layouts: an Error).
  // The performance model's estimates, feasible strategies first, fastest first.
  virtual std::vector<ForestTrial> estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt);
  // The rows' execution order under row scheduling (inspector + sort), after the work on `stream`.
  virtual std::vector<index_t> row_order(const float* rows, index_t n_rows, int depth, stream_t stream);
  // Times a grid of schedules on these rows (ForestPredictor::tune).
  virtual std::vector<ForestTrial> tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt,
                                        int repeat);
};

// The adaptive engine reads its host layout later (the model's shapes, the warp emulator): the
// layout must outlive the engine.
std::unique_ptr<ForestGpu> make_forest_gpu(const CsrForest& layout);
std::unique_ptr<ForestGpu> make_forest_gpu(const ReorgForest& layout);
std::unique_ptr<ForestGpu> make_forest_gpu(const HierarchicalForest& layout);
// choices: where Auto keeps its tuned choices (runtime/detail/forest_choices.hpp).
std::unique_ptr<ForestGpu> make_forest_gpu(const AdaptiveForest& layout, const ForestConfig& config,
                                           std::uint64_t fingerprint);  // runtime/detail/forest_adaptive.cu

}  // namespace detail
}  // namespace canopy
