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
                k = adaptive_step(n, v.feature_bits, v.feature_mask, [row](int f) { return row[f]; }, v.common.categories);
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

ForestAccessProfile forest_access_profile(const AdaptiveForestView& v, const float* rows, index_t n_rows,
                                          index_t max_warps) {
  ForestAccessProfile p;
  if (n_rows < 1 || max_warps < 1) return p;
  const index_t T = v.common.n_trees;
  const int F = v.common.n_features;
  auto get_row = [&](index_t i) { return rows + (i % n_rows) * F; };
  const index_t warps = std::min(max_warps, (n_rows + 31) / 32);
  double asked = 0, moved = 0, waves = 0, reads = 0;
  std::vector<std::uint64_t> sectors, words;
  std::uint32_t k[32];
  for (index_t w = 0; w < warps; ++w) {
    const index_t first = (w * ((n_rows + 31) / 32) / warps) * 32;
    const int lanes = static_cast<int>(std::min<index_t>(32, n_rows - first));
    for (index_t t = 0; t < T; ++t) {
      const ForestNode* base = v.nodes + v.tree_begin[t];
      for (int j = 0; j < lanes; ++j) k[j] = 0;
      for (int l = 0; l < v.depth[t]; ++l) {
        sectors.clear();
        words.clear();
        for (int j = 0; j < lanes; ++j) {
          const std::uint64_t byte = static_cast<std::uint64_t>(v.tree_begin[t] + k[j]) * sizeof(ForestNode);
          sectors.push_back(byte / 32);
          words.push_back(static_cast<std::uint64_t>(k[j]));
        }
        std::sort(sectors.begin(), sectors.end());
        std::sort(words.begin(), words.end());
        asked += 8.0 * lanes;
        moved += 32.0 * static_cast<double>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
        words.erase(std::unique(words.begin(), words.end()), words.end());
        int per_pair[16] = {0};
        int most = 1;
        for (std::uint64_t word : words) most = std::max(most, ++per_pair[word % 16]);
        waves += most;
        reads += 1;
        const float* r0 = get_row(first);
        for (int j = 0; j < lanes; ++j) {
          const float* row = r0 + static_cast<index_t>(j) * F;
          k[j] = adaptive_step(base[k[j]], v.feature_bits, v.feature_mask, [row](int f) { return row[f]; }, v.common.categories);
        }
      }
    }
  }
  if (moved > 0) p.coalescing_direct = asked / moved;
  if (reads > 0) p.smem_conflict = waves / reads / 2;
  // Shared data: for a few rows, every warp of 32 storage positions.
  asked = moved = 0;
  for (index_t w = 0; w < std::min<index_t>(warps, 4); ++w) {
    const float* row = get_row(w * 32);
    for (index_t s0 = 0; s0 < T; s0 += 32) {
      const int lanes = static_cast<int>(std::min<index_t>(32, T - s0));
      int steps = 0;
      for (int j = 0; j < lanes; ++j) {
        k[j] = 0;
        steps = std::max(steps, static_cast<int>(v.depth[v.inter_tree[s0 + j]]));
      }
      for (int l = 0; l < steps; ++l) {
        sectors.clear();
        int active = 0;
        for (int j = 0; j < lanes; ++j) {
          if (l >= v.depth[v.inter_tree[s0 + j]]) continue;
          ++active;
          sectors.push_back(static_cast<std::uint64_t>(k[j] * T + s0 + j) * sizeof(ForestNode) / 32);
          k[j] = adaptive_step(v.inter[static_cast<index_t>(k[j]) * T + s0 + j], v.feature_bits, v.feature_mask,
                               [row](int f) { return row[f]; }, v.common.categories);
        }
        std::sort(sectors.begin(), sectors.end());
        asked += 8.0 * active;
        moved += 32.0 * static_cast<double>(std::unique(sectors.begin(), sectors.end()) - sectors.begin());
      }
    }
  }
  if (moved > 0) p.coalescing_shared_data = asked / moved;
  return p;
}

}  // namespace canopy
