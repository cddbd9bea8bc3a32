#include "layouts/ball_tree.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include "runtime/checks.hpp"
#include "runtime/point_correlation.hpp"

namespace canopy {
namespace {

// Ranges at least this large build their two halves, and run their per-point passes, as
// parallel tasks.
constexpr index_t kParallelGrain = 1 << 14;
// Reductions fold fixed blocks in index order, so double sums round the same way whatever the
// thread count.
constexpr index_t kBlock = 4096;
// Leaves room on the 64-entry rope stack (one pending sibling per level plus the current node).
constexpr int kMaxHeight = 60;

template <class T, class F, class C>
T fold_blocks(index_t begin, index_t end, F&& f, C&& combine) {
  const index_t n = end - begin;
  if (n <= kBlock) return f(begin, end);
  const index_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<T> part(static_cast<std::size_t>(blocks));
  auto run = [&](index_t k) { part[k] = f(begin + k * kBlock, std::min(end, begin + (k + 1) * kBlock)); };
  if (n >= kParallelGrain) {
    tbb::parallel_for(index_t{0}, blocks, run);
  } else {
    for (index_t k = 0; k < blocks; ++k) run(k);
  }
  T acc = part[0];
  for (index_t k = 1; k < blocks; ++k) acc = combine(acc, part[k]);
  return acc;
}

// Nodes in the subtree over n points (halves n / 2 and n - n / 2). Sizes at each level take
// at most two values, so the memo stays O(log n); it is filled before the parallel build.
struct NodeCounter {
  index_t leaf_size;
  std::map<index_t, index_t> memo;
  index_t count(index_t n) {
    if (n <= leaf_size) return 1;
    auto it = memo.find(n);
    if (it != memo.end()) return it->second;
    const index_t r = 1 + count(n / 2) + count(n - n / 2);
    memo.emplace(n, r);
    return r;
  }
  index_t cached(index_t n) const { return n <= leaf_size ? 1 : memo.at(n); }
};

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

  struct Moments {
    double sum[M];
    float lo[M], hi[M];
  };

  void build(node_id at, index_t begin, index_t end, int depth) {
    const index_t n = end - begin;
    const Moments m = fold_blocks<Moments>(
        begin, end,
        [&](index_t b, index_t e) {
          Moments r;
          for (int d = 0; d < M; ++d) {
            r.sum[d] = 0.0;
            r.lo[d] = std::numeric_limits<float>::infinity();
            r.hi[d] = -std::numeric_limits<float>::infinity();
          }
          for (index_t i = b; i < e; ++i) {
            const float* p = row(ids[i]);
            for (int d = 0; d < M; ++d) {
              r.sum[d] += static_cast<double>(p[d]);
              r.lo[d] = std::min(r.lo[d], p[d]);
              r.hi[d] = std::max(r.hi[d], p[d]);
            }
          }
          return r;
        },
        [](Moments a, const Moments& b) {
          for (int d = 0; d < M; ++d) {
            a.sum[d] += b.sum[d];
            a.lo[d] = std::min(a.lo[d], b.lo[d]);
            a.hi[d] = std::max(a.hi[d], b.hi[d]);
          }
          return a;
        });

    float c[M];  // padding sums to 0, so the centre stays zero-padded
    for (int d = 0; d < M; ++d) c[d] = static_cast<float>(m.sum[d] / static_cast<double>(n));
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
      node.first = begin;
      node.count = static_cast<std::int32_t>(n);
      node.split_dim = -1;
      return;
    }
    int dim = 0;
    for (int d = 1; d < dims; ++d)
      if (m.hi[d] - m.lo[d] > m.hi[dim] - m.lo[dim]) dim = d;
    const index_t mid = begin + n / 2;
    // (coordinate, original index) is a total order: identical points still split in half.
    std::nth_element(ids + begin, ids + mid, ids + end, [&](index_t a, index_t b) {
      const float ca = pp[a * M + dim], cb = pp[b * M + dim];
      return ca < cb || (ca == cb && a < b);
    });
    const node_id right = static_cast<node_id>(at + 1 + counter.cached(n / 2));
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

BallTree BallTree::build(const float* points, index_t n, int dims, const BallTreeOptions& options) {
  if (n <= 0) throw Error("ball tree: n = " + std::to_string(n) + ": the point set is empty");
  if (points == nullptr) throw Error("ball tree: points is a null pointer");
  if (dims < 1 || dims > kMaxDims)
    throw Error("ball tree: dims = " + std::to_string(dims) + " is outside 1.." + std::to_string(kMaxDims));
  if (options.leaf_size < 1)
    throw Error("ball tree: leaf_size = " + std::to_string(options.leaf_size) + " must be at least 1");
  const index_t total = n * dims;
  const index_t bad = first_non_finite(points, total);
  if (bad < total)
    throw Error("ball tree: point " + std::to_string(bad / dims) + " has a non-finite coordinate (" +
                std::to_string(points[bad]) + ") in dimension " + std::to_string(bad % dims));

  NodeCounter counter{options.leaf_size, {}};
  const index_t n_nodes = counter.count(n);
  if (n_nodes > std::numeric_limits<node_id>::max())
    throw Error("ball tree: " + std::to_string(n_nodes) + " nodes exceed the 2^31 node limit; raise leaf_size");
  // Median splits: the larger half of m points has m - m / 2 of them.
  int height = 1;
  for (index_t m = n; m > options.leaf_size; m = m - m / 2) ++height;
  if (height > kMaxHeight)
    throw Error("ball tree: height " + std::to_string(height) + " exceeds the rope-stack limit of " +
                std::to_string(kMaxHeight) + " levels; raise leaf_size");

  BallTree tree;
  tree.dims_ = dims;
  tree.leaf_size_ = options.leaf_size;
  tree.height_ = height;
  const int stride = padded_dims(dims);

  std::vector<float> padded(static_cast<std::size_t>(n) * stride, 0.0f);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i)
      std::copy(points + i * dims, points + (i + 1) * dims, padded.begin() + i * stride);
  });
  std::vector<index_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), index_t{0});
  tree.nodes_.resize(static_cast<std::size_t>(n_nodes));
  tree.centres_.assign(static_cast<std::size_t>(n_nodes) * stride, 0.0f);
  tree.radii_.assign(static_cast<std::size_t>(n_nodes), 0.0f);

  dispatch_dims(dims, [&](auto width) {
    constexpr int M = decltype(width)::value;
    Builder<M> b{padded.data(), dims, options.leaf_size, ids.data(), tree.nodes_.data(),
                 tree.centres_.data(), tree.radii_.data(), counter};
    b.build(0, 0, n, 0);
  });

  tree.points_.resize(static_cast<std::size_t>(n) * stride);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i)
      std::copy(padded.begin() + ids[i] * stride, padded.begin() + (ids[i] + 1) * stride,
                tree.points_.begin() + i * stride);
  });
  tree.point_ids_ = std::move(ids);
  return tree;
}

BallTreeView BallTree::view() const {
  BallTreeView v;
  v.nodes = nodes_.data();
  v.centres = centres_.data();
  v.radii = radii_.data();
  v.points = points_.data();
  v.point_ids = point_ids_.data();
  v.n_points = size();
  v.n_nodes = node_count();
  v.dims = dims_;
  v.stride = padded_dims(dims_);
  v.height = height_;
  return v;
}

std::size_t BallTree::bytes() const {
  return nodes_.size() * sizeof(KdNode) + centres_.size() * sizeof(float) + radii_.size() * sizeof(float) +
         points_.size() * sizeof(float) + point_ids_.size() * sizeof(index_t);
}

}  // namespace canopy
