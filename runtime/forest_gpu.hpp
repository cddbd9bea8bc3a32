// Internal: the GPU side of forest inference, behind a CUDA-free interface. Holds the device
// copy of one layout, the row and prediction buffers, and times each phase with CUDA events
// on its own non-blocking stream.
#pragma once

#include <memory>

#include "layouts/forest_layouts.hpp"
#include "runtime/forest.hpp"

namespace canopy {
namespace detail {

class ForestGpuEngine {
 public:
  explicit ForestGpuEngine(const CsrForest& layout);
  explicit ForestGpuEngine(const ReorgForest& layout);
  explicit ForestGpuEngine(const HierarchicalForest& layout);
  ~ForestGpuEngine();

  // Rows in, the kernel, predictions out; fills upload/kernel/download milliseconds.
  void predict(const float* rows, index_t n_rows, float* out, int width, ForestOutput output, ForestKernel kernel,
               ForestTimes* times);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace canopy
