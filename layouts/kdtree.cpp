#include "layouts/kdtree.hpp"
#include "runtime/checks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>
#include <tbb/parallel_reduce.h>

namespace canopy {
namespace {

// Ranges at least this large build their two halves as parallel tasks.
constexpr index_t kParallelGrain = 1 << 14;

struct Builder {
  const float* pts;
  int dims;
  int stride;
  int leaf_size;
  std::vector<index_t>& ids;
  std::vector<KdNode>& nodes;
  std::vector<float>& boxes;
  std::map<index_t, index_t> subtree_nodes_memo;

  // Nodes in the subtree over n points. Halves at each level take at most two distinct
  // sizes, so the memo stays O(log n); it is filled before the parallel build reads it.
  index_t subtree_nodes(index_t n) {
    if (n <= leaf_size) return 1;
    auto it = subtree_nodes_memo.find(n);
    if (it != subtree_nodes_memo.end()) return it->second;
    const index_t r = 1 + subtree_nodes(n / 2) + subtree_nodes(n - n / 2);
    subtree_nodes_memo.emplace(n, r);
    return r;
  }
  index_t subtree_nodes_cached(index_t n) const {
    return n <= leaf_size ? 1 : subtree_nodes_memo.at(n);
  }

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
    std::copy(box.lo, box.lo + dims, lo);
    std::copy(box.hi, box.hi + dims, hi);
  }

  void build(index_t at, index_t begin, index_t end, int depth) {
    float* lo = boxes.data() + at * 2 * stride;
    float* hi = lo + stride;
    bounding_box(begin, end, lo, hi);
    KdNode& node = nodes[at];
    node.depth = static_cast<std::int16_t>(depth);
    const index_t n = end - begin;
    if (n <= leaf_size) {
      node.first = begin;
      node.count = static_cast<std::int32_t>(n);
      node.split_dim = -1;
      return;
    }
    int dim = 0;
    for (int d = 1; d < dims; ++d)
      if (hi[d] - lo[d] > hi[dim] - lo[dim]) dim = d;
    const index_t mid = begin + n / 2;
    // (coordinate, point index) is a total order, so the split never depends on scheduling.
    std::nth_element(ids.begin() + begin, ids.begin() + mid, ids.begin() + end,
                     [&](index_t a, index_t b) {
                       const float ca = pts[a * dims + dim], cb = pts[b * dims + dim];
                       return ca < cb || (ca == cb && a < b);
                     });
    const index_t right = at + 1 + subtree_nodes_cached(n / 2);
    node.first = right;
    node.count = 0;
    node.split_dim = static_cast<std::int16_t>(dim);
    if (n >= kParallelGrain) {
      tbb::parallel_invoke([&] { build(at + 1, begin, mid, depth + 1); },
                           [&] { build(right, mid, end, depth + 1); });
    } else {
      build(at + 1, begin, mid, depth + 1);
      build(right, mid, end, depth + 1);
    }
  }
};

}  // namespace

KdTree KdTree::build(const float* points, index_t n, int dims, const KdTreeOptions& options) {
  if (n <= 0) throw Error("kd-tree: the point set is empty (0 points)");
  if (points == nullptr) throw Error("kd-tree: points is a null pointer");
  if (dims < 1 || dims > kMaxDims)
    throw Error("kd-tree: dims = " + std::to_string(dims) + " is outside 1.." +
                std::to_string(kMaxDims));
  if (options.leaf_size < 1)
    throw Error("kd-tree: leaf_size = " + std::to_string(options.leaf_size) + " must be at least 1");

  const index_t total = n * dims;
  const index_t bad = first_non_finite(points, total);
  if (bad < total)
    throw Error("kd-tree: point " + std::to_string(bad / dims) + " has a non-finite coordinate (" +
                std::to_string(points[bad]) + ") in dimension " + std::to_string(bad % dims));

  KdTree tree;
  tree.dims_ = dims;
  tree.leaf_size_ = options.leaf_size;
  std::vector<index_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), index_t{0});

  const int stride = padded_dims(dims);
  Builder b{points, dims, stride, options.leaf_size, ids, tree.nodes_, tree.boxes_, {}};
  const index_t n_nodes = b.subtree_nodes(n);
  if (n_nodes > std::numeric_limits<node_id>::max())
    throw Error("kd-tree: " + std::to_string(n_nodes) + " nodes exceed the 2^31 node limit; " +
                "raise leaf_size");
  // Median splits give height ceil(log2(n / leaf_size)) + 1; check it fits the rope stack.
  int height = 1;
  for (index_t m = n; m > options.leaf_size; m = m - m / 2) ++height;
  if (height > KdTreeView::kMaxStack - 1)
    throw Error("kd-tree: height " + std::to_string(height) + " exceeds the rope-stack limit");
  tree.height_ = height;
  tree.nodes_.resize(static_cast<std::size_t>(n_nodes));
  tree.boxes_.assign(static_cast<std::size_t>(n_nodes) * 2 * stride, 0.0f);
  b.build(0, 0, n, 0);

  tree.points_.assign(static_cast<std::size_t>(n) * stride, 0.0f);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i)
      std::copy(points + ids[i] * dims, points + (ids[i] + 1) * dims, tree.points_.begin() + i * stride);
  });
  tree.point_ids_ = std::move(ids);
  return tree;
}

KdTreeView KdTree::view() const {
  KdTreeView v;
  v.nodes = nodes_.data();
  v.boxes = boxes_.data();
  v.points = points_.data();
  v.point_ids = point_ids_.data();
  v.n_points = size();
  v.n_nodes = node_count();
  v.dims = dims_;
  v.stride = padded_dims(dims_);
  v.height = height_;
  return v;
}

std::size_t KdTree::bytes() const {
  return nodes_.size() * sizeof(KdNode) + boxes_.size() * sizeof(float) +
         points_.size() * sizeof(float) + point_ids_.size() * sizeof(index_t);
}

}  // namespace canopy
