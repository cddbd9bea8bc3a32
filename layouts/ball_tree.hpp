// A ball tree (a metric tree of nested balls) for nearest-neighbour search. It keeps the
// kd-tree's conventions (layouts/kdtree.hpp) so the same executors and kernels walk it: the
// depth-first flattened layout (child 0 of node n is n + 1, child 1 is stored in the node),
// points in the leaves as contiguous ranges of a tree-ordered, zero-padded copy, KdNode
// records, at most KdTreeView::kMaxStack levels of rope stack.
//
// Distances. Every distance the builder stores is computed exactly as a query visitor
// computes it, on padded coordinates:
//   D(a, b) = sqrt_rn(point_distance2<padded_dims(dims)>(a, b))
// (layouts/geometry.hpp). D is symmetric bit for bit (a - b and b - a round to
// values of equal magnitude), so the radius of a node is an exact upper bound, in float, of
// D(centre(n), p) for every point p under n. Only the triangle inequality on rounded values
// needs a small relative slack when a visitor prunes with it.
#pragma once

#include <cstddef>
#include <vector>

#include "layouts/kdtree.hpp"
#include "core/rounding.hpp"

namespace canopy {

// Non-owning, trivially copyable view; the pointers are host or device memory alike.
struct BallTreeView {
  // leaf: first point + count, split_dim = -1; inner: first = id of child 1, count = 0,
  // split_dim = the dimension the points were split at (median, ties by original index).
  const KdNode* nodes = nullptr;
  const float* centres = nullptr;      // [n_nodes][stride]: the centroid of the node's points, zero-padded
  const float* radii = nullptr;        // [n_nodes]: max over the node's points of D(centre, p)
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
  CANOPY_HD const float* centre(node_id n) const { return centres + static_cast<index_t>(n) * stride; }
  CANOPY_HD float radius(node_id n) const { return radii[n]; }
  CANOPY_HD const float* point(index_t i) const { return points + i * stride; }
};

struct BallTreeOptions {
  int leaf_size = 8;  // most points per leaf
};

// Owns the host copy of a tree. Built on the CPU in O(N log N) with TBB. A node splits its
// points at the median of its widest dimension (ties broken by original point index), so
// halves differ by at most one point, the height is ceil(log2(n / leaf_size)) + 1 even on
// duplicates, and the tree does not depend on the thread count.
class BallTree {
 public:
  // points: row-major [n][dims]. Throws canopy::Error on zero points, dims outside 1..16,
  // leaf_size < 1, or a NaN/infinite coordinate (naming the point and dimension).
  static BallTree build(const float* points, index_t n, int dims, const BallTreeOptions& options = {});

  BallTreeView view() const;
  index_t size() const { return static_cast<index_t>(point_ids_.size()); }
  int dims() const { return dims_; }
  int height() const { return height_; }
  int leaf_size() const { return leaf_size_; }
  node_id node_count() const { return static_cast<node_id>(nodes_.size()); }
  std::size_t bytes() const;

  const std::vector<KdNode>& nodes() const { return nodes_; }
  const std::vector<float>& centres() const { return centres_; }  // padded, see BallTreeView
  const std::vector<float>& radii() const { return radii_; }
  const std::vector<float>& points() const { return points_; }    // padded, tree order
  const std::vector<index_t>& point_ids() const { return point_ids_; }

 private:
  std::vector<KdNode> nodes_;
  std::vector<float> centres_;
  std::vector<float> radii_;
  std::vector<float> points_;
  std::vector<index_t> point_ids_;
  int dims_ = 0;
  int height_ = 0;
  int leaf_size_ = 0;
};

}  // namespace canopy
