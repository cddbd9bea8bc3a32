// A kd-tree over N points of D dimensions, flattened in depth-first order so an autoropes
// traversal needs no parent pointers: the left child of node n is n + 1, the right child is
// stored in the node. Points live in the leaves (contiguous ranges of a tree-ordered copy).
#pragma once

#include <memory>
#include <vector>

#include "layouts/gpu_build.hpp"
#include "layouts/point_tree.hpp"

namespace canopy {

// The kd-tree's view: the shared topology and points, and an axis-aligned box per node.
struct KdTreeView : PointTreeView {
  const float* boxes = nullptr;  // per node: lo[stride] then hi[stride]

  CANOPY_HD const float* lo(node_id n) const { return boxes + static_cast<index_t>(n) * 2 * stride; }
  CANOPY_HD const float* hi(node_id n) const { return lo(n) + stride; }

  // The leaf a point falls in, by descending split dimensions (ties go left). This is the
  // application-specific "sorted" baseline's key; leaf ids grow left to right.
  CANOPY_HD node_id find_leaf(const float* q) const {
    node_id n = 0;
    while (!is_leaf(n)) {
      const int d = nodes[n].split_dim;
      n = q[d] <= hi(n + 1)[d] ? n + 1 : static_cast<node_id>(nodes[n].first);
    }
    return n;
  }
};

struct KdTreeOptions {
  int leaf_size = 8;  // most points per leaf
  Device device = Device::Auto;  // where build() runs (layouts/gpu_build.hpp); the tree is the same
};

// Owns the host copy of a tree. Built on the CPU in O(N log N) with TBB: each node splits its
// points at the median of its widest dimension (ties broken by point index, so the tree does
// not depend on the thread count).
class KdTree : public PointTree<KdTree, KdTreeView> {
 public:
  // points: row-major [n][dims]. Throws canopy::Error on zero points, dims outside 1..16,
  // leaf_size < 1, or a NaN/infinite coordinate (naming the point and dimension).
  static KdTree build(const float* points, index_t n, int dims, const KdTreeOptions& options = {});
  // The same tree built on the GPU (layouts/kdtree_gpu.cu), bit for bit; points may be host or
  // device memory. The same errors, and one when no CUDA device is present.
  static KdTree build_on_gpu(const float* points, index_t n, int dims, const KdTreeOptions& options = {},
                             GpuBuildStats* stats = nullptr);

  const std::vector<float>& boxes() const { return host(boxes_); }  // padded, see KdTreeView

  template <class Map>
  KdTreeView map_view(Map&& map) const {
    KdTreeView v = map_points(map);
    v.boxes = map(boxes_, "the kd-tree boxes");
    return v;
  }

 private:
  friend class KdTreeGpuBuilder;
  mutable std::vector<float> boxes_;
};

// Builds kd-trees on the GPU, keeping its device buffers from build to build: rebuilding a tree
// of the same size (moving points) allocates nothing. KdTree::build_on_gpu is one build with a
// fresh builder.
class KdTreeGpuBuilder {
 public:
  KdTreeGpuBuilder();
  ~KdTreeGpuBuilder();
  KdTreeGpuBuilder(KdTreeGpuBuilder&&) noexcept;
  KdTreeGpuBuilder& operator=(KdTreeGpuBuilder&&) noexcept;
  KdTree build(const float* points, index_t n, int dims, const KdTreeOptions& options = {},
               GpuBuildStats* stats = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canopy
