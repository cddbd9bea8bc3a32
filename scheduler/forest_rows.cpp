#include "scheduler/forest_rows.hpp"

#include <algorithm>
#include <numeric>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>

namespace canopy {

void check_row_schedule_depth(int depth, int max_depth) {
  const int limit = std::min(16, max_depth);
  if (depth < 1 || depth > limit)
    throw Error("row_schedule_depth = " + std::to_string(depth) + ": must be 1 to " + std::to_string(limit) +
                " (the forest's deepest tree has " + std::to_string(max_depth) + " levels below its root)");
}

std::vector<index_t> forest_row_order(const AdaptiveForestView& v, const float* rows, index_t n_rows, int depth) {
  const int key_trees = adaptive_key_trees(v.common.n_trees, depth);
  std::vector<std::pair<std::uint64_t, index_t>> keyed(static_cast<std::size_t>(n_rows));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n_rows, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i)
      keyed[static_cast<std::size_t>(i)] = {adaptive_row_key(v, rows + i * v.common.n_features, depth, key_trees), i};
  });
  // (key, index) pairs are distinct, so this sort is the stable sort by key.
  tbb::parallel_sort(keyed.begin(), keyed.end());
  std::vector<index_t> order(keyed.size());
  for (std::size_t i = 0; i < keyed.size(); ++i) order[i] = keyed[i].second;
  return order;
}

ForestWarpVisits forest_nodes_per_warp(const AdaptiveForestView& v, const float* rows, index_t n_rows,
                                       const index_t* order, index_t max_warps) {
  ForestWarpVisits out;
  const index_t warps = (n_rows + 31) / 32;
  if (warps == 0 || max_warps < 1) return out;
  const index_t sampled = std::min(warps, max_warps);
  struct Sum {
    double distinct = 0, visits = 0;
  };
  const Sum total = tbb::parallel_reduce(
      tbb::blocked_range<index_t>(0, sampled, 1), Sum{},
      [&](const tbb::blocked_range<index_t>& r, Sum s) {
        std::vector<std::uint32_t> seen;
        for (index_t w = r.begin(); w < r.end(); ++w) {
          const index_t first = (w * warps / sampled) * 32;
          const index_t last = std::min(first + 32, n_rows);
          for (index_t t = 0; t < v.common.n_trees; ++t) {
            seen.clear();
            const ForestNode* base = v.nodes + v.tree_begin[t];
            for (index_t i = first; i < last; ++i) {
              const float* row = rows + (order ? order[i] : i) * v.common.n_features;
              std::uint32_t k = 0;
              for (;;) {
                seen.push_back(k);
                const ForestNode n = base[k];
                if (forest_is_leaf(n.info)) break;
                k = adaptive_step(n, v.feature_bits, v.feature_mask, [row](int f) { return row[f]; });
              }
            }
            s.visits += static_cast<double>(seen.size());
            std::sort(seen.begin(), seen.end());
            s.distinct += static_cast<double>(std::unique(seen.begin(), seen.end()) - seen.begin());
          }
        }
        return s;
      },
      [](Sum a, const Sum& b) {
        a.distinct += b.distinct;
        a.visits += b.visits;
        return a;
      });
  out.warps = sampled;
  out.nodes_per_warp = total.distinct / static_cast<double>(sampled);
  out.rows_path_nodes = total.visits / static_cast<double>(sampled);
  return out;
}

}  // namespace canopy
