// The three layouts: structure and footprint, and predictions on awkward trees (a 40-level
// caterpillar, a random unbalanced tree, a lone leaf) checked against a plain walker over the
// source arrays, which shares no code with the layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

#include "test_forest_util.hpp"

namespace canopy {
namespace {

using namespace forest_test;

// A tree in the Canopy format's arrays (scikit-learn semantics: left iff x <= threshold).
struct SourceTree {
  std::vector<int> left, right, feature;
  std::vector<double> threshold, value;
  std::vector<int> samples;
};

SourceTree caterpillar(int depth, std::mt19937& rng) {
  SourceTree t;
  std::uniform_real_distribution<double> u(-1, 1);
  // Node ids in depth-first order (not breadth-first), to exercise the renumbering.
  for (int d = 0; d < depth; ++d) {
    const int inner = static_cast<int>(t.left.size());
    t.left.push_back(inner + 1);  // the leaf comes first,
    t.right.push_back(inner + 2);  // then the rest of the chain
    t.feature.push_back(d % 5);
    t.threshold.push_back(u(rng));
    t.value.push_back(0);
    t.samples.push_back(100);
    t.left.push_back(-1);
    t.right.push_back(-1);
    t.feature.push_back(-2);
    t.threshold.push_back(-2);
    t.value.push_back(d + 0.25);
    t.samples.push_back(d % 3);
  }
  t.left.push_back(-1);
  t.right.push_back(-1);
  t.feature.push_back(-2);
  t.threshold.push_back(-2);
  t.value.push_back(-7.5);
  t.samples.push_back(1);
  // Alternate the side the chain continues on.
  for (std::size_t n = 0; n < t.left.size(); ++n)
    if (t.left[n] >= 0 && n % 4 == 0) std::swap(t.left[n], t.right[n]);
  return t;
}

SourceTree random_tree(int nodes, std::mt19937& rng) {
  SourceTree t;
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<int> open{0};
  auto add = [&]() {
    t.left.push_back(-1);
    t.right.push_back(-1);
    t.feature.push_back(-2);
    t.threshold.push_back(-2);
    t.value.push_back(u(rng) * 10);
    t.samples.push_back(static_cast<int>(rng() % 50));
    return static_cast<int>(t.left.size()) - 1;
  };
  add();
  while (static_cast<int>(t.left.size()) + 2 <= nodes && !open.empty()) {
    const std::size_t pick = rng() % open.size();
    const int n = open[pick];
    open.erase(open.begin() + static_cast<long>(pick));
    t.left[n] = add();
    t.right[n] = add();
    t.feature[n] = static_cast<int>(rng() % 5);
    t.threshold[n] = u(rng);
    open.push_back(t.left[n]);
    open.push_back(t.right[n]);
  }
  return t;
}

SourceTree lone_leaf() {
  SourceTree t;
  t.left = {-1};
  t.right = {-1};
  t.feature = {-2};
  t.threshold = {-2};
  t.value = {3.0};
  t.samples = {10};
  return t;
}

template <class T>
std::string list(const std::vector<T>& v) {
  std::ostringstream s;
  s.precision(17);
  s << "[";
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? "," : "") << v[i];
  return s.str() + "]";
}

std::string to_json(const std::vector<SourceTree>& trees) {
  std::string j = R"({"format":"canopy-forest","version":1,"task":"regression","num_features":5,"trees":[)";
  for (std::size_t i = 0; i < trees.size(); ++i) {
    const SourceTree& t = trees[i];
    std::vector<std::string> values;
    for (double v : t.value) {
      char b[40];
      std::snprintf(b, sizeof b, "[%.17g]", v);
      values.push_back(b);
    }
    std::string vals = "[";
    for (std::size_t k = 0; k < values.size(); ++k) vals += (k ? "," : "") + values[k];
    vals += "]";
    j += std::string(i ? "," : "") + R"({"left_children":)" + list(t.left) + R"(,"right_children":)" + list(t.right) +
         R"(,"features":)" + list(t.feature) + R"(,"thresholds":)" + list(t.threshold) + R"(,"values":)" + vals +
         R"(,"node_samples":)" + list(t.samples) + "}";
  }
  return j + "]}";
}

// The plain walker: x <= threshold in float64, NaN to the child with more samples (tie right).
double walk(const SourceTree& t, const float* row) {
  int n = 0;
  while (t.left[n] >= 0) {
    const float x = row[t.feature[n]];
    bool left;
    if (std::isnan(x)) left = t.samples[t.left[n]] > t.samples[t.right[n]];
    else left = static_cast<double>(x) <= t.threshold[n];
    n = left ? t.left[n] : t.right[n];
  }
  return t.value[n];
}

TEST(ForestLayouts, AwkwardTreesMatchAPlainWalker) {
  std::mt19937 rng(11);
  std::vector<SourceTree> trees{caterpillar(40, rng), random_tree(301, rng), lone_leaf(), caterpillar(7, rng),
                                random_tree(1001, rng)};
  const Forest f = Forest::parse(to_json(trees), "awkward.json");
  EXPECT_EQ(f.max_depth(), 40);
  // Rows with values near the thresholds, and missing values.
  const index_t n = 3000;
  std::vector<float> rows(static_cast<std::size_t>(n) * 5);
  std::uniform_real_distribution<float> u(-1.2f, 1.2f);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = rng() % 13 == 0 ? std::nanf("") : u(rng);
  // Some values exactly at a threshold's float32 neighbours.
  for (index_t i = 0; i < 200; ++i) {
    const SourceTree& t = trees[static_cast<std::size_t>(i) % 2 == 0 ? 0 : 1];
    const int node = static_cast<int>(rng() % t.left.size());
    if (t.left[node] < 0) continue;
    const float below = static_cast<float>(t.threshold[node]);
    rows[static_cast<std::size_t>(i * 5 + t.feature[node])] = i % 4 < 2 ? below : std::nextafter(below, 2.0f);
  }
  std::vector<float> expected(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) {
    double s = 0.0;  // scikit-learn's order: 0.0 + tree 0 + tree 1 + ..., then / trees
    for (const SourceTree& t : trees) s += walk(t, &rows[static_cast<std::size_t>(i * 5)]);
    expected[static_cast<std::size_t>(i)] = static_cast<float>(s / static_cast<double>(trees.size()));
  }
  std::vector<ForestConfig> configs = cpu_layouts();
  for (int sd : {2, 5, 8})
    for (int rsd : {1, 3, 12}) {
      ForestConfig c = forest_config(ForestLayout::Hierarchical, Device::Cpu);
      c.hierarchical.subtree_depth = sd;
      c.hierarchical.root_depth = rsd;
      configs.push_back(c);
    }
  for (const ForestConfig& cfg : configs) {
    SCOPED_TRACE(describe(cfg));
    ForestPredictor p(f, cfg);
    std::vector<float> out(static_cast<std::size_t>(n));
    p.predict(rows.data(), n, out.data());
    index_t wrong = 0;
    for (index_t i = 0; i < n; ++i)
      if (out[static_cast<std::size_t>(i)] != expected[static_cast<std::size_t>(i)] && wrong++ < 5)
        ADD_FAILURE() << "row " << i << ": " << out[static_cast<std::size_t>(i)] << " vs " << expected[static_cast<std::size_t>(i)];
    EXPECT_EQ(wrong, 0);
  }
}

TEST(ForestLayouts, CsrStructureAndFootprint) {
  const Forest& f = model("xgb_covtype");
  const CsrForest c = CsrForest::build(f);
  EXPECT_EQ(static_cast<index_t>(c.info.size()), f.n_nodes());
  EXPECT_EQ(static_cast<index_t>(c.children.size()), 2 * (f.n_nodes() - f.n_leaves()));
  // Trees in layout order: grouped by class, model order within a class.
  for (int g = 0; g < f.n_groups(); ++g)
    for (index_t t = c.common.group_begin[g]; t < c.common.group_begin[g + 1]; ++t) {
      EXPECT_EQ(f.trees()[static_cast<std::size_t>(c.common.order[t])].group, g);
      if (t > c.common.group_begin[g]) {
        EXPECT_GT(c.common.order[t], c.common.order[t - 1]);
      }
    }
  // 4 (feature id) + 4 (value) + 4 (children_arr_idx) per node, 4 per children_arr entry,
  // 8 + 8 per tree, plus the output tables.
  const std::size_t common = 8 * (f.n_groups() + 1) + 4 * f.n_groups() + 8 * f.n_classes();
  EXPECT_EQ(c.footprint_bytes(), static_cast<std::size_t>(12 * f.n_nodes() + 4 * 2 * (f.n_nodes() - f.n_leaves()) +
                                                          16 * f.n_trees()) + common);
}

TEST(ForestLayouts, ReorgInterleavesTreesLevelByLevel) {
  const Forest& f = model("xgb_higgs");
  const ReorgForest r = ReorgForest::build(f);
  const index_t T = f.n_trees();
  ASSERT_EQ(static_cast<int>(r.level_begin.size()), f.max_depth() + 2);
  // Level 0 holds the roots of all trees side by side.
  EXPECT_EQ(r.level_begin[1], T);
  for (index_t t = 0; t < T; ++t) {
    const ForestTree& tree = f.trees()[static_cast<std::size_t>(r.common.order[t])];
    EXPECT_EQ(r.nodes[static_cast<std::size_t>(t)].value, tree.value[0]);
  }
  index_t real = 0;
  for (const ForestNode& n : r.nodes) real += !(n.info == kForestLeafBit && n.value == 0.0f);
  EXPECT_EQ(r.padding_nodes, static_cast<index_t>(r.nodes.size()) - f.n_nodes());
  EXPECT_LE(real, f.n_nodes());
}

TEST(ForestLayouts, HierarchicalSubtrees) {
  const Forest& f = model("rf_letter");  // depth up to 9: 10 levels
  HierarchicalOptions opt;
  opt.subtree_depth = 3;
  opt.root_depth = 4;
  const HierarchicalForest h = HierarchicalForest::build(f, opt);
  EXPECT_EQ(h.root_depth, 4);
  EXPECT_EQ(h.root_stride, 15);
  EXPECT_EQ(h.root_nodes.size(), static_cast<std::size_t>(15 * f.n_trees()));
  const index_t S = h.n_subtrees();
  EXPECT_GT(S, f.n_trees());
  // Non-root subtrees are complete-array prefixes of at most 2^SD - 1 nodes, in order.
  for (index_t s = f.n_trees(); s < S; ++s) {
    const index_t end = s + 1 < S ? h.subtree_node_begin[s + 1] : static_cast<index_t>(h.nodes.size());
    EXPECT_GE(end - h.subtree_node_begin[s], 1);
    EXPECT_LE(end - h.subtree_node_begin[s], 7);
  }
  for (index_t id : h.connections) EXPECT_TRUE(id == -1 || (id >= f.n_trees() && id < S));
  // Every real node is stored once: the rest is padding.
  EXPECT_EQ(static_cast<index_t>(h.root_nodes.size() + h.nodes.size()) - h.padding_nodes, f.n_nodes());
  // The root depth is capped at the forest's depth.
  opt.root_depth = 12;
  EXPECT_EQ(HierarchicalForest::build(model("xgb_higgs"), opt).root_depth, model("xgb_higgs").max_depth() + 1);
}

TEST(ForestLayouts, HierarchicalOptionErrors) {
  HierarchicalOptions opt;
  opt.subtree_depth = 0;
  EXPECT_THROW(HierarchicalForest::build(model("xgb_higgs"), opt), Error);
  opt.subtree_depth = 6;
  opt.root_depth = 13;
  try {
    HierarchicalForest::build(model("xgb_higgs"), opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("root subtree depth 13 is outside 1..12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace canopy
