// Octree::build_on_gpu: the tree Octree::build (layouts/octree.cpp) gives, bit for bit, built
// from sorted octant paths instead of recursive partitions. The cell arithmetic, the cubes and
// the centres of mass come from layouts/octree_build.hpp, the same code the CPU build runs.
//
// A cell's bounds depend only on the octants that lead to it, so every body's whole path can
// be computed at once: its key holds one octant digit (3 bits) per level, the root's first.
//   1. the bounding box (a reduction over blocks), and from it the root cell
//   2. per body its key, max_depth digits from the CPU's double arithmetic
//   3. a stable radix sort of (key, id): the bodies in path order, equal keys in input order.
//      A node of depth k is then a run of equal k-digit prefixes whose ancestors are all inner.
//   4. per sorted position i: D(i), the depth of the leaf holding it, and how many nodes start
//      at i (depths common_digits(i - 1, i) + 1 .. D(i)); depth-first order is (start, depth)
//      order, so an inclusive scan of those counts numbers the nodes. One sync: the node count.
//   5. a second stable sort, by leaf: the CPU's stable partitions leave a leaf's bodies in
//      input order, not in key order
//   6. per node: its record, cube and child count; a scan of the links; the child lists
//   7. the mass sums: every leaf, then the inner nodes one depth at a time from the deepest,
//      children in octant order (the CPU's order of additions)
//   8. one download of every array
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "core/bits.hpp"
#include "core/cuda.cuh"
#include "core/device.hpp"
#include "layouts/octree.hpp"
#include "layouts/octree_build.hpp"

namespace canopy {
namespace {

using detail::BodyBox;
using detail::CellBounds;

constexpr int kBlock = 256;
constexpr int kBoxBlocks = 1024;  // partial boxes of the bounding-box reduction

unsigned blocks_for(index_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

// What the host learns at the sync and at the end: the leaf count (the child lists hold one
// entry per leaf but the first), the deepest leaf, the largest leaf over 2^31 - 1 bodies.
struct Summary {
  unsigned long long leaves;
  unsigned long long largest_leaf;
  unsigned int deepest;
};

struct MergeBoxes {
  __device__ BodyBox operator()(BodyBox a, const BodyBox& b) const {
    detail::merge(a, b);
    return a;
  }
};
struct MaxOf {
  __device__ int operator()(int a, int b) const { return a < b ? b : a; }
};

__device__ BodyBox block_box(BodyBox b) {
  using Reduce = cub::BlockReduce<BodyBox, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  return Reduce(temp).Reduce(b, MergeBoxes{});
}

__global__ void __launch_bounds__(kBlock) box_kernel(const float* xyz, index_t n, BodyBox* partial) {
  BodyBox b = detail::empty_box();
  for (index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<index_t>(gridDim.x) * blockDim.x)
    detail::extend(b, xyz + i * 3);
  const BodyBox total = block_box(b);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// One block: the partial boxes into the root cell.
__global__ void __launch_bounds__(kBlock) root_kernel(const BodyBox* partial, int parts, CellBounds* root) {
  BodyBox b = detail::empty_box();
  for (int p = threadIdx.x; p < parts; p += blockDim.x) detail::merge(b, partial[p]);
  const BodyBox total = block_box(b);
  if (threadIdx.x == 0) *root = detail::root_bounds(total);
}

// Each step below is one thread's work as a function of its index; the kernels only decide
// which thread runs which index.

// Shift that leaves a key's first k digits.
CANOPY_HD inline int prefix_shift(int k, int max_depth) { return 3 * (max_depth - k); }
// Digit `level` (0 = the root's octant) of a key.
CANOPY_HD inline int digit(std::uint64_t key, int level, int max_depth) {
  return static_cast<int>((key >> (3 * (max_depth - 1 - level))) & 7u);
}
// How many leading digits keys a and b share (max_depth when equal).
CANOPY_HD inline int common_digits(std::uint64_t a, std::uint64_t b, int max_depth) {
  const std::uint64_t x = a ^ b;
  if (x == 0) return max_depth;
  const int top_bit = 63 - CANOPY_DEVICE_OR_HOST(__clzll(static_cast<long long>(x)), __builtin_clzll(x));
  return max_depth - 1 - top_bit / 3;
}

// A body's path: at every level, the CPU's midpoint, octant and child bounds.
CANOPY_HD inline std::uint64_t path_key(const float* p, const CellBounds& root, int max_depth) {
  CellBounds cell = root;
  std::uint64_t key = 0;
  for (int level = 0; level < max_depth; ++level) {
    double mid[3];
    detail::cell_mid(cell.lo, cell.hi, mid);
    const int o = detail::octant_of(p[0], p[1], p[2], mid);
    key = key << 3 | static_cast<std::uint64_t>(o);
    detail::child_bounds(cell.lo, cell.hi, mid, o, cell.lo, cell.hi);
  }
  return key;
}

// The first position after p in [p, end) whose key differs from keys[p] above `shift`, or end
// (keys sorted).
CANOPY_HD inline index_t run_end(const std::uint64_t* keys, index_t p, index_t end, int shift) {
  const std::uint64_t v = keys[p] >> shift;
  index_t a = p + 1, b = end;
  while (a < b) {
    const index_t m = a + (b - a) / 2;
    if ((keys[m] >> shift) == v) a = m + 1;
    else b = m;
  }
  return a;
}

// The depth of the leaf holding sorted position i: the first depth at which i's cell holds at
// most leaf_size bodies, or max_depth. Only "more than leaf_size?" matters, so the search stays
// within leaf_size positions either side of i: [lo, hi] is i's cell at depth d clipped to that
// window, and it holds more than leaf_size positions exactly when the cell does.
CANOPY_HD inline int leaf_depth(const std::uint64_t* keys, index_t n, index_t i, index_t leaf_size, int max_depth) {
  index_t lo = i > leaf_size ? i - leaf_size : 0;
  index_t hi = n - 1 - i > leaf_size ? i + leaf_size : n - 1;
  const std::uint64_t key = keys[i];
  int d = 0;
  while (d < max_depth && hi - lo + 1 > leaf_size) {
    ++d;
    const int shift = prefix_shift(d, max_depth);
    const std::uint64_t p = key >> shift;
    index_t a = lo, b = i;  // the first of [lo, i] in i's cell
    while (a < b) {
      const index_t m = a + (b - a) / 2;
      if ((keys[m] >> shift) == p) b = m;
      else a = m + 1;
    }
    lo = a;
    a = i;
    b = hi;  // the last of [i, hi] in i's cell
    while (a < b) {
      const index_t m = b - (b - a) / 2;
      if ((keys[m] >> shift) == p) a = m;
      else b = m - 1;
    }
    hi = a;
  }
  return d;
}

// How many nodes start at sorted position i, whose leaf has depth `depth`: the cells of depths
// 0 .. common_digits(i - 1, i) also hold i - 1, so they start earlier. The deepest node that
// starts at i (if any) is a leaf.
CANOPY_HD inline int nodes_starting_at(const std::uint64_t* keys, index_t i, int depth, int max_depth) {
  const int first = i == 0 ? 0 : common_digits(keys[i - 1], keys[i], max_depth) + 1;
  return depth >= first ? depth - first + 1 : 0;
}

// The arrays of the node steps.
struct NodeArrays {
  const std::uint64_t* keys;         // sorted paths
  const std::uint8_t* leaf_depths;   // per sorted position
  const index_t* starts;             // per sorted position: nodes starting there
  const index_t* nodes_through;      // per sorted position: nodes starting there or before
  const float4* bodies;              // tree order
  index_t n;
  int max_depth;
  OctNode* nodes;
  index_t* node_pos;  // per node: its first sorted position
  index_t* node_end;  // per node: one past its last
  int* links;         // per node: child_ids entries, n_children - 1 (0 for a leaf)
  int* link_first;    // per node: where its child_ids entries begin
  node_id* child_ids;
  float* cubes;
  float* com;
  double* sums;  // per node: m x, m y, m z, m
};

// The nodes starting at sorted position i have consecutive ids and depths, the leaf last.
CANOPY_HD inline void number_nodes(const NodeArrays& a, index_t i) {
  const index_t count = a.starts[i];
  const index_t first_id = a.nodes_through[i] - count;
  const int first_depth = a.leaf_depths[i] - static_cast<int>(count) + 1;
  for (index_t t = 0; t < count; ++t) {
    a.node_pos[first_id + t] = i;
    a.nodes[first_id + t] = OctNode{0, 0, 0, static_cast<std::int16_t>(first_depth + t)};
  }
}

// Node id: its cell (the root's bounds followed down its first `depth` digits), cube and end;
// a leaf's record, sums and centre of mass; an inner node's child count. Returns a leaf's body
// count (0 for an inner node).
CANOPY_HD inline index_t shape_node(const NodeArrays& a, const CellBounds& root, index_t id) {
  const index_t i = a.node_pos[id];
  OctNode node = a.nodes[id];
  const int depth = node.depth;
  const std::uint64_t key = a.keys[i];
  CellBounds cell = root;
  for (int level = 0; level < depth; ++level) {
    double mid[3];
    detail::cell_mid(cell.lo, cell.hi, mid);
    detail::child_bounds(cell.lo, cell.hi, mid, digit(key, level, a.max_depth), cell.lo, cell.hi);
  }
  float* cube = a.cubes + id * 4;
  detail::write_cube(cell.lo, cell.hi, cube);
  const index_t end = run_end(a.keys, i, a.n, prefix_shift(depth, a.max_depth));
  a.node_end[id] = end;
  if (depth < a.leaf_depths[i]) {
    const int shift = prefix_shift(depth + 1, a.max_depth);
    int kids = 0;
    for (index_t p = i; p < end; p = run_end(a.keys, p, end, shift)) ++kids;
    node.n_children = static_cast<std::int16_t>(kids);
    a.nodes[id] = node;
    a.links[id] = kids - 1;
    return 0;
  }
  const index_t count = end - i;
  node.first = i;
  node.count = static_cast<std::int32_t>(count);  // checked against 2^31 - 1 by the caller
  a.nodes[id] = node;
  a.links[id] = 0;
  double sum[4] = {0, 0, 0, 0};
  for (index_t b = i; b < end; ++b) {
    const float4 body = a.bodies[b];
    detail::add_body(sum, body.x, body.y, body.z, body.w);
  }
  for (int c = 0; c < 4; ++c) a.sums[id * 4 + c] = sum[c];
  detail::write_com(sum, cube, a.com + id * 4);
  return count;
}

// Inner node id's link offset and child list: child 0 is id + 1; child s > 0 starts at sorted
// position p, where it is the shallowest node, so its id is the first of those starting at p.
CANOPY_HD inline void link_children(const NodeArrays& a, index_t id) {
  const index_t first = a.link_first[id];
  a.nodes[id].first = first;
  const int shift = prefix_shift(a.nodes[id].depth + 1, a.max_depth);
  const index_t end = a.node_end[id];
  int s = 0;
  for (index_t p = a.node_pos[id]; p < end; p = run_end(a.keys, p, end, shift), ++s)
    if (s > 0) a.child_ids[first + s - 1] = static_cast<node_id>(a.nodes_through[p] - a.starts[p]);
}

// Inner node id's sums from its children's, in octant order, as the CPU adds them.
CANOPY_HD inline void sum_children(const NodeArrays& a, index_t id) {
  const OctNode node = a.nodes[id];
  double sum[4] = {0, 0, 0, 0};
  detail::add_sums(sum, a.sums + (id + 1) * 4);
  for (int c = 1; c < node.n_children; ++c)
    detail::add_sums(sum, a.sums + static_cast<index_t>(a.child_ids[node.first + c - 1]) * 4);
  for (int c = 0; c < 4; ++c) a.sums[id * 4 + c] = sum[c];
  detail::write_com(sum, a.cubes + id * 4, a.com + id * 4);
}

// --- the kernels ------------------------------------------------------------------------------

__device__ index_t thread_index() { return blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x; }

__global__ void __launch_bounds__(kBlock)
path_key_kernel(const float* xyz, index_t n, const CellBounds* root, int max_depth, std::uint64_t* keys, index_t* ids) {
  const index_t i = thread_index();
  if (i >= n) return;
  keys[i] = path_key(xyz + i * 3, *root, max_depth);
  ids[i] = i;
}

// Leaf depths and node starts per sorted position; the summary's leaf count and deepest leaf.
__global__ void __launch_bounds__(kBlock)
node_starts_kernel(const std::uint64_t* keys, index_t n, index_t leaf_size, int max_depth, std::uint8_t* leaf_depths,
                   index_t* starts, Summary* summary) {
  const index_t i = thread_index();
  int is_leaf_start = 0, depth = 0;
  if (i < n) {
    depth = leaf_depth(keys, n, i, leaf_size, max_depth);
    const int count = nodes_starting_at(keys, i, depth, max_depth);
    leaf_depths[i] = static_cast<std::uint8_t>(depth);
    starts[i] = count;
    is_leaf_start = count > 0;
  }
  using Reduce = cub::BlockReduce<int, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  const int leaves = Reduce(temp).Sum(is_leaf_start);
  __syncthreads();  // temp is reused
  const int deepest = Reduce(temp).Reduce(depth, MaxOf{});
  if (threadIdx.x == 0) {
    atomicAdd(&summary->leaves, static_cast<unsigned long long>(leaves));
    atomicMax(&summary->deepest, static_cast<unsigned int>(deepest));
  }
}

// The second sort's keys: each body's leaf (numbered by its leaf node's id), in input order.
__global__ void __launch_bounds__(kBlock)
leaf_key_kernel(const index_t* sorted_ids, const index_t* nodes_through, index_t n, std::uint32_t* leaf_of_body) {
  const index_t i = thread_index();
  if (i < n) leaf_of_body[sorted_ids[i]] = static_cast<std::uint32_t>(nodes_through[i] - 1);
}

__global__ void __launch_bounds__(kBlock)
gather_bodies_kernel(const float* xyz, const float* mass, const index_t* tree_ids, index_t n, float4* bodies) {
  const index_t t = thread_index();
  if (t >= n) return;
  const index_t id = tree_ids[t];
  bodies[t] = make_float4(xyz[id * 3], xyz[id * 3 + 1], xyz[id * 3 + 2], mass[id]);
}

__global__ void __launch_bounds__(kBlock) number_nodes_kernel(NodeArrays a) {
  const index_t i = thread_index();
  if (i < a.n) number_nodes(a, i);
}

__global__ void __launch_bounds__(kBlock)
shape_nodes_kernel(NodeArrays a, const CellBounds* root, index_t n_nodes, Summary* summary) {
  const index_t id = thread_index();
  if (id >= n_nodes) return;
  const index_t count = shape_node(a, *root, id);
  if (count > std::numeric_limits<std::int32_t>::max())
    atomicMax(&summary->largest_leaf, static_cast<unsigned long long>(count));
}

__global__ void __launch_bounds__(kBlock) link_children_kernel(NodeArrays a, index_t n_nodes) {
  const index_t id = thread_index();
  if (id < n_nodes && a.nodes[id].n_children > 0) link_children(a, id);
}

// The inner nodes of one depth (their children, one deeper, are done).
__global__ void __launch_bounds__(kBlock) sum_children_kernel(NodeArrays a, index_t n_nodes, int depth) {
  const index_t id = thread_index();
  if (id < n_nodes && a.nodes[id].depth == depth && a.nodes[id].n_children > 0) sum_children(a, id);
}

// What an out-of-memory error calls the CUB calls' scratch space (run_cub).
constexpr const char* kScratch = "the octree build's scratch space";

// mass[i] < 0 ? i : n, whose minimum is the first negative mass.
struct NegativeAt {
  const float* mass;
  index_t n;
  __host__ __device__ index_t operator()(index_t i) const { return mass[i] < 0.0f ? i : n; }
};

}  // namespace

namespace detail {

index_t first_negative_on_device(const float* mass, index_t n) {
  Stream stream;
  const cudaStream_t s = stream.get();
  DeviceBuffer<unsigned char> temp;
  DeviceBuffer<index_t> first;
  PinnedBuffer<index_t> found;
  first.reserve(1, "the negative mass search", s);
  found.reserve(1);
  const auto negative_at = thrust::make_transform_iterator(thrust::counting_iterator<index_t>(0), NegativeAt{mass, n});
  run_cub("cub::DeviceReduce::Min (the first negative mass)", temp, kScratch, s, [&](void* t, std::size_t& bytes) {
    return cub::DeviceReduce::Min(t, bytes, negative_at, first.get(), n, s);
  });
  copy_to_host(found.get(), first.get(), 1, s);
  stream.sync();
  return *found.get();
}

}  // namespace detail

// Every device buffer of a build, kept from build to build: a rebuild of as many bodies (a
// simulation's time step) allocates nothing on the device.
struct OctreeGpuBuilder::Impl {
  Stream stream;  // declared before the buffers, which are freed on it
  Event t0, t1, t2, t3;
  std::shared_ptr<detail::ResidentArrays> last_resident;  // the last tree's arrays
  DeviceBuffer<float> xyz_copy, mass_copy;
  detail::StagingSlots staging;  // large inputs' and trees' copies
  DeviceBuffer<unsigned char> temp;
  DeviceBuffer<Summary> summary;
  PinnedBuffer<Summary> host_summary;
  DeviceBuffer<BodyBox> partial_boxes;
  DeviceBuffer<CellBounds> root;
  DeviceBuffer<std::uint64_t> keys, sorted_keys;
  DeviceBuffer<index_t> input_order, sorted_ids;
  DeviceBuffer<std::uint8_t> leaf_depths;
  DeviceBuffer<index_t> starts, nodes_through;
  DeviceBuffer<std::uint32_t> leaf_of_body, sorted_leaves;
  DeviceBuffer<index_t> tree_ids;
  DeviceBuffer<float> bodies;
  DeviceBuffer<OctNode> nodes;
  DeviceBuffer<index_t> node_pos, node_end;
  DeviceBuffer<int> links, link_first;
  DeviceBuffer<float> cubes, com;
  DeviceBuffer<double> sums;
  DeviceBuffer<node_id> child_ids;

  // Steps 1-4: the root cell, the bodies' paths sorted, each leaf's depth and the node ids.
  // Returns the node count; the counts of the summary in `counts`.
  index_t paths(const float* d_xyz, index_t n, const OctreeOptions& options, Summary& counts);
  // Steps 5-7: the bodies in leaf order, the nodes, their links and sums. Returns the height.
  int shape(const float* d_xyz, const float* d_mass, index_t n, int max_depth, index_t n_nodes,
            const Summary& counts);
};

OctreeGpuBuilder::OctreeGpuBuilder() = default;
OctreeGpuBuilder::~OctreeGpuBuilder() = default;
OctreeGpuBuilder::OctreeGpuBuilder(OctreeGpuBuilder&&) noexcept = default;
OctreeGpuBuilder& OctreeGpuBuilder::operator=(OctreeGpuBuilder&&) noexcept = default;

Octree Octree::build_on_gpu(const float* xyz, const float* mass, index_t n, const OctreeOptions& options,
                            GpuBuildStats* stats) {
  OctreeGpuBuilder builder;
  return builder.build(xyz, mass, n, options, stats);
}

index_t OctreeGpuBuilder::Impl::paths(const float* d_xyz, index_t n, const OctreeOptions& options,
                                      Summary& counts) {
  const cudaStream_t s = stream.get();
  const std::size_t un = static_cast<std::size_t>(n);
  const int max_depth = options.max_depth;
  summary.reserve(1, "the octree build's summary", s);
  host_summary.reserve(1);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(summary.get(), 0, sizeof(Summary), s));

  // 1. The root cell.
  const int box_blocks = static_cast<int>(std::min<index_t>(blocks_for(n), kBoxBlocks));
  partial_boxes.reserve(static_cast<std::size_t>(box_blocks), "the octree build's bounding boxes", s);
  root.reserve(1, "the octree root cell", s);
  box_kernel<<<box_blocks, kBlock, 0, s>>>(d_xyz, n, partial_boxes.get());
  CANOPY_CUDA_CHECK_LAUNCH("box_kernel");
  root_kernel<<<1, kBlock, 0, s>>>(partial_boxes.get(), box_blocks, root.get());
  CANOPY_CUDA_CHECK_LAUNCH("root_kernel");

  // 2-3. The paths, sorted.
  keys.reserve(un, "the octree build's keys", s);
  sorted_keys.reserve(un, "the octree build's keys", s);
  input_order.reserve(un, "the octree build's ids", s);
  sorted_ids.reserve(un, "the octree build's ids", s);
  path_key_kernel<<<blocks_for(n), kBlock, 0, s>>>(d_xyz, n, root.get(), max_depth, keys.get(), input_order.get());
  CANOPY_CUDA_CHECK_LAUNCH("path_key_kernel");
  // Radix sort is stable: bodies with equal paths keep their input order.
  run_cub("cub::DeviceRadixSort::SortPairs (the octree paths)", temp, kScratch, s, [&](void* t, std::size_t& bytes) {
    return cub::DeviceRadixSort::SortPairs(t, bytes, keys.get(), sorted_keys.get(), input_order.get(),
                                           sorted_ids.get(), n, 0, 3 * max_depth, s);
  });

  // 4. Leaf depths and node ids.
  leaf_depths.reserve(un, "the octree build's leaf depths", s);
  starts.reserve(un, "the octree build's node starts", s);
  nodes_through.reserve(un, "the octree build's node starts", s);
  node_starts_kernel<<<blocks_for(n), kBlock, 0, s>>>(sorted_keys.get(), n, options.leaf_size, max_depth,
                                                      leaf_depths.get(), starts.get(), summary.get());
  CANOPY_CUDA_CHECK_LAUNCH("node_starts_kernel");
  run_cub("cub::DeviceScan::InclusiveSum (the octree node ids)", temp, kScratch, s, [&](void* t, std::size_t& bytes) {
    return cub::DeviceScan::InclusiveSum(t, bytes, starts.get(), nodes_through.get(), n, s);
  });
  index_t n_nodes = 0;
  copy_to_host(&n_nodes, nodes_through.get() + (n - 1), 1, s);
  copy_to_host(host_summary.get(), summary.get(), 1, s);
  stream.sync();
  if (n_nodes > std::numeric_limits<node_id>::max()) throw detail::too_many_nodes(n_nodes);
  counts = *host_summary.get();
  return n_nodes;
}

int OctreeGpuBuilder::Impl::shape(const float* d_xyz, const float* d_mass, index_t n, int max_depth, index_t n_nodes,
                                  const Summary& counts) {
  const cudaStream_t s = stream.get();
  const std::size_t un = static_cast<std::size_t>(n);
  // child_ids: n_children - 1 per inner node, which adds up to leaves - 1.
  const std::size_t n_links = static_cast<std::size_t>(counts.leaves - 1);
  const std::size_t un_nodes = static_cast<std::size_t>(n_nodes);

  // 5. Each leaf's bodies in input order: ids in input order, stably sorted by leaf.
  leaf_of_body.reserve(un, "the octree build's leaf keys", s);
  sorted_leaves.reserve(un, "the octree build's leaf keys", s);
  tree_ids.reserve(un, "the octree body ids", s);
  bodies.reserve(un * 4, "the octree bodies", s);
  leaf_key_kernel<<<blocks_for(n), kBlock, 0, s>>>(sorted_ids.get(), nodes_through.get(), n, leaf_of_body.get());
  CANOPY_CUDA_CHECK_LAUNCH("leaf_key_kernel");
  const int leaf_bits = bits_for(static_cast<std::uint64_t>(n_nodes - 1));
  run_cub("cub::DeviceRadixSort::SortPairs (the octree leaves)", temp, kScratch, s, [&](void* t, std::size_t& bytes) {
    return cub::DeviceRadixSort::SortPairs(t, bytes, leaf_of_body.get(), sorted_leaves.get(), input_order.get(),
                                           tree_ids.get(), n, 0, leaf_bits, s);
  });
  float4* bodies4 = reinterpret_cast<float4*>(bodies.get());
  gather_bodies_kernel<<<blocks_for(n), kBlock, 0, s>>>(d_xyz, d_mass, tree_ids.get(), n, bodies4);
  CANOPY_CUDA_CHECK_LAUNCH("gather_bodies_kernel");

  // 6. The nodes. Node arrays grow with a quarter to spare: moving bodies change the node count
  // a little from step to step, and a rebuild should not reallocate for that.
  auto grow = [&](auto& buffer, std::size_t count, const char* what) {
    if (buffer.capacity() < count) buffer.reserve(count + count / 4, what, s);
  };
  grow(nodes, un_nodes, "the octree nodes");
  grow(node_pos, un_nodes, "the octree build's node positions");
  grow(node_end, un_nodes, "the octree build's node positions");
  grow(links, un_nodes, "the octree build's link counts");
  grow(link_first, un_nodes, "the octree build's link counts");
  grow(cubes, un_nodes * 4, "the octree cells");
  grow(com, un_nodes * 4, "the octree centres of mass");
  grow(sums, un_nodes * 4, "the octree build's mass sums");
  grow(child_ids, n_links, "the octree child lists");
  const NodeArrays arrays{sorted_keys.get(), leaf_depths.get(), starts.get(), nodes_through.get(), bodies4, n,
                          max_depth, nodes.get(), node_pos.get(), node_end.get(), links.get(), link_first.get(),
                          child_ids.get(), cubes.get(), com.get(), sums.get()};
  number_nodes_kernel<<<blocks_for(n), kBlock, 0, s>>>(arrays);
  CANOPY_CUDA_CHECK_LAUNCH("number_nodes_kernel");
  shape_nodes_kernel<<<blocks_for(n_nodes), kBlock, 0, s>>>(arrays, root.get(), n_nodes, summary.get());
  CANOPY_CUDA_CHECK_LAUNCH("shape_nodes_kernel");
  // An inner node's links follow those of every node before it in depth-first order.
  run_cub("cub::DeviceScan::ExclusiveSum (the octree links)", temp, kScratch, s, [&](void* t, std::size_t& bytes) {
    return cub::DeviceScan::ExclusiveSum(t, bytes, links.get(), link_first.get(), n_nodes, s);
  });
  link_children_kernel<<<blocks_for(n_nodes), kBlock, 0, s>>>(arrays, n_nodes);
  CANOPY_CUDA_CHECK_LAUNCH("link_children_kernel");

  // 7. Inner nodes' sums, deepest first; inner nodes lie at depths 0 .. height - 2.
  const int height = static_cast<int>(counts.deepest) + 1;
  for (int depth = height - 2; depth >= 0; --depth) {
    sum_children_kernel<<<blocks_for(n_nodes), kBlock, 0, s>>>(arrays, n_nodes, depth);
    CANOPY_CUDA_CHECK_LAUNCH("sum_children_kernel");
  }
  return height;
}

Octree OctreeGpuBuilder::build(const float* xyz, const float* mass, index_t n, const OctreeOptions& options,
                               GpuBuildStats* stats) {
  detail::check_octree_arguments(xyz, mass, n, options);
  if (!gpu_available()) throw Error("octree: build_on_gpu needs a CUDA device: " + gpu_description());
  const detail::BodyMemory where{is_device_pointer(xyz), is_device_pointer(mass)};
  detail::check_bodies(xyz, mass, n, options, where);
  const int max_depth = options.max_depth;
  const std::size_t un = static_cast<std::size_t>(n);

  if (!impl_) impl_ = std::make_unique<Impl>();
  Impl& b = *impl_;
  Stream& stream = b.stream;
  const cudaStream_t s = stream.get();
  Event &t0 = b.t0, &t1 = b.t1, &t2 = b.t2, &t3 = b.t3;
  t0.record(s);
  const float* d_xyz = xyz;
  const float* d_mass = mass;
  if (!where.xyz_on_device) {
    b.xyz_copy.reserve(un * 3, "the octree build's coordinates", s);
    detail::copy_up(b.xyz_copy.get(), xyz, un * 3 * sizeof(float), s, &b.staging);
    d_xyz = b.xyz_copy.get();
  }
  if (!where.mass_on_device) {
    b.mass_copy.reserve(un, "the octree build's masses", s);
    detail::copy_up(b.mass_copy.get(), mass, un * sizeof(float), s, &b.staging);
    d_mass = b.mass_copy.get();
  }
  t1.record(s);
  Summary counts{};
  const index_t n_nodes = b.paths(d_xyz, n, options, counts);
  const int height = b.shape(d_xyz, d_mass, n, max_depth, n_nodes, counts);
  const std::size_t n_links = static_cast<std::size_t>(counts.leaves - 1);
  const std::size_t un_nodes = static_cast<std::size_t>(n_nodes);
  t2.record(s);

  // 8. The tree stays on the device: its arrays copied into memory the tree owns (these buffers
  // serve the next build); the nodes and child lists, which the engines' host side reads, to the
  // host.
  Octree tree;
  tree.leaf_size_ = options.leaf_size;
  tree.max_depth_ = max_depth;
  tree.height_ = height;
  tree.built_on_ = Device::Gpu;
  std::shared_ptr<detail::ResidentArrays> resident = detail::next_resident(b.last_resident);
  const struct {
    const char* name;
    const void* data;
    std::size_t bytes;
  } kept[] = {{"the octree nodes", b.nodes.get(), un_nodes * sizeof(OctNode)},
                {"the octree child lists", b.child_ids.get(), n_links * sizeof(node_id)},
                {"the octree centres of mass", b.com.get(), un_nodes * 4 * sizeof(float)},
                {"the octree cells", b.cubes.get(), un_nodes * 4 * sizeof(float)},
                {"the octree bodies", b.bodies.get(), un * 4 * sizeof(float)},
                {"the octree body ids", b.tree_ids.get(), un * sizeof(index_t)}};
  for (const auto& a : kept) {
    void* dst = resident->add(a.name, a.bytes, s);
    if (a.bytes > 0) CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, a.data, a.bytes, cudaMemcpyDeviceToDevice, s));
  }
  t2.record(s);
  tree.nodes_.resize(un_nodes);
  tree.child_ids_.resize(n_links);
  detail::copy_down(tree.nodes_.data(), b.nodes.get(), un_nodes * sizeof(tree.nodes_[0]), s, &b.staging);
  detail::copy_down(tree.child_ids_.data(), b.child_ids.get(), n_links * sizeof(tree.child_ids_[0]), s, &b.staging);
  copy_to_host(b.host_summary.get(), b.summary.get(), 1, s);
  t3.record(s);
  stream.sync();
  if (b.host_summary.get()->largest_leaf > 0)
    throw detail::too_many_coincident_bodies(static_cast<index_t>(b.host_summary.get()->largest_leaf));
  tree.keep_on_device(std::move(resident), n);
  if (stats) {
    stats->upload_ms = (where.xyz_on_device && where.mass_on_device) ? 0.0 : t1.since(t0);
    stats->build_ms = t2.since(t1);
    stats->download_ms = t3.since(t2);
  }
  return tree;
}

}  // namespace canopy
