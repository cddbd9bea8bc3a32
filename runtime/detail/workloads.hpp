// The built-in workloads as the engine sees them (runtime/engine.hpp): each names its data and
// tree view, its visitor over a call's queries and results, its sort key (the hand-tuned
// LeafSort baseline) and the shape of its per-query data. The public APIs are adapters over
// Engine<one of these>.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device_buffer.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/device_copy.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/bh_visitor.hpp"
#include "runtime/knn_visitor.hpp"
#include "runtime/options.hpp"
#include "runtime/pc_visitor.hpp"

namespace canopy {
namespace detail {

// The leaf a query falls in: the kd-tree's sort key.
struct KdLeafKey {
  KdTreeView tree;
  const float* queries;
  CANOPY_HD std::uint32_t operator()(index_t q) const {
    return static_cast<std::uint32_t>(tree.find_leaf(queries + q * tree.dims));
  }
};

// What the workloads over one of Canopy's point trees share: the tree is the data, its view the
// topology, its DeviceCopy the device side; queries are points of the tree's dimension.
template <class Tree>
struct PointTreeWorkload {
  using Data = Tree;
  using View = decltype(std::declval<const Tree&>().view());
  using Device = DeviceCopy<Tree>;
  static constexpr bool kBuiltinTree = true, kSortKey = true;
  // What the GPU side reads on the host: the sizes, and the nodes once a top-tree needs them
  // (topology_view; a tree left on the device by its GPU build is not copied back for less).
  // full_view: every array, for the CPU.
  static View host_view(const Data& tree) { return tree.shape_view(); }
  static View topology_view(const Data& tree) { return tree.topology_view(); }
  static View full_view(const Data& tree) { return tree.view(); }
  static const View& topology(const View& v) { return v; }
  // LeafSort's key is the leaf a query lies in, one of this many (a full binary tree's).
  static index_t sort_key_leaves(const View& v) { return (static_cast<index_t>(v.n_nodes) + 1) / 2; }

  int default_depth = kDefaultTopTreeDepth;
  int query_dims = 0;
};

// Point correlation: counts [n] of index_t, or [n][n_radii] at several radii in one walk.
struct PcWorkload : PointTreeWorkload<KdTree> {
  static constexpr bool kGuided = false;
  const char* name = "PointCorrelation";
  std::size_t output_bytes[2] = {sizeof(index_t), 0};
  float radius2 = 0;
  int n_radii = 1;                 // > 1: radii2 holds them (set_radii)
  float radii2[kMaxPcRadii] = {};  // non-decreasing

  void set_radii(const float* r, int n) {
    n_radii = n;
    for (int j = 0; j < n; ++j) radii2[j] = r[j] * r[j];
    radius2 = radii2[n - 1];
    output_bytes[0] = static_cast<std::size_t>(n) * sizeof(index_t);
  }
  template <class F>
  void with_visitor(const View& tree, const float* queries, void* const* out, F&& f) const {
    dispatch_dims(tree.dims, [&](auto md) {
      if (n_radii > 1) {
        PcRadiiVisitor<decltype(md)::value> v;
        v.tree = tree;
        v.queries = queries;
        v.counts = static_cast<index_t*>(out[0]);
        v.n_radii = n_radii;
        for (int j = 0; j < n_radii; ++j) v.radii2[j] = radii2[j];
        f(v);
        return;
      }
      PointCorrelationVisitor<decltype(md)::value> v;
      v.tree = tree;
      v.queries = queries;
      v.counts = static_cast<index_t*>(out[0]);
      v.radius2 = radius2;
      f(v);
    });
  }
  template <class F>
  void with_sort_key(const View& tree, const float* queries, F&& f) const {
    f(KdLeafKey{tree, queries}, static_cast<std::uint64_t>(tree.n_nodes));
  }
};

// k nearest neighbours over a kd, ball or vp tree: indices [n][k] of index_t, distances [n][k]
// of float.
template <class Tree>
struct KnnWorkload : PointTreeWorkload<Tree> {
  using View = typename PointTreeWorkload<Tree>::View;
  static constexpr bool kGuided = true;
  const char* name = "NearestNeighbors";
  std::size_t output_bytes[2] = {0, 0};
  int k = 1;

  KnnWorkload(int dims, int neighbours) : k(neighbours) {
    this->query_dims = dims;
    output_bytes[0] = static_cast<std::size_t>(k) * sizeof(index_t);
    output_bytes[1] = static_cast<std::size_t>(k) * sizeof(float);
  }
  // The candidate list (KnnVisitor): a heap for trees of fewer than 2^31 points, but in the
  // result rows for a ball or vp tree at k <= 8, where the heap's setup and final sort cost more
  // than its insertions save (H200, 2 x 10^5 7-d points, k = 1: 6% slower).
  template <class F>
  void with_visitor(const View& tree, const float* queries, void* const* out, F&& f) const {
    auto* dist = static_cast<float*>(out[1]);
    auto* index = static_cast<index_t*>(out[0]);
    dispatch_dims(tree.dims, [&](auto md) {
      constexpr int M = decltype(md)::value;
      const bool small_list = !std::is_same_v<View, KdTreeView> && k <= 8;
      if (tree.n_points < std::numeric_limits<std::int32_t>::max() && !small_list)
        f(make_knn_visitor<M, View, true>(tree, queries, k, dist, index));
      else
        f(make_knn_visitor<M>(tree, queries, k, dist, index));
    });
  }
  // Auto tries lockstep over the sorted order for these (runtime/auto_choice.hpp, workload_wide).
  bool wide_search() const { return std::is_same_v<View, KdTreeView> && k > 16; }
  // The leaf of each query's greedy descent (greedy_leaf), which needs no candidate list.
  template <class F>
  void with_sort_key(const View& tree, const float* queries, F&& f) const {
    dispatch_dims(tree.dims, [&](auto md) {
      const auto v = make_knn_visitor<decltype(md)::value>(tree, queries, k, nullptr, nullptr);
      f(GreedyLeafKey<View, std::decay_t<decltype(v)>>{tree, v}, static_cast<std::uint64_t>(tree.n_nodes));
    });
  }
};

// Barnes-Hut: the octree and the bodies in their original order, which are the queries. For an
// octree left on the device by its GPU build, the host copy of the bodies is made only for a CPU
// call (original_order()); the device copy is made on the device (BhDevice).
struct BhData {
  const Octree& tree;
  mutable std::vector<float> xyz, mass;  // [n][3], [n]: empty until original_order()
  // Fills xyz and mass from the tree's bodies (copying the tree to the host if it is on the device).
  void original_order() const;
};
// The bodies in their original order, on the device, from a device copy of their octree
// (runtime/detail/bh_gpu.cu).
void scatter_original_order(const OctreeView& tree, float* xyz, float* mass, stream_t stream);
struct BhView {
  OctreeView tree;
  const float* xyz = nullptr;
  const float* mass = nullptr;
};
// The bodies' device copy, beside the octree's.
class BhDevice {
 public:
  BhDevice(const BhData& d, stream_t s) : tree_(d.tree, s) {
    const std::size_t n = static_cast<std::size_t>(d.tree.size());
    xyz_.reserve(n * 3, "the body positions", s);
    mass_.reserve(n, "the body masses", s);
    if (d.tree.on_device()) {
      scatter_original_order(tree_.view(), xyz_.get(), mass_.get(), s);
    } else {
      d.original_order();
      copy_n_async(xyz_.get(), d.xyz.data(), d.xyz.size(), s);
      copy_n_async(mass_.get(), d.mass.data(), d.mass.size(), s);
    }
    view_ = BhView{tree_.view(), xyz_.get(), mass_.get()};
  }
  const BhView& view() const { return view_; }
  std::size_t bytes() const { return tree_.bytes() + (view_.tree.n_bodies * 4) * sizeof(float); }  // + xyz, mass

 private:
  DeviceCopy<Octree> tree_;
  DeviceBuffer<float> xyz_, mass_;
  BhView view_;
};

// Forces [n][3] of float.
struct BhWorkload {
  using Data = BhData;
  using View = BhView;
  using Device = BhDevice;
  static constexpr bool kGuided = false, kBuiltinTree = true, kSortKey = true;
  // The GPU side's host view is the topology; full_view has the bodies, for the CPU.
  static View host_view(const Data& d) {
    if (!d.tree.on_device() || d.tree.host_ready()) return full_view(d);
    return BhView{d.tree.topology_view(), nullptr, nullptr};
  }
  static View full_view(const Data& d) {
    d.original_order();
    return BhView{d.tree.view(), d.xyz.data(), d.mass.data()};
  }
  static const OctreeView& topology(const View& v) { return v.tree; }

  const char* name = "BarnesHut";
  int default_depth = kDefaultOctreeDepth;
  int query_dims = 0;  // the bodies are in the view
  std::size_t output_bytes[2] = {3 * sizeof(float), 0};
  float theta2 = 0, eps2 = 0;
  index_t first = 0;  // the call's bodies are first .. first + n - 1

  template <class F>
  void with_visitor(const View& view, const float* /*queries*/, void* const* out, F&& f) const {
    BarnesHutVisitor v;
    v.first = first;
    v.tree = view.tree;
    v.bodies_xyz = view.xyz;
    v.masses = view.mass;
    v.forces = static_cast<float*>(out[0]);
    v.theta2 = theta2;
    v.eps2 = eps2;
    f(v);
  }
  // The bodies' Morton codes in the root cell.
  struct MortonKey {
    const float* xyz;
    const float* cube;
    CANOPY_HD std::uint64_t operator()(index_t i) const { return morton_key(xyz[i * 3], xyz[i * 3 + 1], xyz[i * 3 + 2], cube); }
  };
  template <class F>
  void with_sort_key(const View& view, const float* /*queries*/, F&& f) const {
    f(MortonKey{view.xyz + first * 3, view.tree.cube(0)}, ~std::uint64_t{0} >> 1);
  }
};

}  // namespace detail
}  // namespace canopy
