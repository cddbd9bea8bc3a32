// Internal: the GPU side of point correlation, behind a CUDA-free interface. Holds the device
// copy of the tree, the queries, results, the scheduling matrix (device and pinned host) and
// the order, and times each phase with CUDA events on its own non-blocking stream.
#pragma once

#include <memory>
#include <vector>

#include "executor/executor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/options.hpp"

namespace canopy {
namespace detail {

class PcGpuEngine {
 public:
  explicit PcGpuEngine(const KdTree& tree);
  ~PcGpuEngine();

  void set_queries(const float* queries, index_t n);
  // Inspector kernel + asynchronous copy of the matrix into pinned host memory. The view
  // stays valid until the next inspect().
  SchedulingMatrixView inspect(const TopTree& top, float radius2, double* ms);
  // The inspector kernel alone: the matrix stays on the device for device_sandpile().
  double inspect_on_device(const TopTree& top, float radius2);
  // The sandpile of the device matrix, on the device; the order stays there for execute().
  double device_sandpile();
  // Pinned host memory for a schedule of n queries; upload_order() sends it to the device
  // for the next execute().
  index_t* order_staging(index_t n);
  void upload_order(index_t n);
  // Leaf sort on the device (leaf search kernel + stable radix sort); the order stays there.
  double leaf_sort();
  std::vector<index_t> download_order();
  // The matrix of the last inspection, copied into pinned host memory.
  SchedulingMatrixView download_matrix();
  // Runs the executor in the uploaded order (use_order) or the input order.
  double execute(ExecutorKind kind, float radius2, bool use_order, std::vector<index_t>* gpu_warp_nodes);
  void download_counts(index_t* out);
  // The pipelined hybrid run over the current queries in the chunks given as boundaries; the
  // order stays on the device.
  PipelineStats pipelined(const TopTree& top, float radius2, const TraversalOptions& opt, const std::vector<index_t>& chunks);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace canopy
