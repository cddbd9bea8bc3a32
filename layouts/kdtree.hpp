// A kd-tree over N points of D dimensions, flattened in depth-first order so an autoropes
// traversal needs no parent pointers: the left child of node n is n + 1, the right child is
// stored in the node. Points live in the leaves (contiguous ranges of a tree-ordered copy).
#pragma once

#include <cstdint>
#include <vector>

#include "layouts/geometry.hpp"

namespace canopy {

struct KdNode {
  index_t first;          // leaf: first point (tree order); inner: id of the right child
  std::int32_t count;     // leaf: number of points; inner: 0
  std::int16_t split_dim; // inner: the dimension split at; leaf: -1
  std::int16_t depth;     // root is 0
};
static_assert(sizeof(KdNode) == 16, "KdNode is read as one 16-byte record");

// Non-owning, trivially copyable view; the pointers are host or device memory alike. It is
// also the *topology* the inspector and executors walk (is_leaf / child_count / child).
struct KdTreeView {
  const KdNode* nodes = nullptr;
  const float* boxes = nullptr;      // per node: lo[stride] then hi[stride]
  const float* points = nullptr;     // tree order, row-major [n_points][stride]
  const index_t* point_ids = nullptr;  // original index of each tree-order point
  index_t n_points = 0;
  node_id n_nodes = 0;
  int dims = 0;
  int stride = 0;  // padded_dims(dims)
  int height = 0;  // number of levels: the deepest node has depth height - 1

  // The rope stack holds at most one pending sibling per level plus the current node.
  static constexpr int kMaxStack = 64;

  CANOPY_HD bool is_leaf(node_id n) const { return nodes[n].split_dim < 0; }
  CANOPY_HD int child_count(node_id n) const { return is_leaf(n) ? 0 : 2; }
  CANOPY_HD node_id child(node_id n, int i) const {
    return i == 0 ? n + 1 : static_cast<node_id>(nodes[n].first);
  }
  CANOPY_HD const float* lo(node_id n) const { return boxes + static_cast<index_t>(n) * 2 * stride; }
  CANOPY_HD const float* hi(node_id n) const { return lo(n) + stride; }
  CANOPY_HD const float* point(index_t i) const { return points + i * stride; }

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
};

// Owns the host copy of a tree. Built on the CPU in O(N log N) with TBB: each node splits its
// points at the median of its widest dimension (ties broken by point index, so the tree does
// not depend on the thread count).
class KdTree {
 public:
  // points: row-major [n][dims]. Throws canopy::Error on zero points, dims outside 1..16,
  // leaf_size < 1, or a NaN/infinite coordinate (naming the point and dimension).
  static KdTree build(const float* points, index_t n, int dims, const KdTreeOptions& options = {});

  KdTreeView view() const;
  index_t size() const { return static_cast<index_t>(point_ids_.size()); }
  int dims() const { return dims_; }
  int height() const { return height_; }
  int leaf_size() const { return leaf_size_; }
  node_id node_count() const { return static_cast<node_id>(nodes_.size()); }
  std::size_t bytes() const;

  const std::vector<KdNode>& nodes() const { return nodes_; }
  const std::vector<float>& boxes() const { return boxes_; }    // padded, see KdTreeView
  const std::vector<float>& points() const { return points_; }  // padded, tree order
  const std::vector<index_t>& point_ids() const { return point_ids_; }

 private:
  std::vector<KdNode> nodes_;
  std::vector<float> boxes_;
  std::vector<float> points_;
  std::vector<index_t> point_ids_;
  int dims_ = 0;
  int height_ = 0;
  int leaf_size_ = 0;
};

}  // namespace canopy
