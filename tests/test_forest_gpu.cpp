// The GPU kernels against the CPU executor (skipped without a CUDA device).
// Every kernel (direct, hybrid, shared data) adds the trees' leaves in layout order with the
// CPU executor's own sums, so every output must have the CPU's bits exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "executor/forest_eval.hpp"
#include "require_gpu.hpp"
#include "core/device.hpp"
#include "test_forest_util.hpp"

namespace canopy {
namespace {

using namespace forest_test;

std::vector<ForestConfig> gpu_layouts() {
  std::vector<ForestConfig> out = cpu_layouts();  // csr, reorg, hier default, hier (1,1), hier (3,4)
  ForestConfig big = out[2];
  big.hierarchical.subtree_depth = 8;
  big.hierarchical.root_depth = kMaxRootDepth;  // one 32 KiB root subtree per chunk when the forest is deep
  out.push_back(big);
  for (ForestConfig& c : out) c.device = Device::Gpu;
  return out;
}

std::vector<ForestOutput> outputs(const ModelCase& c) {
  std::vector<ForestOutput> o{ForestOutput::Margin, ForestOutput::Prob};
  if (c.klass) o.push_back(ForestOutput::Class);
  return o;
}

ForestData first_rows(const ForestData& d, index_t n) {
  ForestData t = d;
  t.values.assign(d.values.begin(), d.values.begin() + n * d.n_features);
  t.n_rows = n;
  return t;
}

// The kernels a layout offers.
std::vector<ForestKernel> kernels_of(const ForestConfig& cfg) {
  std::vector<ForestKernel> k{ForestKernel::Direct, ForestKernel::SharedData};
  if (cfg.layout == ForestLayout::Hierarchical) k.push_back(ForestKernel::Hybrid);
  return k;
}

TEST(ForestGpu, EveryKernelIsBitIdenticalToTheCpu) {
  CANOPY_REQUIRE_GPU();
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    for (ForestOutput out : outputs(c)) {
      const std::vector<float> ref = cpu_predict(f, d, out);
      for (const ForestConfig& cfg : gpu_layouts()) {
        ForestPredictor p(f, cfg);
        ASSERT_EQ(p.device(), Device::Gpu);
        for (ForestKernel k : kernels_of(cfg)) {
          SCOPED_TRACE(c.name + " " + describe(cfg) + " " + to_string(k) + " " + to_string(out));
          const std::vector<float> got = predict(p, d, out, k);
          ASSERT_EQ(got.size(), ref.size());
          EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST(ForestGpu, DirectMatchesPython) {
  CANOPY_REQUIRE_GPU();
  for (const ModelCase& c : xgboost_cases()) {
    SCOPED_TRACE(c.name);
    ForestConfig cfg;
    cfg.device = Device::Gpu;
    ForestPredictor p(model(c.name), cfg);
    const auto m = predict(p, rows(c.rows), ForestOutput::Margin);
    const auto expected = read_lines(dir() + expected_name(c) + ".margin.txt");
    const int w = p.output_width(ForestOutput::Margin);
    for (std::size_t i = 0; i < expected.size(); ++i)
      for (int k = 0; k < w; ++k) ASSERT_EQ(m[i * w + k], static_cast<float>(expected[i][k])) << "row " << i;
  }
}

TEST(ForestGpu, BatchShapes) {
  CANOPY_REQUIRE_GPU();
  // Tails, a single row, one block, many blocks (rows repeated past the file's 1000).
  for (const char* name : {"xgb_covtype", "rf_higgs_reg", "rf_letter"}) {
    ModelCase c;
    for (const ModelCase& m : all_cases())
      if (m.name == name) c = m;
    const ForestData& d = rows(c.rows);
    for (index_t n : {index_t{1}, index_t{37}, index_t{129}, index_t{1000}, index_t{20011}}) {
      const ForestData batch = n <= d.n_rows ? first_rows(d, n) : tiled(d, n);
      for (const ForestConfig& cfg : gpu_layouts()) {
        if (cfg.hierarchical.subtree_depth == 1) continue;  // covered elsewhere; keeps this test quick
        ForestPredictor p(model(c.name), cfg);
        const std::vector<float> ref = cpu_predict(model(c.name), batch, ForestOutput::Prob);
        for (ForestKernel k : kernels_of(cfg)) {
          SCOPED_TRACE(c.name + " n=" + std::to_string(n) + " " + describe(cfg) + " " + to_string(k));
          const auto got = predict(p, batch, ForestOutput::Prob, k);
          EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)), 0);
        }
      }
    }
  }
}

TEST(ForestGpu, EmptyBatchAndErrors) {
  CANOPY_REQUIRE_GPU();
  ForestConfig cfg;
  cfg.device = Device::Gpu;
  ForestPredictor csr(model("xgb_higgs"), cfg);
  EXPECT_NO_THROW(csr.predict(nullptr, 0, nullptr));
  EXPECT_FALSE(csr.supports(ForestKernel::Hybrid));
  std::vector<float> out(1000);
  ForestRunOptions opt;
  opt.kernel = ForestKernel::Hybrid;
  try {
    csr.predict(rows("higgs_rows").values.data(), 10, out.data(), opt);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the hierarchical layout"), std::string::npos) << e.what();
  }
  // A predictor keeps working after an error, and between batches of different sizes.
  const ForestData& d = rows("higgs_rows");
  EXPECT_EQ(predict(csr, first_rows(d, 10), ForestOutput::Prob),
            cpu_predict(model("xgb_higgs"), first_rows(d, 10), ForestOutput::Prob));
  EXPECT_EQ(predict(csr, d, ForestOutput::Prob), cpu_predict(model("xgb_higgs"), d, ForestOutput::Prob));
}

TEST(ForestGpu, CpuDeviceWhenRequested) {
  // Runs everywhere: Device::Cpu never touches CUDA, Device::Gpu without one is an Error.
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  EXPECT_EQ(ForestPredictor(model("xgb_higgs"), cfg).device(), Device::Cpu);
  if (!gpu_available()) {
    cfg.device = Device::Gpu;
    EXPECT_THROW(ForestPredictor(model("xgb_higgs"), cfg), Error);
  }
}

}  // namespace
}  // namespace canopy
