// Internal: the GPU side of nearest-neighbour search behind a CUDA-free interface, one
// implementation per tree (each in its own .cu file, so they compile in parallel).
#pragma once

#include <memory>
#include <vector>

#include "executor/executor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/options.hpp"
#include "layouts/vp_tree.hpp"

namespace canopy {
namespace detail {

class KnnGpu {
 public:
  virtual ~KnnGpu() = default;
  // Uploads the queries and sizes the result buffers for k neighbours.
  virtual void set_queries(const float* queries, index_t n, int k) = 0;
  // Guided inspector + copy of the rows into pinned host memory (valid until the next call).
  virtual GuidedMatrixView inspect(const TopTree& top, GuidedRows rows, double* ms) = 0;
  // The guided inspector and scheduler both on the device (DeviceGuidedScheduler::supports()
  // must hold for the top-tree); the order stays there.
  virtual double inspect_on_device(const TopTree& top, GuidedRows rows) = 0;
  virtual double device_schedule(const TopTree& top) = 0;
  virtual std::vector<index_t> device_buckets() = 0;
  // Pinned memory for a schedule of the current queries; upload_order() sends it.
  virtual index_t* order_staging() = 0;
  virtual void upload_order() = 0;
  // Sort by the leaf of each query's greedy descent; the order stays on the device.
  virtual double leaf_sort() = 0;
  virtual std::vector<index_t> download_order() = 0;
  virtual std::vector<std::uint64_t> download_sorted_keys() = 0;
  virtual double execute(ExecutorKind kind, bool use_order, std::vector<index_t>* gpu_warp_nodes) = 0;
  virtual void download(float* distances, index_t* indices) = 0;
  // The pipelined hybrid run over the current queries in the chunks given as boundaries; the
  // order stays on the device.
  virtual PipelineStats pipelined(const TopTree& top, const TraversalOptions& opt, GuidedRows rows,
                                  const std::vector<index_t>& chunks) = 0;
};

std::unique_ptr<KnnGpu> make_knn_gpu(const KdTree& tree);
std::unique_ptr<KnnGpu> make_knn_gpu(const BallTree& tree);
std::unique_ptr<KnnGpu> make_knn_gpu(const VpTree& tree);

}  // namespace detail
}  // namespace canopy
