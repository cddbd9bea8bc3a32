#include "layouts/kdtree.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "layouts/median_tree_build.hpp"

namespace canopy {
namespace {

using detail::kParallelGrain;
using detail::NodeCounter;

struct Builder {
  const float* pts;
  int dims;
  int stride;
  int leaf_size;
  std::vector<index_t>& ids;
  std::vector<KdNode>& nodes;
  std::vector<float>& boxes;
  const NodeCounter& counter;

  void bounding_box(index_t begin, index_t end, float* lo, float* hi) const {
    struct Box {
      float lo[kMaxDims], hi[kMaxDims];
    };
    Box init;
    std::fill(init.lo, init.lo + kMaxDims, std::numeric_limits<float>::infinity());
    std::fill(init.hi, init.hi + kMaxDims, -std::numeric_limits<float>::infinity());
    auto grow = [&](index_t b, index_t e, Box box) {
      for (index_t i = b; i < e; ++i) {
        const float* p = pts + ids[i] * dims;
        for (int d = 0; d < dims; ++d) {
          box.lo[d] = std::min(box.lo[d], p[d]);
          box.hi[d] = std::max(box.hi[d], p[d]);
        }
      }
      return box;
    };
    Box box;
    if (end - begin < kParallelGrain) {
      box = grow(begin, end, init);
    } else {
      box = tbb::parallel_reduce(
          tbb::blocked_range<index_t>(begin, end, kParallelGrain / 4), init,
          [&](const tbb::blocked_range<index_t>& r, Box b) { return grow(r.begin(), r.end(), b); },
          [&](Box a, const Box& b) {
            for (int d = 0; d < dims; ++d) {
              a.lo[d] = std::min(a.lo[d], b.lo[d]);
              a.hi[d] = std::max(a.hi[d], b.hi[d]);
            }
            return a;
          });
    }
    for (int d = 0; d < dims; ++d) {
      lo[d] = detail::canonical_zero(box.lo[d]);
      hi[d] = detail::canonical_zero(box.hi[d]);
    }
  }

  void build(index_t at, index_t begin, index_t end, int depth) {
    float* lo = boxes.data() + at * 2 * stride;
    float* hi = lo + stride;
    bounding_box(begin, end, lo, hi);
    KdNode& node = nodes[at];
    node.depth = static_cast<std::int16_t>(depth);
    const index_t n = end - begin;
    if (n <= leaf_size) {
      detail::make_leaf(node, begin, n);
      return;
    }
    int dim = 0;
    for (int d = 1; d < dims; ++d)
      if (hi[d] - lo[d] > hi[dim] - lo[dim]) dim = d;
    const index_t mid = begin + n / 2;
    // (coordinate, point index) is a total order, so the split never depends on scheduling.
    detail::split_stable(ids.data(), begin, end, [&](index_t a, index_t b) {
      const float ca = pts[a * dims + dim], cb = pts[b * dims + dim];
      return ca < cb || (ca == cb && a < b);
    });
    const index_t right = at + 1 + counter.cached(n / 2);
    detail::build_halves(*this, node, at, right, dim, begin, mid, end, depth);
  }
};

}  // namespace

KdTree KdTree::build(const float* points, index_t n, int dims, const KdTreeOptions& options) {
  if (detail::build_on_gpu(options.device, is_device_pointer(points), n, "kd-tree"))
    return build_on_gpu(points, n, dims, options);
  if (n <= 0) throw Error("kd-tree: the point set is empty (0 points)");
  detail::check_points("kd-tree: ", points, n, dims, options.leaf_size);

  std::vector<index_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), index_t{0});

  const int stride = padded_dims(dims);
  NodeCounter counter{options.leaf_size, {}};
  const index_t n_nodes = detail::count_nodes("kd-tree: ", counter, n);
  // Median splits give height ceil(log2(n / leaf_size)) + 1; check it fits the rope stack.
  const int height = detail::median_height(n, options.leaf_size);
  if (height > KdTreeView::kMaxStack - 1)
    throw Error("kd-tree: height " + std::to_string(height) + " exceeds the rope-stack limit");
  KdTree tree;
  tree.set_shape(dims, options.leaf_size, height);
  tree.nodes_.resize(static_cast<std::size_t>(n_nodes));
  tree.boxes_.assign(static_cast<std::size_t>(n_nodes) * 2 * stride, 0.0f);
  Builder b{points, dims, stride, options.leaf_size, ids, tree.nodes_, tree.boxes_, counter};
  b.build(0, 0, n, 0);

  tree.points_ = detail::copy_rows(points, dims, dims, n, stride, [&](index_t i) { return ids[i]; });
  tree.point_ids_ = std::move(ids);
  return tree;
}

}  // namespace canopy
