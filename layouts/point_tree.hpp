// What the kd-tree, ball tree and vp-tree share: nodes split at a median and flattened depth
// first (child 0 of node n is n + 1, child 1 is stored in the node), the points in the leaves as
// contiguous ranges of a tree-ordered copy padded to padded_dims(dims), and their original ids.
// Each tree adds its own bounds (boxes, balls, shells) to the view and the owner.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "layouts/arrays.hpp"
#include "layouts/geometry.hpp"
#include "layouts/resident.hpp"

namespace canopy {

struct KdNode {
  index_t first;          // leaf: first point (tree order); inner: id of child 1
  std::int32_t count;     // leaf: number of points; inner: 0
  std::int16_t split_dim; // inner: the dimension split at (vp-tree: 0, a marker); leaf: -1
  std::int16_t depth;     // root is 0
};
static_assert(sizeof(KdNode) == 16, "KdNode is read as one 16-byte record");

// The topology and points of a median-split tree: non-owning and trivially copyable, host or
// device pointers alike. It is what the inspector and executors walk (is_leaf / child_count /
// child).
struct PointTreeView {
  const KdNode* nodes = nullptr;
  const float* points = nullptr;       // tree order, row-major [n_points][stride]
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
  CANOPY_HD node_id child(node_id n, int i) const { return i == 0 ? n + 1 : static_cast<node_id>(nodes[n].first); }
  CANOPY_HD const float* point(index_t i) const { return points + i * stride; }
};

// The owner of what the three trees share. Tree is the derived owner (its map_view lists its
// arrays, layouts/arrays.hpp), View its view type (derived from PointTreeView).
//
// A tree built on the GPU stays there (on_device(), detail::DeviceResident): its arrays live in
// device memory, which the engines read in place. Its nodes come to the host when first needed
// (topology_view(), nodes(): a top-tree's cut); the other host arrays on first use, all at once,
// by any other accessor or view() (a CPU call, count_nodes' emulator, the quality tools); a copy
// of such a tree makes them first. A GPU call under the leaf sort or the input order copies
// nothing (10^7 points: the nodes' 67 MB took 11-23 ms on the H100).
template <class Tree, class View>
class PointTree : public detail::DeviceResident<Tree> {
 public:
  View view() const {
    this->fetch_host();
    return static_cast<const Tree&>(*this).map_view(HostArrays{});
  }
  // The nodes and sizes on the host (the nodes copied there first where needed), null for the
  // other arrays of a tree on the device not copied yet. What the engines cut top-trees from,
  // and a Traverser's host tree (runtime/custom.cuh); a walk on the CPU needs view().
  View topology_view() const {
    if (this->host_ready()) return view();
    this->fetch_host(kNodesName);
    return this->host_part_view();
  }
  // What is on the host now, copying nothing: the sizes always, null arrays (the nodes too) for
  // a tree on the device not copied yet. What a GPU call starts from (its engine fetches the
  // nodes for a top-tree: PointTreeWorkload::topology_view).
  View shape_view() const { return this->host_ready() ? view() : this->host_part_view(); }
  // Bytes of the tree's arrays: what its device copy takes.
  std::size_t bytes() const {
    return this->on_device() ? this->resident()->bytes() : array_bytes(static_cast<const Tree&>(*this));
  }
  index_t size() const {
    return this->on_device() ? this->resident_count() : static_cast<index_t>(point_ids_.size());
  }
  int dims() const { return dims_; }
  int height() const { return height_; }
  int leaf_size() const { return leaf_size_; }
  node_id node_count() const {  // (a tree on the device may not have fetched its nodes)
    const std::size_t n = this->on_device() ? this->resident()->bytes(kNodesName) / sizeof(KdNode) : nodes_.size();
    return static_cast<node_id>(n);
  }
  Device built_on() const { return built_on_; }  // where its build ran (Cpu or Gpu)

  const std::vector<KdNode>& nodes() const {
    this->fetch_host(kNodesName);
    return nodes_;
  }
  const std::vector<float>& points() const { return this->host(points_); }  // padded, tree order
  const std::vector<index_t>& point_ids() const { return this->host(point_ids_); }

 protected:
  // The shared part of a view, its arrays mapped (map_view).
  template <class Map>
  View map_points(Map& map) const {
    View v;
    v.nodes = map(nodes_, kNodesName);
    v.points = map(points_, "the tree points");
    v.point_ids = map(point_ids_, "the tree point ids");
    v.n_points = size();
    v.n_nodes = node_count();
    v.dims = dims_;
    v.stride = padded_dims(dims_);
    v.height = height_;
    return v;
  }

  // A build's sizes, the same for a CPU and a GPU build.
  void set_shape(int dims, int leaf_size, int height) {
    dims_ = dims;
    leaf_size_ = leaf_size;
    height_ = height;
  }

  // After a GPU build has filled `resident`: the tree is on the device.
  void keep_on_device(std::shared_ptr<detail::ResidentArrays> resident, index_t points) {
    detail::DeviceResident<Tree>::keep_on_device(std::move(resident), points);
    built_on_ = Device::Gpu;
  }

  static constexpr const char* kNodesName = "the tree nodes";  // its name in map_view
  mutable std::vector<KdNode> nodes_;
  mutable std::vector<float> points_;
  mutable std::vector<index_t> point_ids_;
  int dims_ = 0;
  int height_ = 0;
  int leaf_size_ = 0;
  Device built_on_ = Device::Cpu;
};

}  // namespace canopy
