// Rows for forest inference: CSV files with a header, plain or gzip-compressed. Every column
// but the label is a numeric feature, in the model's feature order; an empty field or
// "nan" (any case) is a missing value (NaN), which follows each node's default direction.
// CUDA-free.
#pragma once

#include <string>
#include <vector>

#include "layouts/forest.hpp"
#include "core/types.hpp"

namespace canopy {

struct ForestData {
  std::vector<float> values;  // row-major [n_rows][n_features]; NaN = missing
  int n_features = 0;
  index_t n_rows = 0;
  std::vector<std::string> feature_names;
  std::string label_name;      // empty when there is no label column
  std::vector<double> labels;  // [n_rows] when there is one
  const float* row(index_t i) const { return values.data() + i * n_features; }
};

// label: the label column's name, or its 0-based index; "" = no label column. Fields are
// parsed as float64 and rounded to float32 (as numpy's float64 -> float32 conversion does).
// Errors (canopy::Error) name the file, the line and the column: a missing file, no header,
// no rows, a short or long row, a field that is not a number, a missing label, an unknown
// label column.
ForestData read_forest_csv(const std::string& path, const std::string& label = "");

// The data must have exactly the model's number of features.
void check_forest_data(const ForestData& data, const std::string& data_path, const Forest& forest);

// One line per row, `width` values separated by commas, each with 9 significant digits
// (enough for a float32 to round-trip; the leaf output's node ids print as integers).
void write_predictions(const std::string& path, const float* out, index_t n_rows, int width);

}  // namespace canopy
