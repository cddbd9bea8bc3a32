// The CPU executor of forest inference: TBB tasks over blocks of rows. Inside a block the loop
// is tree-major (every row of the block through tree t, then tree t + 1): a tree's nodes stay
// in cache across the block's rows and the rows' independent walks overlap in the
// out-of-order core. Each row still adds its trees in layout order with the code the GPU
// direct kernel runs (find_leaf, Sums), so the results are bit-identical to it.
#pragma once

#include <algorithm>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "executor/forest_eval.hpp"

namespace canopy {

// Rows per block: large blocks read each tree fewer times, small ones give every core work.
// Blocks of kForestCpuMinBlock..kForestCpuMaxBlock rows, at least four per core when the
// batch allows. Measured on 2 cores, 100,000 rows, hierarchical layout: the 100-tree higgs
// forest 829 / 614 / 531 ms with 64 / 1024 / 4096-row blocks, the 3,500-tree covtype model
// 4096 / 3706..3965 / 3860 ms (this machine's noise is about 7%).
constexpr index_t kForestCpuMinBlock = 16;
constexpr index_t kForestCpuMaxBlock = 4096;

inline index_t forest_cpu_block_rows(index_t n_rows) {
  const index_t cores = std::max(1, tbb::this_task_arena::max_concurrency());
  const index_t per_block = (n_rows + 4 * cores - 1) / (4 * cores);
  return std::min(kForestCpuMaxBlock, std::max(kForestCpuMinBlock, (per_block + 15) / 16 * 16));
}

// Runs f(first, n) on each block of the batch's rows (forest_cpu_block_rows), blocks in
// parallel: rows first .. first + n - 1.
template <class F>
void for_each_row_block(index_t n_rows, F&& f) {
  const index_t block = forest_cpu_block_rows(n_rows);
  const index_t blocks = (n_rows + block - 1) / block;
  tbb::parallel_for(tbb::blocked_range<index_t>(0, blocks, 1), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t b = r.begin(); b < r.end(); ++b) f(b * block, std::min(block, n_rows - b * block));
  });
}

// rows: row-major [n_rows][n_features]; dst: [n_rows][width], width = the output's values
// per row (Forest::output_width), in floats: twice that when f64 (dst then holds doubles).
template <class View>
void predict_forest_cpu(const View& v, const float* rows, index_t n_rows, ForestOutput out, int width, float* dst,
                        bool f64 = false) {
  const index_t features = v.common.n_features;
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    for_each_row_block(n_rows, [&](index_t first, index_t n) {
      thread_local std::vector<Sums> s;  // a block's running sums, kept by the thread
      s.resize(static_cast<std::size_t>(n));
      const float* x = rows + first * features;
      for (index_t j = 0; j < n; ++j) s[j].begin(v.common);
      for (index_t t = 0; t < v.common.n_trees; ++t)
        for (index_t j = 0; j < n; ++j) s[j].add(v.common, t, find_leaf(v, t, x + j * features));
      for (index_t j = 0; j < n; ++j) {
        s[j].end(v.common);
        s[j].write(v.common, out, dst + (first + j) * width, f64);
      }
    });
  });
}

// The leaf output (XGBoost's pred_leaf): dst [n_rows][n_trees], dst[i][j] = the model's node id
// of the leaf row i reaches in the model's tree j (c.order maps layout positions back to the
// model's order). leaf_number(t, row): the index within layout tree t of the leaf `row`
// reaches, however the layout finds it.
template <class LeafNumber>
void predict_forest_leaves_cpu(const ForestCommon& c, const float* rows, index_t n_rows, const LeafNumber& leaf_number,
                               float* dst) {
  const index_t features = c.n_features, trees = c.n_trees;
  for_each_row_block(n_rows, [&](index_t first, index_t n) {
    for (index_t t = 0; t < trees; ++t) {  // tree-major, as predict_forest_cpu
      const std::int32_t* ids = c.leaf_source_id.data() + c.leaf_id_begin[static_cast<std::size_t>(t)];
      const index_t count = c.leaf_id_begin[static_cast<std::size_t>(t) + 1] - c.leaf_id_begin[static_cast<std::size_t>(t)];
      const index_t col = c.order[static_cast<std::size_t>(t)];
      for (index_t j = 0; j < n; ++j) {
        const index_t leaf = leaf_number(t, rows + (first + j) * features);
        dst[(first + j) * trees + col] = leaf >= 0 && leaf < count ? static_cast<float>(ids[leaf]) : -1.0f;
      }
    }
  });
}

}  // namespace canopy
