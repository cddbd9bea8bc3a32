// The CPU executor of forest inference: TBB tasks over blocks of rows; each row runs
// predict_row (every tree in layout order), the same code the GPU direct kernel runs, so
// its results are bit-identical to the direct and hybrid kernels'.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "executor/forest_eval.hpp"

namespace canopy {

// rows: row-major [n_rows][n_features]; dst: [n_rows][width], width = the output's values
// per row (Forest::output_width).
template <class View>
void predict_forest_cpu(const View& v, const float* rows, index_t n_rows, ForestOutput out, int width, float* dst) {
  const index_t features = v.common.n_features;
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    tbb::parallel_for(tbb::blocked_range<index_t>(0, n_rows, 64), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t i = r.begin(); i < r.end(); ++i) predict_row<Sums>(v, rows + i * features, out, dst + i * width);
    });
  });
}

}  // namespace canopy
