#include "runtime/knn_gpu.cuh"

namespace canopy {
namespace detail {

std::unique_ptr<KnnGpu> make_knn_gpu(const KdTree& tree) { return std::make_unique<KnnGpuImpl<KdTree>>(tree); }

}  // namespace detail
}  // namespace canopy
