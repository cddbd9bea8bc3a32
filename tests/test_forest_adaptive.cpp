// The adaptive forest format (Tahoe) and its four GPU strategies, against the CPU executor on
// the CSR layout (itself bit-identical to python3-xgboost and scikit-learn, test_forest_predict).
// Every strategy adds each row's leaves in canonical order, so every output must have the CPU's
// bits, whatever the node and tree rearrangement, the schedule or the row order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <utility>

#include "executor/forest_eval.hpp"
#include "layouts/forest_adaptive.hpp"
#include "require_gpu.hpp"
#include "test_util.hpp"
#include "core/device.hpp"
#include "test_errors.hpp"
#include "test_forest_util.hpp"

namespace canopy {
namespace {

using namespace forest_test;


// ---- the format (CPU) ------------------------------------------------------------------------

TEST(ForestAdaptive, CpuPredictionsEqualCsrBitForBit) {
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    for (bool nodes : {false, true})
      for (bool trees : {false, true}) {
        ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Cpu);
        cfg.adaptive.node_rearrangement = nodes;
        cfg.adaptive.tree_rearrangement = trees;
        ForestPredictor p(f, cfg);
        std::string where;
        EXPECT_TRUE(same_bits(predict(p, d, ForestOutput::Prob), cpu_predict(f, d, ForestOutput::Prob), &where))
            << c.name << " nodes " << nodes << " trees " << trees << ": " << where;
      }
  }
}

// Against the libraries' own predictions directly, within 1e-6 relative.
TEST(ForestAdaptive, CpuMatchesLibrariesWithin1e6) {
  for (const ModelCase& c : all_cases()) {
    ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Cpu);
    ForestPredictor p(model(c.name), cfg);
    const std::vector<float> got = predict(p, rows(c.rows), ForestOutput::Prob);
    const auto want = read_lines(dir() + expected_name(c) + ".prob.txt");
    std::size_t k = 0;
    for (const auto& line : want)
      for (double w : line) {
        ASSERT_LT(k, got.size()) << c.name;
        EXPECT_TRUE(close(got[k], w, 1e-6, 1e-12)) << c.name << " value " << k << ": " << got[k] << " vs " << w;
        ++k;
      }
    EXPECT_EQ(k, got.size()) << c.name;
  }
}

// Walks every tree of the adaptive copy and the forest side by side: the first child stored is
// the more probable one, the swapped bit keeps each test, and the interleaved copy holds the
// same nodes at k * n_trees + s.
TEST(ForestAdaptive, NodeRearrangementPutsTheLikelierChildFirst) {
  for (const char* name : {"xgb_higgs", "rf_covtype", "xgb_letter"}) {
    const Forest& f = model(name);
    const ForestCommon common(f);
    const auto prob = forest_node_probabilities(f);
    std::vector<index_t> order(static_cast<std::size_t>(f.n_trees()));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<index_t>(order.size() - 1 - i);
    AdaptiveOptions opt;
    opt.tree_order = order;  // reversed: a permutation other than the identity
    const AdaptiveForest a = AdaptiveForest::build(f, opt);
    EXPECT_EQ(a.feature_bits, static_cast<int>(std::ceil(std::log2(static_cast<double>(f.n_features())))));
    EXPECT_GT(a.swapped_nodes, 0) << name;
    index_t inner = 0;
    for (index_t t = 0; t < f.n_trees(); ++t) {
      const ForestTree& tree = f.trees()[static_cast<std::size_t>(common.order[static_cast<std::size_t>(t)])];
      const auto& p = prob[static_cast<std::size_t>(common.order[static_cast<std::size_t>(t)])];
      const ForestNode* base = a.nodes.data() + a.tree_begin[static_cast<std::size_t>(t)];
      // Pair stored positions with the tree's node ids, breadth-first from both roots.
      std::vector<std::pair<index_t, index_t>> queue{{0, 0}};
      for (std::size_t q = 0; q < queue.size(); ++q) {
        const index_t k = queue[q].first, n = queue[q].second;
        const ForestNode node = base[k];
        const std::size_t nn = static_cast<std::size_t>(n);
        ASSERT_EQ(forest_is_leaf(node.info), tree.is_leaf(n)) << name << " tree " << t << " node " << n;
        const std::uint32_t payload = node.info & kAdaptivePayloadMask;
        const index_t child = static_cast<index_t>(payload >> a.feature_bits);
        if (tree.is_leaf(n)) {
          // A leaf points at itself and keeps every row, NaN included.
          EXPECT_EQ(child, k);
          for (float x : {-1e30f, 0.0f, 1e30f, NAN}) EXPECT_EQ(adaptive_second(node, x, nullptr), 0u);
          const ForestNode leaf = adaptive_leaf(a.view(), t, static_cast<std::uint32_t>(k));
          if (a.common.leaf_width > 0) EXPECT_EQ(static_cast<std::int32_t>(forest_index(leaf.info)), tree.leaf_index[nn]);
          else EXPECT_EQ(leaf.value, tree.value[nn]);
          continue;
        }
        ++inner;
        EXPECT_EQ(static_cast<std::int32_t>(payload & ((1u << a.feature_bits) - 1u)), tree.feature[nn]);
        const bool sw = (node.info & kAdaptiveLtSecondBit) != 0;
        const index_t l = tree.left[nn], r = tree.right[nn];
        EXPECT_EQ(sw, p[static_cast<std::size_t>(r)] > p[static_cast<std::size_t>(l)]) << name << " tree " << t << " node " << n;
        queue.emplace_back(child, sw ? r : l);
        queue.emplace_back(child + 1, sw ? l : r);
        // The test is unchanged: below the threshold still reaches the tree's left child.
        const float below = std::nextafter(tree.value[nn], -INFINITY);
        EXPECT_EQ(adaptive_second(node, below, nullptr), sw ? 1u : 0u);
        EXPECT_EQ(adaptive_second(node, tree.value[nn], nullptr), sw ? 0u : 1u);
        EXPECT_EQ(adaptive_second(node, NAN, nullptr), (tree.default_left[nn] != 0) == sw ? 1u : 0u);
      }
      EXPECT_EQ(static_cast<index_t>(queue.size()), tree.size());
    }
    EXPECT_GT(inner, 0);
    const index_t T = f.n_trees();
    for (index_t s = 0; s < T; ++s) {
      const index_t t = a.inter_tree[static_cast<std::size_t>(s)];
      EXPECT_EQ(t, order[static_cast<std::size_t>(s)]);
      for (index_t k = a.tree_begin[static_cast<std::size_t>(t)]; k < a.tree_begin[static_cast<std::size_t>(t) + 1]; ++k) {
        const ForestNode x = a.inter[static_cast<std::size_t>((k - a.tree_begin[static_cast<std::size_t>(t)]) * T + s)];
        const ForestNode y = a.nodes[static_cast<std::size_t>(k)];
        ASSERT_TRUE(std::memcmp(&x, &y, sizeof x) == 0) << name << " tree " << t << " slot " << k;
      }
    }
  }
}

// The fast copy reaches, for every row without a missing value, the leaf the flagged nodes
// reach: rows of the data sets, and each threshold itself, the floats either side of it,
// +-0 and +-infinity at every feature. Forests with categorical splits have none.
TEST(ForestAdaptive, FastCopyReachesTheSameLeafForRowsWithoutMissingValues) {
  std::size_t vector_leaves = 0;
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    for (bool rearranged : {true, false}) {
      AdaptiveOptions opt;
      opt.node_rearrangement = rearranged;
      const AdaptiveForest a = AdaptiveForest::build(f, opt);
      if (c.name.find("_cat") != std::string::npos) {  // the models with categorical splits
        EXPECT_TRUE(a.fast_nodes.empty() && a.fast_leaf.empty()) << c.name;
        continue;
      }
      ASSERT_EQ(a.fast_nodes.size(), a.nodes.size()) << c.name;
      ASSERT_EQ(a.fast_leaf.size(), a.leaf.size()) << c.name;
      const AdaptiveForestView v = a.view();
      const int F = f.n_features();
      // Rows: the data set's, missing values replaced by thresholds, then probes that sit on and
      // beside thresholds in one feature.
      const ForestData& d = rows(c.rows);
      std::vector<std::vector<float>> probes;
      for (index_t i = 0; i < std::min<index_t>(d.n_rows, 200); ++i) {
        std::vector<float> r(d.values.begin() + i * F, d.values.begin() + (i + 1) * F);
        probes.push_back(r);
      }
      std::mt19937 rng(7);
      for (int q = 0; q < 300; ++q) {
        const ForestNode n = a.nodes[rng() % a.nodes.size()];
        if (n.info & kForestLeafBit) continue;
        std::vector<float> r = probes[rng() % probes.size()];
        const int feat = static_cast<int>(n.info & v.feature_mask);
        for (float x : {n.value, std::nextafter(n.value, -INFINITY), std::nextafter(n.value, INFINITY), 0.0f, -0.0f,
                        INFINITY, -INFINITY}) {
          r[static_cast<std::size_t>(feat)] = x;
          probes.push_back(r);
        }
      }
      std::size_t checked = 0;
      for (std::vector<float>& r : probes) {
        for (float& x : r)
          if (x != x) x = 0.5f;
        auto get = [&](int feat) { return r[static_cast<std::size_t>(feat)]; };
        for (index_t t = 0; t < f.n_trees(); ++t) {
          const index_t b = a.tree_begin[static_cast<std::size_t>(t)];
          const std::uint32_t slow =
              adaptive_walk(v.nodes + b, 1, v.depth[t], v.feature_bits, v.feature_mask, get, v.common.categories);
          std::uint32_t fast = 0;
          for (int l = 0; l < v.depth[t]; ++l) {
            const ForestNode n = v.fast[b + fast];
            fast = adaptive_fast_step(n, v.feature_bits, get(static_cast<int>(n.info & v.feature_mask)));
          }
          ASSERT_EQ(v.leaf[b + slow], v.fast_leaf[b + fast]) << c.name << " tree " << t;
          if (v.fast_leaf_vectors) {  // the leaf's vector, kept at the fast position
            const int W = v.common.leaf_width;
            const double* want =
                v.common.leaf_values + (v.common.tree_leaf_begin[t] + (v.leaf[b + slow] & kForestIndexMask)) * W;
            const double* got = v.fast_leaf_vectors + (b + fast) * W;
            ASSERT_TRUE(std::equal(want, want + W, got)) << c.name << " tree " << t;
            ++vector_leaves;
          }
          ++checked;
        }
      }
      EXPECT_GT(checked, 1000u) << c.name;
      const int W = f.leaf_width();
      EXPECT_EQ(a.fast_leaf_vectors.size(), W > 0 && W <= kAdaptiveFastVectorWidth ? a.nodes.size() * W : 0) << c.name;
    }
  }
  EXPECT_GT(vector_leaves, 1000u);  // some test model is a forest of class vectors
}

TEST(ForestAdaptive, BadTreeOrderIsAnError) {
  AdaptiveOptions opt;
  opt.tree_order = {0, 0};
  const Forest& f = model("xgb_higgs");
  opt.tree_order.resize(static_cast<std::size_t>(f.n_trees()), 0);
  EXPECT_THROW(AdaptiveForest::build(f, opt), Error);
  opt.tree_order = {0};
  EXPECT_THROW(AdaptiveForest::build(f, opt), Error);
}

TEST(ForestAdaptive, ReportsTreeRearrangement) {
  ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Cpu);
  ForestPredictor p(model("xgb_covtype"), cfg);
  const AdaptiveReport& r = p.adaptive_report();
  EXPECT_GT(r.similarity_ms, 0.0);
  EXPECT_GE(r.cv_model_order, 0.0);
  EXPECT_GE(r.cv_rearranged, 0.0);
  EXPECT_GT(r.expected_visits, 1.0);
  cfg.adaptive.hash_bits = 100;  // not a multiple of 64
  EXPECT_THROW(ForestPredictor(model("xgb_covtype"), cfg), Error);
  ForestPredictor q(model("xgb_covtype"), forest_config(ForestLayout::Csr, Device::Cpu));
  EXPECT_THROW(q.adaptive_report(), Error);
}

// ---- row scheduling (CPU reference, warp emulator) ----------------------------------------------

// The key of one row recomputed from the forest itself (not the adaptive copy): per leading
// tree, the path of the first `depth` levels, 1 where it takes the likelier child's sibling.
std::uint64_t reference_key(const Forest& f, const float* row, int depth) {
  const ForestCommon common(f);
  const auto prob = forest_node_probabilities(f);
  const int trees = static_cast<int>(std::min<index_t>(f.n_trees(), 64 / depth));
  std::uint64_t key = 0;
  for (int t = 0; t < trees; ++t) {
    const index_t src = common.order[static_cast<std::size_t>(t)];
    const ForestTree& tree = f.trees()[static_cast<std::size_t>(src)];
    const auto& p = prob[static_cast<std::size_t>(src)];
    index_t n = 0;
    for (int l = 0; l < depth; ++l) {
      int second = 0;
      if (!tree.is_leaf(n)) {
        const std::size_t k = static_cast<std::size_t>(n);
        const float x = row[tree.feature[k]];
        const bool left = x != x ? tree.default_left[k] != 0 : x < tree.value[k];
        const bool swapped = p[static_cast<std::size_t>(tree.right[k])] > p[static_cast<std::size_t>(tree.left[k])];
        second = left == swapped ? 1 : 0;
        n = left ? tree.left[k] : tree.right[k];
      }
      key = (key << 1) | static_cast<std::uint64_t>(second);
    }
  }
  return key;
}

TEST(ForestRowSchedule, OrderIsTheStableSortByTheInspectorKey) {
  for (const char* name : {"xgb_higgs", "rf_covtype"}) {
    const Forest& f = model(name);
    const ForestData& d = rows(std::string(name) == "xgb_higgs" ? "higgs_rows" : "covtype_rows_dense");
    ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Cpu);
    ForestPredictor p(f, cfg);
    for (int depth : {1, 3}) {
      const std::vector<index_t> order = p.schedule_rows(d.values.data(), d.n_rows, depth);
      ASSERT_EQ(static_cast<index_t>(order.size()), d.n_rows);
      std::vector<index_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (index_t i = 0; i < d.n_rows; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i) << "not a permutation";
      for (index_t i = 1; i < d.n_rows; ++i) {
        const std::uint64_t a = reference_key(f, d.row(order[static_cast<std::size_t>(i - 1)]), depth);
        const std::uint64_t b = reference_key(f, d.row(order[static_cast<std::size_t>(i)]), depth);
        ASSERT_TRUE(a < b || (a == b && order[static_cast<std::size_t>(i - 1)] < order[static_cast<std::size_t>(i)]))
            << name << " depth " << depth << " position " << i;
      }
    }
    EXPECT_THROW(p.schedule_rows(d.values.data(), d.n_rows, 0), Error);
    EXPECT_THROW(p.schedule_rows(d.values.data(), d.n_rows, f.max_depth() + 1), Error);
  }
}

TEST(ForestRowSchedule, WarpEmulatorCountsDistinctNodes) {
  const Forest& f = model("xgb_covtype");
  const ForestData& d = rows("covtype_rows");
  ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Cpu);
  ForestPredictor p(f, cfg);
  // 32 copies of one row: the warp visits exactly that row's path in every tree.
  ForestData single;
  single.n_features = d.n_features;
  single.n_rows = 1;
  single.values.assign(d.row(5), d.row(5) + d.n_features);
  const ForestData one = tiled(single, 32);
  double path = 0;
  for (const ForestTree& tree : f.trees()) {
    index_t n = 0;
    path += 1;
    while (!tree.is_leaf(n)) {
      const std::size_t k = static_cast<std::size_t>(n);
      const float x = d.row(5)[tree.feature[k]];
      n = (x != x ? tree.default_left[k] != 0 : x < tree.value[k]) ? tree.left[k] : tree.right[k];
      path += 1;
    }
  }
  EXPECT_DOUBLE_EQ(p.nodes_per_warp(one.values.data(), 32, nullptr), path);
  // Every row 32 times, interleaved: scheduling puts the copies of a row side by side, so its
  // warps visit strictly fewer nodes.
  const ForestData many = tiled(d, d.n_rows * 32);
  const std::vector<index_t> order = p.schedule_rows(many.values.data(), many.n_rows, 4);
  const double plain = p.nodes_per_warp(many.values.data(), many.n_rows, nullptr);
  const double scheduled = p.nodes_per_warp(many.values.data(), many.n_rows, order.data());
  EXPECT_LT(scheduled, 0.8 * plain) << plain << " -> " << scheduled;
}

// ---- the strategies (GPU) -------------------------------------------------------------------------

struct Variant {
  ForestKernel kernel;
  ForestSchedule schedule;
  std::string name;
};

// A split schedule that cuts forest f into about three parts (its largest tree fits one).
ForestSchedule three_parts(const Forest& f, bool wide) {
  const AdaptiveForest a = AdaptiveForest::build(f);
  index_t largest = 0;
  for (std::size_t t = 0; t + 1 < a.tree_begin.size(); ++t) largest = std::max(largest, a.tree_begin[t + 1] - a.tree_begin[t]);
  ForestSchedule s;
  s.block_threads = 32;
  s.rows_per_thread = wide ? 1 : 2;
  const std::size_t tile = static_cast<std::size_t>(f.n_features()) * 32 * s.rows_per_thread * sizeof(float);
  const std::size_t part = std::max<std::size_t>(a.nodes.size() * sizeof(ForestNode) / 3, largest * sizeof(ForestNode));
  s.part_kib = static_cast<int>((part + tile) / 1024 + 1);
  return s;
}

std::vector<Variant> variants(bool wide) {
  std::vector<Variant> v;
  auto add = [&](ForestKernel k, ForestSchedule s, const std::string& n) { v.push_back({k, s, n}); };
  // A schedule that sets the knobs named, the others left to the engine.
  using S = ForestSchedule;
  auto knobs = [](std::initializer_list<std::pair<int S::*, int>> set) {
    S s;
    for (const auto& k : set) s.*k.first = k.second;
    return s;
  };
  add(ForestKernel::Direct, {}, "direct");
  add(ForestKernel::Direct, knobs({{&S::cache_rows, 1}, {&S::block_threads, 64}}), "direct cached 64");
  if (!wide) {
    add(ForestKernel::Direct, knobs({{&S::rows_per_thread, 4}, {&S::tree_interleave, 1}}), "direct 4x1");
    add(ForestKernel::Direct, knobs({{&S::rows_per_thread, 2}, {&S::tree_interleave, 2}, {&S::cache_rows, 1}}),
        "direct 2x2 cached");
  }
  add(ForestKernel::SharedData, {}, "shared-data");
  add(ForestKernel::SharedData, knobs({{&S::tree_group, 3}, {&S::rows_per_block, 7}, {&S::block_threads, 96}}),
      "shared-data 3/7/96");
  // Passes of 40 rows (the last one 20) whose walks outnumber the threads, one walk at a time;
  // and two at a time over a block of one warp.
  add(ForestKernel::SharedData,
      knobs({{&S::tree_group, 40}, {&S::rows_per_block, 100}, {&S::block_threads, 64}, {&S::tree_interleave, 1}}),
      "shared-data 40/100/64 x1");
  add(ForestKernel::SharedData, knobs({{&S::tree_group, 5}, {&S::block_threads, 32}, {&S::tree_interleave, 2}}),
      "shared-data 5/32 x2");
  // Both node orders whatever the rows per pass; 3 staged rows under passes of 5.
  add(ForestKernel::SharedData, knobs({{&S::tree_group, 1}, {&S::interleaved, 0}}), "shared-data tree-major, 1 row");
  add(ForestKernel::SharedData,
      knobs({{&S::tree_group, 5}, {&S::interleaved, 1}, {&S::top_rows, 3}, {&S::tree_interleave, 4}}),
      "shared-data interleaved, 3 rows staged, 5 rows");
  add(ForestKernel::SplitSharedForest, {}, "split");
  add(ForestKernel::SplitSharedForest, {}, "split in three");  // the schedule is made per forest
  add(ForestKernel::Auto, {}, "auto");
  return v;
}

TEST(ForestAdaptiveGpu, EveryStrategyEqualsTheCpuBitForBit) {
  CANOPY_REQUIRE_GPU();
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    // Several blocks, a ragged last one (fewer under a sanitizer, still several of 64 rows).
    const ForestData d = tiled(rows(c.rows), test::under_tool() ? 301 : 3001);
    std::vector<ForestOutput> outs{ForestOutput::Prob};
    if (c.margin) outs.push_back(ForestOutput::Margin);
    if (c.klass) outs.push_back(ForestOutput::Class);
    std::vector<std::vector<float>> want;
    for (ForestOutput o : outs) want.push_back(cpu_predict(f, d, o));
    const bool wide = std::max(f.n_groups(), f.leaf_width()) > 8;
    // The rearrangements change the layout's order, not the kernels: one under a sanitizer.
    for (int rearrange = 0; rearrange < (test::under_tool() ? 1 : 3); ++rearrange) {
      ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Gpu);
      cfg.adaptive.node_rearrangement = rearrange != 1;
      cfg.adaptive.tree_rearrangement = rearrange != 2;
      ForestPredictor p(f, cfg);
      for (Variant v : variants(wide))
        for (int depth : {0, 2}) {
          if (v.name == "split in three") v.schedule = three_parts(f, wide);  // several parts: sums carried
          for (std::size_t o = 0; o < outs.size(); ++o) {
            if (outs[o] != ForestOutput::Prob && (depth > 0 || rearrange > 0)) continue;  // keep the run short
            ForestRunOptions opt;
            opt.output = outs[o];
            opt.kernel = v.kernel;
            opt.schedule = v.schedule;
            opt.row_schedule_depth = depth;
            opt.hardware_cache = ::testing::TempDir() + "canopy_forest_hw_test.json";
            std::vector<float> got(static_cast<std::size_t>(d.n_rows * p.output_width(opt.output)));
            p.predict(d.values.data(), d.n_rows, opt, got.data());
            std::string where;
            EXPECT_TRUE(same_bits(got, want[o], &where))
                << c.name << " " << v.name << " rearrange " << rearrange << " depth " << depth << " output "
                << to_string(outs[o]) << ": " << where;
          }
        }
    }
  }
}

// Blocks whose rows have no missing value walk the fast copy, the others the flagged nodes:
// XGBoost models (whose missing values go either way) on rows without any, and on the same
// rows with missing values in a few, so that one launch takes both paths.
TEST(ForestAdaptiveGpu, FastCopyAndMissingValuesGiveTheCpusBits) {
  CANOPY_REQUIRE_GPU();
  const std::vector<std::pair<std::string, std::string>> cases{{"xgb_covtype", "covtype_rows_dense"},
                                                                {"xgb_higgs", "higgs_rows_dense"},
                                                                {"xgb_letter", "letter_rows_dense"},
                                                                {"rf_covtype", "covtype_rows_dense"}};
  for (const auto& [name, data] : cases) {
    // Under a sanitizer two models (one XGBoost, one random forest) and fewer rows.
    if (test::under_tool() && name != "xgb_higgs" && name != "rf_covtype") continue;
    const Forest& f = model(name);
    const bool wide = std::max(f.n_groups(), f.leaf_width()) > 8;  // (direct: 1 x 1 only)
    const ForestData dense = tiled(rows(data), test::under_tool() ? 300 : 700);
    ForestData mixed = dense;
    for (index_t i : {index_t{130}, index_t{131}, index_t{217}})
      mixed.values[static_cast<std::size_t>(i * mixed.n_features + (i % mixed.n_features))] = NAN;
    ForestPredictor p(f, forest_config(ForestLayout::Adaptive, Device::Gpu));
    std::vector<Variant> vs;
    ForestSchedule s;
    s.cache_rows = 1;
    s.block_threads = 64;
    vs.push_back({ForestKernel::Direct, s, "direct cached 64"});
    if (!wide) {
      s.rows_per_thread = 2;
      s.tree_interleave = 2;
      vs.push_back({ForestKernel::Direct, s, "direct cached 64, 2x2"});
    }
    s = {};
    s.tree_group = 5;
    s.rows_per_block = 20;
    s.interleaved = 0;
    vs.push_back({ForestKernel::SharedData, s, "shared-data tree-major 5/20"});
    s.tree_group = 1;
    s.rows_per_block = 0;
    s.tree_interleave = 4;
    vs.push_back({ForestKernel::SharedData, s, "shared-data tree-major 1 row x4"});
    vs.push_back({ForestKernel::Auto, {}, "auto"});
    for (const ForestData* d : {&dense, static_cast<const ForestData*>(&mixed)}) {
      const std::vector<float> want = cpu_predict(f, *d, ForestOutput::Prob);
      for (const Variant& v : vs) {
        ForestRunOptions opt;
        opt.output = ForestOutput::Prob;
        opt.kernel = v.kernel;
        opt.schedule = v.schedule;
        opt.hardware_cache = ::testing::TempDir() + "canopy_forest_hw_test.json";
        std::vector<float> got(static_cast<std::size_t>(d->n_rows * p.output_width(opt.output)));
        p.predict(d->values.data(), d->n_rows, opt, got.data());
        std::string where;
        EXPECT_TRUE(same_bits(got, want, &where))
            << name << " " << v.name << (d == &dense ? " dense" : " mixed") << ": " << where;
      }
    }
  }
}

// A regression forest of complete trees (Canopy's forest format), sized at will.
Forest complete_forest(int trees, int depth, int features, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::string j = R"({"format": "canopy-forest", "version": 1, "task": "regression", "num_features": )" +
                  std::to_string(features) + R"(, "trees": [)";
  const int nodes = (1 << (depth + 1)) - 1;
  for (int t = 0; t < trees; ++t) {
    std::string l, r, f, th, v, ns;
    for (int k = 0; k < nodes; ++k) {
      const bool leaf = k >= nodes / 2;
      const std::string sep = k ? "," : "";
      l += sep + std::to_string(leaf ? -1 : 2 * k + 1);
      r += sep + std::to_string(leaf ? -1 : 2 * k + 2);
      f += sep + std::to_string(leaf ? -2 : static_cast<int>(rng() % features));
      th += sep + std::to_string(leaf ? -2.0 : u(rng));
      v += sep + (leaf ? "[" + std::to_string(u(rng)) + "]" : std::string("[]"));
      ns += sep + std::to_string(1 + rng() % 100);
    }
    j += std::string(t ? "," : "") + R"({"left_children": [)" + l + R"(], "right_children": [)" + r +
         R"(], "features": [)" + f + R"(], "thresholds": [)" + th + R"(], "values": [)" + v +
         R"(], "node_samples": [)" + ns + "]}";
  }
  return Forest::parse(j + "]}", "complete_forest");
}

ForestData uniform_rows(index_t n, int features, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  ForestData d;
  d.n_features = features;
  d.n_rows = n;
  for (index_t i = 0; i < n * features; ++i) d.values.push_back(u(rng));
  return d;
}

// Shared data keeps a forest's float64 leaf vectors in shared memory while one row's take at
// most a quarter of it, and the leaf index past that (then it reads the vectors from global
// memory): both give the CPU's bits, one row per pass or many.
TEST(ForestAdaptiveGpu, SharedDataSumsLeafVectorsInOrderFromEitherCopy) {
  CANOPY_REQUIRE_GPU();
  const ForestData d = uniform_rows(700, 5, 7);
  for (int trees : {300, 9000}) {  // 2,400 and 72,000 bytes of leaf vector per row
    const Forest f = complete_forest(trees, 2, 5, 11 + trees);
    ForestPredictor p(f, forest_config(ForestLayout::Adaptive, Device::Gpu));
    const std::vector<float> want = cpu_predict(f, d, ForestOutput::Prob);
    for (int group : {1, 3}) {
      ForestRunOptions opt;
      opt.kernel = ForestKernel::SharedData;
      opt.schedule.tree_group = group;
      std::vector<float> got(static_cast<std::size_t>(d.n_rows));
      const ForestTimes t = p.predict(d.values.data(), d.n_rows, opt, got.data());
      EXPECT_EQ(t.schedule.tree_group, group);
      std::string where;
      EXPECT_TRUE(same_bits(got, want, &where)) << trees << " trees, " << group << " rows per pass: " << where;
    }
  }
}

TEST(ForestAdaptiveGpu, SharedForestRunsWhenTheForestFitsAndSaysWhyOtherwise) {
  CANOPY_REQUIRE_GPU();
  ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Gpu);
  ForestRunOptions opt;
  opt.kernel = ForestKernel::SharedForest;
  const ForestData d = uniform_rows(2000, 6, 1);
  // 200 trees of 31 nodes: 49,600 bytes, in shared memory whole.
  const Forest small = complete_forest(200, 4, 6, 2);
  ForestPredictor ps(small, cfg);
  std::vector<float> got(static_cast<std::size_t>(d.n_rows));
  const ForestTimes t = ps.predict(d.values.data(), d.n_rows, opt, got.data());
  EXPECT_EQ(t.kernel, ForestKernel::SharedForest);
  std::string where;
  EXPECT_TRUE(same_bits(got, cpu_predict(small, d, opt.output), &where)) << where;
  // 2,000 trees of 31 nodes: 496,000 bytes, more than any GPU's shared memory per block: a
  // clear error that points to the split strategy, which runs it.
  const Forest big = complete_forest(2000, 4, 6, 3);
  ForestPredictor pb(big, cfg);
  EXPECT_HAS(test::error_of([&] { pb.predict(d.values.data(), d.n_rows, opt, got.data()); },
                            "an error for a forest larger than shared memory"),
             "split-shared-forest");
  opt.kernel = ForestKernel::SplitSharedForest;
  pb.predict(d.values.data(), d.n_rows, opt, got.data());
  EXPECT_TRUE(same_bits(got, cpu_predict(big, d, opt.output), &where)) << where;
}

TEST(ForestAdaptiveGpu, BadSchedulesAreClearErrors) {
  CANOPY_REQUIRE_GPU();
  ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Gpu);
  const Forest& f = model("xgb_higgs");
  ForestPredictor p(f, cfg);
  const ForestData d = tiled(rows("higgs_rows"), 100);
  std::vector<float> out(static_cast<std::size_t>(d.n_rows));
  auto message = [&](ForestRunOptions opt) {
    return test::error_of([&] { p.predict(d.values.data(), d.n_rows, opt, out.data()); });
  };
  ForestRunOptions opt;
  opt.schedule.block_threads = 100;
  EXPECT_NE(message(opt).find("block_threads"), std::string::npos);
  opt = {};
  opt.kernel = ForestKernel::Direct;  // (Auto would take a strategy without this knob)
  opt.schedule.rows_per_thread = 3;
  EXPECT_NE(message(opt).find("rows_per_thread"), std::string::npos);
  opt = {};
  opt.row_schedule_depth = 40;  // deeper than any tree
  EXPECT_NE(message(opt).find("row_schedule_depth"), std::string::npos);
  opt = {};
  opt.row_schedule_depth = -1;
  EXPECT_NE(message(opt).find("row_schedule_depth"), std::string::npos);
  opt = {};
  opt.kernel = ForestKernel::Hybrid;
  EXPECT_NE(message(opt).find("hierarchical"), std::string::npos);
  opt = {};
  opt.kernel = ForestKernel::SharedData;
  opt.schedule.tree_group = 65;
  EXPECT_NE(message(opt).find("tree_group"), std::string::npos);
  opt.schedule.tree_group = 0;
  opt.schedule.tree_interleave = 3;
  EXPECT_NE(message(opt).find("tree_interleave"), std::string::npos);
  opt.schedule.tree_interleave = 0;
  opt.schedule.interleaved = 0;
  opt.schedule.top_rows = 3;
  EXPECT_NE(message(opt).find("top_rows"), std::string::npos);
  opt.schedule.interleaved = 1;
  opt.schedule.top_rows = 1 << 20;  // more rows than the copy has
  EXPECT_NE(message(opt).find("top_rows"), std::string::npos);
  // A part smaller than one tree of 255 nodes (2,040 bytes): 4 KiB less a tile of 32 rows x 28
  // features (3,584 bytes).
  ForestPredictor deep(complete_forest(3, 7, 28, 4), cfg);
  opt = {};
  opt.kernel = ForestKernel::SplitSharedForest;
  opt.schedule.block_threads = 32;
  opt.schedule.rows_per_thread = 1;
  opt.schedule.part_kib = 4;
  EXPECT_HAS(test::error_of([&] { deep.predict(d.values.data(), d.n_rows, opt, out.data()); },
                            "an error for a part smaller than a tree"),
             "part");
  // The strategies of the adaptive layout on another layout.
  ForestPredictor q(f, forest_config(ForestLayout::Csr, Device::Gpu));
  opt = {};
  opt.kernel = ForestKernel::SharedForest;
  EXPECT_HAS(test::error_of([&] { q.predict(d.values.data(), d.n_rows, opt, out.data()); },
                            "an error for shared forest on the csr layout"),
             "adaptive");
  // Auto there is the direct kernel.
  opt.kernel = ForestKernel::Auto;
  EXPECT_EQ(q.predict(d.values.data(), d.n_rows, opt, out.data()).kernel, ForestKernel::Direct);
}

TEST(ForestAdaptiveGpu, GpuRowOrderEqualsTheCpuReference) {
  CANOPY_REQUIRE_GPU();
  const Forest& f = model("xgb_covtype");
  const ForestData d = tiled(rows("covtype_rows"), 5000);
  ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Cpu);
  ForestPredictor cpu(f, cfg);
  cfg.device = Device::Gpu;
  ForestPredictor gpu(f, cfg);
  for (int depth : {1, 2, f.max_depth()}) EXPECT_EQ(gpu.schedule_rows(d.values.data(), d.n_rows, depth), cpu.schedule_rows(d.values.data(), d.n_rows, depth)) << depth;
}

TEST(ForestAdaptiveGpu, TunerAndModelCoverTheStrategies) {
  CANOPY_REQUIRE_GPU();
  ForestConfig cfg = forest_config(ForestLayout::Adaptive, Device::Gpu);
  const Forest& f = model("xgb_covtype");
  ForestPredictor p(f, cfg);
  ForestRunOptions opt;
  opt.hardware_cache = ::testing::TempDir() + "canopy_forest_hw_test.json";
  const ForestData d = tiled(rows("covtype_rows"), test::under_tool() ? 2000 : 20000);
  const auto est = p.model_estimates(d.values.data(), d.n_rows, opt);
  ASSERT_EQ(est.size(), 4u);
  for (std::size_t i = 1; i < est.size(); ++i) EXPECT_LE(est[i - 1].model_ns_per_row, est[i].model_ns_per_row);
  EXPECT_TRUE(std::isfinite(est.front().model_ns_per_row));
  const auto trials = p.tune(d.values.data(), d.n_rows, opt, 2);
  ASSERT_GE(trials.size(), 3u);
  for (std::size_t i = 1; i < trials.size(); ++i) EXPECT_LE(trials[i - 1].kernel_ms, trials[i].kernel_ms);
  // The best schedule, run through predict, gives the CPU's bits.
  opt.kernel = trials.front().kernel;
  opt.schedule = trials.front().schedule;
  std::vector<float> got(static_cast<std::size_t>(d.n_rows * p.output_width(opt.output)));
  const ForestTimes t = p.predict(d.values.data(), d.n_rows, opt, got.data());
  EXPECT_EQ(t.kernel, trials.front().kernel);
  std::string where;
  EXPECT_TRUE(same_bits(got, cpu_predict(f, d, opt.output), &where)) << where;
}

}  // namespace
}  // namespace canopy
