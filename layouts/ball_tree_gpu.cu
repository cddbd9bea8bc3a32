// The ball tree built on the GPU: BallTree::build_on_gpu, bit for bit BallTree::build's tree.
// Its splits are the kd-tree's (the median of the widest dimension, ties by index), so the
// level-by-level build of layouts/median_tree_gpu.cuh gives its topology and point order. A
// node's ball then needs two things in the CPU's exact arithmetic:
//  - the centroid: double sums over the node's points in ascending index order, in
//    detail::chunked_sum's order (chunks of 64 summed in order, then the chunks' sums likewise),
//    divided by the count and rounded to float. The build keeps an id-ordered list beside the
//    coordinate lists for it; one thread sums one chunk.
//  - the radius: the max over the node's points of D(centre, p) on padded coordinates, the very
//    function the visitors call. A max is exact, so any order gives it.
#include <string>

#include "core/rounding.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/geometry.hpp"
#include "layouts/median_tree_gpu.cuh"

namespace canopy {
namespace {

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

__global__ void centres_kernel(Level lv, index_t m, index_t per, const double* sums, int dims, int stride,
                               float* centres) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= m) return;
  float* out = centres + static_cast<index_t>(lv.id[j]) * stride;
  for (int d = 0; d < dims; ++d)
    out[d] = static_cast<float>(div_rn(sums[(j * per) * dims + d], static_cast<double>(lv.count[j])));
  for (int d = dims; d < stride; ++d) out[d] = 0.0f;
}

// One thread per (node, chunk): the largest D(centre, p) of the chunk, into the node's radius
// (zeroed before; a max is exact in any order; non-negative floats order as their bits).
// padded: the points zero-padded to M floats, input order (point_distance2 reads rows of global
// memory through the read-only cache).
template <int M>
__global__ void radii_kernel(Level lv, index_t m, index_t per, const index_t* ids, const float* padded,
                             const float* centres, float* radii) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  Chunk ch;
  if (!chunk_of(lv, m, per, t, ch)) return;
  const node_id at = lv.id[ch.node];
  float centre[M];
  load_query(centres + static_cast<index_t>(at) * M, M, centre);
  float r = 0.0f;
  for (index_t i = ch.begin; i < ch.end; ++i)
    r = fmaxf(r, sqrt_rn(point_distance2<M>(centre, padded + static_cast<index_t>(ids[i]) * M)));
  atomicMax(reinterpret_cast<int*>(radii + at), __float_as_int(r));
}

__global__ void pad_rows_kernel(const float* pts, index_t n, int dims, int stride, float* padded) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  for (int d = 0; d < stride; ++d) padded[i * stride + d] = d < dims ? pts[i * dims + d] : 0.0f;
}

}  // namespace

BallTree BallTree::build_on_gpu(const float* points, index_t n, int dims, const BallTreeOptions& options,
                                GpuBuildStats* stats) {
  const std::string prefix = "ball tree: ";
  detail::check_not_empty(prefix, n);
  detail::check_shape(prefix, points, dims, options.leaf_size);
  if (!gpu_available()) throw Error("ball tree: build_on_gpu needs a CUDA device: " + gpu_description());
  MedianGpuBuild b;
  const bool on_device = is_device_pointer(points);
  const float* pts = b.upload(prefix, points, n, dims);
  detail::MedianTreeInput in{detail::NodeCounter{options.leaf_size, {}}, 0, 0, {}, {}};
  detail::size_median_tree(prefix, n, in);

  const cudaStream_t s = b.stream.get();
  const int stride = padded_dims(dims);
  DeviceBuffer<float> centres, radii, padded;
  DeviceBuffer<double> sums[2];
  padded.reserve(static_cast<std::size_t>(n) * stride, "the ball-tree build's padded points", s);
  pad_rows_kernel<<<grid(n), kBlockSize, 0, s>>>(pts, n, dims, stride, padded.get());
  CANOPY_CUDA_CHECK_LAUNCH("pad_rows_kernel");
  centres.reserve(static_cast<std::size_t>(in.n_nodes) * stride, "the ball-tree centres", s);
  radii.reserve(static_cast<std::size_t>(in.n_nodes), "the ball-tree radii", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(radii.get(), 0, static_cast<std::size_t>(in.n_nodes) * sizeof(float), s));
  b.build(pts, n, dims, options.leaf_size, in.counter, true,
          [&](const Level& lv, index_t m, index_t largest, const index_t* ids, cudaStream_t st) {
            const index_t per = (largest + kSumChunk - 1) / kSumChunk, threads = m * per;
            for (auto& buffer : sums)
              buffer.reserve(static_cast<std::size_t>(threads) * dims, "the ball-tree centroid sums", st);
            chunk_sums_kernel<<<grid(threads), kBlockSize, 0, st>>>(lv, m, per, ids, pts, dims, sums[0].get());
            CANOPY_CUDA_CHECK_LAUNCH("chunk_sums_kernel");
            int at = 0, round = 0;
            for (index_t have = per; have > 1; have = (have + kSumChunk - 1) / kSumChunk, ++round, at = 1 - at) {
              const index_t groups = (have + kSumChunk - 1) / kSumChunk;
              group_sums_kernel<<<grid(m * groups), kBlockSize, 0, st>>>(lv, m, per, groups, round, dims,
                                                                          sums[at].get(), sums[1 - at].get());
              CANOPY_CUDA_CHECK_LAUNCH("group_sums_kernel");
            }
            centres_kernel<<<grid(m), kBlockSize, 0, st>>>(lv, m, per, sums[at].get(), dims, stride, centres.get());
            CANOPY_CUDA_CHECK_LAUNCH("centres_kernel");
            dispatch_dims(dims, [&](auto width) {
              constexpr int M = decltype(width)::value;
              radii_kernel<M><<<grid(threads), kBlockSize, 0, st>>>(lv, m, per, ids, padded.get(), centres.get(),
                                                                    radii.get());
            });
            CANOPY_CUDA_CHECK_LAUNCH("radii_kernel");
          });
  BallTree tree;
  tree.dims_ = dims;
  tree.leaf_size_ = options.leaf_size;
  tree.height_ = in.height;
  b.fetch(tree.centres_, centres.get(), static_cast<std::size_t>(in.n_nodes) * stride);
  b.fetch(tree.radii_, radii.get(), static_cast<std::size_t>(in.n_nodes));
  b.finish(tree.nodes_, tree.points_, tree.point_ids_, on_device, stats);
  return tree;
}

}  // namespace canopy
