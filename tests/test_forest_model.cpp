// Tahoe's performance model: equations 1-7 against hand-computed values, the strategy choice,
// the on-disk cache of the hardware parameters, and (with a GPU) their measurement.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "require_gpu.hpp"
#include "core/device.hpp"
#include "scheduler/forest_model.hpp"
#include "scheduler/forest_model_gpu.hpp"
#include "test_errors.hpp"

namespace canopy {
namespace {

namespace fs = std::filesystem;

// Round numbers, so the expected values below can be worked out by hand.
ForestHardware toy_hardware() {
  ForestHardware hw;
  hw.device_name = "Toy GPU";
  hw.device_uuid = "00112233445566778899aabbccddeeff";
  hw.sm_count = 4;
  hw.smem_read_gbs = 1000;
  hw.smem_write_gbs = 500;
  hw.gmem_coalesced_gbs = 200;
  hw.gmem_uncoalesced_gbs = 10;
  hw.block_reduce_ns_per_thread = 0.5;
  hw.global_reduce_ns_per_block = 100;
  hw.gmem_cached_random_gbs = 100;
  hw.gmem_latency_ns = 300;
  hw.smem_latency_ns = 20;
  hw.launch_ns = 2000;
  return hw;
}

// 10 trees of 31 nodes of 8 bytes (2480 bytes), 5 nodes visited per tree, 10 features.
ForestCostInputs toy_inputs() {
  ForestCostInputs in;
  in.n_batch = 100;
  in.sample_bytes = 40;
  in.n_trees = 10;
  in.avg_depth = 5;
  in.node_bytes = 8;
  in.attr_bytes = 4;
  in.nodes_per_tree = 31;
  in.forest_bytes = 2480;
  in.smem_bytes = 48 * 1024;
  in.threads_per_block = 128;
  in.blocks = 4;
  in.parts = 1;
  return in;
}

const ForestCostEstimate& find(const std::vector<ForestCostEstimate>& est, ForestKernel s) {
  for (const ForestCostEstimate& e : est)
    if (e.strategy == s) return e;
  ADD_FAILURE() << "no estimate for " << to_string(s);
  return est.front();
}

void expect_terms(const ForestCostEstimate& e, double smem, double gmem, double bred, double gred) {
  SCOPED_TRACE(to_string(e.strategy));
  const double tol = 1e-12;
  EXPECT_NEAR(e.smem_ns, smem, tol);
  EXPECT_NEAR(e.gmem_ns, gmem, tol);
  EXPECT_NEAR(e.block_reduce_ns, bred, tol);
  EXPECT_NEAR(e.global_reduce_ns, gred, tol);
  EXPECT_NEAR(e.ns_per_row, smem + gmem + bred + gred, tol);  // eq. 1
}

// The model's strategies are ForestKernel values in its own order (ties go to the first),
// named as the API parses them.
TEST(ForestCostModel, StrategyOrderAndNames) {
  const std::pair<ForestKernel, const char*> expected[] = {{ForestKernel::SharedData, "shared-data"},
                                                           {ForestKernel::Direct, "direct"},
                                                           {ForestKernel::SharedForest, "shared-forest"},
                                                           {ForestKernel::SplitSharedForest, "split-shared-forest"}};
  ASSERT_EQ(std::size(kForestModelStrategies), std::size(expected));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    EXPECT_EQ(kForestModelStrategies[i], expected[i].first) << i;
    EXPECT_STREQ(to_string(kForestModelStrategies[i]), expected[i].second);
    EXPECT_EQ(parse_forest_kernel(expected[i].second), kForestModelStrategies[i]);
  }
}

TEST(ForestCostModel, EquationsByHand) {
  const auto est = estimate_forest_costs(toy_inputs(), toy_hardware());
  ASSERT_EQ(est.size(), 4u);
  EXPECT_EQ(est[0].strategy, ForestKernel::SharedData);
  EXPECT_EQ(est[1].strategy, ForestKernel::Direct);
  EXPECT_EQ(est[2].strategy, ForestKernel::SharedForest);
  EXPECT_EQ(est[3].strategy, ForestKernel::SplitSharedForest);
  // D*N*S_node = 5*10*8 = 400 bytes of nodes, D*N*S_att = 5*10*4 = 200 bytes of attributes,
  // N_nodes*N_trees*S_node = 31*10*8 = 2480 bytes of forest.
  // Shared data (eq. 4, eq. 2): SMEM 40/500 + 200/1000 = 0.28; GMEM 40/200 + 400/(200/2) = 4.2;
  // B_REDU 0.5*128/100 = 0.64.
  expect_terms(find(est, ForestKernel::SharedData), 0.28, 4.2, 0.64, 0);
  // Direct (eq. 5): GMEM 400/(200/2) + 200/10 = 24.
  expect_terms(find(est, ForestKernel::Direct), 0, 24, 0, 0);
  // Shared forest (eq. 6): SMEM 400/1000 = 0.4; GMEM 200/10 = 20.
  expect_terms(find(est, ForestKernel::SharedForest), 0.4, 20, 0, 0);
  // Splitting (eq. 7, eq. 3): SMEM 2480/(500*100) + 0.4 = 0.4496; GMEM 2480/(200*100) + 20 = 20.124;
  // G_REDU 100*4/100 = 4.
  expect_terms(find(est, ForestKernel::SplitSharedForest), 0.4496, 20.124, 0, 4);
  for (const ForestCostEstimate& e : est) EXPECT_TRUE(e.feasible) << to_string(e.strategy);
  EXPECT_NEAR(find(est, ForestKernel::SharedData).ns_per_row, 5.12, 1e-12);
  EXPECT_NEAR(find(est, ForestKernel::SplitSharedForest).ns_per_row, 24.5736, 1e-12);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::SharedData);
}

TEST(ForestCostModel, SharedForestInfeasibleWhenTheForestExceedsSharedMemory) {
  ForestCostInputs in = toy_inputs();
  ForestHardware hw = toy_hardware();
  hw.gmem_uncoalesced_gbs = 1000;  // cheap attribute reads: shared forest would be the fastest
  in.smem_bytes = 2480;            // the forest just fits
  auto est = estimate_forest_costs(in, hw);
  EXPECT_TRUE(find(est, ForestKernel::SharedForest).feasible);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::SharedForest);

  in.smem_bytes = 2479;  // one byte short
  est = estimate_forest_costs(in, hw);
  EXPECT_FALSE(find(est, ForestKernel::SharedForest).feasible);
  EXPECT_FALSE(find(est, ForestKernel::SplitSharedForest).feasible);  // one part: the whole forest
  EXPECT_TRUE(find(est, ForestKernel::SharedData).feasible);
  EXPECT_TRUE(find(est, ForestKernel::Direct).feasible);
  // Its estimate is still computed (0.4 + 200/1000), just not chosen.
  EXPECT_NEAR(find(est, ForestKernel::SharedForest).ns_per_row, 0.6, 1e-12);
  EXPECT_NE(choose_forest_strategy(est), ForestKernel::SharedForest);

  in.parts = 2;  // 1240 bytes a part
  est = estimate_forest_costs(in, hw);
  EXPECT_TRUE(find(est, ForestKernel::SplitSharedForest).feasible);
  EXPECT_FALSE(find(est, ForestKernel::SharedForest).feasible);

  in.smem_bytes = 39;  // not even one sample fits, nor a tenth of the forest: only direct remains
  in.parts = 10;
  est = estimate_forest_costs(in, hw);
  EXPECT_FALSE(find(est, ForestKernel::SharedData).feasible);
  EXPECT_FALSE(find(est, ForestKernel::SplitSharedForest).feasible);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::Direct);
}

// The forest does not fit (3 parts do), attribute reads cost 200/100 = 2 ns per row:
//   shared data  4.48 + 64 / N      (eq. 2's reduction, amortised over the batch)
//   direct       6
//   splitting    2.4 + 317.36 / N   (forest load 4.96/N + 12.4/N, global reduction 300/N)
TEST(ForestCostModel, ChoiceFlipsWithBatchSize) {
  ForestHardware hw = toy_hardware();
  hw.gmem_uncoalesced_gbs = 100;
  ForestCostInputs in = toy_inputs();
  in.smem_bytes = 1000;
  in.parts = 3;
  in.blocks = 3;

  in.n_batch = 1;
  auto est = estimate_forest_costs(in, hw);
  EXPECT_NEAR(find(est, ForestKernel::SharedData).ns_per_row, 68.48, 1e-9);
  EXPECT_NEAR(find(est, ForestKernel::SplitSharedForest).ns_per_row, 319.76, 1e-9);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::Direct);

  in.n_batch = 100;
  est = estimate_forest_costs(in, hw);
  EXPECT_NEAR(find(est, ForestKernel::SharedData).ns_per_row, 5.12, 1e-9);
  EXPECT_NEAR(find(est, ForestKernel::SplitSharedForest).ns_per_row, 5.5736, 1e-9);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::SharedData);

  in.n_batch = 10000;
  est = estimate_forest_costs(in, hw);
  const ForestCostEstimate& split = find(est, ForestKernel::SplitSharedForest);
  EXPECT_NEAR(split.smem_ns, 0.4 + 2480.0 / (500.0 * 10000), 1e-12);
  EXPECT_NEAR(split.gmem_ns, 2.0 + 2480.0 / (200.0 * 10000), 1e-12);
  EXPECT_NEAR(split.global_reduce_ns, 0.03, 1e-12);
  EXPECT_NEAR(split.ns_per_row, 2.4 + 317.36 / 10000, 1e-9);
  EXPECT_NEAR(find(est, ForestKernel::SharedData).ns_per_row, 4.4864, 1e-9);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::SplitSharedForest);

  // The crossing of shared data and splitting: 2.08 = 253.36 / N, N = 121.8.
  in.n_batch = 121;
  EXPECT_EQ(choose_forest_strategy(estimate_forest_costs(in, hw)), ForestKernel::SharedData);
  in.n_batch = 122;
  EXPECT_EQ(choose_forest_strategy(estimate_forest_costs(in, hw)), ForestKernel::SplitSharedForest);
}

TEST(ForestCostModel, SharedForestBeatsSplittingWhenItFits) {
  ForestHardware hw = toy_hardware();
  hw.gmem_uncoalesced_gbs = 100;
  ForestCostInputs in = toy_inputs();
  in.n_batch = 1e9;  // splitting's load and reduction amortised to almost nothing
  const auto est = estimate_forest_costs(in, hw);
  EXPECT_LT(find(est, ForestKernel::SharedForest).ns_per_row, find(est, ForestKernel::SplitSharedForest).ns_per_row);
  EXPECT_EQ(choose_forest_strategy(est), ForestKernel::SharedForest);
}

TEST(ForestCostModel, RejectsBadInputs) {
  const ForestHardware hw = toy_hardware();
  ForestCostInputs in = toy_inputs();
  in.n_batch = 0;
  EXPECT_THROW(estimate_forest_costs(in, hw), Error);
  in = toy_inputs();
  in.avg_depth = -1;
  EXPECT_THROW(estimate_forest_costs(in, hw), Error);
  in = toy_inputs();
  in.parts = 0;
  EXPECT_THROW(estimate_forest_costs(in, hw), Error);
  in = toy_inputs();
  in.n_trees = std::nan("");
  EXPECT_THROW(estimate_forest_costs(in, hw), Error);
  ForestHardware unmeasured;  // every bandwidth 0
  EXPECT_HAS(test::error_of([&] { estimate_forest_costs(toy_inputs(), unmeasured); },
                            "an error for an unmeasured GPU"),
             "smem_read_gbs");
  EXPECT_THROW(choose_forest_strategy({}), Error);
  auto est = estimate_forest_costs(toy_inputs(), hw);
  for (ForestCostEstimate& e : est) e.feasible = false;
  EXPECT_THROW(choose_forest_strategy(est), Error);
}

// ---- the cache ----

class ForestHardwareCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path("/tmp") / ("canopy_forest_hw_" + std::to_string(::getpid()) + "_" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path() const { return (dir_ / "sub" / "dir" / "forest_hardware.json").string(); }
  void write(const std::string& text) const {
    fs::create_directories(fs::path(path()).parent_path());
    std::ofstream(path()) << text;
  }
  fs::path dir_;
};

void expect_same(const ForestHardware& a, const ForestHardware& b) {
  EXPECT_EQ(a.device_name, b.device_name);
  EXPECT_EQ(a.device_uuid, b.device_uuid);
  EXPECT_EQ(a.sm_count, b.sm_count);
  EXPECT_EQ(a.smem_read_gbs, b.smem_read_gbs);
  EXPECT_EQ(a.smem_write_gbs, b.smem_write_gbs);
  EXPECT_EQ(a.gmem_coalesced_gbs, b.gmem_coalesced_gbs);
  EXPECT_EQ(a.gmem_uncoalesced_gbs, b.gmem_uncoalesced_gbs);
  EXPECT_EQ(a.block_reduce_ns_per_thread, b.block_reduce_ns_per_thread);
  EXPECT_EQ(a.global_reduce_ns_per_block, b.global_reduce_ns_per_block);
  EXPECT_EQ(a.gmem_cached_random_gbs, b.gmem_cached_random_gbs);
  EXPECT_EQ(a.gmem_latency_ns, b.gmem_latency_ns);
  EXPECT_EQ(a.smem_latency_ns, b.smem_latency_ns);
  EXPECT_EQ(a.launch_ns, b.launch_ns);
  EXPECT_EQ(a.version, b.version);
}

TEST_F(ForestHardwareCache, SaveThenLoadRoundTripsEveryField) {
  ForestHardware hw = toy_hardware();
  hw.device_name = "NVIDIA H100 80GB HBM3";
  hw.sm_count = 132;
  hw.smem_read_gbs = 29876.123456789012;  // bits that a short decimal would lose
  hw.smem_write_gbs = 28000.5;
  hw.gmem_coalesced_gbs = 3012.0 / 7.0;
  hw.gmem_uncoalesced_gbs = 1.0 / 3.0;
  hw.block_reduce_ns_per_thread = 1e-4 / 3.0;
  hw.global_reduce_ns_per_block = 0.1;
  save_forest_hardware(path(), hw);  // creates sub/dir
  ASSERT_TRUE(fs::exists(path()));
  ForestHardware back;
  std::string why = "stale";
  ASSERT_TRUE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &back, &why)) << why;
  EXPECT_TRUE(why.empty()) << why;
  expect_same(back, hw);
  // No temporary file left beside it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path()).parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST_F(ForestHardwareCache, MissingFileIsNotLoaded) {
  ForestHardware out = toy_hardware();
  out.sm_count = 77;
  std::string why;
  EXPECT_FALSE(load_forest_hardware(path(), "Toy GPU", toy_hardware().device_uuid, &out, &why));
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(out.sm_count, 77);  // untouched
  EXPECT_FALSE(load_forest_hardware(path(), "Toy GPU", toy_hardware().device_uuid, &out));  // no why: fine too
}

TEST_F(ForestHardwareCache, MalformedFileIsNotLoadedAndSaysWhy) {
  const ForestHardware hw = toy_hardware();
  ForestHardware out;
  std::string why;
  write("{\"format\": \"canopy-forest-hardware\", \"version\": 2, \"device_name\": ");  // cut short
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
  EXPECT_NE(why.find("malformed"), std::string::npos) << why;
  EXPECT_NE(why.find(path()), std::string::npos) << why;

  // Valid JSON, a field missing.
  save_forest_hardware(path(), hw);
  std::ifstream f(path());
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  f.close();
  const std::size_t at = text.find("\"smem_write_gbs\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 16, "\"smem_wrote_gbs\"");
  write(text);
  why.clear();
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
  EXPECT_NE(why.find("malformed"), std::string::npos) << why;

  // A field of the wrong type, and a bandwidth that is not positive.
  write("{\"format\": \"canopy-forest-hardware\", \"version\": 2, \"device_name\": 3}");
  why.clear();
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
  EXPECT_NE(why.find("malformed"), std::string::npos) << why;
  ForestHardware zero = hw;
  zero.gmem_uncoalesced_gbs = 0;
  save_forest_hardware(path(), zero);
  why.clear();
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
  EXPECT_NE(why.find("malformed"), std::string::npos) << why;

  // Not JSON at all, and a JSON array.
  write("sm_count = 132\n");
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
  write("[1, 2, 3]");
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
}

TEST_F(ForestHardwareCache, AnotherVersionUuidOrNameIsNotLoaded) {
  const ForestHardware hw = toy_hardware();
  save_forest_hardware(path(), hw);
  ForestHardware out;
  std::string why;
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, "ffeeddccbbaa99887766554433221100", &out, &why));
  EXPECT_NE(why.find(hw.device_uuid), std::string::npos) << why;
  EXPECT_FALSE(load_forest_hardware(path(), "Other GPU", hw.device_uuid, &out, &why));
  EXPECT_NE(why.find("Other GPU"), std::string::npos) << why;
  EXPECT_TRUE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why)) << why;

  ForestHardware v1 = hw;
  v1.version = 1;  // a record of the first format: measured again
  save_forest_hardware(path(), v1);
  EXPECT_FALSE(load_forest_hardware(path(), hw.device_name, hw.device_uuid, &out, &why));
  EXPECT_NE(why.find("version 1"), std::string::npos) << why;
}

TEST_F(ForestHardwareCache, LoadOrMeasureMeasuresOnlyWhenNeeded) {
  const ForestHardware toy = toy_hardware();
  const std::string other_uuid = "ffeeddccbbaa99887766554433221100";
  int calls = 0;
  std::string measuring_uuid = toy.device_uuid;
  const auto measure = [&] {
    ++calls;
    ForestHardware hw = toy;
    hw.device_uuid = measuring_uuid;
    hw.smem_read_gbs = 1000 + calls;  // tells the measurements apart
    return hw;
  };

  bool measured = false;
  ForestHardware hw = load_or_measure_forest_hardware(path(), toy.device_name, toy.device_uuid, measure, &measured);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(measured);
  EXPECT_EQ(hw.smem_read_gbs, 1001);
  ASSERT_TRUE(fs::exists(path()));
  ForestHardware on_disk;
  ASSERT_TRUE(load_forest_hardware(path(), toy.device_name, toy.device_uuid, &on_disk));
  expect_same(on_disk, hw);

  hw = load_or_measure_forest_hardware(path(), toy.device_name, toy.device_uuid, measure, &measured);
  EXPECT_EQ(calls, 1);  // the cache was valid
  EXPECT_FALSE(measured);
  EXPECT_EQ(hw.smem_read_gbs, 1001);
  hw = load_or_measure_forest_hardware(path(), toy.device_name, toy.device_uuid, measure);
  EXPECT_EQ(calls, 1);

  measuring_uuid = other_uuid;  // the cache now belongs to another GPU
  hw = load_or_measure_forest_hardware(path(), toy.device_name, other_uuid, measure, &measured);
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(measured);
  EXPECT_EQ(hw.device_uuid, other_uuid);
  EXPECT_EQ(hw.smem_read_gbs, 1002);
  ASSERT_TRUE(load_forest_hardware(path(), toy.device_name, other_uuid, &on_disk));  // rewritten
  EXPECT_EQ(on_disk.smem_read_gbs, 1002);

  // A malformed cache is measured again and replaced.
  write("{");
  hw = load_or_measure_forest_hardware(path(), toy.device_name, other_uuid, measure, &measured);
  EXPECT_EQ(calls, 3);
  EXPECT_TRUE(measured);
  EXPECT_TRUE(load_forest_hardware(path(), toy.device_name, other_uuid, &on_disk));
}

TEST_F(ForestHardwareCache, LoadOrMeasureChecksTheMeasurementsDevice) {
  const ForestHardware toy = toy_hardware();
  int calls = 0;
  // A measurement without a name or uuid takes the device's.
  const auto anonymous = [&] {
    ++calls;
    ForestHardware hw = toy;
    hw.device_name.clear();
    hw.device_uuid.clear();
    return hw;
  };
  const ForestHardware hw = load_or_measure_forest_hardware(path(), toy.device_name, toy.device_uuid, anonymous);
  EXPECT_EQ(hw.device_name, toy.device_name);
  EXPECT_EQ(hw.device_uuid, toy.device_uuid);
  // One of another device is an error, and nothing is cached for it.
  fs::remove(path());
  EXPECT_THROW(load_or_measure_forest_hardware(path(), "Other GPU", toy.device_uuid, [&] { return toy; }), Error);
  EXPECT_FALSE(fs::exists(path()));
  // No path: no cache, always measured.
  load_or_measure_forest_hardware("", toy.device_name, toy.device_uuid, anonymous);
  load_or_measure_forest_hardware("", toy.device_name, toy.device_uuid, anonymous);
  EXPECT_EQ(calls, 3);
}

TEST_F(ForestHardwareCache, SaveFailureNamesThePath) {
  write("a file where a directory should be");
  const std::string bad = path() + "/forest_hardware.json";
  EXPECT_HAS(test::error_of([&] { save_forest_hardware(bad, toy_hardware()); }), bad);
}

// Sets an environment variable for its lifetime (unset when `value` is empty).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value.empty())
      ::unsetenv(name);
    else
      ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ForestHardwareCachePath, FollowsTheEnvironment) {
  {
    ScopedEnv a("CANOPY_CACHE_DIR", "/c/canopy"), b("XDG_CACHE_HOME", "/x"), c("HOME", "/h");
    EXPECT_EQ(default_forest_hardware_cache(), "/c/canopy/forest_hardware.json");
  }
  {
    ScopedEnv a("CANOPY_CACHE_DIR", ""), b("XDG_CACHE_HOME", "/x"), c("HOME", "/h");
    EXPECT_EQ(default_forest_hardware_cache(), "/x/canopy/forest_hardware.json");
  }
  {
    ScopedEnv a("CANOPY_CACHE_DIR", ""), b("XDG_CACHE_HOME", ""), c("HOME", "/h");
    EXPECT_EQ(default_forest_hardware_cache(), "/h/.cache/canopy/forest_hardware.json");
  }
  {
    ScopedEnv a("CANOPY_CACHE_DIR", ""), b("XDG_CACHE_HOME", ""), c("HOME", "");
    EXPECT_EQ(default_forest_hardware_cache(), "");
  }
}

// ---- the measurement ----

// Nothing here depends on how fast the GPU is (a sanitizer or a busy GPU slows every figure):
// the record names this GPU, every figure is finite and positive, the wall time holds the
// measured launches, the model takes the record, and the cache gives it back unchanged.
TEST(ForestHardwareGpu, MeasuresPlausibleNumbers) {
  CANOPY_REQUIRE_GPU();
  gpu_free_memory();  // creates the CUDA context, which is not the measurement's cost
  const auto t0 = std::chrono::steady_clock::now();
  const ForestHardware hw = measure_forest_hardware(0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s (%s), %d SMs, measured in %.3f s:\n  smem read %.0f GB/s, write %.0f GB/s\n"
              "  gmem coalesced %.0f GB/s, uncoalesced %.1f GB/s\n  B_rate %.3g ns/thread, G_rate %.3g ns/block\n"
              "  cached random %.0f GB/s, latency global %.0f ns, shared %.1f ns, launch %.0f ns\n",
              hw.device_name.c_str(), hw.device_uuid.c_str(), hw.sm_count, seconds, hw.smem_read_gbs,
              hw.smem_write_gbs, hw.gmem_coalesced_gbs, hw.gmem_uncoalesced_gbs, hw.block_reduce_ns_per_thread,
              hw.global_reduce_ns_per_block, hw.gmem_cached_random_gbs, hw.gmem_latency_ns, hw.smem_latency_ns,
              hw.launch_ns);

  // The record names this GPU, as the cache keys it.
  EXPECT_FALSE(hw.device_name.empty());
  EXPECT_EQ(gpu_description().rfind(hw.device_name, 0), 0u) << gpu_description();
  ASSERT_EQ(hw.device_uuid.size(), 32u);
  EXPECT_EQ(hw.device_uuid.find_first_not_of("0123456789abcdef"), std::string::npos) << hw.device_uuid;
  EXPECT_EQ(device_identity(0), std::make_pair(hw.device_name, hw.device_uuid));
  EXPECT_GT(hw.sm_count, 0);
  EXPECT_EQ(hw.version, 2);
  for (double v : {hw.smem_read_gbs, hw.smem_write_gbs, hw.gmem_coalesced_gbs, hw.gmem_uncoalesced_gbs,
                   hw.block_reduce_ns_per_thread, hw.global_reduce_ns_per_block, hw.gmem_cached_random_gbs,
                   hw.gmem_latency_ns, hw.smem_latency_ns, hw.launch_ns}) {
    EXPECT_TRUE(std::isfinite(v)) << v;
    EXPECT_GT(v, 0);
  }
  // The wall time holds every timed run, among them the 32 launches that launch_ns divides.
  EXPECT_TRUE(std::isfinite(seconds));
  EXPECT_GT(seconds * 1e9, 32 * hw.launch_ns);

  // The record drives the model, the paper's equations and Canopy's extension.
  for (const ForestCostEstimate& e : estimate_forest_costs(toy_inputs(), hw))
    EXPECT_TRUE(std::isfinite(e.ns_per_row) && e.ns_per_row > 0) << to_string(e.strategy);
  ForestShape direct;
  direct.chain_steps = 10;
  for (const ForestBatchEstimate& e : estimate_forest_batch(toy_inputs(), {direct}, hw))
    EXPECT_TRUE(std::isfinite(e.batch_ns) && e.batch_ns > 0);

  // The cache: the first call measures and saves, the file loads for this GPU only, and a
  // second call loads it (a second measurement would not repeat every figure to the bit).
  const std::string path = ::testing::TempDir() + "canopy_forest_hw_gpu_" + std::to_string(::getpid()) + ".json";
  fs::remove(path);
  const ForestHardware first = cached_forest_hardware(0, path);
  ASSERT_TRUE(fs::exists(path));
  ForestHardware loaded;
  std::string why;
  ASSERT_TRUE(load_forest_hardware(path, hw.device_name, hw.device_uuid, &loaded, &why)) << why;
  expect_same(loaded, first);
  expect_same(cached_forest_hardware(0, path), first);
  EXPECT_FALSE(load_forest_hardware(path, hw.device_name, std::string(32, '0'), &loaded));
  fs::remove(path);
}

// Canopy's extension, by hand on the toy numbers: per-strategy coalescing, the critical path
// of a small batch and the launches.
TEST(ForestCostModelExtension, ThroughputPathAndLaunchesByHand) {
  const ForestHardware hw = toy_hardware();
  ForestCostInputs in = toy_inputs();  // 10 trees x 5 visits, 8-byte nodes, 4-byte attributes
  ForestShape direct;
  direct.strategy = ForestKernel::Direct;
  direct.coalescing = 2.0;   // rows share nodes: 2 bytes asked per byte moved
  direct.rows_in_smem = true;
  direct.chain_steps = 30;
  direct.waves = 1;
  ForestShape data;
  data.strategy = ForestKernel::SharedData;
  data.coalescing = 0.25;
  data.rows_in_smem = true;
  data.chain_steps = 4;
  in.n_batch = 100;
  auto est = estimate_forest_batch(in, {direct, data}, hw);
  ASSERT_EQ(est.size(), 2u);
  const ForestBatchEstimate& d = est[0].strategy == ForestKernel::Direct ? est[0] : est[1];
  const ForestBatchEstimate& s = est[0].strategy == ForestKernel::Direct ? est[1] : est[0];
  // direct: 400 node bytes / (200 x 2) + 200 attribute bytes / 1000 (shared memory) = 1.2 ns/row.
  EXPECT_NEAR(d.row_ns, 1.2, 1e-12);
  EXPECT_NEAR(d.throughput_ns, 120, 1e-9);
  // path: 30 steps x (300 + 20) ns.
  EXPECT_NEAR(d.path_ns, 9600 + 2000, 1e-9);  // and one launch
  EXPECT_NEAR(d.batch_ns, 9600 + 2000, 1e-9);
  // shared data: 40/500 + 200/1000 + 40/200 + 400/(200 x 0.25) + 0.5 x 128 = 72.48 ns/row.
  EXPECT_NEAR(s.row_ns, 0.08 + 0.2 + 0.2 + 8 + 64, 1e-9);
  EXPECT_NEAR(s.path_ns, 4 * 320 + 2000, 1e-9);
  EXPECT_NEAR(s.batch_ns, 7248.0, 1e-9);
  EXPECT_EQ(est[0].strategy, ForestKernel::SharedData);  // 7248 < 11600: fastest first
  // A large batch: the path no longer matters and direct's throughput wins.
  in.n_batch = 1e6;
  est = estimate_forest_batch(in, {direct, data}, hw);
  EXPECT_EQ(est[0].strategy, ForestKernel::Direct);
  EXPECT_NEAR(est[0].batch_ns, 1.2e6, 1e-6);
  // Calibrated times replace the bandwidth terms, and a calibrated small batch bounds the path.
  direct.calibrated_row_ns = 3;
  direct.calibrated_small_ns = 5e4;
  est = estimate_forest_batch(in, {direct}, hw);
  EXPECT_NEAR(est[0].batch_ns, 3e6, 1e-6);
  in.n_batch = 100;
  est = estimate_forest_batch(in, {direct}, hw);
  EXPECT_NEAR(est[0].batch_ns, 5e4, 1e-6);
  in.n_batch = 1e6;
  // Infeasible shapes sort last; bad shape values are errors.
  ForestShape forest;
  forest.strategy = ForestKernel::SharedForest;  // the toy forest (2480 bytes) fits 48 KiB
  in.smem_bytes = 100;                             // ... but not 100 bytes
  est = estimate_forest_batch(in, {forest, direct}, hw);
  EXPECT_FALSE(est.back().feasible);
  EXPECT_EQ(est.back().strategy, ForestKernel::SharedForest);
  direct.coalescing = 0;
  EXPECT_THROW(estimate_forest_batch(in, {direct}, hw), Error);
  ForestShape hybrid;  // a kernel the model does not estimate
  hybrid.strategy = ForestKernel::Hybrid;
  EXPECT_HAS(test::error_of([&] { estimate_forest_batch(in, {hybrid}, hw); }), "hybrid is not one of kForestModelStrategies");
}

}  // namespace
}  // namespace canopy
