// Forest predictions on the CPU executor against the training libraries' own predictions
// (saved by tests/data/forest/make_test_data.py), for every layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "executor/forest_eval.hpp"
#include "test_forest_util.hpp"

namespace canopy {
namespace {

using namespace forest_test;

// XGBoost: predict(output_margin=True) and predict(), relative 1e-5; class exactly.
TEST(ForestPredict, XgboostMatchesPython) {
  for (const ModelCase& c : xgboost_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    const auto margin = read_lines(dir() + expected_name(c) + ".margin.txt");
    const auto prob = read_lines(dir() + expected_name(c) + ".prob.txt");
    ASSERT_EQ(margin.size(), static_cast<std::size_t>(d.n_rows)) << c.name;
    for (const ForestConfig& cfg : cpu_layouts()) {
      SCOPED_TRACE(c.name + " " + describe(cfg));
      ForestPredictor p(f, cfg);
      const auto m = predict(p, d, ForestOutput::Margin);
      const auto pr = predict(p, d, ForestOutput::Prob);
      const int wm = p.output_width(ForestOutput::Margin), wp = p.output_width(ForestOutput::Prob);
      ASSERT_EQ(static_cast<std::size_t>(wm), margin[0].size());
      ASSERT_EQ(static_cast<std::size_t>(wp), prob[0].size());
      index_t bit_exact = 0, bad_m = 0, bad_p = 0;
      for (index_t i = 0; i < d.n_rows; ++i) {
        for (int k = 0; k < wm; ++k) {
          const float ours = m[i * wm + k];
          const float theirs = static_cast<float>(margin[i][k]);  // printed with %.9g: exact
          bit_exact += std::memcmp(&ours, &theirs, sizeof ours) == 0;
          if (!close(ours, theirs, 1e-5)) ++bad_m;
        }
        for (int k = 0; k < wp; ++k)
          if (!close(pr[i * wp + k], prob[i][k], 1e-5)) {
            if (bad_p++ < 5) ADD_FAILURE() << "row " << i << " prob[" << k << "] " << pr[i * wp + k] << " vs " << prob[i][k];
          }
      }
      EXPECT_EQ(bad_m, 0);
      EXPECT_EQ(bad_p, 0);
      // Stronger than the 1e-5 the issue asks: the float32 summation order of XGBoost is
      // reproduced, so every margin is bit-identical.
      EXPECT_EQ(bit_exact, d.n_rows * wm);
      if (c.klass) {
        const auto cls = read_lines(dir() + expected_name(c) + ".class.txt");
        const auto ours = predict(p, d, ForestOutput::Class);
        index_t wrong = 0;
        for (index_t i = 0; i < d.n_rows; ++i) wrong += ours[i] != cls[i][0];
        EXPECT_EQ(wrong, 0);
      } else {
        EXPECT_THROW(p.output_width(ForestOutput::Class), Error);
      }
    }
  }
}

// XGBoost 1.7's transforms in float32 with the platform's expf: what python3-xgboost computed
// the saved probabilities with (its Sigmoid and Softmax, src/common/math.h).
float xgboost_sigmoid(float m) { return 1.0f / (std::exp(std::min(-m, 88.7f)) + 1.0f + 1e-16f); }
std::vector<float> xgboost_softmax(const float* m, int k) {
  float top = m[0];
  for (int j = 1; j < k; ++j) top = std::fmax(m[j], top);
  std::vector<float> e(static_cast<std::size_t>(k));
  double sum = 0;
  for (int j = 0; j < k; ++j) sum += e[j] = std::exp(m[j] - top);
  for (float& v : e) v /= static_cast<float>(sum);
  return e;
}

// Probabilities bit for bit: python3-xgboost's own (read back exactly, %.9g) against Canopy's
// on every CPU layout. They may differ only where glibc's expf is misrounded (the one operation
// Canopy computes its own way): each difference must come with such an argument in its row, and
// the platform formula above must reproduce the file, so the test knows what XGBoost did.
TEST(ForestPredict, XgboostProbabilitiesAreXgboostsBits) {
  index_t compared = 0, explained = 0;
  for (const ModelCase& c : xgboost_cases()) {
    const Forest& f = model(c.name);
    if (f.objective() == ForestObjective::MultiSoftmax || f.objective() == ForestObjective::SquaredError) continue;
    const ForestData& d = rows(c.rows);
    const auto prob = read_lines(dir() + expected_name(c) + ".prob.txt");
    ForestPredictor p(f, forest_config(ForestLayout::Csr, Device::Cpu));
    const auto m = predict(p, d, ForestOutput::Margin);
    const auto pr = predict(p, d, ForestOutput::Prob);
    const int k = p.output_width(ForestOutput::Margin);
    for (index_t i = 0; i < d.n_rows; ++i) {
      const float* mi = m.data() + i * k;
      const std::vector<float> platform = k == 1 ? std::vector<float>{xgboost_sigmoid(mi[0])} : xgboost_softmax(mi, k);
      bool misrounded = false;  // an argument where glibc's expf and Canopy's differ
      float top = mi[0];
      for (int j = 1; j < k; ++j) top = std::fmax(mi[j], top);
      for (int j = 0; j < k; ++j) {
        const float x = k == 1 ? std::min(-mi[0], 88.7f) : mi[j] - top;
        misrounded |= std::exp(x) != static_cast<float>(forest_math::exp_rn(x));
      }
      for (int j = 0; j < k; ++j) {
        const float theirs = static_cast<float>(prob[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]);
        ASSERT_EQ(platform[static_cast<std::size_t>(j)], theirs) << c.name << " row " << i << ": the formula is not XGBoost's";
        const float ours = pr[static_cast<std::size_t>(i * k + j)];
        ++compared;
        if (ours == theirs) continue;
        EXPECT_TRUE(misrounded) << c.name << " row " << i << " [" << j << "]: " << ours << " vs " << theirs;
        ++explained;
      }
    }
  }
  std::printf("[ probs    ] %lld XGBoost probabilities, %lld differ (each where glibc's expf is misrounded)\n",
              static_cast<long long>(compared), static_cast<long long>(explained));
  EXPECT_GT(compared, 5000);
  EXPECT_LE(explained * 1000, compared);  // at most 0.1%
}

// scikit-learn: predict_proba / predict within 1e-6; class exactly.
// The proba output is predict_proba's shape: a binary XGBoost model's [1 - p, p], 1 - p
// rounded to float32 as XGBClassifier forms it from python3-xgboost's p (saved with %.9g:
// exact); every other classifier's is its prob output; regressors have none.
TEST(ForestPredict, ProbaIsPredictProbasColumns) {
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    for (const ForestConfig& cfg : cpu_layouts()) {
      SCOPED_TRACE(c.name + " " + describe(cfg));
      ForestPredictor p(f, cfg);
      if (!c.klass) {
        try {
          p.output_width(ForestOutput::Proba);
          ADD_FAILURE() << "a regressor has no proba output";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("proba output needs a classifier"), std::string::npos) << e.what();
        }
        continue;
      }
      const bool binary_xgb = f.objective() == ForestObjective::BinaryLogistic;
      const int w = p.output_width(ForestOutput::Proba), wp = p.output_width(ForestOutput::Prob);
      EXPECT_EQ(w, binary_xgb ? 2 : wp);
      const auto proba = predict(p, d, ForestOutput::Proba);
      if (!binary_xgb) {
        EXPECT_EQ(proba, predict(p, d, ForestOutput::Prob));
        continue;
      }
      const auto want = read_lines(dir() + expected_name(c) + ".prob.txt");
      index_t differ = 0;
      for (index_t i = 0; i < d.n_rows; ++i) {
        const float q = static_cast<float>(want[i][0]);
        const float one_minus = 1.0f - q;
        differ += std::memcmp(&proba[i * 2], &one_minus, sizeof(float)) != 0;
        differ += std::memcmp(&proba[i * 2 + 1], &q, sizeof(float)) != 0;
      }
      // (XgboostProbabilitiesAreXgboostsBits: one row's p of these files is glibc's misrounded
      // expf; allow it and its 1 - p)
      EXPECT_LE(differ, 2);
    }
  }
}

TEST(ForestPredict, SklearnMatchesPython) {
  for (const ModelCase& c : sklearn_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    const auto prob = read_lines(dir() + c.name + ".prob.txt");
    ASSERT_EQ(prob.size(), static_cast<std::size_t>(d.n_rows)) << c.name;
    for (const ForestConfig& cfg : cpu_layouts()) {
      SCOPED_TRACE(c.name + " " + describe(cfg));
      ForestPredictor p(f, cfg);
      const auto pr = predict(p, d, ForestOutput::Prob);
      const int w = p.output_width(ForestOutput::Prob);
      ASSERT_EQ(static_cast<std::size_t>(w), prob[0].size());
      index_t bad = 0, bit_exact = 0;
      for (index_t i = 0; i < d.n_rows; ++i)
        for (int k = 0; k < w; ++k) {
          if (!close(pr[i * w + k], prob[i][k], 1e-6)) {
            if (bad++ < 5) ADD_FAILURE() << "row " << i << " [" << k << "] " << pr[i * w + k] << " vs " << prob[i][k];
          }
          bit_exact += pr[i * w + k] == static_cast<float>(prob[i][k]);  // %.17g: the exact float64
        }
      EXPECT_EQ(bad, 0);
      // Stronger: scikit-learn's float64 additions are reproduced step by step, so every value
      // is scikit-learn's, rounded once to float32.
      EXPECT_EQ(bit_exact, d.n_rows * w);
      // A forest has no margin: the margin output is the probability.
      EXPECT_EQ(predict(p, d, ForestOutput::Margin), pr);
      if (c.klass) {
        const auto cls = read_lines(dir() + c.name + ".class.txt");
        const auto ours = predict(p, d, ForestOutput::Class);
        index_t wrong = 0;
        for (index_t i = 0; i < d.n_rows; ++i) wrong += ours[i] != cls[i][0];
        EXPECT_EQ(wrong, 0);
      }
    }
  }
}

// Every layout sums the trees in the same order: identical bits for every output.
TEST(ForestPredict, LayoutsAgreeBitForBit) {
  auto cases = xgboost_cases();
  for (const ModelCase& c : sklearn_cases()) cases.push_back(c);
  for (const ModelCase& c : cases) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    std::vector<ForestOutput> outs{ForestOutput::Margin, ForestOutput::Prob};
    if (c.klass) outs.push_back(ForestOutput::Class);
    std::vector<std::vector<float>> reference;
    for (const ForestConfig& cfg : cpu_layouts()) {
      SCOPED_TRACE(c.name + " " + describe(cfg));
      ForestPredictor p(f, cfg);
      for (std::size_t o = 0; o < outs.size(); ++o) {
        const auto r = predict(p, d, outs[o]);
        if (reference.size() <= o) reference.push_back(r);
        else EXPECT_EQ(std::memcmp(r.data(), reference[o].data(), r.size() * sizeof(float)), 0) << to_string(outs[o]);
      }
    }
  }
}

// The CPU executor's row blocks depend on the batch size: the results must not.
TEST(ForestPredict, BatchSizeDoesNotChangeResults) {
  for (const char* name : {"xgb_covtype", "rf_letter"}) {
    SCOPED_TRACE(name);
    const ModelCase c = [&] {
      for (const ModelCase& m : xgboost_cases())
        if (m.name == name) return m;
      for (const ModelCase& m : sklearn_cases())
        if (m.name == name) return m;
      return ModelCase{};
    }();
    const ForestData& d = rows(c.rows);
    ForestConfig cfg = forest_config(ForestLayout::Hierarchical, Device::Cpu);
    ForestPredictor p(model(name), cfg);
    const int w = p.output_width(ForestOutput::Prob);
    const std::vector<float> whole = predict(p, d, ForestOutput::Prob);
    std::vector<float> one(static_cast<std::size_t>(w));
    for (index_t i = 0; i < d.n_rows; i += 7) {
      p.predict(d.row(i), 1, one.data());
      ASSERT_EQ(std::memcmp(one.data(), &whole[static_cast<std::size_t>(i * w)], w * sizeof(float)), 0) << "row " << i;
    }
    const index_t n = 20011;  // many blocks, a short last one
    std::vector<float> big(static_cast<std::size_t>(n * d.n_features)), out(static_cast<std::size_t>(n * w));
    for (index_t i = 0; i < n; ++i)
      std::memcpy(&big[static_cast<std::size_t>(i * d.n_features)], d.row(i % d.n_rows), d.n_features * sizeof(float));
    p.predict(big.data(), n, out.data());
    for (index_t i = 0; i < n; ++i)
      ASSERT_EQ(std::memcmp(&out[static_cast<std::size_t>(i * w)], &whole[static_cast<std::size_t>((i % d.n_rows) * w)],
                            w * sizeof(float)),
                0)
          << "row " << i;
  }
}

// A forest file written by hand to pin down the documented semantics of the Canopy format:
// left iff x <= threshold (float64), a missing value to default_left or else to the child
// with more training samples (a tie goes right).
Forest one_split(const std::string& extra, double threshold) {
  char t[64];
  std::snprintf(t, sizeof t, "%.17g", threshold);
  const std::string json = std::string(R"({"format":"canopy-forest","version":1,"task":"regression","num_features":2,
    "trees":[{"left_children":[1,-1,-1],"right_children":[2,-1,-1],"features":[1,-2,-2],"thresholds":[)") +
                           t + R"(,-2,-2],"values":[[],[10.0],[20.0]])" + extra + "}]}";
  return Forest::parse(json, "one_split.json");
}

float run_one(const Forest& f, float x) {
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  ForestPredictor p(f, cfg);
  const float row[2] = {0.0f, x};
  float out = 0;
  p.predict(row, 1, &out);
  return out;
}

TEST(ForestPredict, CanopyFormatThresholdIsLessOrEqualInDouble) {
  const Forest half = one_split(R"(,"node_samples":[3,2,1])", 0.5);
  EXPECT_EQ(run_one(half, 0.5f), 10.0f);  // 0.5 <= 0.5: left
  EXPECT_EQ(run_one(half, std::nextafter(0.5f, 1.0f)), 20.0f);
  // 0.1 (float64) lies between two float32 values: float32(0.1) > 0.1 goes right.
  const Forest tenth = one_split(R"(,"node_samples":[3,2,1])", 0.1);
  EXPECT_EQ(run_one(tenth, 0.1f), 20.0f);
  EXPECT_EQ(run_one(tenth, std::nextafter(0.1f, 0.0f)), 10.0f);
  EXPECT_EQ(above_float(0.1), 0.1f);
  EXPECT_EQ(above_float(0.5), std::nextafter(0.5f, 1.0f));
}

TEST(ForestPredict, CanopyFormatMissingValues) {
  const float nan = std::nanf("");
  EXPECT_EQ(run_one(one_split(R"(,"node_samples":[3,2,1])", 0.5), nan), 10.0f);  // more samples left
  EXPECT_EQ(run_one(one_split(R"(,"node_samples":[3,1,2])", 0.5), nan), 20.0f);  // more samples right
  EXPECT_EQ(run_one(one_split(R"(,"node_samples":[4,2,2])", 0.5), nan), 20.0f);  // a tie goes right
  EXPECT_EQ(run_one(one_split(R"(,"default_left":[1,0,0],"node_samples":[3,1,2])", 0.5), nan), 10.0f);
  EXPECT_EQ(run_one(one_split(R"(,"default_left":[0,0,0],"node_samples":[3,2,1])", 0.5), nan), 20.0f);
}

// XGBoost: left iff x < split_condition; NaN follows default_left.
TEST(ForestPredict, XgboostSplitSemantics) {
  auto model_with = [](int default_left) {
    const std::string json = R"({"learner":{"objective":{"name":"reg:squarederror"},
      "learner_model_param":{"base_score":"0E0","num_class":"0","num_feature":"1"},
      "gradient_booster":{"name":"gbtree","model":{"tree_info":[0],"trees":[{
        "tree_param":{"num_nodes":"3","size_leaf_vector":"0"},
        "left_children":[1,-1,-1],"right_children":[2,-1,-1],"split_indices":[0,0,0],
        "split_conditions":[0.5,1.0,2.0],"default_left":[)" + std::to_string(default_left) +
                             R"(,0,0],"split_type":[0,0,0]}]}}}})";
    return Forest::parse(json, "tiny.json");
  };
  auto run = [](const Forest& f, float x) {
    ForestConfig cfg;
    cfg.device = Device::Cpu;
    ForestPredictor p(f, cfg);
    float out = 0;
    p.predict(&x, 1, &out);
    return out;
  };
  const Forest left = model_with(1), right = model_with(0);
  EXPECT_EQ(run(left, 0.25f), 1.0f);
  EXPECT_EQ(run(left, 0.5f), 2.0f);  // not < 0.5
  EXPECT_EQ(run(left, std::nanf("")), 1.0f);
  EXPECT_EQ(run(right, std::nanf("")), 2.0f);
  EXPECT_EQ(run(left, -INFINITY), 1.0f);
  EXPECT_EQ(run(left, INFINITY), 2.0f);
}

TEST(ForestPredict, EmptyBatchAndBadArguments) {
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  ForestPredictor p(model("xgb_higgs"), cfg);
  EXPECT_NO_THROW(p.predict(nullptr, 0, nullptr));
  EXPECT_THROW(p.predict(nullptr, 5, nullptr), Error);
  float row[28] = {}, out = 0;
  EXPECT_THROW(p.predict(row, -1, &out), Error);
}

// ---- the leaf output (XGBoost's pred_leaf) -----------------------------------------------------

// Every CPU layout, the adaptive one with and without its rearrangements too.
std::vector<ForestConfig> leaf_layouts() {
  std::vector<ForestConfig> out = cpu_layouts();
  ForestConfig a = forest_config(ForestLayout::Adaptive, Device::Cpu);
  out.push_back(a);
  a.adaptive.node_rearrangement = false;
  a.adaptive.tree_rearrangement = false;
  out.push_back(a);
  return out;
}

// predict(pred_leaf=True) of python3-xgboost 1.7 (make_leaf_data.py), rows with missing values:
// depth-wise models, loss-guided ones (node ids not breadth-first), multi-class (columns in
// the model's tree order: round by round), a model read from UBJSON, and one with NaN and
// infinite split conditions.
TEST(ForestPredict, LeafMatchesXgboost) {
  struct Case {
    std::string model, file, rows;
  };
  const std::vector<Case> cases = {{"xgb_higgs", "xgb_higgs.json", "higgs_rows"},
                                   {"xgb_covtype", "xgb_covtype.json", "covtype_rows"},
                                   {"xgb_lossguide", "xgb_lossguide.json", "higgs_rows"},
                                   {"xgb_lossguide", "xgb_lossguide.ubj", "higgs_rows"},
                                   {"xgb_lossguide_multi", "xgb_lossguide_multi.ubj", "covtype_rows"},
                                   {"xgb_nonfinite", "xgb_nonfinite.json", "higgs_rows"},
                                   {"xgb_cat", "xgb_cat.json", "cat_rows"},
                                   {"xgb_cat_multi", "xgb_cat_multi.ubj", "cat_rows"}};
  for (const Case& c : cases) {
    const Forest f = Forest::load(dir() + c.file);
    const ForestData& d = rows(c.rows);
    const auto expected = read_lines(dir() + c.model + ".leaf.txt");
    ASSERT_EQ(expected.size(), static_cast<std::size_t>(d.n_rows)) << c.model;
    ASSERT_EQ(expected[0].size(), static_cast<std::size_t>(f.n_trees())) << c.model;
    index_t missing = 0;
    for (float x : d.values) missing += x != x;
    EXPECT_GT(missing, 0);
    for (const ForestConfig& cfg : leaf_layouts()) {
      SCOPED_TRACE(c.file + " " + describe(cfg) + (cfg.layout == ForestLayout::Adaptive && !cfg.adaptive.node_rearrangement ? " (no rearrangement)" : ""));
      ForestPredictor p(f, cfg);
      ASSERT_EQ(p.output_width(ForestOutput::Leaf), f.n_trees());
      const auto leaf = predict(p, d, ForestOutput::Leaf);
      const int w = static_cast<int>(f.n_trees());
      index_t wrong = 0;
      for (index_t i = 0; i < d.n_rows; ++i)
        for (int t = 0; t < w; ++t)
          if (leaf[i * w + t] != static_cast<float>(expected[i][t]) && wrong++ < 5)
            ADD_FAILURE() << "row " << i << " tree " << t << ": leaf " << leaf[i * w + t] << ", XGBoost " << expected[i][t];
      EXPECT_EQ(wrong, 0);
    }
  }
  // The loss-guided trees do renumber: without the source ids the test above would fail.
  index_t renumbered = 0;
  const Forest lossguide = Forest::load(dir() + "xgb_lossguide.json");
  for (const ForestTree& t : lossguide.trees())
    for (index_t n = 0; n < t.size(); ++n) renumbered += t.source_id[static_cast<std::size_t>(n)] != n;
  EXPECT_GT(renumbered, 0);
}

// Canopy forests: the id of the leaf in the file's arrays (there a leaf: left_children -1), and
// the leaf whose values the prob output adds; every CPU layout agrees.
TEST(ForestPredict, LeafOfCanopyForests) {
  const Forest& f = model("rf_covtype");
  const ForestData& d = rows("covtype_rows_dense");
  ForestPredictor csr(f, forest_config(ForestLayout::Csr, Device::Cpu));
  const auto ref = predict(csr, d, ForestOutput::Leaf);
  const int w = static_cast<int>(f.n_trees());
  // By hand on the model: walk each tree and check the source id of the leaf reached.
  for (index_t i = 0; i < d.n_rows; i += 37)
    for (int t = 0; t < w; ++t) {
      const ForestTree& tr = f.trees()[static_cast<std::size_t>(t)];
      index_t n = 0;
      while (!tr.is_leaf(n)) {
        const float x = d.row(i)[tr.feature[static_cast<std::size_t>(n)]];
        const bool left = x != x ? tr.default_left[static_cast<std::size_t>(n)] != 0 : x < tr.value[static_cast<std::size_t>(n)];
        n = left ? tr.left[static_cast<std::size_t>(n)] : tr.right[static_cast<std::size_t>(n)];
      }
      ASSERT_EQ(ref[i * w + t], static_cast<float>(tr.source_id[static_cast<std::size_t>(n)])) << "row " << i << " tree " << t;
    }
  for (const ForestConfig& cfg : leaf_layouts()) {
    SCOPED_TRACE(describe(cfg));
    ForestPredictor p(f, cfg);
    EXPECT_EQ(predict(p, d, ForestOutput::Leaf), ref);
  }
}

TEST(ForestPredict, LeafOutputShapes) {
  const Forest& f = model("xgb_covtype");
  EXPECT_EQ(f.output_width(ForestOutput::Leaf), 42);
  EXPECT_STREQ(to_string(ForestOutput::Leaf), "leaf");
  ForestPredictor p(f, forest_config(ForestLayout::Hierarchical, Device::Cpu));
  const ForestData& d = rows("covtype_rows");
  // Batches of every size give the same rows (blocks of the CPU executor).
  const auto all = predict(p, d, ForestOutput::Leaf);
  for (index_t n : {index_t{1}, index_t{17}, index_t{999}}) {
    std::vector<float> out(static_cast<std::size_t>(n) * 42);
    ForestRunOptions opt;
    opt.output = ForestOutput::Leaf;
    p.predict(d.values.data() + (d.n_rows - n) * d.n_features, n, opt, out.data());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), all.end() - n * 42)) << n;
  }
  ForestRunOptions opt;
  opt.output = ForestOutput::Leaf;
  EXPECT_NO_THROW(p.predict(d.values.data(), 0, opt, nullptr));
}

}  // namespace
}  // namespace canopy
