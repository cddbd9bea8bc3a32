#include "layouts/ball_tree.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "layouts/median_tree_build.hpp"
#include "layouts/geometry.hpp"

namespace canopy {
namespace {

using detail::fold_blocks;
using detail::NodeCounter;

template <int M>
struct Builder {
  const float* pp;  // input rows padded to M floats, original order
  int dims;
  int leaf_size;
  index_t* ids;
  KdNode* nodes;
  float* centres;
  float* radii;
  const NodeCounter& counter;

  const float* row(index_t id) const { return pp + id * M; }

  struct Box {
    float lo[M], hi[M];
  };

  void build(node_id at, index_t begin, index_t end, int depth) {
    const index_t n = end - begin;
    const Box m = fold_blocks<Box>(
        begin, end,
        [&](index_t b, index_t e) {
          Box r;
          for (int d = 0; d < M; ++d) {
            r.lo[d] = std::numeric_limits<float>::infinity();
            r.hi[d] = -std::numeric_limits<float>::infinity();
          }
          for (index_t i = b; i < e; ++i) {
            const float* p = row(ids[i]);
            for (int d = 0; d < M; ++d) {
              r.lo[d] = std::min(r.lo[d], p[d]);
              r.hi[d] = std::max(r.hi[d], p[d]);
            }
          }
          return r;
        },
        [](Box a, const Box& b) {
          for (int d = 0; d < M; ++d) {
            a.lo[d] = std::min(a.lo[d], b.lo[d]);
            a.hi[d] = std::max(a.hi[d], b.hi[d]);
          }
          return a;
        });
    const std::array<double, M> sum = detail::chunked_sum<M>(begin, end, [&](index_t i) { return row(ids[i]); });

    float c[M];  // padding sums to 0, so the centre stays zero-padded
    for (int d = 0; d < M; ++d) c[d] = static_cast<float>(sum[d] / static_cast<double>(n));
    std::copy(c, c + M, centres + static_cast<index_t>(at) * M);
    // The radius is the max of the very values a visitor computes, hence an exact bound.
    radii[at] = fold_blocks<float>(
        begin, end,
        [&](index_t b, index_t e) {
          float r = 0.0f;
          for (index_t i = b; i < e; ++i) r = std::max(r, sqrt_rn(point_distance2<M>(c, row(ids[i]))));
          return r;
        },
        [](float a, float b) { return std::max(a, b); });

    KdNode& node = nodes[at];
    node.depth = static_cast<std::int16_t>(depth);
    if (n <= leaf_size) {
      detail::make_leaf(node, begin, n);
      return;
    }
    int dim = 0;
    for (int d = 1; d < dims; ++d)
      if (m.hi[d] - m.lo[d] > m.hi[dim] - m.lo[dim]) dim = d;
    const index_t mid = begin + n / 2;
    // (coordinate, original index) is a total order: identical points still split in half.
    detail::split_stable(ids, begin, end, [&](index_t a, index_t b) {
      const float ca = pp[a * M + dim], cb = pp[b * M + dim];
      return ca < cb || (ca == cb && a < b);
    });
    const node_id right = static_cast<node_id>(at + 1 + counter.cached(n / 2));
    detail::build_halves(*this, node, at, right, dim, begin, mid, end, depth);
  }
};

}  // namespace

BallTree BallTree::build(const float* points, index_t n, int dims, const BallTreeOptions& options) {
  if (detail::build_on_gpu(options.device, is_device_pointer(points), n, "ball tree"))
    return build_on_gpu(points, n, dims, options);
  detail::MedianTreeInput in = detail::prepare_median_tree("ball tree", points, n, dims, options.leaf_size);
  const index_t n_nodes = in.n_nodes;

  BallTree tree;
  tree.set_shape(dims, options.leaf_size, in.height);
  const int stride = padded_dims(dims);
  tree.nodes_.resize(static_cast<std::size_t>(n_nodes));
  tree.centres_.assign(static_cast<std::size_t>(n_nodes) * stride, 0.0f);
  tree.radii_.assign(static_cast<std::size_t>(n_nodes), 0.0f);

  dispatch_dims(dims, [&](auto width) {
    constexpr int M = decltype(width)::value;
    Builder<M> b{in.padded.data(), dims, options.leaf_size, in.ids.data(), tree.nodes_.data(),
                 tree.centres_.data(), tree.radii_.data(), in.counter};
    b.build(0, 0, n, 0);
  });

  tree.points_ = detail::tree_order_rows(in, stride);
  tree.point_ids_ = std::move(in.ids);
  return tree;
}

}  // namespace canopy
