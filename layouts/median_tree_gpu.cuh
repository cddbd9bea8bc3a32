// Internal: the level-by-level GPU build the median-split trees share: the kd-tree's and ball
// tree's whole level loop (layouts/kdtree_gpu.cu explains it), the vp-tree's level bookkeeping,
// and the centroids. Include from the layouts/ .cu builders only; its kernels live in an
// anonymous namespace, one copy per builder.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda.cuh"
#include "core/device.hpp"
#include "core/rounding.hpp"
#include "layouts/gpu_build.hpp"
#include "layouts/median_tree_build.hpp"
#include "layouts/point_tree.hpp"
#include "layouts/resident.hpp"

namespace canopy {
namespace {

constexpr int kBlockSize = 256;

unsigned grid(index_t n) { return static_cast<unsigned>((n + kBlockSize - 1) / kBlockSize); }

// A float's bits as an unsigned integer that sorts like the float; -0 sorts as +0 (they are equal
// to the CPU's comparison, which then orders them by index, as the stable sort does).
__device__ std::uint32_t sortable(float v) {
  const std::uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void iota_kernel(index_t n, index_t* ids) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) ids[i] = i;
}

__global__ void coordinate_keys_kernel(const float* points, index_t n, int dims, int d, std::uint32_t* keys,
                                       index_t* ids) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  keys[i] = sortable(points[i * dims + d]);
  ids[i] = i;
}

// Subtree sizes of the median split: nodes(size) for the sizes a tree of n points has, sorted by
// size (sizes up to the leaf size make one node and are not listed).
struct SizeTable {
  const index_t* sizes;
  const index_t* nodes;
  int count;
  index_t leaf_size;
  __device__ index_t operator()(index_t size) const {
    if (size <= leaf_size) return 1;
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (sizes[mid] < size) lo = mid + 1; else hi = mid;
    }
    return nodes[lo];
  }
};

// One level's nodes, left to right (their point ranges ascend).
struct Level {
  index_t* begin;
  index_t* count;
  node_id* id;
  std::int16_t* split;  // written by node_kernel: the split dimension, -1 for a leaf
};

struct Lists {
  // per dimension: ids by (coordinate, id) within each node; ord[dims], when kept: ids ascending
  index_t* ord[kMaxDims + 1];
};

// Node j of the level's record: a leaf holds its points, an inner node (split at split_dim) names
// child 1, which follows child 0's subtree of c / 2 points.
__device__ inline KdNode level_node(const Level& lv, index_t j, int depth, int leaf_size, SizeTable subtree,
                                    std::int16_t split_dim) {
  const index_t b = lv.begin[j], c = lv.count[j];
  KdNode node;
  node.depth = static_cast<std::int16_t>(depth);
  if (c <= leaf_size) {
    node.first = b;
    node.count = static_cast<std::int32_t>(c);
    node.split_dim = -1;
  } else {
    node.first = lv.id[j] + 1 + subtree(c / 2);
    node.count = 0;
    node.split_dim = split_dim;
  }
  return node;
}

// Each node of the level: its box from the ends of its lists, its split dimension, its record.
__global__ void node_kernel(Level lv, index_t m, int depth, Lists lists, const float* points, int dims, int stride,
                            int leaf_size, SizeTable subtree, KdNode* nodes, float* boxes) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= m) return;
  const index_t b = lv.begin[j], c = lv.count[j];
  const node_id at = lv.id[j];
  float* lo = boxes + static_cast<index_t>(at) * 2 * stride;
  float* hi = lo + stride;
  int dim = 0;
  for (int d = 0; d < dims; ++d) {
    lo[d] = detail::canonical_zero(points[lists.ord[d][b] * dims + d]);
    hi[d] = detail::canonical_zero(points[lists.ord[d][b + c - 1] * dims + d]);
    if (d > 0 && hi[d] - lo[d] > hi[dim] - lo[dim]) dim = d;
  }
  const KdNode node = level_node(lv, j, depth, leaf_size, subtree, static_cast<std::int16_t>(dim));
  lv.split[j] = node.split_dim;
  nodes[at] = node;
}

// The inner nodes' children, in order, at twice their rank among the inner nodes.
__global__ void children_kernel(Level lv, index_t m, const index_t* rank, const KdNode* nodes, Level next) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= m || lv.split[j] < 0) return;
  const index_t b = lv.begin[j], c = lv.count[j], r = 2 * rank[j];
  const node_id at = lv.id[j];
  next.begin[r] = b;
  next.count[r] = c / 2;
  next.id[r] = at + 1;
  next.begin[r + 1] = b + c / 2;
  next.count[r + 1] = c - c / 2;
  next.id[r + 1] = static_cast<node_id>(nodes[at].first);
}

__global__ void inner_flags_kernel(Level lv, index_t m, index_t* flags) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j < m) flags[j] = lv.split[j] >= 0;
}

// For each position: the node of this level it lies in (node_of, from the level before; -1: a
// leaf's, it stays put), -1 now too where that node is a leaf; and for the points of inner nodes
// whether they go left: the first half of the split dimension's list.
__global__ void left_flags_kernel(Level lv, index_t n, Lists lists, index_t* node_of, std::uint8_t* left) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const index_t j = node_of[i];
  if (j < 0) return;
  const int dim = lv.split[j];
  if (dim < 0) {
    node_of[i] = -1;
    return;
  }
  const index_t b = lv.begin[j], c = lv.count[j];
  left[lists.ord[dim][i]] = (i - b) < c / 2;
}

struct LeftOf {
  const index_t* ord;
  const std::uint8_t* left;
  __device__ index_t operator()(index_t i) const { return left[ord[i]]; }
};

// The stable partition of one list: left-goers first, each side in list order. before[i] is the
// number of left-goers at positions < i (an exclusive scan over the whole list; differences within
// a node count that node's alone).
// With next_node_of (one list's partition per level writes it): each position's node at the
// next level, the child whose range holds it (children sit at twice their parent's inner rank).
__global__ void partition_kernel(Level lv, index_t n, const index_t* node_of, const std::uint8_t* left,
                                 const index_t* before, const index_t* ord, index_t* out, const index_t* rank,
                                 index_t* next_node_of) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const index_t j = node_of[i], id = ord[i];
  if (j < 0) {
    out[i] = id;
    if (next_node_of) next_node_of[i] = -1;
    return;
  }
  const index_t b = lv.begin[j], c = lv.count[j];
  if (next_node_of) next_node_of[i] = 2 * rank[j] + ((i - b) < c / 2 ? 0 : 1);
  const index_t lefts = before[i] - before[b];
  out[left[id] ? b + lefts : b + c / 2 + (i - b - lefts)] = id;
}

// The leaves' points in ascending id (a leaf holds at most leaf_size of them), and the padded
// tree-order copy of the points.
__global__ void leaf_points_kernel(const KdNode* nodes, node_id n_nodes, const index_t* ord, index_t* point_ids) {
  const index_t a = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (a >= n_nodes || nodes[a].split_dim >= 0) return;
  const index_t b = nodes[a].first, c = nodes[a].count;
  for (index_t k = 0; k < c; ++k) {
    const index_t id = ord[b + k];
    index_t p = b + k;
    for (; p > b && point_ids[p - 1] > id; --p) point_ids[p] = point_ids[p - 1];
    point_ids[p] = id;
  }
}

__global__ void tree_points_kernel(const float* points, index_t n, int dims, int stride, const index_t* point_ids,
                                   float* out) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float* p = points + static_cast<index_t>(point_ids[i]) * dims;
  for (int d = 0; d < stride; ++d) out[i * stride + d] = d < dims ? p[d] : 0.0f;
}

// ---- Centroids, in detail::chunked_sum's order (the ball tree's and vp-tree's) ----------------

using detail::kSumChunk;

// Chunks of a node's points (or of partial sums) of kSumChunk, after `rounds` rounds of grouping.
__device__ index_t entries_after(index_t count, int rounds) {
  index_t e = (count + kSumChunk - 1) / kSumChunk;
  for (int r = 0; r < rounds; ++r) e = (e + kSumChunk - 1) / kSumChunk;
  return e;
}

// Thread t's chunk when a level's m nodes get `per` threads each, one per kSumChunk points:
// its node and its positions [begin, end). False for a thread past its node's points.
struct Chunk {
  index_t node, begin, end;
};
__device__ bool chunk_of(const Level& lv, index_t m, index_t per, index_t t, Chunk& out) {
  if (t >= m * per) return false;
  const index_t j = t / per, k = t % per;
  const index_t b = lv.begin[j], c = lv.count[j];
  if (k * kSumChunk >= c) return false;
  out = Chunk{j, b + k * kSumChunk, b + ((k + 1) * kSumChunk < c ? (k + 1) * kSumChunk : c)};
  return true;
}

// One thread per (node, chunk): the chunk's double sums in order (part: [m][per][dims]).
__global__ void chunk_sums_kernel(Level lv, index_t m, index_t per, const index_t* ids, const float* pts, int dims,
                                  double* part) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  Chunk ch;
  if (!chunk_of(lv, m, per, t, ch)) return;
  double acc[kMaxDims];
  for (int d = 0; d < dims; ++d) acc[d] = 0.0;
  for (index_t i = ch.begin; i < ch.end; ++i) {
    const float* p = pts + static_cast<index_t>(ids[i]) * dims;
    for (int d = 0; d < dims; ++d) acc[d] = add_rn(acc[d], static_cast<double>(p[d]));
  }
  for (int d = 0; d < dims; ++d) part[t * dims + d] = acc[d];
}

// One round of grouping: each node's partial sums, kSumChunk at a time, in order, into `out`.
__global__ void group_sums_kernel(Level lv, index_t m, index_t per, index_t groups, int round, int dims,
                                  const double* in, double* out) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= m * groups) return;
  const index_t j = t / groups, g = t % groups;
  const index_t have = entries_after(lv.count[j], round);
  if (g * kSumChunk >= have) return;
  const index_t end = (g + 1) * kSumChunk < have ? (g + 1) * kSumChunk : have;
  for (int d = 0; d < dims; ++d) {
    double acc = 0.0;
    for (index_t e = g * kSumChunk; e < end; ++e) acc = add_rn(acc, in[(j * per + e) * dims + d]);
    out[(j * per + g) * dims + d] = acc;
  }
}

// Node j's centroid (zero-padded to stride) at row lv.id[j] of centres (by_id) or at row j.
__global__ void centres_kernel(Level lv, index_t m, index_t per, const double* sums, int dims, int stride, bool by_id,
                               float* centres) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= m) return;
  float* out = centres + (by_id ? static_cast<index_t>(lv.id[j]) : j) * stride;
  for (int d = 0; d < dims; ++d)
    out[d] = static_cast<float>(div_rn(sums[(j * per) * dims + d], static_cast<double>(lv.count[j])));
  for (int d = dims; d < stride; ++d) out[d] = 0.0f;
}

// The centroids of a level's m nodes (the largest of `largest` points, `ids` each node's ids
// ascending), as CPU builds sum them (detail::chunked_sum): into centres (see centres_kernel).
// sums: two scratch buffers, grown as needed.
inline void level_centroids(const Level& lv, index_t m, index_t largest, const index_t* ids, const float* pts,
                            int dims, DeviceBuffer<double> (&sums)[2], float* centres, bool by_id, cudaStream_t s) {
  const index_t per = (largest + kSumChunk - 1) / kSumChunk, threads = m * per;
  for (auto& buffer : sums) buffer.reserve(static_cast<std::size_t>(threads) * dims, "the centroid sums", s);
  chunk_sums_kernel<<<grid(threads), kBlockSize, 0, s>>>(lv, m, per, ids, pts, dims, sums[0].get());
  CANOPY_CUDA_CHECK_LAUNCH("chunk_sums_kernel");
  int at = 0, round = 0;
  for (index_t have = per; have > 1; have = (have + kSumChunk - 1) / kSumChunk, ++round, at = 1 - at) {
    const index_t groups = (have + kSumChunk - 1) / kSumChunk;
    group_sums_kernel<<<grid(m * groups), kBlockSize, 0, s>>>(lv, m, per, groups, round, dims, sums[at].get(),
                                                              sums[1 - at].get());
    CANOPY_CUDA_CHECK_LAUNCH("group_sums_kernel");
  }
  centres_kernel<<<grid(m), kBlockSize, 0, s>>>(lv, m, per, sums[at].get(), dims, padded_dims(dims), by_id, centres);
  CANOPY_CUDA_CHECK_LAUNCH("centres_kernel");
}

// The points zero-padded to `stride` floats, input order (what point_distance2 reads).
__global__ void pad_rows_kernel(const float* pts, index_t n, int dims, int stride, float* padded) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  for (int d = 0; d < stride; ++d) padded[i * stride + d] = d < dims ? pts[i * dims + d] : 0.0f;
}
// The same into `padded`, reserved here (`what` names it in an out-of-memory error).
inline void pad_rows(const float* pts, index_t n, int dims, DeviceBuffer<float>& padded, const char* what,
                     cudaStream_t s) {
  const int stride = padded_dims(dims);
  padded.reserve(static_cast<std::size_t>(n) * stride, what, s);
  pad_rows_kernel<<<grid(n), kBlockSize, 0, s>>>(pts, n, dims, stride, padded.get());
  CANOPY_CUDA_CHECK_LAUNCH("pad_rows_kernel");
}

// Nodes per level and inner nodes per level, from the sizes alone.
struct LevelSizes {
  std::vector<index_t> nodes, inner, largest;
};
LevelSizes level_sizes(index_t n, index_t leaf_size) {
  LevelSizes out;
  std::map<index_t, index_t> level{{n, 1}};
  while (!level.empty()) {
    std::map<index_t, index_t> next;
    index_t nodes = 0, inner = 0;
    out.largest.push_back(level.rbegin()->first);
    for (const auto& [size, k] : level) {
      nodes += k;
      if (size <= leaf_size) continue;
      inner += k;
      next[size / 2] += k;
      next[size - size / 2] += k;
    }
    out.nodes.push_back(nodes);
    out.inner.push_back(inner);
    level.swap(next);
  }
  return out;
}


// The checks a ball or vp build makes before it touches the device: the CPU build's (errors start
// with `prefix`), then the device's presence.
inline void check_gpu_build(const std::string& prefix, const float* points, index_t n, int dims, int leaf_size) {
  detail::check_not_empty(prefix, n);
  detail::check_shape(prefix, points, dims, leaf_size);
  if (!gpu_available()) throw Error(prefix + "build_on_gpu needs a CUDA device: " + gpu_description());
}

// Every device buffer of a median-split build, kept from build to build: a rebuild of the same
// size (moving points) allocates nothing.
class MedianGpuBuild {
 public:
  Stream stream;
  Event t0, t1, t2;
  DeviceBuffer<KdNode> nodes;
  DeviceBuffer<float> boxes;        // [nodes][2 stride]: each node's bounding box
  DeviceBuffer<index_t> point_ids;  // tree order
  DeviceBuffer<float> tree_points;  // tree order, padded
  index_t n_nodes = 0;

  // The points in device memory (copied there when `points` is host memory; t0..t1 times the
  // copy), checked finite; the errors start with `prefix`.
  const float* upload(const std::string& prefix, const float* points, index_t n, int dims) {
    const cudaStream_t s = stream.get();
    const std::size_t total = static_cast<std::size_t>(n) * dims;
    t0.record(s);
    const float* pts = points;
    uploaded_ = !is_device_pointer(points);
    if (uploaded_) {
      input_.reserve(total, "the tree build's points", s);
      detail::copy_up(input_.get(), points, total * sizeof(float), s, &staging_);
      pts = input_.get();
    }
    t1.record(s);
    const index_t bad = first_non_finite_on_device(pts, static_cast<index_t>(total), s);
    if (bad < static_cast<index_t>(total)) {
      float value = 0;
      copy_memory(&value, pts + bad, sizeof(float), s);
      throw detail::non_finite_error(prefix, bad, dims, value);
    }
    return pts;
  }

  // Builds the topology, boxes, point order and padded points of the tree over pts (device) with
  // `counter` filled for n (count_nodes). per_level(level, m, largest, ids, stream) runs once per
  // level after its m nodes (the largest of `largest` points) are written, `ids` (with keep_ids)
  // holding each node's ids ascending.
  template <class PerLevel>
  void build(const float* pts, index_t n, int dims, int leaf_size, const detail::NodeCounter& counter,
             bool keep_ids, PerLevel&& per_level);

  // The ball and vp builds' start, after check_gpu_build: the points in device memory (checked
  // finite), the tree's size in `in`.
  const float* start(const std::string& prefix, const float* points, index_t n, int dims, int leaf_size,
                     detail::MedianTreeInput& in) {
    const float* pts = upload(prefix, points, n, dims);
    in.counter = detail::NodeCounter{leaf_size, {}};
    detail::size_median_tree(prefix, n, in);
    return pts;
  }

  // The subtree sizes of a tree of counter's n points, on the device: the right children's ids.
  SizeTable size_table(const detail::NodeCounter& counter) {
    const cudaStream_t s = stream.get();
    std::vector<index_t> sizes, counts;
    for (const auto& [size, count] : counter.memo) {
      sizes.push_back(size);
      counts.push_back(count);
    }
    // Small and pageable: the copy returns once the bytes are staged.
    const std::size_t entries = std::max<std::size_t>(1, sizes.size());
    table_sizes_.reserve(entries, "the tree build's size table", s);
    table_nodes_.reserve(entries, "the tree build's size table", s);
    copy_to_device(table_sizes_.get(), sizes.data(), sizes.size(), s);
    copy_to_device(table_nodes_.get(), counts.data(), counts.size(), s);
    return SizeTable{table_sizes_.get(), table_nodes_.get(), static_cast<int>(sizes.size()), counter.leaf_size};
  }

  // The two level records, for levels of up to `widest` nodes; lv[0] holds the root of n points.
  void levels_from_root(std::size_t widest, index_t n, Level (&lv)[2]) {
    const cudaStream_t s = stream.get();
    for (int k = 0; k < 2; ++k) {
      lv_begin_[k].reserve(widest, "the tree build's levels", s);
      lv_count_[k].reserve(widest, "the tree build's levels", s);
      lv_id_[k].reserve(widest, "the tree build's levels", s);
      lv_split_[k].reserve(widest, "the tree build's levels", s);
      lv[k] = Level{lv_begin_[k].get(), lv_count_[k].get(), lv_id_[k].get(), lv_split_[k].get()};
    }
    // The root's (begin, count, id), from pinned memory: an asynchronous copy (the last build's
    // ended in a synchronisation, so the buffer is free).
    level0_.reserve(3);
    level0_.get()[0] = 0;
    level0_.get()[1] = n;
    level0_.get()[2] = 0;
    copy_to_device(lv[0].begin, level0_.get(), 1, s);
    copy_to_device(lv[0].count, level0_.get() + 1, 1, s);
    copy_to_device(lv[0].id, reinterpret_cast<const node_id*>(level0_.get() + 2), 1, s);
  }

  // For a builder with its own level loop (the vp-tree's): the shape keep() copies out.
  void set_shape(index_t n, int dims, index_t node_count) {
    n_ = n;
    stride_ = padded_dims(dims);
    n_nodes = node_count;
  }

  // One of a tree's arrays in the build's device memory, by the name its map_view gives it.
  struct Array {
    const char* name;
    const void* data;
    std::size_t bytes;
  };
  // Leaves the tree on the device: the shared arrays and `extra` copied into arrays the tree
  // owns (the builder's own buffers serve the next build; the host copies the nodes when it
  // first needs them, PointTree); waits for the copies and fills stats (upload: none for device
  // input; download: none).
  std::shared_ptr<detail::ResidentArrays> keep(std::initializer_list<Array> extra, GpuBuildStats* stats) {
    const cudaStream_t s = stream.get();
    std::shared_ptr<detail::ResidentArrays> resident = detail::next_resident(last_resident_);
    const std::size_t un = static_cast<std::size_t>(n_);
    const Array shared[] = {{"the tree nodes", nodes.get(), static_cast<std::size_t>(n_nodes) * sizeof(KdNode)},
                            {"the tree points", tree_points.get(), un * stride_ * sizeof(float)},
                            {"the tree point ids", point_ids.get(), un * sizeof(index_t)}};
    auto add = [&](const Array& a) {
      void* dst = resident->add(a.name, a.bytes, s);
      if (a.bytes > 0) CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, a.data, a.bytes, cudaMemcpyDeviceToDevice, s));
    };
    for (const Array& a : shared) add(a);
    for (const Array& a : extra) add(a);
    t2.record(s);
    stream.sync();
    if (stats) {
      stats->upload_ms = uploaded_ ? t1.since(t0) : 0.0;
      stats->build_ms = t2.since(t1);
      stats->download_ms = 0.0;
    }
    return resident;
  }

 private:
  index_t n_ = 0;
  int stride_ = 0;
  bool uploaded_ = false;  // the last upload() copied host points
  std::shared_ptr<detail::ResidentArrays> last_resident_;  // the last tree's arrays (keep)
  DeviceBuffer<float> input_;
  detail::StagingSlots staging_;  // the upload's copies (large point sets)
  DeviceBuffer<index_t> table_sizes_, table_nodes_;
  DeviceBuffer<index_t> lists_[2][kMaxDims + 1];
  DeviceBuffer<std::uint32_t> keys_, sorted_keys_;
  DeviceBuffer<index_t> ids_, before_, rank_;
  DeviceBuffer<unsigned char> temp_;
  DeviceBuffer<index_t> lv_begin_[2], lv_count_[2];
  DeviceBuffer<node_id> lv_id_[2];
  DeviceBuffer<std::int16_t> lv_split_[2];
  DeviceBuffer<index_t> node_of_[2];
  DeviceBuffer<std::uint8_t> left_;
  PinnedBuffer<index_t> level0_;
};

template <class PerLevel>
void MedianGpuBuild::build(const float* pts, index_t n, int dims, int leaf_size, const detail::NodeCounter& counter,
                           bool keep_ids, PerLevel&& per_level) {
  const cudaStream_t s = stream.get();
  n_nodes = counter.cached(n);
  n_ = n;
  stride_ = padded_dims(dims);
  const int lists = dims + (keep_ids ? 1 : 0);
  const LevelSizes levels = level_sizes(n, leaf_size);
  const int stride = padded_dims(dims);
  const std::size_t un = static_cast<std::size_t>(n);

  const SizeTable subtree = size_table(counter);

  nodes.reserve(static_cast<std::size_t>(n_nodes), "the tree nodes", s);
  boxes.reserve(static_cast<std::size_t>(n_nodes) * 2 * stride, "the tree boxes", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(boxes.get(), 0, static_cast<std::size_t>(n_nodes) * 2 * stride * sizeof(float), s));

  // The lists, double-buffered: one stable radix sort of (coordinate, id) per dimension.
  keys_.reserve(un, "the tree build's sort keys", s);
  sorted_keys_.reserve(un, "the tree build's sort keys", s);
  ids_.reserve(un, "the tree build's ids", s);
  // Not run_cub: the scratch space is sized once for every level's sorts and scans (their largest).
  std::size_t sort_bytes = 0, scan_bytes = 0;
  CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_.get(), sorted_keys_.get(), ids_.get(),
                                                    ids_.get(), n, 0, 32, s));
  // Level arrays, double-buffered, sized for the widest level.
  const index_t widest = *std::max_element(levels.nodes.begin(), levels.nodes.end());
  const std::size_t uw = static_cast<std::size_t>(widest);
  before_.reserve(un, "the tree build's scan", s);
  rank_.reserve(uw, "the tree build's levels", s);
  using LeftIt = thrust::transform_iterator<LeftOf, thrust::counting_iterator<index_t>>;
  std::size_t rank_bytes = 0;
  CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, LeftIt(thrust::counting_iterator<index_t>(0),
                                                  LeftOf{nullptr, nullptr}), before_.get(), n, s));
  CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, rank_bytes, rank_.get(), rank_.get(), widest, s));
  temp_.reserve(std::max({sort_bytes, scan_bytes, rank_bytes}), "the tree build's scratch space", s);
  Lists cur, nxt;
  for (int d = 0; d < lists; ++d) {
    lists_[0][d].reserve(un, "the tree build's sorted lists", s);
    lists_[1][d].reserve(un, "the tree build's sorted lists", s);
    cur.ord[d] = lists_[0][d].get();
    nxt.ord[d] = lists_[1][d].get();
  }
  for (int d = 0; d < dims; ++d) {
    coordinate_keys_kernel<<<grid(n), kBlockSize, 0, s>>>(pts, n, dims, d, keys_.get(), ids_.get());
    CANOPY_CUDA_CHECK_LAUNCH("coordinate_keys_kernel");
    std::size_t bytes = sort_bytes;
    CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_.get(), bytes, keys_.get(), sorted_keys_.get(), ids_.get(),
                                                      cur.ord[d], n, 0, 32, s));
  }
  if (keep_ids) {
    iota_kernel<<<grid(n), kBlockSize, 0, s>>>(n, cur.ord[dims]);
    CANOPY_CUDA_CHECK_LAUNCH("iota_kernel");
  }

  Level lv[2];
  levels_from_root(uw, n, lv);
  node_of_[0].reserve(un, "the tree build's node map", s);
  node_of_[1].reserve(un, "the tree build's node map", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(node_of_[0].get(), 0, un * sizeof(index_t), s));  // all in the root
  left_.reserve(un, "the tree build's split flags", s);

  int at = 0;
  for (std::size_t depth = 0; depth < levels.nodes.size(); ++depth) {
    const index_t m = levels.nodes[depth];
    Level& here = lv[at];
    node_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, static_cast<int>(depth), cur, pts, dims, stride,
                                               leaf_size, subtree, nodes.get(), boxes.get());
    CANOPY_CUDA_CHECK_LAUNCH("node_kernel");
    per_level(here, m, levels.largest[depth], keep_ids ? cur.ord[dims] : nullptr, s);
    if (levels.inner[depth] == 0) break;
    inner_flags_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, rank_.get());
    CANOPY_CUDA_CHECK_LAUNCH("inner_flags_kernel");
    std::size_t bytes = rank_bytes;
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp_.get(), bytes, rank_.get(), rank_.get(), m, s));
    children_kernel<<<grid(m), kBlockSize, 0, s>>>(here, m, rank_.get(), nodes.get(), lv[1 - at]);
    CANOPY_CUDA_CHECK_LAUNCH("children_kernel");
    left_flags_kernel<<<grid(n), kBlockSize, 0, s>>>(here, n, cur, node_of_[at].get(), left_.get());
    CANOPY_CUDA_CHECK_LAUNCH("left_flags_kernel");
    for (int d = 0; d < lists; ++d) {
      bytes = scan_bytes;
      CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(
          temp_.get(), bytes, LeftIt(thrust::counting_iterator<index_t>(0), LeftOf{cur.ord[d], left_.get()}),
          before_.get(), n, s));
      partition_kernel<<<grid(n), kBlockSize, 0, s>>>(here, n, node_of_[at].get(), left_.get(), before_.get(), cur.ord[d],
                                                      nxt.ord[d], rank_.get(), d == 0 ? node_of_[1 - at].get() : nullptr);
      CANOPY_CUDA_CHECK_LAUNCH("partition_kernel");
    }
    std::swap(cur, nxt);
    at = 1 - at;
  }

  point_ids.reserve(un, "the tree point ids", s);
  tree_points.reserve(un * stride, "the tree points", s);
  leaf_points_kernel<<<grid(n_nodes), kBlockSize, 0, s>>>(nodes.get(), n_nodes, cur.ord[0], point_ids.get());
  CANOPY_CUDA_CHECK_LAUNCH("leaf_points_kernel");
  tree_points_kernel<<<grid(n), kBlockSize, 0, s>>>(pts, n, dims, stride, point_ids.get(), tree_points.get());
  CANOPY_CUDA_CHECK_LAUNCH("tree_points_kernel");
}

}  // namespace
}  // namespace canopy
