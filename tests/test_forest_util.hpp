// Shared by the forest tests: the test models of tests/data/forest, the predictions python
// saved next to them, and running a predictor over a whole data file.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "layouts/forest.hpp"
#include "runtime/forest_predictor.hpp"
#include "io/forest_data.hpp"

namespace canopy {
namespace forest_test {

inline std::string dir() { return std::string(CANOPY_TEST_DATA) + "/forest/"; }

// One line per row, comma-separated numbers (the format of the expected-prediction files and
// of canopy-bench --predictions).
inline std::vector<std::vector<double>> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  std::vector<std::vector<double>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<double> r;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, ',')) r.push_back(std::strtod(field.c_str(), nullptr));
    rows.push_back(r);
  }
  return rows;
}

struct ModelCase {
  std::string name;  // <name>.json, <name>.{margin,prob,class}.txt
  std::string rows;  // <rows>.csv
  bool margin;       // python saved margins (XGBoost)
  bool klass;        // a classifier
};

// Models trained by python3-xgboost 1.7 on the real data sets, rows with missing values (the
// ones with margins), then scikit-learn forests (scikit-learn 1.2 refuses NaN: rows without
// missing values).
inline std::vector<ModelCase> all_cases() {
  return {{"xgb_covtype", "covtype_rows", true, true},          {"xgb_letter", "letter_rows", true, true},
          {"xgb_higgs", "higgs_rows", true, true},              {"xgb_higgs_v2", "higgs_rows", true, true},
          {"xgb_higgs_reg", "higgs_rows", true, false},         {"rf_covtype", "covtype_rows_dense", false, true},
          {"rf_letter", "letter_rows_dense", false, true},      {"et_higgs", "higgs_rows_dense", false, true},
          {"rf_higgs_reg", "higgs_rows_dense", false, false},   {"et_letter_reg", "letter_rows_dense", false, false},
          // Categorical splits (tests/data/forest/make_categorical_data.py), rows with categories
          // never seen in training, negative and fractional ones and missing values.
          {"xgb_cat", "cat_rows", true, true},                  {"xgb_cat_multi", "cat_rows", true, true}};
}
inline std::vector<ModelCase> cases_where(bool margin) {
  std::vector<ModelCase> out;
  for (const ModelCase& c : all_cases())
    if (c.margin == margin) out.push_back(c);
  return out;
}
inline std::vector<ModelCase> xgboost_cases() { return cases_where(true); }
inline std::vector<ModelCase> sklearn_cases() { return cases_where(false); }

// xgb_higgs_v2 shares xgb_higgs's expectations (it is the same model in the 2.x fields).
inline std::string expected_name(const ModelCase& c) { return c.name == "xgb_higgs_v2" ? "xgb_higgs" : c.name; }

inline const Forest& model(const std::string& name) {
  static std::vector<std::pair<std::string, Forest>> cache;
  for (const auto& e : cache)
    if (e.first == name) return e.second;
  cache.emplace_back(name, Forest::load(dir() + name + ".json"));
  return cache.back().second;
}

inline const ForestData& rows(const std::string& name) {
  static std::vector<std::pair<std::string, ForestData>> cache;
  for (const auto& e : cache)
    if (e.first == name) return e.second;
  cache.emplace_back(name, read_forest_csv(dir() + name + ".csv", "label"));
  return cache.back().second;
}

// Bit for bit, the first difference in *where.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b, std::string* where) {
  if (a.size() != b.size()) {
    *where = "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      *where = "value " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
      return false;
    }
  return true;
}

// A layout on a device, every other option at its default.
inline ForestConfig forest_config(ForestLayout layout, Device device) {
  ForestConfig c;
  c.layout = layout;
  c.device = device;
  return c;
}

inline std::vector<float> predict(ForestPredictor& p, const ForestData& d, ForestOutput out,
                                  ForestKernel kernel = ForestKernel::Direct) {
  std::vector<float> res(static_cast<std::size_t>(d.n_rows * p.output_width(out)));
  ForestRunOptions opt;
  opt.output = out;
  opt.kernel = kernel;
  p.predict(d.values.data(), d.n_rows, opt, res.data());
  return res;
}

// The plain CPU executor on the CSR layout: the reference every other executor is held to.
inline std::vector<float> cpu_predict(const Forest& f, const ForestData& d, ForestOutput out) {
  ForestPredictor p(f, forest_config(ForestLayout::Csr, Device::Cpu));
  return predict(p, d, out);
}

// Rows repeated up to n (batches larger than the file, several blocks of every kernel).
inline ForestData tiled(const ForestData& d, index_t n) {
  ForestData t = d;
  t.values.clear();
  t.labels.clear();
  for (index_t i = 0; i < n; ++i) {
    const float* r = d.row(i % d.n_rows);
    t.values.insert(t.values.end(), r, r + d.n_features);
  }
  t.n_rows = n;
  return t;
}

// |a - b| <= rel * max(|a|, |b|) (and an absolute floor for values that underflow float32).
inline bool close(double a, double b, double rel, double abs_floor = 1e-30) {
  const double d = std::fabs(a - b);
  return d <= rel * std::max(std::fabs(a), std::fabs(b)) || d <= abs_floor;
}

inline std::vector<ForestConfig> cpu_layouts() {
  std::vector<ForestConfig> out;
  for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Reorg, ForestLayout::Hierarchical})
    out.push_back(forest_config(l, Device::Cpu));
  // Hierarchical corner cases: one-node subtrees, a one-node root, the default.
  ForestConfig h = out.back();
  h.hierarchical.subtree_depth = 1;
  h.hierarchical.root_depth = 1;
  out.push_back(h);
  h.hierarchical.subtree_depth = 3;
  h.hierarchical.root_depth = 4;
  out.push_back(h);
  return out;
}

inline std::string describe(const ForestConfig& c) {
  std::string s = to_string(c.layout);
  if (c.layout == ForestLayout::Hierarchical)
    s += "(SD " + std::to_string(c.hierarchical.subtree_depth) + ", RSD " + std::to_string(c.hierarchical.root_depth) + ")";
  return s;
}

}  // namespace forest_test
}  // namespace canopy
