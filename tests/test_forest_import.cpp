// Model import: the test models load as what they are, and every kind of malformed or
// unsupported file is a canopy::Error that names the file and the JSON path (never a crash,
// never another exception type).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "test_errors.hpp"
#include "test_forest_util.hpp"

namespace canopy {
namespace {

using nlohmann::json;
using namespace forest_test;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The Error message parsing `text` gives; a test failure if it does not throw canopy::Error.
std::string error_of(const std::string& text, const std::string& name = "m.json") {
  return test::error_of([&] { Forest::parse(text, name); });
}

const json& xgb_higgs() {
  static const json j = json::parse(slurp(dir() + "xgb_higgs.json"));
  return j;
}
const json& rf_covtype() {
  static const json j = json::parse(slurp(dir() + "rf_covtype.json"));
  return j;
}

// xgb_higgs with one change.
std::string xgb_with(const std::function<void(json&)>& change) {
  json j = xgb_higgs();
  change(j);
  return j.dump();
}
std::string rf_with(const std::function<void(json&)>& change) {
  json j = rf_covtype();
  change(j);
  return j.dump();
}
json& tree(json& j, int t) { return j["learner"]["gradient_booster"]["model"]["trees"][t]; }
// The first inner node of a tree past the root (so messages carry a real index).
int inner_node(const json& t) {
  for (std::size_t i = 1; i < t["left_children"].size(); ++i)
    if (t["left_children"][i] != -1) return static_cast<int>(i);
  return 0;
}
const std::string kTree3 = "learner/gradient_booster/model/trees/3/";

TEST(ForestImport, LoadsTheTestModels) {
  const Forest& b = model("xgb_higgs");
  EXPECT_EQ(b.objective(), ForestObjective::BinaryLogistic);
  EXPECT_EQ(b.n_trees(), 40);
  EXPECT_EQ(b.n_features(), 28);
  EXPECT_EQ(b.n_groups(), 1);
  EXPECT_EQ(b.n_classes(), 2);
  EXPECT_LE(b.max_depth(), 5);  // trained with max_depth 5
  const Forest& c = model("xgb_covtype");
  EXPECT_EQ(c.objective(), ForestObjective::MultiSoftprob);
  EXPECT_EQ(c.n_trees(), 42);  // 6 rounds x 7 classes
  EXPECT_EQ(c.n_groups(), 7);
  EXPECT_EQ(c.n_features(), 12);
  EXPECT_EQ(model("xgb_letter").objective(), ForestObjective::MultiSoftmax);
  EXPECT_EQ(model("xgb_letter").n_groups(), 26);
  EXPECT_EQ(model("xgb_higgs_reg").objective(), ForestObjective::SquaredError);
  const Forest& rf = model("rf_covtype");
  EXPECT_EQ(rf.objective(), ForestObjective::RfClassifier);
  EXPECT_EQ(rf.n_trees(), 20);
  EXPECT_EQ(rf.leaf_width(), 7);
  EXPECT_EQ(rf.class_values(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7}));  // Cover_Type 1..7
  EXPECT_LE(rf.max_depth(), 9);
  EXPECT_EQ(model("rf_higgs_reg").objective(), ForestObjective::RfRegressor);
  EXPECT_EQ(model("rf_higgs_reg").leaf_width(), 1);
  for (const ForestTree& t : rf.trees())
    for (index_t n = 0; n < t.size(); ++n)
      if (!t.is_leaf(n)) {
        EXPECT_GT(t.left[n], n);  // breadth-first: children after their parent, left then right
        EXPECT_EQ(t.right[n], t.left[n] + 1);
      }
}

TEST(ForestImport, GzipAndV2Fields) {
  // The same model gzip-compressed.
  const std::string gz = ::testing::TempDir() + "xgb_higgs.json.gz";
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string text = slurp(dir() + "xgb_higgs.json");
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
  const Forest a = Forest::load(gz);
  EXPECT_EQ(a.n_nodes(), model("xgb_higgs").n_nodes());
  EXPECT_EQ(a.base_margin(), model("xgb_higgs").base_margin());
  // The 2.x variant: base_score "[4E-1]", booleans in default_left, size_leaf_vector "1".
  const Forest& v2 = model("xgb_higgs_v2");
  EXPECT_EQ(v2.base_margin(), model("xgb_higgs").base_margin());
  EXPECT_EQ(v2.n_nodes(), model("xgb_higgs").n_nodes());
}

// A subset keeps the model's metadata and the listed trees in the listed order: its leaves are
// those columns of the whole model's pred_leaf, and its margins sum only those trees.
TEST(ForestImport, SubsetKeepsTheListedTreesInOrder) {
  const Forest& f = model("xgb_higgs");
  const ForestData& d = rows("higgs_rows");
  const std::vector<index_t> ids = {7, 0, f.n_trees() - 1, 3};
  const Forest sub = f.subset(ids);
  ASSERT_EQ(sub.n_trees(), 4);
  EXPECT_EQ(sub.objective(), f.objective());
  EXPECT_EQ(sub.n_features(), f.n_features());
  EXPECT_EQ(sub.base_margin(), f.base_margin());
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  ForestPredictor whole(f, cfg), part(sub, cfg);
  ForestRunOptions leaf;
  leaf.output = ForestOutput::Leaf;
  std::vector<float> all(static_cast<std::size_t>(d.n_rows * f.n_trees())), some(static_cast<std::size_t>(d.n_rows) * 4);
  whole.predict(d.values.data(), d.n_rows, leaf, all.data());
  part.predict(d.values.data(), d.n_rows, leaf, some.data());
  for (index_t r = 0; r < d.n_rows; ++r)
    for (std::size_t j = 0; j < ids.size(); ++j)
      ASSERT_EQ(some[static_cast<std::size_t>(r) * 4 + j], all[static_cast<std::size_t>(r * f.n_trees() + ids[j])])
          << "row " << r << ", tree " << ids[j];
  // The margin of row 0: the base margin plus the four trees' leaves, in the listed order.
  ForestRunOptions margin;
  margin.output = ForestOutput::Margin;
  float m = 0;
  part.predict(d.values.data(), 1, margin, &m);
  float want = f.base_margin()[0];
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const ForestTree& t = f.trees()[static_cast<std::size_t>(ids[j])];
    const float id = some[j];
    for (index_t k = 0; k < t.size(); ++k)
      if (t.is_leaf(k) && static_cast<float>(t.source_id.empty() ? k : t.source_id[static_cast<std::size_t>(k)]) == id)
        want += t.value[static_cast<std::size_t>(k)];
  }
  EXPECT_EQ(m, want);
  EXPECT_THROW(f.subset({f.n_trees()}), Error);
  EXPECT_THROW(f.subset({-1}), Error);
}

TEST(ForestImport, NotJson) {
  const std::string text = slurp(dir() + "xgb_higgs.json");
  const std::string truncated = error_of(text.substr(0, text.size() / 2), "cut.json");
  EXPECT_HAS(truncated, "cut.json: not valid JSON");
  EXPECT_HAS(truncated, "line 1, column");
  EXPECT_HAS(error_of(""), "m.json: not valid JSON");
  EXPECT_HAS(error_of("[1, 2]"), "m.json: (top level): expected a JSON object");
  EXPECT_HAS(error_of(R"({"foo": 1})"), "neither an XGBoost model");
  EXPECT_HAS(error_of(R"({"learner": 1e999})"), "not valid JSON");
  try {
    Forest::load(dir() + "no_such_model.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "no_such_model.json: cannot open");
  }
}

TEST(ForestImport, XgboostWrongTypesAndMissingFields) {
  const int n = inner_node(xgb_higgs()["learner"]["gradient_booster"]["model"]["trees"][3]);
  const std::string at = kTree3 + "split_indices/" + std::to_string(n);
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_indices"][n] = "7"; })),
             "m.json: " + at + ": expected an integer, found string \"7\"");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_conditions"][n] = "x"; })),
             kTree3 + "split_conditions/" + std::to_string(n) + ": expected a number, found string");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3).erase("split_conditions"); })),
             "m.json: learner/gradient_booster/model/trees/3: the field 'split_conditions' is missing");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["gradient_booster"]["model"]["trees"] = json::object(); })),
             "learner/gradient_booster/model/trees: expected an array, found object");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["default_left"][n] = 2; })),
             kTree3 + "default_left/" + std::to_string(n) + ": expected 0, 1, false or true");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["learner_model_param"]["num_feature"] = "abc"; })),
             "learner/learner_model_param/num_feature: 'abc' is not an integer");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["tree_param"]["num_nodes"] = "5"; })),
             kTree3 + "left_children: has ");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["right_children"].erase(0); })),
             kTree3 + "right_children: has ");
}

TEST(ForestImport, XgboostBadTopology) {
  const json& t3 = xgb_higgs()["learner"]["gradient_booster"]["model"]["trees"][3];
  const int n = inner_node(t3);
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_indices"][n] = 40; })),
             "m.json: " + kTree3 + "split_indices/" + std::to_string(n) +
                 ": feature 40 is out of range (the model has 28 features)");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_indices"][n] = -1; })), "feature -1 is out of range");
  // A child pointing back at the root: a cycle.
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["left_children"][n] = 0; })),
             kTree3 + "left_children/" + std::to_string(n) + ": node 0 is reached a second time");
  // Two parents for one node.
  const int shared = t3["left_children"][0];
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["right_children"][0] = shared; })), "is reached a second time");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["left_children"][n] = 9999; })),
             kTree3 + "left_children/" + std::to_string(n) + ": child 9999 is out of range");
  // A leaf with a right child.
  int leaf = 0;
  for (std::size_t i = 0; i < t3["left_children"].size(); ++i)
    if (t3["left_children"][i] == -1) leaf = static_cast<int>(i);
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["right_children"][leaf] = 1; })),
             kTree3 + "right_children/" + std::to_string(leaf) + ": node " + std::to_string(leaf) + " has no left child");
}

// Categorical splits: read (python3-xgboost 1.7, enable_categorical=True), and every malformed
// part of their lists named.
TEST(ForestImport, XgboostCategorical) {
  const Forest tiny = Forest::load(dir() + "xgb_categorical.json");
  const ForestTree& t0 = tiny.trees()[0];
  ASSERT_TRUE(t0.is_categorical(0));
  EXPECT_EQ(t0.feature[0], 1);
  // Categories 1, 3 and 5 go right (bits 1, 3, 5 of the one word), the rest left.
  ASSERT_EQ(t0.categories[0].size(), 1u);
  EXPECT_EQ(t0.categories[0][0], (1u << 1) | (1u << 3) | (1u << 5));
  EXPECT_NE(tiny.describe().find("2 categorical splits"), std::string::npos) << tiny.describe();
  const Forest cat = Forest::load(dir() + "xgb_cat.json");
  EXPECT_GT(cat.n_categorical_nodes(), 100);
  // Mutations of xgb_higgs's tree 3: a categorical node with and without a list.
  const int n = inner_node(xgb_higgs()["learner"]["gradient_booster"]["model"]["trees"][3]);
  const std::string node = "tree 3, node " + std::to_string(n);
  auto with_set = [&](json cats, json nodes, json segments, json sizes) {
    return xgb_with([=](json& j) {
      tree(j, 3)["split_type"][n] = 1;
      tree(j, 3)["categories"] = cats;
      tree(j, 3)["categories_nodes"] = nodes;
      tree(j, 3)["categories_segments"] = segments;
      tree(j, 3)["categories_sizes"] = sizes;
    });
  };
  const Forest listed = Forest::parse(with_set({2, 40}, {n}, {0}, {2}), "m.json");
  const ForestTree& t3 = listed.trees()[3];
  index_t at = -1;  // the node's breadth-first id
  for (index_t k = 0; k < t3.size(); ++k)
    if (t3.source_id[static_cast<std::size_t>(k)] == n) at = k;
  ASSERT_GE(at, 0);
  ASSERT_TRUE(t3.is_categorical(at));
  EXPECT_EQ(t3.categories[static_cast<std::size_t>(at)], (std::vector<std::uint32_t>{1u << 2, 1u << 8}));
  // Left out of the lists: an empty set (every category goes left), as XGBoost reads it.
  const Forest unlisted = Forest::parse(xgb_with([&](json& j) { tree(j, 3)["split_type"][n] = 1; }), "m.json");
  EXPECT_EQ(unlisted.n_categorical_nodes(), 1);
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_type"][n] = 2; })),
             kTree3 + "split_type/" + std::to_string(n) + ": " + node + ": split type 2 is neither 0 (numerical) nor 1");
  EXPECT_HAS(error_of(xgb_with([&](json& j) {
               tree(j, 3)["categories"] = json::array({1});
               tree(j, 3)["categories_nodes"] = json::array({n});
               tree(j, 3)["categories_segments"] = json::array({0});
               tree(j, 3)["categories_sizes"] = json::array({1});
             })),
             kTree3 + "categories_nodes/0: " + node + " has categories but split type 0 (numerical)");
  EXPECT_HAS(error_of(with_set({2}, {9999}, {0}, {1})), "categories_nodes/0: tree 3, node 9999 is out of range");
  EXPECT_HAS(error_of(with_set({2}, {n}, {0, 0}, {1})), "categories_segments: has 2 entries for 1 categorical nodes");
  EXPECT_HAS(error_of(with_set({2}, {n}, {0}, {1, 1})), "categories_sizes: has 2 entries for 1 categorical nodes");
  EXPECT_HAS(error_of(with_set({2}, {n}, {3}, {1})), "categories_segments/0: " + node + ": segment start 3 is outside the 1 categories");
  EXPECT_HAS(error_of(with_set({2}, {n}, {0}, {5})), "categories_sizes/0: " + node + ": 5 categories from 0 run past the 1 categories");
  EXPECT_HAS(error_of(with_set({-1}, {n}, {0}, {1})), "categories/0: " + node + ": category -1 is outside 0..16777215");
  EXPECT_HAS(error_of(with_set({16777216}, {n}, {0}, {1})), "categories/0: " + node + ": category 16777216 is outside");
  EXPECT_HAS(error_of(with_set({1.5}, {n}, {0}, {1})), "categories/0: expected an integer, found number 1.5");
  EXPECT_HAS(error_of(with_set({2, 3}, {n, n}, {0, 1}, {1, 1})), "categories_nodes/1: " + node + " is listed twice");
}

TEST(ForestImport, XgboostUnsupported) {
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["objective"]["name"] = "rank:pairwise"; })),
             "learner/objective/name: objective 'rank:pairwise' is not supported");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["gradient_booster"]["name"] = "dart"; })),
             "learner/gradient_booster/name: booster 'dart' is not supported");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["learner_model_param"]["num_target"] = "2"; })),
             "multi-target models are not supported");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["tree_param"]["size_leaf_vector"] = "3"; })),
             "vector leaves");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["learner_model_param"]["base_score"] = "[1E-1,2E-1]"; })),
             "several base scores");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["learner_model_param"]["base_score"] = "1.5"; })),
             "learner/learner_model_param/base_score: binary:logistic needs a base score strictly between 0 and 1");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["gradient_booster"]["model"]["tree_info"][5] = 3; })),
             "learner/gradient_booster/model/tree_info/5: output group 3 is out of range");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["gradient_booster"]["model"]["tree_info"].erase(0); })),
             "learner/gradient_booster/model/tree_info: has 39 entries for 40 trees");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { j["learner"]["learner_model_param"]["num_class"] = "3"; })),
             "3 classes with objective binary:logistic");
}

TEST(ForestImport, CanopyFormatErrors) {
  const int n = inner_node(rf_covtype()["trees"][0]);
  EXPECT_HAS(error_of(rf_with([](json& j) { j["format"] = "other"; })), "m.json: format: 'other' is not 'canopy-forest'");
  EXPECT_HAS(error_of(rf_with([](json& j) { j["version"] = 2; })), "version: version 2 is not supported");
  EXPECT_HAS(error_of(rf_with([](json& j) { j["task"] = "ranking"; })), "task: 'ranking' is neither");
  EXPECT_HAS(error_of(rf_with([](json& j) { j["trees"] = json::array(); })), "trees: the forest has no trees");
  EXPECT_HAS(error_of(rf_with([&](json& j) { j["trees"][2]["features"][n] = 12; })),
             "trees/2/features/" + std::to_string(n) + ": feature 12 is out of range (the model has 12 features)");
  EXPECT_HAS(error_of(rf_with([&](json& j) { j["trees"][2]["thresholds"][n] = nullptr; })),
             "trees/2/thresholds/" + std::to_string(n) + ": expected a number, found null");
  EXPECT_HAS(error_of(rf_with([](json& j) {
               j["trees"][1].erase("node_samples");
               j["trees"][1].erase("default_left");
             })),
             "trees/1: needs 'default_left' or 'node_samples'");
  EXPECT_HAS(error_of(rf_with([](json& j) { j["classes"] = json::array(); })), "classes: 0 classes");
  // Leaf values: the first leaf of tree 4.
  const json& t4 = rf_covtype()["trees"][4];
  int leaf = 0;
  while (t4["left_children"][leaf] != -1) ++leaf;
  const std::string at = "trees/4/values/" + std::to_string(leaf);
  EXPECT_HAS(error_of(rf_with([&](json& j) { j["trees"][4]["values"][leaf] = json::array({0.5, 0.5}); })),
             at + ": a leaf needs 7 values (one per class), found 2");
  EXPECT_HAS(error_of(rf_with([&](json& j) { j["trees"][4]["values"][leaf] = json::array({0.5, 0.2, 0, 0, 0, 0, 0}); })),
             at + ": the class distribution sums to 0.7");
  EXPECT_HAS(error_of(rf_with([&](json& j) { j["trees"][4]["values"][leaf] = json::array({1.5, -0.5, 0, 0, 0, 0, 0}); })),
             at + "/1: a class probability must be >= 0");
  EXPECT_HAS(error_of(rf_with([&](json& j) { j["trees"][4]["left_children"][0] = 0; })),
             "trees/4/left_children/0: node 0 is reached a second time");
}

}  // namespace
}  // namespace canopy

// ---- NaN / Infinity literals and UBJSON --------------------------------------------------------

namespace canopy {
namespace {

using namespace forest_test;

void expect_same_forest(const Forest& a, const Forest& b) {
  EXPECT_EQ(a.objective(), b.objective());
  EXPECT_EQ(a.n_features(), b.n_features());
  EXPECT_EQ(a.n_groups(), b.n_groups());
  EXPECT_EQ(a.class_values(), b.class_values());
  EXPECT_EQ(a.base_margin(), b.base_margin());
  ASSERT_EQ(a.n_trees(), b.n_trees());
  for (index_t t = 0; t < a.n_trees(); ++t) {
    SCOPED_TRACE("tree " + std::to_string(t));
    const ForestTree& x = a.trees()[static_cast<std::size_t>(t)];
    const ForestTree& y = b.trees()[static_cast<std::size_t>(t)];
    EXPECT_EQ(x.left, y.left);
    EXPECT_EQ(x.right, y.right);
    EXPECT_EQ(x.feature, y.feature);
    ASSERT_EQ(x.value.size(), y.value.size());
    EXPECT_EQ(0, std::memcmp(x.value.data(), y.value.data(), x.value.size() * sizeof(float)));  // NaN too
    EXPECT_EQ(x.default_left, y.default_left);
    EXPECT_EQ(x.cover, y.cover);
    EXPECT_EQ(x.categorical, y.categorical);
    EXPECT_EQ(x.categories, y.categories);
    EXPECT_EQ(x.group, y.group);
  }
}

// Margins of every CPU layout equal (bit for bit) those XGBoost saved for the model.
void expect_xgboost_margins(const Forest& f, const std::string& expected, const ForestData& d) {
  const auto margin = read_lines(dir() + expected + ".margin.txt");
  ASSERT_EQ(margin.size(), static_cast<std::size_t>(d.n_rows));
  for (const ForestConfig& cfg : cpu_layouts()) {
    SCOPED_TRACE(expected + " " + describe(cfg));
    ForestPredictor p(f, cfg);
    const auto m = predict(p, d, ForestOutput::Margin);
    const int w = p.output_width(ForestOutput::Margin);
    ASSERT_EQ(static_cast<std::size_t>(w), margin[0].size());
    index_t differ = 0;
    for (index_t i = 0; i < d.n_rows; ++i)
      for (int k = 0; k < w; ++k) differ += m[i * w + k] != static_cast<float>(margin[i][k]);
    EXPECT_EQ(differ, 0);
  }
}

// xgb_higgs as text, with the number `placeholder` (set by `change`) written as `literal`.
std::string xgb_with_literal(const std::function<void(json&)>& change, const std::string& literal) {
  std::string text = xgb_with(change);
  const std::string placeholder = "12345.5";
  const std::size_t at = text.find(placeholder);
  EXPECT_NE(at, std::string::npos);
  if (at != std::string::npos) text.replace(at, placeholder.size(), literal);
  return text;
}

TEST(ForestImport, NonFiniteLiterals) {
  // XGBoost itself wrote NaN, Infinity and -Infinity split conditions (make_leaf_data.py): an
  // inner node's NaN or -Infinity sends every present value right, +Infinity every finite value
  // left, exactly as XGBoost predicts.
  const std::string text = slurp(dir() + "xgb_nonfinite.json");
  for (const char* lit : {"NaN", "Infinity", "-Infinity"}) EXPECT_NE(text.find(lit), std::string::npos) << lit;
  const Forest f = Forest::load(dir() + "xgb_nonfinite.json");
  EXPECT_TRUE(std::isnan(f.trees()[0].value[0]));
  EXPECT_EQ(f.trees()[2].value[0], -std::numeric_limits<float>::infinity());
  expect_xgboost_margins(f, "xgb_nonfinite", rows("higgs_rows"));

  // A NaN leaf value would make every prediction through it NaN: an error naming tree and node.
  const json& t3 = xgb_higgs()["learner"]["gradient_booster"]["model"]["trees"][3];
  int leaf = 0;
  while (t3["left_children"][leaf] != -1) ++leaf;
  const std::string l = std::to_string(leaf);
  EXPECT_HAS(error_of(xgb_with_literal([&](json& j) { tree(j, 3)["split_conditions"][leaf] = 12345.5; }, "NaN")),
             "m.json: " + kTree3 + "split_conditions/" + l + ": tree 3, leaf node " + l + ": the leaf value is NaN");
  // An infinite leaf saturates the margin, as in XGBoost.
  const Forest inf = Forest::parse(
      xgb_with_literal([&](json& j) { tree(j, 3)["split_conditions"][leaf] = 12345.5; }, "-Infinity"), "m.json");
  EXPECT_EQ(inf.n_nodes(), model("xgb_higgs").n_nodes());
  EXPECT_HAS(error_of(xgb_with_literal([](json& j) { j["learner"]["learner_model_param"]["base_score"] = 12345.5; }, "NaN")),
             "learner/learner_model_param/base_score: the base score is not finite");
  EXPECT_HAS(error_of(xgb_with_literal([](json& j) { j["learner"]["learner_model_param"]["base_score"] = "[12345.5]"; },
                                       "Infinity")),
             "learner/learner_model_param/base_score: the base score is not finite");
  const int n = inner_node(t3);
  EXPECT_HAS(error_of(xgb_with_literal([&](json& j) { tree(j, 3)["default_left"][n] = 12345.5; }, "NaN")),
             kTree3 + "default_left/" + std::to_string(n) + ": expected 0, 1, false or true, found number NaN");
  EXPECT_HAS(error_of(xgb_with_literal([&](json& j) { tree(j, 3)["split_indices"][n] = 12345.5; }, "-Infinity")),
             kTree3 + "split_indices/" + std::to_string(n) + ": expected an integer, found number -Infinity");
  EXPECT_HAS(error_of(xgb_with_literal([](json& j) { j["learner"]["objective"]["name"] = 12345.5; }, "NaN")),
             "learner/objective/name: expected a string, found number NaN");
  // Inside strings the words stay strings; a string is no number.
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_conditions"][n] = "NaN"; })),
             kTree3 + "split_conditions/" + std::to_string(n) + ": expected a number, found string \"NaN\"");
  EXPECT_HAS(error_of(xgb_with([&](json& j) { tree(j, 3)["split_conditions"][n] = "-Infinity"; })),
             kTree3 + "split_conditions/" + std::to_string(n) + ": expected a number, found string \"-Infinity\"");
  // Strings holding the marker bytes are never taken for literals.
  for (const char* s : {"\x7f", "~", "~I"}) {
    const std::string with_str = xgb_with_literal(
        [&](json& j) {
          tree(j, 3)["split_conditions"][n] = s;
          j["learner"]["attributes"]["note"] = "\x7f~`^";
          tree(j, 4)["split_conditions"][inner_node(tree(j, 4))] = 12345.5;
        },
        "NaN");
    EXPECT_HAS(error_of(with_str), kTree3 + "split_conditions/" + std::to_string(n) + ": expected a number, found string");
  }
  // Syntax errors keep the file's line and column: the literals are replaced in place.
  const std::string bad = error_of(R"({"learner": [NaN, Infinity, -Infinity, NaNo, 1]})");
  const std::string same = error_of(R"({"learner": [111, 22222222, 333333333, NaNo, 1]})");
  EXPECT_HAS(bad, "line 1, column ");
  EXPECT_EQ(bad.substr(0, bad.find(';')), same.substr(0, same.find(';')));
}

TEST(ForestImport, Ubjson) {
  // XGBoost 1.7's save_model("m.ubj"): the same forest and the same margins as its JSON.
  for (const std::string name : {"xgb_lossguide", "xgb_lossguide_multi", "xgb_cat", "xgb_cat_multi"}) {
    SCOPED_TRACE(name);
    const std::string bytes = slurp(dir() + name + ".ubj");
    ASSERT_EQ(bytes.substr(0, 2), "{L");
    const Forest u = Forest::load(dir() + name + ".ubj");
    const Forest j = Forest::load(dir() + name + ".json");
    expect_same_forest(u, j);
    expect_xgboost_margins(u, name,
                           rows(name == "xgb_lossguide" ? "higgs_rows" : name == "xgb_lossguide_multi" ? "covtype_rows" : "cat_rows"));
  }
  // nlohmann's UBJSON of a JSON model (the other encoder's choices: typed arrays, small ints),
  // gzip-compressed, under a name without the extension: recognised by content.
  const std::vector<std::uint8_t> ub = json::to_ubjson(xgb_higgs(), /*use_size=*/true, /*use_type=*/true);
  const std::string gz = ::testing::TempDir() + "higgs_model.gz";
  gzFile f = gzopen(gz.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, ub.data(), static_cast<unsigned>(ub.size())), static_cast<int>(ub.size()));
  gzclose(f);
  expect_same_forest(Forest::load(gz), model("xgb_higgs"));
  // Malformed: the error names the file and the byte.
  const std::string bytes = slurp(dir() + "xgb_lossguide.ubj");
  const std::string cut = test::error_of([&] { Forest::parse(bytes.substr(0, bytes.size() / 2), "cut.ubj"); });
  EXPECT_HAS(cut, "cut.ubj: not valid UBJSON (parse error at byte ");
  const std::vector<std::uint8_t> other = json::to_ubjson(json{{"foo", 1}});
  EXPECT_HAS(error_of(std::string(other.begin(), other.end()), "o.ubj"), "o.ubj: (top level): neither an XGBoost model");
  // A container of nulls declared in 14 bytes with 2^28 entries: refused, not built.
  const std::string bomb = std::string("{i\x01" "a[$Z#l") + std::string("\x10\x00\x00\x00", 4) + "}";
  EXPECT_HAS(error_of(bomb, "b.ubj"), "b.ubj: not valid UBJSON (it declares more values than its 14 bytes can hold)");
  // Nesting that would recurse a million times: refused before.
  const std::string deep = "{i\x01" "a" + std::string(1000000, '[');
  EXPECT_HAS(error_of(deep, "d.ubj"), "d.ubj: not valid UBJSON (containers nested deeper than 256 levels)");
  std::string wrong_type = bytes;
  wrong_type[wrong_type.find("split_indices") + 13] = 'Z';  // the array's marker becomes null
  EXPECT_HAS(error_of(wrong_type, "w.ubj"), "w.ubj: ");
}

}  // namespace
}  // namespace canopy
