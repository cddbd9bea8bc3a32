// Internal: the GPU side of Barnes-Hut behind a CUDA-free interface.
#pragma once

#include <memory>
#include <vector>

#include "executor/executor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "layouts/octree.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/options.hpp"

namespace canopy {
namespace detail {

class BhGpu {
 public:
  // xyz [n][3] and mass [n]: the bodies in their original order (the queries).
  BhGpu(const Octree& tree, const float* xyz, const float* mass);
  ~BhGpu();
  void set_parameters(float theta2, float eps2);
  // Inspector + copy of the matrix into pinned host memory (valid until the next call).
  SchedulingMatrixView inspect(const TopTree& top, double* ms);
  // The inspector alone; the matrix stays on the device for device_sandpile().
  double inspect_on_device(const TopTree& top);
  double device_sandpile();
  SchedulingMatrixView download_matrix();
  index_t* order_staging();
  void upload_order();
  // Sort the bodies by Morton code; the order stays on the device.
  double morton_sort();
  std::vector<index_t> download_order();
  std::vector<std::uint64_t> download_sorted_keys();
  double execute(ExecutorKind kind, bool use_order, std::vector<index_t>* gpu_warp_nodes);
  void download(float* forces);
  // The pipelined hybrid run in the chunks given as boundaries; the order stays on the device.
  PipelineStats pipelined(const TopTree& top, const TraversalOptions& opt, const std::vector<index_t>& chunks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace canopy
