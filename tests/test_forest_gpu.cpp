// The GPU kernels against the CPU executor (skipped without a CUDA device).
// Every kernel (direct, hybrid, shared data) adds the trees' leaves in layout order with the
// CPU executor's own sums, so every output must have the CPU's bits exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "executor/forest_eval.hpp"
#include "tests/require_gpu.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_forest_util.hpp"
#include "tests/test_util.hpp"

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
  ForestPredictor csr(model("xgb_higgs"), forest_config(ForestLayout::Csr, Device::Gpu));
  EXPECT_NO_THROW(csr.predict(nullptr, 0, nullptr));
  EXPECT_FALSE(csr.supports(ForestKernel::Hybrid));
  std::vector<float> out(1000);
  ForestRunOptions opt;
  opt.kernel = ForestKernel::Hybrid;
  try {
    csr.predict(rows("higgs_rows").values.data(), 10, opt, out.data());
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

// ---- the stream contract --------------------------------------------------------------------------

// One GPU call of each kind a layout offers: every kernel it supports and, on the adaptive
// layout, row scheduling too.
struct GpuCall {
  std::string name;
  ForestRunOptions opt;
};

std::vector<GpuCall> calls_of(const ForestPredictor& p) {
  std::vector<GpuCall> out;
  for (ForestKernel k : {ForestKernel::Direct, ForestKernel::Hybrid, ForestKernel::SharedData, ForestKernel::SharedForest,
                         ForestKernel::SplitSharedForest, ForestKernel::Auto}) {
    if (!p.supports(k)) continue;
    GpuCall c;
    c.name = to_string(k);
    c.opt.kernel = k;
    c.opt.hardware_cache = ::testing::TempDir() + "canopy_forest_hw_test.json";
    out.push_back(c);
    if (p.layout() == ForestLayout::Adaptive && k != ForestKernel::Auto) {
      c.name += ", rows scheduled";
      c.opt.row_schedule_depth = 2;
      out.push_back(c);
    }
  }
  return out;
}

// Every layout on the GPU, each with every call it offers, on xgb_higgs (its forest fits in
// shared memory whole, so the shared-forest strategy runs too).
void for_every_gpu_call(const std::function<void(ForestPredictor&, const GpuCall&)>& f) {
  for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Reorg, ForestLayout::Hierarchical, ForestLayout::Adaptive}) {
    ForestConfig cfg = forest_config(l, Device::Gpu);
    ForestPredictor p(model("xgb_higgs"), cfg);
    for (const GpuCall& c : calls_of(p)) {
      SCOPED_TRACE(std::string(to_string(l)) + " " + c.name);
      f(p, c);
    }
  }
}

std::vector<float> predict_rows(ForestPredictor& p, const float* rows, index_t n, const ForestRunOptions& opt) {
  std::vector<float> out(static_cast<std::size_t>(n * p.output_width(opt.output)));
  p.predict(rows, n, opt, out.data());
  return out;
}

TEST(ForestGpu, NoWorkRunsOnTheLegacyDefaultStream) {
  CANOPY_REQUIRE_GPU();
  // The probe itself: work on the legacy stream waits for the spinning kernel.
  EXPECT_FALSE(test::finishes_beside_a_blocking_stream(test::legacy_stream_work, 2.0));
  const ForestData& d = rows("higgs_rows");
  for_every_gpu_call([&](ForestPredictor& p, const GpuCall& c) {
    const std::vector<float> reference = predict_rows(p, d.values.data(), d.n_rows, c.opt);  // warm: every buffer exists
    std::vector<float> got;
    EXPECT_TRUE(test::finishes_beside_a_blocking_stream([&] { got = predict_rows(p, d.values.data(), d.n_rows, c.opt); },
                                                        20.0));
    EXPECT_EQ(got, reference);
  });
}

TEST(ForestGpu, ASecondIdenticalCallAllocatesAndFreesNothing) {
  CANOPY_REQUIRE_GPU();
  const ForestData& d = rows("higgs_rows");
  for_every_gpu_call([&](ForestPredictor& p, const GpuCall& c) {
    predict_rows(p, d.values.data(), d.n_rows, c.opt);
    // Auto tries other schedules (scratch buffers) until the batch's size class settles.
    std::vector<float> out(static_cast<std::size_t>(d.n_rows * p.output_width(c.opt.output)));
    for (int call = 0; call < 3000; ++call) {
      const ForestTuning t = p.predict(d.values.data(), d.n_rows, c.opt, out.data()).tuning;
      if (t != ForestTuning::Refining && t != ForestTuning::Prior) break;
    }
    test::expect_allocates_nothing([&] { predict_rows(p, d.values.data(), d.n_rows, c.opt); });
  });
}

// A repeated call replays a CUDA graph of its launch: it must read the rows the buffer holds at
// that call (not those of the call that was captured), and any change of kernel, size or
// buffer must launch afresh. Rows and predictions in device memory, as a serving loop keeps them.
TEST(ForestGpu, RepeatedCallsReplayAGraphThatReadsTheCurrentRows) {
  CANOPY_REQUIRE_GPU();
  const ForestData& d = rows("higgs_rows");
  const Forest& f = model("xgb_higgs");
  const index_t n = std::min<index_t>(d.n_rows, 300);
  ForestData fwd = first_rows(d, n), rev = fwd;  // the second batch: the rows in reverse
  for (index_t i = 0; i < n; ++i)
    std::copy(fwd.row(n - 1 - i), fwd.row(n - 1 - i) + d.n_features, rev.values.begin() + i * d.n_features);
  const std::vector<float> want_fwd = cpu_predict(f, fwd, ForestOutput::Margin);
  const std::vector<float> want_rev = cpu_predict(f, rev, ForestOutput::Margin);
  const std::size_t bytes = fwd.values.size() * sizeof(float);
  float* d_rows = static_cast<float*>(test::device_alloc(bytes));
  float* d_out = static_cast<float*>(test::device_alloc(want_fwd.size() * sizeof(float)));
  float* d_out2 = static_cast<float*>(test::device_alloc(want_fwd.size() * sizeof(float)));
  for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Adaptive}) {
    for (ForestKernel k : {ForestKernel::Direct, ForestKernel::SharedData, ForestKernel::SharedForest, ForestKernel::Auto}) {
      for (bool graph : {true, false}) {
        ForestPredictor p(f, forest_config(l, Device::Gpu));  // (no graphs of an earlier case)
        if (!p.supports(k)) continue;
        SCOPED_TRACE(std::string(to_string(l)) + " " + to_string(k) + (graph ? ", graphs on" : ", graphs off"));
        ForestRunOptions opt;
        opt.kernel = k;
        opt.output = ForestOutput::Margin;
        opt.graph = graph;
        opt.online_tuning = false;  // Auto keeps its prior (a class being tuned launches directly)
        opt.hardware_cache = ::testing::TempDir() + "canopy_forest_hw_test.json";
        const bool replays = graph && k != ForestKernel::SharedForest;
        auto call = [&](const ForestData& batch, index_t rows_n, float* out, bool want_graph) {
          copy_memory(d_rows, batch.values.data(), bytes);
          const ForestTimes t = p.predict(d_rows, rows_n, opt, out);
          EXPECT_EQ(t.graph, want_graph);
          std::vector<float> got(static_cast<std::size_t>(rows_n) * f.output_width(ForestOutput::Margin));
          copy_memory(got.data(), out, got.size() * sizeof(float));
          return got;
        };
        auto prefix = [&](const std::vector<float>& v, index_t rows_n) {
          return std::vector<float>(v.begin(), v.begin() + rows_n * f.output_width(ForestOutput::Margin));
        };
        copy_memory(d_rows, fwd.values.data(), bytes);
        p.predict(d_rows, n, opt, d_out);  // auto settles its choice; later calls launch the same
        EXPECT_EQ(call(fwd, n, d_out, false), want_fwd);    // the key's 2nd and 3rd calls: launched
        EXPECT_EQ(call(rev, n, d_out, false), want_rev);
        EXPECT_EQ(call(fwd, n, d_out, replays), want_fwd);  // the 4th: captured
        EXPECT_EQ(call(rev, n, d_out, replays), want_rev);  // replayed: the rows now in the buffer
        EXPECT_EQ(call(fwd, n - 1, d_out, false), prefix(want_fwd, n - 1));  // another size: launched
        EXPECT_EQ(call(rev, n, d_out2, false), want_rev);                    // another buffer: launched
        EXPECT_EQ(call(rev, n, d_out, replays), want_rev);                   // the first key's graph again
        // Sizes that each come back only after more than 32 other keys are never captured,
        // and push the first key (and its graph) out.
        for (int round = 0; round < 5; ++round)
          for (index_t m = 2; m < 42; ++m) EXPECT_EQ(call(fwd, n - m, d_out, false), prefix(want_fwd, n - m));
        EXPECT_EQ(call(fwd, n, d_out, false), want_fwd);
      }
    }
  }
  test::device_free(d_rows);
  test::device_free(d_out);
  test::device_free(d_out2);
}

TEST(ForestGpu, TheCallersStreamIsHonoured) {
  CANOPY_REQUIRE_GPU();
  // Two batches in pinned memory; the caller's stream writes one or the other into the device
  // rows just before each call, after a spin, so a call that did not wait for it would read
  // the other batch.
  const ForestData& d = rows("higgs_rows");
  const index_t n = test::under_tool() ? 200 : d.n_rows;  // every layout and call still, fewer rows
  const std::size_t values = static_cast<std::size_t>(n * d.n_features), bytes = values * sizeof(float);
  PinnedBuffer<float> batch[2];
  for (int b = 0; b < 2; ++b) {
    batch[b].reserve(values);
    for (index_t i = 0; i < n; ++i)  // the second batch: the rows in reverse
      std::copy(d.row(b == 0 ? i : n - 1 - i), d.row(b == 0 ? i : n - 1 - i) + d.n_features,
                batch[b].get() + i * d.n_features);
  }
  void* s = test::make_stream();
  float* d_rows = static_cast<float*>(test::device_alloc(bytes));
  const std::size_t out_bytes = static_cast<std::size_t>(n * model("xgb_higgs").output_width(ForestOutput::Prob)) * sizeof(float);
  float* d_out = static_cast<float*>(test::device_alloc(out_bytes));
  for_every_gpu_call([&](ForestPredictor& p, const GpuCall& c) {
    const std::vector<float> want[2] = {predict_rows(p, batch[0].get(), n, c.opt), predict_rows(p, batch[1].get(), n, c.opt)};
    copy_memory(d_rows, batch[1].get(), bytes);
    ForestRunOptions opt = c.opt;
    opt.stream = static_cast<stream_t>(s);
    for (int i = 0; i < 6; ++i) {
      const int b = i % 2;
      const bool out_on_device = i >= 3;
      test::copy_after_delay(d_rows, batch[b].get(), bytes, 2.0, s);
      std::vector<float> got(want[b].size());
      p.predict(d_rows, n, opt, out_on_device ? d_out : got.data());
      ASSERT_EQ(got.size() * sizeof(float), out_bytes);
      if (out_on_device) copy_memory(got.data(), d_out, out_bytes, opt.stream);
      EXPECT_EQ(got, want[b]) << "call " << i;
    }
    if (p.layout() == ForestLayout::Adaptive && c.opt.kernel == ForestKernel::Direct && c.opt.row_schedule_depth == 0) {
      test::copy_after_delay(d_rows, batch[0].get(), bytes, 2.0, s);
      EXPECT_EQ(p.schedule_rows(d_rows, n, 2, opt.stream), p.schedule_rows(batch[0].get(), n, 2));
    }
  });
  test::sync_stream(s);
  test::device_free(d_out);
  test::device_free(d_rows);
  test::destroy_stream(s);
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

// The leaf output is the CPU executor's alone: a GPU predictor of every layout refuses it
// clearly, before any GPU work, and keeps working.
// The leaf output (XGBoost's pred_leaf) on the GPU: every layout gives the CPU's node ids, the
// CPU's being XGBoost's own (test_forest_predict.cpp). Categorical and multi-class models,
// random forests, several blocks and a ragged last one; auto resolves to the leaf kernel.
TEST(ForestGpu, LeafOutputEqualsTheCpus) {
  CANOPY_REQUIRE_GPU();
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData d = tiled(rows(c.rows), 1001);
    const std::vector<float> want = cpu_predict(f, d, ForestOutput::Leaf);
    for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Reorg, ForestLayout::Hierarchical, ForestLayout::Adaptive}) {
      ForestPredictor p(f, forest_config(l, Device::Gpu));
      ForestRunOptions opt;
      opt.output = ForestOutput::Leaf;
      if (l == ForestLayout::Adaptive) opt.kernel = ForestKernel::Auto;
      std::vector<float> got(static_cast<std::size_t>(d.n_rows * p.output_width(ForestOutput::Leaf)));
      p.predict(d.values.data(), d.n_rows, opt, got.data());
      EXPECT_EQ(got, want) << c.name << " " << to_string(l);
    }
  }
}

}  // namespace
}  // namespace canopy
