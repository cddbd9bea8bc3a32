// The kd-tree built on the GPU, level by level: KdTree::build_on_gpu. It gives KdTree::build's
// tree bit for bit. What makes that possible is that the CPU tree is defined by the points alone:
// a node's points are the n / 2 first (or the rest) of its parent's in (coordinate, index) order,
// kept in ascending index order (detail::split_stable), and its box is the min and max of its
// points with zero stored as +0.
//
// The build keeps, for every dimension d, the points' ids sorted by (coordinate d, id) within each
// node (one stable radix sort per dimension at the start). A node's box is then the first and last
// entry of each list, its median the middle entry of its split dimension's list, and the split of
// a level is one stable partition of each list (a scan of the left flags and a scatter). The node
// layout (ids, sizes, depths) depends on n and the leaf size alone, so the host knows every level's
// size in advance and the build needs no synchronisation until the tree is copied out.
#include <string>

#include "layouts/kdtree.hpp"
#include "layouts/median_tree_gpu.cuh"

namespace canopy {

struct KdTreeGpuBuilder::Impl {
  MedianGpuBuild core;
};

KdTreeGpuBuilder::KdTreeGpuBuilder() = default;
KdTreeGpuBuilder::~KdTreeGpuBuilder() = default;
KdTreeGpuBuilder::KdTreeGpuBuilder(KdTreeGpuBuilder&&) noexcept = default;
KdTreeGpuBuilder& KdTreeGpuBuilder::operator=(KdTreeGpuBuilder&&) noexcept = default;

KdTree KdTree::build_on_gpu(const float* points, index_t n, int dims, const KdTreeOptions& options,
                            GpuBuildStats* stats) {
  KdTreeGpuBuilder builder;
  return builder.build(points, n, dims, options, stats);
}

KdTree KdTreeGpuBuilder::build(const float* points, index_t n, int dims, const KdTreeOptions& options,
                               GpuBuildStats* stats) {
  const std::string prefix = "kd-tree: ";
  if (n <= 0) throw Error("kd-tree: the point set is empty (0 points)");
  detail::check_shape(prefix, points, dims, options.leaf_size);
  if (!gpu_available()) throw Error("kd-tree: build_on_gpu needs a CUDA device: " + gpu_description());
  if (!impl_) impl_ = std::make_unique<Impl>();
  MedianGpuBuild& b = impl_->core;
  const float* pts = b.upload(prefix, points, n, dims);

  detail::NodeCounter counter{options.leaf_size, {}};
  const index_t n_nodes = detail::count_nodes(prefix, counter, n);
  const int height = detail::median_height(n, options.leaf_size);
  if (height > KdTreeView::kMaxStack - 1)
    throw Error("kd-tree: height " + std::to_string(height) + " exceeds the rope-stack limit");
  b.build(pts, n, dims, options.leaf_size, counter, false, [](const Level&, index_t, index_t, const index_t*, cudaStream_t) {});
  KdTree tree;
  tree.set_shape(dims, options.leaf_size, height);
  tree.keep_on_device(b.keep({{"the kd-tree boxes", b.boxes.get(),
                               static_cast<std::size_t>(n_nodes) * 2 * padded_dims(dims) * sizeof(float)}}, stats),
                      n);
  return tree;
}

}  // namespace canopy
