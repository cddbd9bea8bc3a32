// Internal: build steps shared by the median-split trees (kd-tree, ball tree, vp-tree). Each
// splits a node's n points into halves of n / 2 and n - n / 2 and flattens depth first, so
// node counts, heights, the two-halves recursion and the row copies are the same code. Kept in
// one place so the trees cannot drift apart; only the layouts/*.cpp builders include it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>

#include "layouts/point_tree.hpp"
#include "core/checks.hpp"
#include "core/types.hpp"

namespace canopy::detail {

// Ranges at least this large build their two halves, and run their per-point passes, as
// parallel tasks.
constexpr index_t kParallelGrain = 1 << 14;
// Reductions fold fixed blocks in index order, so double sums round the same way whatever the
// thread count.
constexpr index_t kBlock = 4096;
// Leaves room on the 64-entry rope stack (one pending sibling per level plus the current node).
constexpr int kMaxHeight = 60;

// f(b, e) over consecutive kBlock-sized blocks of [begin, end), combined left to right: the
// blocks and the combine order never depend on scheduling, only the blocks' evaluation does.
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
// at most two values, so the memo stays O(log n); it is filled before the parallel build, which
// only reads it (cached), so the build needs no lock.
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

// The checks after the emptiness check (whose wording differs between trees), in the order
// every tree reports them. `prefix` names the tree, e.g. "ball tree: ".
inline void check_points(const std::string& prefix, const float* points, index_t n, int dims, int leaf_size) {
  if (points == nullptr) throw Error(prefix + "points is a null pointer");
  if (dims < 1 || dims > kMaxDims)
    throw Error(prefix + "dims = " + std::to_string(dims) + " is outside 1.." + std::to_string(kMaxDims));
  if (leaf_size < 1) throw Error(prefix + "leaf_size = " + std::to_string(leaf_size) + " must be at least 1");
  const index_t total = n * dims;
  const index_t bad = first_non_finite(points, total);
  if (bad < total)
    throw Error(prefix + "point " + std::to_string(bad / dims) + " has a non-finite coordinate (" +
                std::to_string(points[bad]) + ") in dimension " + std::to_string(bad % dims));
}

// counter.count(n), filling the memo the build reads; node ids are node_id, so more is an error.
inline index_t count_nodes(const std::string& prefix, NodeCounter& counter, index_t n) {
  const index_t n_nodes = counter.count(n);
  if (n_nodes > std::numeric_limits<node_id>::max())
    throw Error(prefix + std::to_string(n_nodes) + " nodes exceed the 2^31 node limit; raise leaf_size");
  return n_nodes;
}

// Levels of a median-split tree: the larger half of m points has m - m / 2 of them.
inline int median_height(index_t n, int leaf_size) {
  int height = 1;
  for (index_t m = n; m > leaf_size; m = m - m / 2) ++height;
  return height;
}

// Row i of the result is row row_of(i) of src (`width` floats, src_stride apart), zero-padded
// to `stride` floats: the padded copies every tree keeps, in input or in tree order.
template <class RowOf>
std::vector<float> copy_rows(const float* src, int src_stride, int width, index_t n, int stride, RowOf row_of) {
  std::vector<float> out(static_cast<std::size_t>(n) * stride, 0.0f);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) {
      const float* row = src + row_of(i) * src_stride;
      std::copy(row, row + width, out.begin() + i * stride);
    }
  });
  return out;
}

// What the ball tree and vp-tree builders start from, once their input has been checked.
struct MedianTreeInput {
  NodeCounter counter;         // memo filled for n; the builder reads it while recursing
  index_t n_nodes;
  int height;
  std::vector<float> padded;   // input rows zero-padded to padded_dims(dims), input order
  std::vector<index_t> ids;    // 0..n-1; the builder permutes it into tree order
};

// Checks the input (errors start with `tree` + ": ") and sizes the tree, for the builders
// whose height limit is kMaxHeight.
inline MedianTreeInput prepare_median_tree(const char* tree, const float* points, index_t n, int dims,
                                           int leaf_size) {
  const std::string prefix = std::string(tree) + ": ";
  if (n <= 0) throw Error(prefix + "n = " + std::to_string(n) + ": the point set is empty");
  check_points(prefix, points, n, dims, leaf_size);

  MedianTreeInput in{NodeCounter{leaf_size, {}}, 0, 0, {}, {}};
  in.n_nodes = count_nodes(prefix, in.counter, n);
  in.height = median_height(n, leaf_size);
  if (in.height > kMaxHeight)
    throw Error(prefix + "height " + std::to_string(in.height) + " exceeds the rope-stack limit of " +
                std::to_string(kMaxHeight) + " levels; raise leaf_size");

  in.padded = copy_rows(points, dims, dims, n, padded_dims(dims), [](index_t i) { return i; });
  in.ids.resize(static_cast<std::size_t>(n));
  std::iota(in.ids.begin(), in.ids.end(), index_t{0});
  return in;
}

// The padded rows in tree order, once the build has permuted in.ids.
inline std::vector<float> tree_order_rows(const MedianTreeInput& in, int stride) {
  const index_t* ids = in.ids.data();
  return copy_rows(in.padded.data(), stride, stride, static_cast<index_t>(in.ids.size()), stride,
                   [ids](index_t i) { return ids[i]; });
}

// Marks `node` as a leaf over the n points from `begin` (tree order).
inline void make_leaf(KdNode& node, index_t begin, index_t n) {
  node.first = begin;
  node.count = static_cast<std::int32_t>(n);
  node.split_dim = -1;
}

// Marks node `at` as inner with child 1 at `right`, then has b build child 0 over [begin, mid)
// and child 1 over [mid, end): as two parallel tasks once the range is large enough for the
// fork to pay. The children write disjoint node ranges, so the result does not depend on it.
template <class Builder, class Id>
void build_halves(Builder& b, KdNode& node, Id at, Id right, int split_dim, index_t begin, index_t mid,
                  index_t end, int depth) {
  node.first = right;
  node.count = 0;
  node.split_dim = static_cast<std::int16_t>(split_dim);
  if (end - begin >= kParallelGrain) {
    tbb::parallel_invoke([&] { b.build(at + 1, begin, mid, depth + 1); },
                         [&] { b.build(right, mid, end, depth + 1); });
  } else {
    b.build(at + 1, begin, mid, depth + 1);
    b.build(right, mid, end, depth + 1);
  }
}

}  // namespace canopy::detail
