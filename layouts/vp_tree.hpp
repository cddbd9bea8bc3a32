// A vantage-point tree for nearest-neighbour search. It keeps the kd-tree's conventions
// (layouts/kdtree.hpp) so the same executors and kernels walk it: the depth-first flattened
// layout (child 0 of node n is n + 1, child 1 is stored in the node), points in the leaves as
// contiguous ranges of a tree-ordered, zero-padded copy, KdNode records, at most
// KdTreeView::kMaxStack levels of rope stack.
//
// An inner node n picks a vantage point v among its points and splits them by D(v, p):
// child 0 ("inside") holds the half nearer to v, child 1 ("outside") the rest, and mu(n) is
// the largest D in the inside half. Every non-root node c also keeps its shell around its
// parent's vantage point: shell_lo(c) <= D(vantage(parent(c)), p) <= shell_hi(c) for every
// point p under c (the bounds are the min and max of those values, so they are tight).
//
// Distances. Every distance the builder stores is computed exactly as a query visitor
// computes it, on padded coordinates:
//   D(a, b) = sqrt_rn(point_distance2<padded_dims(dims)>(a, b))
// (layouts/geometry.hpp); D is symmetric bit for bit. The shells and mu are exact
// bounds of those float values; only the triangle inequality on rounded values needs a small
// relative slack when a visitor prunes with it.
#pragma once

#include <cstddef>
#include <vector>

#include "layouts/kdtree.hpp"
#include "core/rounding.hpp"

namespace canopy {

// Non-owning, trivially copyable view; the pointers are host or device memory alike.
struct VpTreeView {
  // leaf: first point + count, split_dim = -1; inner: first = id of child 1, count = 0,
  // split_dim = 0 (a marker: a vp-tree splits by distance, not by a dimension).
  const KdNode* nodes = nullptr;
  const float* vantages = nullptr;     // [n_nodes][stride]: inner: the vantage point, zero-padded; leaf: zeros
  const float* mu = nullptr;           // [n_nodes]: inner: max D(vantage, p) over child 0's points; leaf: 0
  const node_id* parent = nullptr;     // [n_nodes]: root: kNoNode (-1)
  const float* shell_lo = nullptr;     // [n_nodes]: min over the node's points of D(vantage(parent), p); root: 0
  const float* shell_hi = nullptr;     // [n_nodes]: max of the same; root: +inf
  const float* points = nullptr;       // tree order, row-major [n_points][stride]
  const index_t* point_ids = nullptr;  // original index of each tree-order point
  index_t n_points = 0;
  node_id n_nodes = 0;
  int dims = 0;
  int stride = 0;  // padded_dims(dims)
  int height = 0;  // number of levels: the deepest node has depth height - 1

  static constexpr int kMaxStack = 64;

  CANOPY_HD bool is_leaf(node_id n) const { return nodes[n].split_dim < 0; }
  CANOPY_HD int child_count(node_id n) const { return is_leaf(n) ? 0 : 2; }
  CANOPY_HD node_id child(node_id n, int i) const {
    return i == 0 ? n + 1 : static_cast<node_id>(nodes[n].first);
  }
  CANOPY_HD const float* vantage(node_id n) const { return vantages + static_cast<index_t>(n) * stride; }
  CANOPY_HD const float* point(index_t i) const { return points + i * stride; }
};

struct VpTreeOptions {
  int leaf_size = 8;  // most points per leaf
};

// Owns the host copy of a tree. Built on the CPU in O(N log N) with TBB.
//
// The vantage point of an inner node is found in two hops towards the rim of its points:
// a = the point farthest (by D) from their centroid (summed in double, rounded to float),
// v = the point farthest from a; ties go to the smallest original index. v is an end of an
// approximate diameter, so it sees the others at well-spread distances and the median shell
// cuts the set cleanly. Child 0 gets the n / 2 points with the smallest
// (D(v, p), original index), the vantage point itself ranked first among equal distances so it
// always lands inside; child 1 gets the other n - n / 2. Halves differ by at most one point,
// so the height is ceil(log2(n / leaf_size)) + 1 even on duplicates, and the tree does not
// depend on the thread count.
class VpTree {
 public:
  // points: row-major [n][dims]. Throws canopy::Error on zero points, dims outside 1..16,
  // leaf_size < 1, or a NaN/infinite coordinate (naming the point and dimension).
  static VpTree build(const float* points, index_t n, int dims, const VpTreeOptions& options = {});

  VpTreeView view() const;
  index_t size() const { return static_cast<index_t>(point_ids_.size()); }
  int dims() const { return dims_; }
  int height() const { return height_; }
  int leaf_size() const { return leaf_size_; }
  node_id node_count() const { return static_cast<node_id>(nodes_.size()); }
  std::size_t bytes() const;

  const std::vector<KdNode>& nodes() const { return nodes_; }
  const std::vector<float>& vantages() const { return vantages_; }  // padded, see VpTreeView
  const std::vector<float>& mu() const { return mu_; }
  const std::vector<node_id>& parent() const { return parent_; }
  const std::vector<float>& shell_lo() const { return shell_lo_; }
  const std::vector<float>& shell_hi() const { return shell_hi_; }
  const std::vector<float>& points() const { return points_; }  // padded, tree order
  const std::vector<index_t>& point_ids() const { return point_ids_; }

 private:
  std::vector<KdNode> nodes_;
  std::vector<float> vantages_;
  std::vector<float> mu_;
  std::vector<node_id> parent_;
  std::vector<float> shell_lo_;
  std::vector<float> shell_hi_;
  std::vector<float> points_;
  std::vector<index_t> point_ids_;
  int dims_ = 0;
  int height_ = 0;
  int leaf_size_ = 0;
};

}  // namespace canopy
