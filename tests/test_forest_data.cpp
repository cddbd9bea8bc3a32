// The forest CSV reader and the predictions writer: missing values, the label column, and a
// clear error (file, line, column) for every malformed file.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "test_errors.hpp"
#include "test_forest_util.hpp"

namespace canopy {
namespace {

using namespace forest_test;

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& path, const std::string& label = "") {
  return test::error_of([&] { read_forest_csv(path, label); });
}

TEST(ForestData, ReadsRowsMissingValuesAndLabel) {
  const std::string p = write_temp("ok.csv", "a,b,label,c\n1.5,,2,nan\n\"3\", NaN ,0,-inf\n\n4e-3,5,1,NAN\n");
  const ForestData d = read_forest_csv(p, "label");
  ASSERT_EQ(d.n_rows, 3);
  ASSERT_EQ(d.n_features, 3);
  EXPECT_EQ(d.feature_names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(d.label_name, "label");
  EXPECT_EQ(d.labels, (std::vector<double>{2, 0, 1}));
  EXPECT_EQ(d.row(0)[0], 1.5f);
  EXPECT_TRUE(std::isnan(d.row(0)[1]));
  EXPECT_TRUE(std::isnan(d.row(0)[2]));
  EXPECT_EQ(d.row(1)[0], 3.0f);
  EXPECT_TRUE(std::isnan(d.row(1)[1]));
  EXPECT_EQ(d.row(1)[2], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(d.row(2)[0], static_cast<float>(4e-3));  // float64 parse, then one rounding
  // The label by index; no label at all.
  EXPECT_EQ(read_forest_csv(p, "2").labels, d.labels);
  const ForestData all = read_forest_csv(p);
  EXPECT_EQ(all.n_features, 4);
  EXPECT_TRUE(all.labels.empty());
}

TEST(ForestData, TestRowsHaveTheirMissingValues) {
  // make_test_data.py wrote ~5% missing values, as empty fields and as "nan".
  const ForestData& d = rows("higgs_rows");
  EXPECT_EQ(d.n_rows, 1000);
  EXPECT_EQ(d.n_features, 28);
  index_t missing = 0;
  for (float v : d.values) missing += std::isnan(v);
  EXPECT_GT(missing, d.n_rows * d.n_features / 40);
  EXPECT_LT(missing, d.n_rows * d.n_features / 10);
  const ForestData& dense = rows("higgs_rows_dense");
  for (float v : dense.values) ASSERT_FALSE(std::isnan(v));
}

TEST(ForestData, GzipCompressed) {
  const std::string path = ::testing::TempDir() + "rows.csv.gz";
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string text = "x,y\n1,2\n3,\n";
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  const ForestData d = read_forest_csv(path);
  ASSERT_EQ(d.n_rows, 2);
  EXPECT_EQ(d.row(1)[0], 3.0f);
  EXPECT_TRUE(std::isnan(d.row(1)[1]));
}

TEST(ForestData, Errors) {
  EXPECT_HAS(error_of(::testing::TempDir() + "missing.csv"), "missing.csv: cannot open");
  EXPECT_HAS(error_of(write_temp("empty.csv", "")), "empty.csv: the file is empty");
  EXPECT_HAS(error_of(write_temp("header.csv", "a,b\n")), "header.csv: no data rows");
  EXPECT_HAS(error_of(write_temp("short.csv", "a,b,c\n1,2,3\n4,5\n")), "short.csv:3: expected 3 fields (as in the header), found 2");
  EXPECT_HAS(error_of(write_temp("long.csv", "a,b\n1,2,3\n")), "long.csv:2: expected 2 fields");
  EXPECT_HAS(error_of(write_temp("text.csv", "a,area,c\n1,2,3\n1,Rawah,3\n")),
             "text.csv:3: column 1 (area): 'Rawah' is not a number");
  EXPECT_HAS(error_of(write_temp("junk.csv", "a,b\n1,2x\n")), "junk.csv:2: column 1 (b): '2x' is not a number");
  EXPECT_HAS(error_of(write_temp("nolabel.csv", "a,label\n1,\n"), "label"),
             "nolabel.csv:2: the label (column 1, label) is missing");
  EXPECT_HAS(error_of(write_temp("lab.csv", "a,b\n1,2\n"), "target"), "lab.csv: there is no label column 'target' (the header has: a, b)");
  EXPECT_HAS(error_of(write_temp("lab2.csv", "a,b\n1,2\n"), "7"), "lab2.csv: label column 7 is out of range");
  EXPECT_HAS(error_of(write_temp("only.csv", "label\n1\n"), "label"), "only.csv: no feature columns");
}

TEST(ForestData, FeatureCountMustMatchTheModel) {
  const Forest& f = model("xgb_higgs");
  EXPECT_NO_THROW(check_forest_data(rows("higgs_rows"), "higgs_rows.csv", f));
  try {
    check_forest_data(rows("covtype_rows"), "covtype_rows.csv", f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "covtype_rows.csv: 12 feature columns (besides the label 'label'), but the model");
    EXPECT_HAS(e.what(), "xgb_higgs.json has 28 features");
  }
  // The same file read without naming its label: one column too many.
  const ForestData no_label = read_forest_csv(dir() + "higgs_rows.csv");
  try {
    check_forest_data(no_label, "higgs_rows.csv", f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "29 feature columns, but the model");
    EXPECT_HAS(e.what(), "--label");
  }
}

TEST(ForestData, PredictionsRoundTripFloat32) {
  std::vector<float> v = {0.1f, 1.0f / 3.0f, -2.5e-30f, 123456789.0f, 0.0f, std::nextafter(1.0f, 2.0f)};
  const std::string path = ::testing::TempDir() + "pred.txt";
  write_predictions(path, v.data(), 3, 2);
  const auto back = read_lines(path);
  ASSERT_EQ(back.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(back[i].size(), 2u);
    for (std::size_t k = 0; k < 2; ++k) EXPECT_EQ(static_cast<float>(back[i][k]), v[i * 2 + k]);
  }
}

}  // namespace
}  // namespace canopy
