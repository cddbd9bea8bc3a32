// The default forest call (ForestConfig{}, ForestRunOptions{}): the fastest layout and strategy,
// the bits of csr direct, float64 results, and Auto's choices tuned online and kept on disk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/warnings.hpp"
#include "runtime/detail/forest_choices.hpp"
#include "scheduler/forest_model.hpp"
#include "tests/require_gpu.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_forest_util.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

using namespace forest_test;

// A fresh directory under the test's temporary folder.
std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "canopy_" + name + "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Collects the warnings Canopy gives while it lives.
class WarningLog {
 public:
  WarningLog() {
    previous_ = set_warning_handler([this](const std::string& m) { messages.push_back(m); });
  }
  ~WarningLog() { set_warning_handler(previous_); }
  std::vector<std::string> messages;

 private:
  WarningHandler previous_;
};

std::vector<double> predict_f64(ForestPredictor& p, const float* rows, index_t n, ForestOutput out,
                                const ForestRunOptions& base = {}) {
  ForestRunOptions opt = base;
  opt.output = out;
  std::vector<double> res(static_cast<std::size_t>(n * p.output_width(out)));
  p.predict_f64(rows, n, opt, res.data());
  return res;
}

std::vector<ForestOutput> outputs_of(const Forest& f) {
  std::vector<ForestOutput> out{ForestOutput::Margin, ForestOutput::Prob, ForestOutput::Leaf};
  if (f.is_classifier()) {
    out.push_back(ForestOutput::Class);
    out.push_back(ForestOutput::Proba);
  }
  return out;
}

// ---- the CPU -------------------------------------------------------------------------------------

TEST(ForestDefault, CpuRunsTheHierarchicalLayoutWithCsrBits) {
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    ForestConfig cfg;
    cfg.device = Device::Cpu;
    ForestPredictor p(f, cfg);
    EXPECT_EQ(p.layout(), ForestLayout::Hierarchical) << c.name;
    for (ForestOutput out : outputs_of(f)) {
      SCOPED_TRACE(c.name + " " + to_string(out));
      std::vector<float> got(static_cast<std::size_t>(d.n_rows * p.output_width(out)));
      ForestRunOptions opt;
      opt.output = out;
      const ForestTimes t = p.predict(d.values.data(), d.n_rows, opt, got.data());
      EXPECT_EQ(t.layout, ForestLayout::Hierarchical);
      EXPECT_EQ(t.tuning, ForestTuning::Fixed);
      std::string where;
      EXPECT_TRUE(same_bits(got, cpu_predict(f, d, out), &where)) << where;
    }
  }
}

// scikit-learn's predict_proba / predict are float64: the double output gives them bit for bit
// (saved with %.17g); an XGBoost model's double output is its float32 output, widened.
TEST(ForestDefault, Float64OutputIsScikitLearnsBits) {
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData& d = rows(c.rows);
    for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Hierarchical, ForestLayout::Adaptive}) {
      SCOPED_TRACE(c.name + " " + to_string(l));
      ForestPredictor p(f, forest_config(l, Device::Cpu));
      const std::vector<double> prob = predict_f64(p, d.values.data(), d.n_rows, ForestOutput::Prob);
      if (!c.margin) {
        const auto expected = read_lines(dir() + c.name + ".prob.txt");
        const int w = p.output_width(ForestOutput::Prob);
        index_t differ = 0;
        for (index_t i = 0; i < d.n_rows; ++i)
          for (int k = 0; k < w; ++k) differ += prob[static_cast<std::size_t>(i * w + k)] != expected[i][k];
        EXPECT_EQ(differ, 0);
      }
      for (ForestOutput out : {ForestOutput::Margin, ForestOutput::Prob}) {
        const std::vector<float> narrow = cpu_predict(f, d, out);
        const std::vector<double> wide = out == ForestOutput::Prob ? prob : predict_f64(p, d.values.data(), d.n_rows, out);
        ASSERT_EQ(narrow.size(), wide.size());
        index_t differ = 0;
        for (std::size_t i = 0; i < wide.size(); ++i) differ += static_cast<float>(wide[i]) != narrow[i];
        EXPECT_EQ(differ, 0) << to_string(out) << ": the double output rounds to the float output";
        if (c.margin) {
          for (std::size_t i = 0; i < wide.size(); ++i) ASSERT_EQ(wide[i], static_cast<double>(narrow[i]));
        }
      }
      std::vector<double> leaf(static_cast<std::size_t>(d.n_rows * f.n_trees()));
      ForestRunOptions opt;
      opt.output = ForestOutput::Leaf;
      EXPECT_THROW(p.predict_f64(d.values.data(), d.n_rows, opt, leaf.data()), Error);
    }
  }
}

// The choices file: this GPU's entries round-trip, other GPUs' are kept, a corrupt file or
// entry is a warning and no entries, never an exception.
TEST(ForestChoices, FileRoundTripsKeepsOtherGpusAndWarnsOnCorruptFiles) {
  const std::string dir = fresh_dir("choices");
  const std::uint64_t model = detail::forest_fingerprint(forest_test::model("xgb_higgs"), AdaptiveConfig{});
  EXPECT_NE(model, detail::forest_fingerprint(forest_test::model("xgb_covtype"), AdaptiveConfig{}));
  AdaptiveConfig no_rearrangement;
  no_rearrangement.tree_rearrangement = false;
  EXPECT_NE(model, detail::forest_fingerprint(forest_test::model("xgb_higgs"), no_rearrangement));
  const detail::ForestChoiceFile a(dir, model, "uuid-a", "GPU A"), b(dir, model, "uuid-b", "GPU B");
  EXPECT_TRUE(a.load().empty());
  detail::ForestChoiceMap ca, cb;
  ca[{13, 0}] = {ForestKernel::SharedData, {}};
  ca[{13, 0}].knobs.block_threads = 128;
  ca[{13, 0}].knobs.tree_interleave = 4;
  ca[{20, 2}] = {ForestKernel::Direct, {}};
  cb[{6, 0}] = {ForestKernel::SharedForest, {}};
  a.save(ca);
  b.save(cb);
  const detail::ForestChoiceMap ra = a.load(), rb = b.load();
  ASSERT_EQ(ra.size(), 2u);
  const std::pair<int, int> k13{13, 0}, k20{20, 2}, k6{6, 0};
  EXPECT_EQ(ra.at(k13).kernel, ForestKernel::SharedData);
  EXPECT_TRUE(ra.at(k13).knobs == ca[k13].knobs);
  EXPECT_EQ(ra.at(k20).kernel, ForestKernel::Direct);
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb.at(k6).kernel, ForestKernel::SharedForest);
  // A second predictor's save adds to the first's: its classes replace only their own.
  detail::ForestChoiceMap more;
  more[k20] = {ForestKernel::SharedForest, {}};
  more[{9, 0}] = {ForestKernel::SharedData, {}};
  a.save(more);
  const detail::ForestChoiceMap merged = a.load();
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged.at(k13).kernel, ForestKernel::SharedData);
  EXPECT_EQ(merged.at(k20).kernel, ForestKernel::SharedForest);
  EXPECT_EQ(b.load().size(), 1u);
  // Another model has a file of its own; "none" keeps nothing.
  EXPECT_TRUE(detail::ForestChoiceFile(dir, model + 1, "uuid-a", "GPU A").load().empty());
  const detail::ForestChoiceFile none("none", model, "uuid-a", "GPU A");
  EXPECT_EQ(none.path(), "");
  none.save(ca);
  EXPECT_TRUE(none.load().empty());
  // Corrupt files and entries: warnings, never an exception or a wrong entry.
  for (const std::string& text : {std::string("{not json"), std::string(""), std::string("[1, 2]"),
                                  std::string("{\"format\": \"something else\", \"entries\": []}")}) {
    { std::ofstream(a.path(), std::ios::trunc) << text; }
    WarningLog log;
    EXPECT_TRUE(a.load().empty()) << text;
    ASSERT_EQ(log.messages.size(), 1u) << text;
    EXPECT_NE(log.messages[0].find(a.path()), std::string::npos) << log.messages[0];
  }
  {
    std::ofstream(a.path(), std::ios::trunc)
        << "{\"format\": \"canopy-forest-choices\", \"version\": " << detail::kForestChoicesVersion
        << ", \"model\": \"" << a.path().substr(a.path().size() - 21, 16) << "\", \"entries\": ["
        << "{\"gpu\": \"uuid-a\", \"size_class\": 3, \"row_depth\": 0, \"kernel\": \"warp-drive\", \"schedule\": {}},"
        << "{\"gpu\": \"uuid-a\", \"size_class\": 4, \"row_depth\": 0, \"kernel\": \"hybrid\", \"schedule\": {}},"
        << "{\"gpu\": \"uuid-a\", \"size_class\": 5, \"row_depth\": 0, \"kernel\": \"direct\", \"schedule\": {\"block_threads\": \"x\"}},"
        << "{\"gpu\": \"uuid-a\", \"size_class\": 7, \"row_depth\": 0, \"kernel\": \"direct\", \"schedule\": {\"block_threads\": 64}}]}";
  }
  WarningLog log;
  const detail::ForestChoiceMap partial = a.load();
  EXPECT_EQ(log.messages.size(), 3u);
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_EQ(partial.at(std::pair<int, int>(7, 0)).knobs.block_threads, 64);
  // Another version: stale, ignored without a warning.
  {
    std::ofstream(a.path(), std::ios::trunc) << "{\"format\": \"canopy-forest-choices\", \"version\": 0, \"entries\": []}";
  }
  WarningLog quiet;
  EXPECT_TRUE(a.load().empty());
  EXPECT_TRUE(quiet.messages.empty());
  std::filesystem::remove_all(dir);
}

// ---- the GPU -------------------------------------------------------------------------------------

// The default predictor on the GPU is the adaptive layout under Auto, with csr direct's bits
// for every model and output, float32 and float64, rows and results on the host or the device.
TEST(ForestDefaultGpu, AdaptiveAutoWithCsrBits) {
  CANOPY_REQUIRE_GPU();
  const std::string cache = fresh_dir("default_gpu");
  for (const ModelCase& c : all_cases()) {
    const Forest& f = model(c.name);
    const ForestData d = tiled(rows(c.rows), test::under_tool() ? 1500 : 5000);
    ForestConfig cfg;
    cfg.cache_dir = cache;
    ForestPredictor p(f, cfg);
    ASSERT_EQ(p.device(), Device::Gpu);
    EXPECT_EQ(p.layout(), ForestLayout::Adaptive);
    ForestPredictor cpu(f, forest_config(ForestLayout::Csr, Device::Cpu));
    const std::size_t bytes = d.values.size() * sizeof(float);
    float* d_rows = static_cast<float*>(test::device_alloc(bytes));
    copy_memory(d_rows, d.values.data(), bytes);
    for (ForestOutput out : outputs_of(f)) {
      SCOPED_TRACE(c.name + " " + to_string(out));
      ForestRunOptions opt;
      opt.output = out;
      const std::vector<float> ref = cpu_predict(f, d, out);
      std::string where;
      // Enough calls to see the prior, trials and (for small classes) the tuned choice.
      for (int call = 0; call < (test::under_tool() ? 3 : 40); ++call) {
        std::vector<float> got(ref.size());
        const ForestTimes t = p.predict(call % 2 ? d_rows : d.values.data(), d.n_rows, opt, got.data());
        EXPECT_EQ(t.layout, ForestLayout::Adaptive);
        ASSERT_TRUE(same_bits(got, ref, &where)) << "call " << call << " (" << to_string(t.kernel) << ", "
                                                 << to_string(t.tuning) << "): " << where;
      }
      if (out == ForestOutput::Leaf) continue;
      const std::vector<double> wide = predict_f64(p, d.values.data(), d.n_rows, out);
      const std::vector<double> cpu_wide = predict_f64(cpu, d.values.data(), d.n_rows, out);
      EXPECT_TRUE(same_bits(wide, cpu_wide, &where)) << "float64: " << where;
    }
    test::device_free(d_rows);
  }
  std::filesystem::remove_all(cache);
}

// Auto on a never-seen class runs its prior at once, times other schedules on the calls' own
// batches until the class settles, and keeps the choice: a second predictor (a new process, as
// far as the cache can tell) starts tuned; a corrupt file is a warning and a fresh start. Every
// call's bits are csr direct's.
TEST(ForestDefaultGpu, AutoTunesOnlineAndTheNextPredictorStartsTuned) {
  CANOPY_REQUIRE_GPU();
  const std::string cache = fresh_dir("online");
  const Forest& f = model("xgb_covtype");
  const index_t n = test::under_tool() ? 700 : 3000;
  const ForestData d = tiled(rows("covtype_rows"), n);
  const std::vector<float> ref = cpu_predict(f, d, ForestOutput::Prob);
  ForestConfig cfg;
  cfg.cache_dir = cache;
  auto run = [&](ForestPredictor& p, const ForestRunOptions& opt) {
    std::vector<float> got(ref.size());
    const ForestTimes t = p.predict(d.values.data(), n, opt, got.data());
    std::string where;
    EXPECT_TRUE(same_bits(got, ref, &where)) << to_string(t.kernel) << " " << t.schedule.describe() << ": " << where;
    return t;
  };
  ForestTimes last;
  {
    ForestPredictor p(f, cfg);
    const ForestTimes first = run(p, {});
    EXPECT_EQ(first.tuning, ForestTuning::Prior);
    EXPECT_EQ(first.tuning_ms, 0.0);
    int calls = 1, refining = 0;
    for (; calls < 3000; ++calls) {
      last = run(p, {});
      if (last.tuning == ForestTuning::Refining) {
        ++refining;
        EXPECT_GT(last.tuning_ms, 0.0);
      }
      if (last.tuning == ForestTuning::Tuned) break;
    }
    EXPECT_EQ(last.tuning, ForestTuning::Tuned) << "not settled after " << calls << " calls";
    EXPECT_GT(refining, 4);
    std::printf("[ auto     ] settled after %d calls (%d with a trial): %s, %s\n", calls, refining, to_string(last.kernel),
                last.schedule.describe().c_str());
    for (int call = 0; call < 5; ++call) {
      const ForestTimes t = run(p, {});
      EXPECT_EQ(t.tuning, ForestTuning::Tuned);
      EXPECT_EQ(t.kernel, last.kernel);
      EXPECT_TRUE(t.schedule == last.schedule);
      EXPECT_EQ(t.tuning_ms, 0.0);
    }
    // Online tuning off: an untuned class keeps its prior, no trial.
    ForestRunOptions off;
    off.online_tuning = false;
    std::vector<float> got(static_cast<std::size_t>(40 * p.output_width(ForestOutput::Prob)));
    for (int call = 0; call < 3; ++call)
      EXPECT_EQ(p.predict(d.values.data(), 40, off, got.data()).tuning, ForestTuning::Prior);
    // Knobs the caller sets are kept: Auto then chooses the strategy only.
    ForestRunOptions fixed;
    fixed.schedule.block_threads = 64;
    for (int call = 0; call < 30; ++call) EXPECT_EQ(run(p, fixed).schedule.block_threads, 64);
  }
  {
    ForestPredictor again(f, cfg);  // the choice kept in the cache directory
    const ForestTimes t = run(again, {});
    EXPECT_EQ(t.tuning, ForestTuning::Tuned);
    EXPECT_EQ(t.kernel, last.kernel);
    EXPECT_TRUE(t.schedule == last.schedule);
  }
  {
    // A corrupt file: a warning naming it, the prior, and the right bits.
    std::filesystem::path file;
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache))
      if (e.path().extension() == ".json") file = e.path();
    ASSERT_FALSE(file.empty());
    { std::ofstream(file, std::ios::trunc) << "{\"format\": \"canopy-forest-choices\", \"entries\": [tru"; }
    WarningLog log;
    ForestPredictor corrupt(f, cfg);
    EXPECT_EQ(run(corrupt, {}).tuning, ForestTuning::Prior);
    ASSERT_EQ(log.messages.size(), 1u);
    EXPECT_NE(log.messages[0].find(file.string()), std::string::npos) << log.messages[0];
  }
  std::filesystem::remove_all(cache);
}

// optimize() tunes classes ahead of the calls: they then run tuned from their first call.
TEST(ForestDefaultGpu, OptimizeTunesAheadOfTheCalls) {
  CANOPY_REQUIRE_GPU();
  const std::string cache = fresh_dir("optimize");
  const Forest& f = model("xgb_higgs");
  const ForestData d = rows("higgs_rows");
  ForestConfig cfg;
  cfg.cache_dir = cache;
  ForestPredictor p(f, cfg);
  const std::vector<index_t> sizes{1, 100, test::under_tool() ? 1500 : 5000};
  const std::vector<ForestTuned> tuned = p.optimize(d.values.data(), d.n_rows, sizes);
  ASSERT_EQ(tuned.size(), sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(tuned[i].batch_size, sizes[i]);
    EXPECT_GT(tuned[i].trials, 0);
    EXPECT_GT(tuned[i].kernel_ms, 0.0);
    const ForestData batch = tiled(d, sizes[i]);
    std::vector<float> got(static_cast<std::size_t>(sizes[i] * p.output_width(ForestOutput::Prob)));
    const ForestTimes t = p.predict(batch.values.data(), sizes[i], got.data());
    EXPECT_EQ(t.tuning, ForestTuning::Tuned);
    EXPECT_EQ(t.kernel, tuned[i].kernel);
    EXPECT_TRUE(t.schedule == tuned[i].schedule);
    std::string where;
    EXPECT_TRUE(same_bits(got, cpu_predict(f, batch, ForestOutput::Prob), &where)) << where;
  }
  // Tuned already: looked up, no trial.
  EXPECT_EQ(p.optimize(d.values.data(), d.n_rows, {100}).at(0).trials, 0);
  // A named kernel or the CPU: nothing to tune.
  ForestRunOptions direct;
  direct.kernel = ForestKernel::Direct;
  EXPECT_TRUE(p.optimize(d.values.data(), d.n_rows, {100}, direct).empty());
  ForestPredictor cpu(f, forest_config(ForestLayout::Auto, Device::Cpu));
  EXPECT_TRUE(cpu.optimize(d.values.data(), d.n_rows, {100}).empty());
  EXPECT_THROW(p.optimize(d.values.data(), d.n_rows, {0}), Error);
  std::filesystem::remove_all(cache);
}

// What Auto's tuning is for: its tuned choice runs about as fast as the fastest strategy run
// at its defaults on the same batch (the strategies differ many times over at small batches,
// so a wrong pick or a tuner that never leaves its prior misses the bound), with the CPU's
// bits. The times are medians of calls interleaved round by round, so a clock that drifts
// touches every variant alike.
TEST(ForestDefaultGpu, TunedChoiceIsAboutAsFastAsTheFastestStrategy) {
  CANOPY_REQUIRE_GPU();
  const std::string cache = fresh_dir("tuned_speed");
  const Forest& f = model("xgb_covtype");
  ForestConfig cfg;
  cfg.cache_dir = cache;
  ForestPredictor p(f, cfg);
  ASSERT_EQ(p.layout(), ForestLayout::Adaptive);
  for (index_t n : {index_t{100}, index_t{test::under_tool() ? 1500 : 20000}}) {
    SCOPED_TRACE(std::to_string(n) + " rows");
    const ForestData d = tiled(rows("covtype_rows"), n);
    const std::vector<float> ref = cpu_predict(f, d, ForestOutput::Prob);
    const std::vector<ForestTuned> tuned = p.optimize(d.values.data(), n, {n});
    ASSERT_EQ(tuned.size(), 1u);
    // Auto first, then every strategy at its defaults that this forest can take.
    std::vector<ForestRunOptions> variants(1);
    for (ForestKernel k : kForestModelStrategies) {
      ForestRunOptions fixed;
      fixed.kernel = k;
      std::vector<float> got(ref.size());
      try {
        p.predict(d.values.data(), n, fixed, got.data());
      } catch (const Error&) {
        continue;  // e.g. the forest does not fit shared memory
      }
      variants.push_back(fixed);
    }
    ASSERT_GE(variants.size(), 3u);
    const int rounds = test::under_tool() ? 2 : 15;
    std::vector<std::vector<double>> ms(variants.size());
    for (int r = 0; r < rounds; ++r)
      for (std::size_t v = 0; v < variants.size(); ++v) {
        std::vector<float> got(ref.size());
        const ForestTimes t = p.predict(d.values.data(), n, variants[v], got.data());
        ms[v].push_back(t.kernel_ms);
        if (v == 0) {
          EXPECT_EQ(t.tuning, ForestTuning::Tuned);
          EXPECT_EQ(t.kernel, tuned[0].kernel);
          EXPECT_TRUE(p.supports(t.kernel)) << to_string(t.kernel);
          std::string where;
          ASSERT_TRUE(same_bits(got, ref, &where)) << to_string(t.kernel) << ": " << where;
        }
      }
    std::vector<double> median;
    for (std::vector<double>& m : ms) {
      std::sort(m.begin(), m.end());
      median.push_back(m[m.size() / 2]);
    }
    const double fastest = *std::min_element(median.begin() + 1, median.end());
    std::printf("[ auto     ] %lld rows: tuned %s (%s) %.4f ms; at defaults:", static_cast<long long>(n),
                to_string(tuned[0].kernel), tuned[0].schedule.describe().c_str(), median[0]);
    for (std::size_t v = 1; v < variants.size(); ++v) std::printf(" %s %.4f ms", to_string(variants[v].kernel), median[v]);
    std::printf("\n");
    if (test::under_tool()) continue;  // a sanitizer's times say nothing about the kernels'
    // 1.3x and 5 us: room for the noise the tuner's trials saw. An H200 (2026-11-28): tuned
    // 0.0101 / 0.0230 ms, the fastest default 0.0108 / 0.0283, the others 0.037 to 0.077.
    EXPECT_LE(median[0], 1.3 * fastest + 0.005);
  }
  std::filesystem::remove_all(cache);
}

}  // namespace
}  // namespace canopy
