// A ball tree (a metric tree of nested balls) for nearest-neighbour search. Its nodes and
// points are laid out as every median-split tree's (layouts/point_tree.hpp), so the same
// executors and kernels walk it.
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

#include "layouts/gpu_build.hpp"
#include "layouts/point_tree.hpp"

namespace canopy {

// The ball tree's view: the shared topology and points (inner nodes: split_dim = the dimension
// the points were split at, median, ties by original index), and a ball per node.
struct BallTreeView : PointTreeView {
  const float* centres = nullptr;  // [n_nodes][stride]: the centroid of the node's points, zero-padded
  const float* radii = nullptr;    // [n_nodes]: max over the node's points of D(centre, p)

  CANOPY_HD const float* centre(node_id n) const { return centres + static_cast<index_t>(n) * stride; }
  CANOPY_HD float radius(node_id n) const { return radii[n]; }
};

struct BallTreeOptions {
  int leaf_size = 8;  // most points per leaf
  Device device = Device::Auto;  // where build() runs (layouts/gpu_build.hpp); the tree is the same
};

// Owns the host copy of a tree. Built on the CPU in O(N log N) with TBB. A node splits its
// points at the median of its widest dimension (ties broken by original point index), so
// halves differ by at most one point, the height is ceil(log2(n / leaf_size)) + 1 even on
// duplicates, and the tree does not depend on the thread count.
class BallTree : public PointTree<BallTree, BallTreeView> {
 public:
  // points: row-major [n][dims]. Throws canopy::Error on zero points, dims outside 1..16,
  // leaf_size < 1, or a NaN/infinite coordinate (naming the point and dimension).
  static BallTree build(const float* points, index_t n, int dims, const BallTreeOptions& options = {});
  // The same tree built on the GPU (layouts/ball_tree_gpu.cu), bit for bit; points may be host or
  // device memory. The same errors, and one when no CUDA device is present.
  static BallTree build_on_gpu(const float* points, index_t n, int dims, const BallTreeOptions& options = {},
                               GpuBuildStats* stats = nullptr);

  const std::vector<float>& centres() const { return host(centres_); }  // padded, see BallTreeView
  const std::vector<float>& radii() const { return host(radii_); }

  template <class Map>
  BallTreeView map_view(Map&& map) const {
    BallTreeView v = map_points(map);
    v.centres = map(centres_, "the ball-tree centres");
    v.radii = map(radii_, "the ball-tree radii");
    return v;
  }

 private:
  mutable std::vector<float> centres_;
  mutable std::vector<float> radii_;
};

}  // namespace canopy
