// What every imported forest must satisfy (layouts/forest.hpp's normalised convention), and a
// prediction on the CSR layout, for the importer fuzz targets.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fuzz_util.hpp"
#include "layouts/forest.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace fuzz {

inline void check_forest(const Forest& f) {
  CANOPY_FUZZ_CHECK(f.n_features() >= 1, "no features");
  CANOPY_FUZZ_CHECK(f.n_groups() >= 1 && f.n_groups() <= kMaxForestOutputs, "output groups");
  CANOPY_FUZZ_CHECK(f.base_margin().size() == static_cast<std::size_t>(f.n_groups()), "one base margin per group");
  for (const ForestTree& t : f.trees()) {
    const std::size_t n = static_cast<std::size_t>(t.size());
    CANOPY_FUZZ_CHECK(n >= 1, "a tree without nodes");
    CANOPY_FUZZ_CHECK(t.right.size() == n && t.feature.size() == n && t.value.size() == n &&
                          t.default_left.size() == n && t.leaf_index.size() == n,
                      "node arrays of different lengths");
    CANOPY_FUZZ_CHECK(t.cover.empty() || t.cover.size() == n, "cover length");
    CANOPY_FUZZ_CHECK(t.group >= 0 && t.group < f.n_groups(), "tree group out of range");
    std::vector<int> level(n, 0);
    std::size_t leaves = 0;
    int depth = 0;
    for (std::size_t k = 0; k < n; ++k) {
      depth = std::max(depth, level[k]);
      if (t.left[k] < 0) {
        CANOPY_FUZZ_CHECK(t.right[k] < 0, "a leaf with a right child");
        if (f.leaf_width() > 0) CANOPY_FUZZ_CHECK(t.leaf_index[k] == static_cast<std::int32_t>(leaves), "leaf index");
        ++leaves;
        continue;
      }
      // Breadth-first: children after the parent, the right one right after the left one.
      CANOPY_FUZZ_CHECK(static_cast<std::size_t>(t.left[k]) > k &&
                            t.right[k] == t.left[k] + 1 && static_cast<std::size_t>(t.right[k]) < n,
                        "children not breadth-first");
      CANOPY_FUZZ_CHECK(t.feature[k] >= 0 && t.feature[k] < f.n_features(), "feature out of range");
      level[static_cast<std::size_t>(t.left[k])] = level[static_cast<std::size_t>(t.right[k])] = level[k] + 1;
    }
    CANOPY_FUZZ_CHECK(depth == t.depth, "depth");
    CANOPY_FUZZ_CHECK(t.leaf_values.size() == (f.leaf_width() > 0 ? leaves * f.leaf_width() : 0u), "leaf values");
  }
  (void)f.describe();
}

// Rows of zeros and of missing values through the CSR layout on the CPU.
inline void predict_smoke(const Forest& f) {
  if (f.n_features() > 4096) return;  // a few bytes of JSON declare up to 2^30 features: rows too large
  library_call([&] {
    ForestConfig cfg;
    cfg.device = Device::Cpu;
    ForestPredictor p(f, cfg);
    std::vector<float> rows(static_cast<std::size_t>(2 * f.n_features()), 0.0f);
    for (int j = 0; j < f.n_features(); ++j) rows[static_cast<std::size_t>(f.n_features() + j)] = std::numeric_limits<float>::quiet_NaN();
    for (ForestOutput o : {ForestOutput::Margin, ForestOutput::Prob, ForestOutput::Class, ForestOutput::Leaf}) {
      int w = 0;
      if (!library_call([&] { w = p.output_width(o); })) continue;
      std::vector<float> out(static_cast<std::size_t>(2 * w));
      ForestRunOptions run;
      run.output = o;
      p.predict(rows.data(), 2, run, out.data());
    }
  });
}

}  // namespace fuzz
}  // namespace canopy
