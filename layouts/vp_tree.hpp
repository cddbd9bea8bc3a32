// A vantage-point tree for nearest-neighbour search. Its nodes and points are laid out as every
// median-split tree's (layouts/point_tree.hpp), so the same executors and kernels walk it.
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

#include "layouts/gpu_build.hpp"
#include "layouts/point_tree.hpp"

namespace canopy {

// The vp-tree's view: the shared topology and points (inner nodes: split_dim = 0, a marker: a
// vp-tree splits by distance, not by a dimension), a vantage point per inner node and a shell per
// node.
struct VpTreeView : PointTreeView {
  const float* vantages = nullptr;  // [n_nodes][stride]: inner: the vantage point, zero-padded; leaf: zeros
  const float* mu = nullptr;        // [n_nodes]: inner: max D(vantage, p) over child 0's points; leaf: 0
  const node_id* parent = nullptr;  // [n_nodes]: root: kNoNode (-1)
  const float* shell_lo = nullptr;  // [n_nodes]: min over the node's points of D(vantage(parent), p); root: 0
  const float* shell_hi = nullptr;  // [n_nodes]: max of the same; root: +inf

  CANOPY_HD const float* vantage(node_id n) const { return vantages + static_cast<index_t>(n) * stride; }
};

struct VpTreeOptions {
  int leaf_size = 8;  // most points per leaf
  Device device = Device::Auto;  // where build() runs (layouts/gpu_build.hpp); the tree is the same
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
class VpTree : public PointTree<VpTree, VpTreeView> {
 public:
  // points: row-major [n][dims]. Throws canopy::Error on zero points, dims outside 1..16,
  // leaf_size < 1, or a NaN/infinite coordinate (naming the point and dimension).
  static VpTree build(const float* points, index_t n, int dims, const VpTreeOptions& options = {});
  // The same tree built on the GPU (layouts/vp_tree_gpu.cu), bit for bit; points may be host or
  // device memory. The same errors, and one naming a missing device.
  static VpTree build_on_gpu(const float* points, index_t n, int dims, const VpTreeOptions& options = {},
                             GpuBuildStats* stats = nullptr);

  const std::vector<float>& vantages() const { return host(vantages_); }  // padded, see VpTreeView
  const std::vector<float>& mu() const { return host(mu_); }
  const std::vector<node_id>& parent() const { return host(parent_); }
  const std::vector<float>& shell_lo() const { return host(shell_lo_); }
  const std::vector<float>& shell_hi() const { return host(shell_hi_); }

  template <class Map>
  VpTreeView map_view(Map&& map) const {
    VpTreeView v = map_points(map);
    v.vantages = map(vantages_, "the vp-tree vantage points");
    v.mu = map(mu_, "the vp-tree split radii");
    v.parent = map(parent_, "the vp-tree parents");
    v.shell_lo = map(shell_lo_, "the vp-tree shells (low ends)");
    v.shell_hi = map(shell_hi_, "the vp-tree shells (high ends)");
    return v;
  }

 private:
  mutable std::vector<float> vantages_;
  mutable std::vector<float> mu_;
  mutable std::vector<node_id> parent_;
  mutable std::vector<float> shell_lo_;
  mutable std::vector<float> shell_hi_;
};

}  // namespace canopy
