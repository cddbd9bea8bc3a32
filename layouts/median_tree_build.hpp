// Internal: build steps shared by the median-split trees (kd-tree, ball tree, vp-tree). Each
// splits a node's n points into halves of n / 2 and n - n / 2 and flattens depth first, so
// node counts, heights, the two-halves recursion and the row copies are the same code. Kept in
// one place so the trees cannot drift apart; only the layouts/ builders (CPU and GPU) include it.
#pragma once

#include <algorithm>
#include <array>
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

// A centroid's sums, in an order a GPU reproduces in parallel: consecutive chunks of kSumChunk
// terms summed in order from +0, then the chunks' sums the same way, chunk by chunk, until one
// is left. (A sequential sum over a node's 10^6 points would leave a GPU a single thread.)
constexpr index_t kSumChunk = 64;

// The sums over i in [begin, end) of the M floats at row(i), in double, in that order.
template <int M, class Row>
std::array<double, M> chunked_sum(index_t begin, index_t end, Row&& row) {
  const index_t chunks = (end - begin + kSumChunk - 1) / kSumChunk;
  std::vector<std::array<double, M>> part(static_cast<std::size_t>(chunks));
  auto run = [&](index_t k) {
    std::array<double, M> acc{};
    for (index_t i = begin + k * kSumChunk; i < std::min(end, begin + (k + 1) * kSumChunk); ++i) {
      const float* p = row(i);
      for (int d = 0; d < M; ++d) acc[d] += static_cast<double>(p[d]);
    }
    part[k] = acc;
  };
  if (end - begin >= kParallelGrain) {
    tbb::parallel_for(index_t{0}, chunks, run);
  } else {
    for (index_t k = 0; k < chunks; ++k) run(k);
  }
  while (part.size() > 1) {
    std::vector<std::array<double, M>> next((part.size() + kSumChunk - 1) / kSumChunk);
    for (std::size_t g = 0; g < next.size(); ++g) {
      std::array<double, M> acc{};
      for (std::size_t j = g * kSumChunk; j < std::min(part.size(), (g + 1) * kSumChunk); ++j)
        for (int d = 0; d < M; ++d) acc[d] += part[j][d];
      next[g] = acc;
    }
    part.swap(next);
  }
  return part[0];
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
// every tree reports them. `prefix` names the tree, e.g. "ball tree: ". check_shape is what needs
// no look at the coordinates; non_finite_error names a bad one (flat index `bad`, value `value`).
inline void check_shape(const std::string& prefix, const float* points, int dims, int leaf_size) {
  if (points == nullptr) throw Error(prefix + "points is a null pointer");
  if (dims < 1 || dims > kMaxDims)
    throw Error(prefix + "dims = " + std::to_string(dims) + " is outside 1.." + std::to_string(kMaxDims));
  if (leaf_size < 1) throw Error(prefix + "leaf_size = " + std::to_string(leaf_size) + " must be at least 1");
}
inline Error non_finite_error(const std::string& prefix, index_t bad, int dims, float value) {
  return Error(prefix + "point " + std::to_string(bad / dims) + " has a non-finite coordinate (" +
               std::to_string(value) + ") in dimension " + std::to_string(bad % dims));
}
inline void check_points(const std::string& prefix, const float* points, index_t n, int dims, int leaf_size) {
  check_shape(prefix, points, dims, leaf_size);
  const index_t total = n * dims;
  const index_t bad = first_non_finite(points, total);
  if (bad < total) throw non_finite_error(prefix, bad, dims, points[bad]);
}

// Bounds store zero as +0: min and max of -0 and +0 depend on the order they are met in, and a
// box must not (the GPU build meets the points in another order). Distances do not see the sign.
CANOPY_HD inline float canonical_zero(float v) { return v == 0.0f ? 0.0f : v; }

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
inline void check_not_empty(const std::string& prefix, index_t n) {
  if (n <= 0) throw Error(prefix + "n = " + std::to_string(n) + ": the point set is empty");
}
// Fills in's counter, node count and height for n points (the checks after the points').
inline void size_median_tree(const std::string& prefix, index_t n, MedianTreeInput& in) {
  in.n_nodes = count_nodes(prefix, in.counter, n);
  in.height = median_height(n, in.counter.leaf_size);
  if (in.height > kMaxHeight)
    throw Error(prefix + "height " + std::to_string(in.height) + " exceeds the rope-stack limit of " +
                std::to_string(kMaxHeight) + " levels; raise leaf_size");
}

inline MedianTreeInput prepare_median_tree(const char* tree, const float* points, index_t n, int dims,
                                           int leaf_size) {
  const std::string prefix = std::string(tree) + ": ";
  check_not_empty(prefix, n);
  check_points(prefix, points, n, dims, leaf_size);

  MedianTreeInput in{NodeCounter{leaf_size, {}}, 0, 0, {}, {}};
  size_median_tree(prefix, n, in);

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

// Splits ids[begin, end) so that [begin, begin + n / 2) holds the n / 2 points first in `less`
// (a strict total order) and the rest follows, each half keeping the order it had. Every build
// starts from ascending original indices, so a node's points stay in that order: its contents and
// their order follow from the points alone, not from how a selection happened to move them, and
// the GPU builds give the same trees. nth_element finds the pivot on a copy; the split itself is a
// stable partition (in fixed blocks, in parallel, for large ranges).
template <class Less>
void split_stable(index_t* ids, index_t begin, index_t end, Less less) {
  const index_t n = end - begin, half = n / 2;
  if (n < kParallelGrain) {
    // Most nodes are small: a per-thread scratch spares an allocation per node. Nothing below
    // waits on TBB, so no other task can take this thread's scratch while it is in use.
    thread_local std::vector<index_t> small;
    small.assign(ids + begin, ids + end);
    std::nth_element(small.begin(), small.begin() + half, small.end(), less);
    const index_t pivot = small[half];
    index_t left = begin, right = 0;
    for (index_t i = begin; i < end; ++i) {
      const index_t id = ids[i];
      if (less(id, pivot)) ids[left++] = id; else small[right++] = id;
    }
    std::copy(small.begin(), small.begin() + right, ids + left);
    return;
  }
  std::vector<index_t> scratch(ids + begin, ids + end);
  std::nth_element(scratch.begin(), scratch.begin() + half, scratch.end(), less);
  const index_t pivot = scratch[half];
  const index_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<index_t> lefts(static_cast<std::size_t>(blocks) + 1, 0);
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    index_t c = 0;
    for (index_t i = begin + b * kBlock; i < std::min(end, begin + (b + 1) * kBlock); ++i) c += less(ids[i], pivot);
    lefts[b + 1] = c;
  });
  for (index_t b = 0; b < blocks; ++b) lefts[b + 1] += lefts[b];
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    index_t l = lefts[b], r = half + b * kBlock - lefts[b];
    for (index_t i = begin + b * kBlock; i < std::min(end, begin + (b + 1) * kBlock); ++i) {
      const index_t id = ids[i];
      scratch[less(id, pivot) ? l++ : r++] = id;
    }
  });
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, kBlock), [&](const tbb::blocked_range<index_t>& r) {
    std::copy(scratch.begin() + r.begin(), scratch.begin() + r.end(), ids + begin + r.begin());
  });
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
