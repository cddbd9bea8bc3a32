// Internal: the GPU side of forest inference, behind a CUDA-free interface. Holds the device
// copy of one layout, the row and prediction buffers, and times each phase with CUDA events
// on its own non-blocking stream.
#pragma once

#include <memory>
#include <vector>

#include "layouts/forest_adaptive.hpp"
#include "layouts/forest_layouts.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace detail {

class ForestGpuEngine {
 public:
  explicit ForestGpuEngine(const CsrForest& layout);
  explicit ForestGpuEngine(const ReorgForest& layout);
  explicit ForestGpuEngine(const HierarchicalForest& layout);
  explicit ForestGpuEngine(const AdaptiveForest& layout);
  ~ForestGpuEngine();

  // Rows in, (row scheduling,) the kernel, predictions out; fills the times, the kernel that
  // ran and its schedule.
  void predict(const float* rows, index_t n_rows, float* out, int width, const ForestRunOptions& opt,
               ForestTimes* times);
  // Adaptive layout: the performance model's estimates, feasible strategies first, fastest first.
  std::vector<ForestTrial> estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt);
  // Adaptive layout: the rows' execution order under row scheduling (inspector + sort).
  std::vector<index_t> row_order(const float* rows, index_t n_rows, int depth);
  // Adaptive layout: times a grid of schedules on these rows (ForestPredictor::tune).
  std::vector<ForestTrial> tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt, int repeat);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace canopy
