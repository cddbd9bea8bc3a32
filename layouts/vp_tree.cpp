#include "layouts/vp_tree.hpp"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "layouts/median_tree_build.hpp"
#include "layouts/geometry.hpp"

namespace canopy {
namespace {

using detail::fold_blocks;
using detail::kBlock;
using detail::kParallelGrain;
using detail::NodeCounter;

// Runs f(i) for every i of [begin, end), in parallel for large ranges.
template <class F>
void for_range(index_t begin, index_t end, F&& f) {
  if (end - begin >= kParallelGrain) {
    tbb::parallel_for(tbb::blocked_range<index_t>(begin, end, kBlock), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t i = r.begin(); i < r.end(); ++i) f(i);
    });
  } else {
    for (index_t i = begin; i < end; ++i) f(i);
  }
}

struct Far {
  float d;
  index_t id;
};
// Farther wins; equal distances go to the smaller index (associative and commutative).
inline Far farther(const Far& a, const Far& b) { return a.d > b.d || (a.d == b.d && a.id < b.id) ? a : b; }

struct Shell {
  float lo, hi;
};
inline Shell widen(const Shell& a, const Shell& b) { return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}; }

template <int M>
struct Builder {
  const float* pp;  // input rows padded to M floats, original order
  int leaf_size;
  index_t* ids;
  float* key;  // by original index: D(vantage, p) of the node being split
  KdNode* nodes;
  float* vantages;
  float* mu;
  node_id* parent;
  float* shell_lo;
  float* shell_hi;
  const NodeCounter& counter;

  const float* row(index_t id) const { return pp + id * M; }

  Shell shell(index_t begin, index_t end) const {
    const Shell empty{std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
    return fold_blocks<Shell>(
        begin, end,
        [&](index_t b, index_t e) {
          Shell s = empty;
          for (index_t i = b; i < e; ++i) s = widen(s, Shell{key[ids[i]], key[ids[i]]});
          return s;
        },
        widen);
  }

  // The point of [begin, end) farthest (by D) from x; ties go to the smallest original index.
  index_t farthest_from(const float (&x)[M], index_t begin, index_t end) const {
    return fold_blocks<Far>(
               begin, end,
               [&](index_t b, index_t e) {
                 Far f{-1.0f, std::numeric_limits<index_t>::max()};
                 for (index_t i = b; i < e; ++i)
                   f = farther(f, Far{sqrt_rn(point_distance2<M>(x, row(ids[i]))), ids[i]});
                 return f;
               },
               farther)
        .id;
  }

  void build(node_id at, index_t begin, index_t end, int depth) {
    const index_t n = end - begin;
    KdNode& node = nodes[at];
    node.depth = static_cast<std::int16_t>(depth);
    if (n <= leaf_size) {
      detail::make_leaf(node, begin, n);
      return;  // vantage and mu stay zero
    }

    const std::array<double, M> sum = detail::chunked_sum<M>(begin, end, [&](index_t i) { return row(ids[i]); });
    float c[M];
    for (int d = 0; d < M; ++d) c[d] = static_cast<float>(sum[d] / static_cast<double>(n));
    // Two hops towards the rim: an end of an approximate diameter sees the others at
    // well-spread distances (measured: fewer nodes per nearest-neighbour query than the
    // one-hop point or a sampled best-spread point).
    const index_t hop = farthest_from(c, begin, end);
    float ph[M];
    std::copy(row(hop), row(hop) + M, ph);
    const index_t v = farthest_from(ph, begin, end);

    float vp[M];
    std::copy(row(v), row(v) + M, vp);
    std::copy(vp, vp + M, vantages + static_cast<index_t>(at) * M);
    for_range(begin, end, [&](index_t i) { key[ids[i]] = sqrt_rn(point_distance2<M>(vp, row(ids[i]))); });

    const index_t mid = begin + n / 2;
    // (D, original index) is a total order, so identical points still split in half; the
    // vantage point ranks first among equal distances so it always stays inside.
    detail::split_stable(ids, begin, end, [&](index_t a, index_t b) {
      const float ka = key[a], kb = key[b];
      if (ka != kb) return ka < kb;
      return (a == v ? -1 : a) < (b == v ? -1 : b);
    });
    const Shell inside = shell(begin, mid);
    const Shell outside = shell(mid, end);
    const node_id right = static_cast<node_id>(at + 1 + counter.cached(n / 2));
    mu[at] = inside.hi;
    // The children's shells are this node's distances; written here, before the children
    // reuse key[] for their own vantage points.
    parent[at + 1] = at;
    shell_lo[at + 1] = inside.lo;
    shell_hi[at + 1] = inside.hi;
    parent[right] = at;
    shell_lo[right] = outside.lo;
    shell_hi[right] = outside.hi;
    detail::build_halves(*this, node, at, right, 0, begin, mid, end, depth);
  }
};

}  // namespace

VpTree VpTree::build(const float* points, index_t n, int dims, const VpTreeOptions& options) {
  if (detail::build_on_gpu(options.device, is_device_pointer(points), n, "vp-tree"))
    return build_on_gpu(points, n, dims, options);
  detail::MedianTreeInput in = detail::prepare_median_tree("vp-tree", points, n, dims, options.leaf_size);

  VpTree tree;
  tree.set_shape(dims, options.leaf_size, in.height);
  const int stride = padded_dims(dims);

  std::vector<float> key(static_cast<std::size_t>(n), 0.0f);
  const auto nn = static_cast<std::size_t>(in.n_nodes);
  tree.nodes_.resize(nn);
  tree.vantages_.assign(nn * stride, 0.0f);
  tree.mu_.assign(nn, 0.0f);
  tree.parent_.assign(nn, kNoNode);
  tree.shell_lo_.assign(nn, 0.0f);
  tree.shell_hi_.assign(nn, std::numeric_limits<float>::infinity());

  dispatch_dims(dims, [&](auto width) {
    constexpr int M = decltype(width)::value;
    Builder<M> b{in.padded.data(),      options.leaf_size,     in.ids.data(),   key.data(),
                 tree.nodes_.data(),    tree.vantages_.data(), tree.mu_.data(), tree.parent_.data(),
                 tree.shell_lo_.data(), tree.shell_hi_.data(), in.counter};
    b.build(0, 0, n, 0);
  });

  tree.points_ = detail::tree_order_rows(in, stride);
  tree.point_ids_ = std::move(in.ids);
  return tree;
}

}  // namespace canopy
