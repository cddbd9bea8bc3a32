// The vp-tree built on the GPU, level by level: VpTree::build_on_gpu, bit for bit VpTree::build's
// tree. A node's points sit in one contiguous range, in ascending index (as the CPU's stable
// split keeps them), and every node of a level is split at once:
//  - the centroid in detail::chunked_sum's order (the ball tree's kernels);
//  - the hop (farthest from the centroid) and the vantage point (farthest from the hop): one
//    thread per chunk of 64 points takes the largest (D, -index) packed in 64 bits, then one
//    atomicMax per chunk into its node; a max is exact, so the order does not matter;
//  - D(v, p) for every point, then one stable radix sort of (node, D) over the level, the vantage
//    point's key below every other: each node's first n / 2 entries are its inside half, its
//    shells the first and last keys of each half;
//  - the split: a stable partition of the ascending ranges by the inside flag (the kd-tree's
//    scan and scatter), so each half stays in ascending index.
// Node ids and sizes come from n alone (layouts/median_tree_gpu.cuh), so nothing waits on the
// host until the tree is copied out.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <string>

#include "core/bits.hpp"
#include "layouts/geometry.hpp"
#include "layouts/median_tree_gpu.cuh"
#include "layouts/vp_tree.hpp"

namespace canopy {
namespace {

// (D, index) packed so that the larger D wins and, among equal D, the smaller index. D >= 0, so
// its bits order as the float.
__device__ unsigned long long far_key(float d, index_t id) {
  return (static_cast<unsigned long long>(__float_as_uint(d)) << 32) |
         (0xffffffffull - static_cast<unsigned long long>(id));
}
__device__ index_t far_id(unsigned long long k) { return static_cast<index_t>(0xffffffffull - (k & 0xffffffffull)); }

// A node's record: the kd-tree's without a box (split_dim 0 marks an inner vp node).
__global__ void vp_node_kernel(Level lv, index_t m, int depth, int leaf_size, SizeTable subtree, KdNode* nodes) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= m) return;
  const KdNode node = level_node(lv, j, depth, leaf_size, subtree, 0);
  lv.split[j] = node.split_dim;
  nodes[lv.id[j]] = node;
}

// One thread per (inner node, chunk): the chunk's point farthest from the node's `from` point
// (row j of from_rows, or the padded row of the point far[j] names), into best[j] (zeroed).
template <int M>
__global__ void farthest_kernel(Level lv, index_t m, index_t per, const index_t* ids, const float* padded,
                                const float* from_rows, const unsigned long long* far, unsigned long long* best) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  Chunk ch;
  if (!chunk_of(lv, m, per, t, ch) || lv.split[ch.node] < 0) return;
  float x[M];
  load_query(from_rows ? from_rows + ch.node * M : padded + far_id(far[ch.node]) * M, M, x);
  unsigned long long top = 0;
  for (index_t i = ch.begin; i < ch.end; ++i) {
    const index_t id = ids[i];
    top = max(top, far_key(sqrt_rn(point_distance2<M>(x, padded + id * M)), id));
  }
  atomicMax(best + ch.node, top);
}

// Per position: the sort key (node j << 32 | D's bits + 1, the vantage point's 0: first among
// equal distances) of a point of an inner node; past every node (m << 32) for the rest, whose
// node_of becomes -1 where their node is a leaf. The thread holding the vantage point writes it.
template <int M>
__global__ void vp_keys_kernel(Level lv, index_t n, index_t m, index_t* node_of, const index_t* ids,
                               const float* padded, const unsigned long long* vantage, std::uint64_t* keys,
                               float* vantages) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t past = static_cast<std::uint64_t>(m) << 32;
  const index_t j = node_of[i];
  if (j < 0) {
    keys[i] = past;
    return;
  }
  if (lv.split[j] < 0) {
    node_of[i] = -1;
    keys[i] = past;
    return;
  }
  const index_t id = ids[i], v = far_id(vantage[j]);
  std::uint32_t low = 0;
  if (id == v) {
    float* out = vantages + static_cast<index_t>(lv.id[j]) * M;
    for (int d = 0; d < M; ++d) out[d] = padded[v * M + d];
  } else {
    float x[M];
    load_query(padded + v * M, M, x);
    low = __float_as_uint(sqrt_rn(point_distance2<M>(x, padded + id * M))) + 1;
  }
  keys[i] = (static_cast<std::uint64_t>(j) << 32) | low;
}

__device__ float key_distance(std::uint64_t k) {
  const std::uint32_t low = static_cast<std::uint32_t>(k);
  return low == 0 ? 0.0f : __uint_as_float(low - 1);
}

struct InnerCount {
  const index_t* count;
  const std::int16_t* split;
  __device__ index_t operator()(index_t j) const { return split[j] >= 0 ? count[j] : 0; }
};

// Per sorted position: whether its point goes inside (first n / 2 of its node's sorted range,
// which starts at start[j]).
__global__ void inside_flags_kernel(Level lv, index_t n, index_t m, const std::uint64_t* keys, const index_t* ids,
                                    const index_t* start, std::uint8_t* left) {
  const index_t s = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (s >= n) return;
  const index_t j = static_cast<index_t>(keys[s] >> 32);
  if (j >= m) return;
  left[ids[s]] = (s - start[j]) < lv.count[j] / 2;
}

// Per inner node: mu and its children's parent and shells, from the ends of its sorted halves.
__global__ void shells_kernel(Level lv, index_t m, const std::uint64_t* keys, const index_t* start,
                              const KdNode* nodes, float* mu, node_id* parent, float* shell_lo, float* shell_hi) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= m || lv.split[j] < 0) return;
  const index_t g = start[j], c = lv.count[j], h = c / 2;
  const node_id at = lv.id[j], right = static_cast<node_id>(nodes[at].first);
  mu[at] = key_distance(keys[g + h - 1]);
  parent[at + 1] = at;
  shell_lo[at + 1] = key_distance(keys[g]);
  shell_hi[at + 1] = key_distance(keys[g + h - 1]);
  parent[right] = at;
  shell_lo[right] = key_distance(keys[g + h]);
  shell_hi[right] = key_distance(keys[g + c - 1]);
}

__global__ void infinity_kernel(float* x) { *x = __int_as_float(0x7f800000); }

// The tree's own arrays, set as VpTree::build sets them before its recursion.
struct VpArrays {
  DeviceBuffer<float> vantages, mu, shell_lo, shell_hi;
  DeviceBuffer<node_id> parent;
  VpArrays(std::size_t nn, int stride, cudaStream_t s) {
    vantages.reserve(nn * stride, "the vp-tree vantage points", s);
    mu.reserve(nn, "the vp-tree split radii", s);
    parent.reserve(nn, "the vp-tree parents", s);
    shell_lo.reserve(nn, "the vp-tree shells", s);
    shell_hi.reserve(nn, "the vp-tree shells", s);
    CANOPY_CUDA_CHECK(cudaMemsetAsync(vantages.get(), 0, nn * stride * sizeof(float), s));
    CANOPY_CUDA_CHECK(cudaMemsetAsync(mu.get(), 0, nn * sizeof(float), s));
    CANOPY_CUDA_CHECK(cudaMemsetAsync(parent.get(), 0xff, nn * sizeof(node_id), s));  // kNoNode
    CANOPY_CUDA_CHECK(cudaMemsetAsync(shell_lo.get(), 0, nn * sizeof(float), s));
    infinity_kernel<<<1, 1, 0, s>>>(shell_hi.get());  // the root's; every other node's parent writes it
    CANOPY_CUDA_CHECK_LAUNCH("infinity_kernel");
  }
};

using LeftIt = thrust::transform_iterator<LeftOf, thrust::counting_iterator<index_t>>;
using InnerIt = thrust::transform_iterator<InnerCount, thrust::counting_iterator<index_t>>;

// The level loop's working arrays: the ids (double-buffered), keys, flags, scans and the level
// records, and one scratch space for every level's sorts and scans.
struct VpWork {
  DeviceBuffer<index_t> ids[2], sorted_ids, before, rank, start, node_of[2];
  DeviceBuffer<std::uint64_t> keys, sorted_keys;
  DeviceBuffer<unsigned long long> hop, vantage;
  DeviceBuffer<std::uint8_t> left;
  DeviceBuffer<double> sums[2];
  DeviceBuffer<unsigned char> temp;
  std::size_t sort_bytes = 0, scan_bytes = 0, rank_bytes = 0, start_bytes = 0;
  VpWork(index_t n, index_t widest, cudaStream_t s) {
    const std::size_t un = static_cast<std::size_t>(n), uw = static_cast<std::size_t>(widest);
    for (auto& x : ids) x.reserve(un, "the vp-tree build's ids", s);
    for (auto& x : node_of) x.reserve(un, "the vp-tree build's node map", s);
    sorted_ids.reserve(un, "the vp-tree build's ids", s);
    before.reserve(un, "the vp-tree build's scan", s);
    keys.reserve(un, "the vp-tree build's sort keys", s);
    sorted_keys.reserve(un, "the vp-tree build's sort keys", s);
    left.reserve(un, "the vp-tree build's split flags", s);
    rank.reserve(uw, "the vp-tree build's levels", s);
    start.reserve(uw, "the vp-tree build's levels", s);
    hop.reserve(uw, "the vp-tree build's levels", s);
    vantage.reserve(uw, "the vp-tree build's levels", s);
    const int max_bits = 32 + bits_for(widest);
    // Not run_cub: the scratch space is sized once for every level's sorts and scans (their largest).
    CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys.get(), sorted_keys.get(), ids[0].get(),
                                                      sorted_ids.get(), n, 0, max_bits, s));
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(
        nullptr, scan_bytes, LeftIt(thrust::counting_iterator<index_t>(0), LeftOf{nullptr, nullptr}), before.get(), n, s));
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, rank_bytes, rank.get(), rank.get(), widest, s));
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(
        nullptr, start_bytes, InnerIt(thrust::counting_iterator<index_t>(0), InnerCount{nullptr, nullptr}), start.get(),
        widest, s));
    temp.reserve(std::max({sort_bytes, scan_bytes, rank_bytes, start_bytes}), "the vp-tree build's scratch space", s);
  }
};

}  // namespace

VpTree VpTree::build_on_gpu(const float* points, index_t n, int dims, const VpTreeOptions& options,
                            GpuBuildStats* stats) {
  const std::string prefix = "vp-tree: ";
  check_gpu_build(prefix, points, n, dims, options.leaf_size);
  MedianGpuBuild b;
  detail::MedianTreeInput in{};
  const float* pts = b.start(prefix, points, n, dims, options.leaf_size, in);
  b.set_shape(n, dims, in.n_nodes);

  const cudaStream_t s = b.stream.get();
  const int stride = padded_dims(dims);
  const int leaf_size = options.leaf_size;
  const std::size_t un = static_cast<std::size_t>(n), nn = static_cast<std::size_t>(in.n_nodes);
  const LevelSizes levels = level_sizes(n, leaf_size);
  const index_t widest = *std::max_element(levels.nodes.begin(), levels.nodes.end());
  const std::size_t uw = static_cast<std::size_t>(widest);

  const SizeTable subtree = b.size_table(in.counter);

  b.nodes.reserve(nn, "the tree nodes", s);
  VpArrays a(nn, stride, s);
  DeviceBuffer<float> padded, centroids;
  pad_rows(pts, n, dims, padded, "the vp-tree build's padded points", s);
  centroids.reserve(uw * stride, "the vp-tree build's centroids", s);
  VpWork w(n, widest, s);
  Level lv[2];
  b.levels_from_root(uw, n, lv);

  iota_kernel<<<grid(n), kBlockSize, 0, s>>>(n, w.ids[0].get());
  CANOPY_CUDA_CHECK_LAUNCH("iota_kernel");
  CANOPY_CUDA_CHECK(cudaMemsetAsync(w.node_of[0].get(), 0, un * sizeof(index_t), s));  // all in the root

  int at = 0;
  dispatch_dims(dims, [&](auto width) {
    constexpr int M = decltype(width)::value;
    for (std::size_t depth = 0; depth < levels.nodes.size(); ++depth) {
      const index_t m = levels.nodes[depth];
      const std::size_t um = static_cast<std::size_t>(m);
      const Level& here = lv[at];
      index_t* cur = w.ids[at].get();
      vp_node_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, static_cast<int>(depth), leaf_size, subtree,
                                                    b.nodes.get());
      CANOPY_CUDA_CHECK_LAUNCH("vp_node_kernel");
      if (levels.inner[depth] == 0) break;
      const index_t largest = levels.largest[depth];
      const index_t per = (largest + kSumChunk - 1) / kSumChunk, threads = m * per;
      level_centroids(here, m, largest, cur, pts, dims, w.sums, centroids.get(), false, s);
      CANOPY_CUDA_CHECK(cudaMemsetAsync(w.hop.get(), 0, um * sizeof(unsigned long long), s));
      CANOPY_CUDA_CHECK(cudaMemsetAsync(w.vantage.get(), 0, um * sizeof(unsigned long long), s));
      farthest_kernel<M><<<grid(threads), kBlockSize, 0, s>>>(here, m, per, cur, padded.get(), centroids.get(),
                                                              nullptr, w.hop.get());
      CANOPY_CUDA_CHECK_LAUNCH("farthest_kernel");
      farthest_kernel<M><<<grid(threads), kBlockSize, 0, s>>>(here, m, per, cur, padded.get(), nullptr, w.hop.get(),
                                                              w.vantage.get());
      CANOPY_CUDA_CHECK_LAUNCH("farthest_kernel");
      vp_keys_kernel<M><<<grid(n), kBlockSize, 0, s>>>(here, n, m, w.node_of[at].get(), cur, padded.get(),
                                                       w.vantage.get(), w.keys.get(), a.vantages.get());
      CANOPY_CUDA_CHECK_LAUNCH("vp_keys_kernel");
      std::size_t bytes = w.sort_bytes;
      CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.temp.get(), bytes, w.keys.get(), w.sorted_keys.get(), cur,
                                                        w.sorted_ids.get(), n, 0, 32 + bits_for(m), s));
      bytes = w.start_bytes;
      CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(
          w.temp.get(), bytes, InnerIt(thrust::counting_iterator<index_t>(0), InnerCount{here.count, here.split}),
          w.start.get(), m, s));
      inside_flags_kernel<<<grid(n), kBlockSize, 0, s>>>(here, n, m, w.sorted_keys.get(), w.sorted_ids.get(), w.start.get(),
                                                         w.left.get());
      CANOPY_CUDA_CHECK_LAUNCH("inside_flags_kernel");
      shells_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, w.sorted_keys.get(), w.start.get(), b.nodes.get(), a.mu.get(),
                                                   a.parent.get(), a.shell_lo.get(), a.shell_hi.get());
      CANOPY_CUDA_CHECK_LAUNCH("shells_kernel");
      // The next level's records, and the split itself: the kd-tree's stable partition.
      inner_flags_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, w.rank.get());
      CANOPY_CUDA_CHECK_LAUNCH("inner_flags_kernel");
      bytes = w.rank_bytes;
      CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(w.temp.get(), bytes, w.rank.get(), w.rank.get(), m, s));
      children_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, w.rank.get(), b.nodes.get(), lv[1 - at]);
      CANOPY_CUDA_CHECK_LAUNCH("children_kernel");
      bytes = w.scan_bytes;
      CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(
          w.temp.get(), bytes, LeftIt(thrust::counting_iterator<index_t>(0), LeftOf{cur, w.left.get()}), w.before.get(), n,
          s));
      partition_kernel<<<grid(n), kBlockSize, 0, s>>>(here, n, w.node_of[at].get(), w.left.get(), w.before.get(), cur,
                                                      w.ids[1 - at].get(), w.rank.get(), w.node_of[1 - at].get());
      CANOPY_CUDA_CHECK_LAUNCH("partition_kernel");
      at = 1 - at;
    }
  });

  // Each leaf's range is already ascending: the stable partitions kept every range so.
  b.point_ids.reserve(un, "the tree point ids", s);
  b.tree_points.reserve(un * stride, "the tree points", s);
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(b.point_ids.get(), w.ids[at].get(), un * sizeof(index_t), cudaMemcpyDeviceToDevice, s));
  tree_points_kernel<<<grid(n), kBlockSize, 0, s>>>(pts, n, dims, stride, b.point_ids.get(), b.tree_points.get());
  CANOPY_CUDA_CHECK_LAUNCH("tree_points_kernel");

  VpTree tree;
  tree.set_shape(dims, leaf_size, in.height);
  tree.keep_on_device(b.keep({{"the vp-tree vantage points", a.vantages.get(), nn * stride * sizeof(float)},
                              {"the vp-tree split radii", a.mu.get(), nn * sizeof(float)},
                              {"the vp-tree parents", a.parent.get(), nn * sizeof(node_id)},
                              {"the vp-tree shells (low ends)", a.shell_lo.get(), nn * sizeof(float)},
                              {"the vp-tree shells (high ends)", a.shell_hi.get(), nn * sizeof(float)}}, stats),
                      n);
  return tree;
}

}  // namespace canopy
