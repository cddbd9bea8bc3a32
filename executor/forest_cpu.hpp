// The CPU executor of forest inference: TBB tasks over blocks of rows. Inside a block the loop
// is tree-major (every row of the block through tree t, then tree t + 1): a tree's upper
// nodes stay in L1 across the block's rows and the rows' independent walks overlap in the
// out-of-order core. Each row still adds its trees in layout order with the code the GPU
// direct kernel runs (find_leaf, Sums), so the results are bit-identical to it.
#pragma once

#include <algorithm>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "executor/forest_eval.hpp"

namespace canopy {

// Rows per block of the CPU executor (8: 59 ms, 16: 50, 32: 48, 64: 47 per 1,000 rows of the
// 3,500-tree covtype benchmark model, CSR layout, 2 cores).
constexpr int kForestCpuRowBlock = 64;

// rows: row-major [n_rows][n_features]; dst: [n_rows][width], width = the output's values
// per row (Forest::output_width).
template <class View>
void predict_forest_cpu(const View& v, const float* rows, index_t n_rows, ForestOutput out, int width, float* dst) {
  const index_t features = v.common.n_features;
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    const index_t blocks = (n_rows + kForestCpuRowBlock - 1) / kForestCpuRowBlock;
    tbb::parallel_for(tbb::blocked_range<index_t>(0, blocks, 4), [&](const tbb::blocked_range<index_t>& r) {
      Sums s[kForestCpuRowBlock];
      for (index_t b = r.begin(); b < r.end(); ++b) {
        const index_t first = b * kForestCpuRowBlock;
        const int n = static_cast<int>(std::min<index_t>(kForestCpuRowBlock, n_rows - first));
        const float* x = rows + first * features;
        for (int j = 0; j < n; ++j) s[j].begin(v.common);
        for (index_t t = 0; t < v.common.n_trees; ++t)
          for (int j = 0; j < n; ++j) s[j].add(v.common, t, find_leaf(v, t, x + j * features));
        for (int j = 0; j < n; ++j) {
          s[j].end(v.common);
          s[j].write(v.common, out, dst + (first + j) * width);
        }
      }
    });
  });
}

}  // namespace canopy
