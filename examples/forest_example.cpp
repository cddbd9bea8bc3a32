// Forest inference: load an XGBoost model (JSON), predict the probabilities of rows read from a
// CSV on the GPU when there is one (the CPU otherwise), and check them against XGBoost's own.
//   forest_example MODEL.json ROWS.csv EXPECTED_PROBABILITIES.txt
#include <cmath>
#include <cstdio>
#include <fstream>
#include <vector>

#include "io/forest_data.hpp"
#include "runtime/forest_predictor.hpp"

int main(int argc, char** argv) {
  if (argc != 4) return std::printf("usage: forest_example MODEL.json ROWS.csv EXPECTED.txt\n"), 2;
  const canopy::Forest forest = canopy::Forest::load(argv[1]);      // XGBoost or Canopy JSON
  const canopy::ForestData rows = canopy::read_forest_csv(argv[2], "label");
  canopy::ForestPredictor predictor(forest);  // CSR layout by default; uploads the forest once
  canopy::ForestRunOptions run;
  run.output = canopy::ForestOutput::Prob;
  const int width = predictor.output_width(run.output);
  std::vector<float> out(static_cast<std::size_t>(rows.n_rows) * width);
  const canopy::ForestTimes t = predictor.predict(rows.values.data(), rows.n_rows, run, out.data());

  std::ifstream expected(argv[3]);
  for (std::size_t i = 0; i < out.size(); ++i) {
    double theirs = 0;
    expected >> theirs;
    if (!(std::fabs(out[i] - theirs) <= 1e-5 * std::fabs(theirs) + 1e-7)) {
      std::printf("value %zu: %.9g, XGBoost %.9g\n", i, out[i], theirs);
      return 1;
    }
  }
  std::printf("forest on the %s: %lld rows, row 0's probability %.6f; kernel %.3f ms; ok\n",
              canopy::to_string(predictor.device()), static_cast<long long>(rows.n_rows), out[0], t.kernel_ms);
  return 0;
}
