// An octree over 3-d bodies with masses (the Barnes-Hut workload), flattened with the kd-tree's
// conventions so the same inspector and executors walk it: depth-first node order, child 0 of
// an inner node n is n + 1, the other children's ids sit in a separate array (`child_ids`),
// and bodies live in the leaves as contiguous ranges of a tree-ordered copy.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/types.hpp"
#include "layouts/arrays.hpp"
#include "layouts/gpu_build.hpp"
#include "layouts/resident.hpp"

namespace canopy {

struct OctNode {
  index_t first;             // leaf: first body (tree order); inner: offset of children 1.. in child_ids
  std::int32_t count;        // leaf: number of bodies; inner: 0
  std::int16_t n_children;   // inner: 1..8 (non-empty octants only); leaf: 0
  std::int16_t depth;        // root is 0
};
static_assert(sizeof(OctNode) == 16, "OctNode is read as one 16-byte record");

// Non-owning, trivially copyable view; the pointers are host or device memory alike. Every
// 4-float record is 16-byte aligned so the GPU can read it with one float4 load.
struct OctreeView {
  const OctNode* nodes = nullptr;
  const node_id* child_ids = nullptr;  // per inner node: children 1..n_children-1, in octant order
  const float* com = nullptr;          // per node: centre of mass x, y, z and total mass
  const float* cubes = nullptr;        // per node: cell centre x, y, z and half side
  const float* bodies = nullptr;       // tree order: x, y, z, mass
  const index_t* body_ids = nullptr;   // original index of each tree-order body
  index_t n_bodies = 0;
  node_id n_nodes = 0;
  int height = 0;  // number of levels: the deepest node has depth height - 1

  // Deepest depth a tree may have (OctreeOptions::max_depth <= kMaxDepth). 21 levels of
  // halving is also the resolution of morton_key (21 bits per axis).
  static constexpr int kMaxDepth = 21;
  // An inner node leaves at most 7 siblings pending on the rope stack and inner nodes lie at
  // depths 0..kMaxDepth-1; the lockstep emulator pushes all 8 children of the deepest one.
  static constexpr int kMaxStack = 7 * kMaxDepth + 1;

  CANOPY_HD bool is_leaf(node_id n) const { return nodes[n].n_children == 0; }
  CANOPY_HD int child_count(node_id n) const { return nodes[n].n_children; }
  CANOPY_HD node_id child(node_id n, int i) const {
    return i == 0 ? n + 1 : child_ids[nodes[n].first + (i - 1)];
  }
  CANOPY_HD const float* node_com(node_id n) const { return com + static_cast<index_t>(n) * 4; }
  CANOPY_HD const float* cube(node_id n) const { return cubes + static_cast<index_t>(n) * 4; }
  CANOPY_HD const float* body(index_t i) const { return bodies + i * 4; }
};

struct OctreeOptions {
  int leaf_size = 8;   // a node with at most this many bodies is a leaf
  int max_depth = 20;  // nodes at this depth are leaves (coincident bodies cannot be split)
  Device device = Device::Auto;  // where build() runs (layouts/gpu_build.hpp); the tree is the same
};

// Owns an octree: its host copy, or, built on the GPU, its device arrays (detail::DeviceResident:
// the nodes and child lists come back at once, the rest on first use). Built on the CPU with TBB, in parallel over subtrees; the
// tree is the same whatever the thread count (stable partitions, fixed summation order).
//
// Geometry: the root cell is the bounding cube of the bodies (side = the largest extent,
// slightly enlarged); a body goes to the octant given by comparing each coordinate with the
// cell centre (<= goes low); octant bits are x (1), y (2), z (4), and only non-empty octants
// become children, in octant order. Cell bounds are tracked in double and the stored float
// cube is rounded outwards, so every cube contains all of its bodies even where float
// arithmetic could not place the centres exactly. Centres of mass are summed in double (per
// node from its children, in octant order) and rounded to float.
class Octree : public detail::DeviceResident<Octree> {
 public:
  // xyz: row-major [n][3]; mass: [n]. Throws canopy::Error on zero bodies, a null pointer, a
  // non-finite coordinate or mass or a negative mass (naming the body), leaf_size < 1, or
  // max_depth outside 1..OctreeView::kMaxDepth.
  static Octree build(const float* xyz, const float* mass, index_t n, const OctreeOptions& options = {});
  // The same tree built on the GPU (layouts/octree_gpu.cu), bit for bit; xyz and mass may be
  // host or device memory. The same errors, and one when no CUDA device is present.
  static Octree build_on_gpu(const float* xyz, const float* mass, index_t n, const OctreeOptions& options = {},
                             GpuBuildStats* stats = nullptr);

  OctreeView view() const {
    fetch_host();
    return map_view(HostArrays{});
  }
  // What is on the host now, copying nothing (see PointTree::topology_view): the nodes and child
  // lists always.
  OctreeView topology_view() const { return host_ready() ? view() : host_part_view(); }
  index_t size() const { return on_device() ? resident_count() : static_cast<index_t>(body_ids_.size()); }
  int height() const { return height_; }
  int leaf_size() const { return leaf_size_; }
  int max_depth() const { return max_depth_; }
  Device built_on() const { return built_on_; }  // where its build ran (Cpu or Gpu)
  node_id node_count() const { return static_cast<node_id>(nodes_.size()); }
  std::size_t bytes() const { return on_device() ? resident()->bytes() : array_bytes(*this); }  // the device copy's

  const std::vector<OctNode>& nodes() const { return nodes_; }
  const std::vector<node_id>& child_ids() const { return child_ids_; }
  const std::vector<float>& com() const { return host(com_); }  // [nodes][4]
  const std::vector<float>& cubes() const { return host(cubes_); }  // [nodes][4]
  const std::vector<float>& bodies() const { return host(bodies_); }  // [n][4], tree order
  const std::vector<index_t>& body_ids() const { return host(body_ids_); }

  template <class Map>
  OctreeView map_view(Map&& map) const {
    OctreeView v;
    v.nodes = map(nodes_, "the octree nodes");
    v.child_ids = map(child_ids_, "the octree child lists");
    v.com = map(com_, "the octree centres of mass");
    v.cubes = map(cubes_, "the octree cells");
    v.bodies = map(bodies_, "the octree bodies");
    v.body_ids = map(body_ids_, "the octree body ids");
    v.n_bodies = size();
    v.n_nodes = node_count();
    v.height = height_;
    return v;
  }

 private:
  friend class OctreeGpuBuilder;
  friend class detail::DeviceResident<Octree>;
  mutable std::vector<OctNode> nodes_;
  mutable std::vector<node_id> child_ids_;
  mutable std::vector<float> com_;
  mutable std::vector<float> cubes_;
  mutable std::vector<float> bodies_;
  mutable std::vector<index_t> body_ids_;
  int height_ = 0;
  int leaf_size_ = 0;
  int max_depth_ = 0;
  Device built_on_ = Device::Cpu;
};

// The GPU build with its device buffers kept from build to build: a rebuild of as many bodies
// (a simulation's time step) allocates nothing on the device. Octree::build_on_gpu is one build
// with a fresh builder.
class OctreeGpuBuilder {
 public:
  OctreeGpuBuilder();
  ~OctreeGpuBuilder();
  OctreeGpuBuilder(OctreeGpuBuilder&&) noexcept;
  OctreeGpuBuilder& operator=(OctreeGpuBuilder&&) noexcept;
  Octree build(const float* xyz, const float* mass, index_t n, const OctreeOptions& options = {},
               GpuBuildStats* stats = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canopy
