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

}  // namespace

BallTree BallTree::build_on_gpu(const float* points, index_t n, int dims, const BallTreeOptions& options,
                                GpuBuildStats* stats) {
  const std::string prefix = "ball tree: ";
  check_gpu_build(prefix, points, n, dims, options.leaf_size);
  MedianGpuBuild b;
  detail::MedianTreeInput in{};
  const float* pts = b.start(prefix, points, n, dims, options.leaf_size, in);

  const cudaStream_t s = b.stream.get();
  const int stride = padded_dims(dims);
  DeviceBuffer<float> centres, radii, padded;
  DeviceBuffer<double> sums[2];
  pad_rows(pts, n, dims, padded, "the ball-tree build's padded points", s);
  centres.reserve(static_cast<std::size_t>(in.n_nodes) * stride, "the ball-tree centres", s);
  radii.reserve(static_cast<std::size_t>(in.n_nodes), "the ball-tree radii", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(radii.get(), 0, static_cast<std::size_t>(in.n_nodes) * sizeof(float), s));
  b.build(pts, n, dims, options.leaf_size, in.counter, true,
          [&](const Level& lv, index_t m, index_t largest, const index_t* ids, cudaStream_t st) {
            const index_t per = (largest + kSumChunk - 1) / kSumChunk, threads = m * per;
            level_centroids(lv, m, largest, ids, pts, dims, sums, centres.get(), true, st);
            dispatch_dims(dims, [&](auto width) {
              constexpr int M = decltype(width)::value;
              radii_kernel<M><<<grid(threads), kBlockSize, 0, st>>>(lv, m, per, ids, padded.get(), centres.get(),
                                                                    radii.get());
            });
            CANOPY_CUDA_CHECK_LAUNCH("radii_kernel");
          });
  BallTree tree;
  tree.set_shape(dims, options.leaf_size, in.height);
  const std::size_t nn = static_cast<std::size_t>(in.n_nodes);
  tree.keep_on_device(b.keep({{"the ball-tree centres", centres.get(), nn * stride * sizeof(float)},
                              {"the ball-tree radii", radii.get(), nn * sizeof(float)}}, stats),
                      n);
  return tree;
}

}  // namespace canopy
