// What every traversal workload of canopy-bench shares: the variants (schedule x executor),
// running each one with a warm-up and timed repeats, checking that every variant's results are
// identical, the table and the JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "core/timing.hpp"
#include "layouts/kdtree.hpp"
#include "io/dataset.hpp"
#include "runtime/options.hpp"

namespace CLI {
class App;
}

namespace canopy {
namespace bench {

struct Variant {
  const char* name;
  ExecutorKind executor;
  ScheduleKind schedule;
};

// All variants of a workload: unguided ones schedule on the device with the sandpile
// (hybrid-gpu-sandpile), guided ones with the recursive buckets (hybrid-gpu-buckets); every
// schedule runs under independent threads and FSM lockstep; `auto` is the API's default.
std::vector<Variant> parse_variants(const std::string& list, bool guided);
Device parse_device(const std::string& s);
double median(std::vector<double> v);
// Where a driver builds its tree: on the CPU when the run is (--device cpu), else wherever
// Device::Auto builds fastest.
inline Device build_device(Device requested) { return requested == Device::Cpu ? Device::Cpu : Device::Auto; }
// Makes the process's CUDA context (about 0.1 s, once) where a GPU may be used, so that a timed
// build measures the build.
void start_device(Device requested);
// A tree built up to `runs` times, the last one kept: more than once only where it was built on
// the GPU, whose first build in a process also loads the build's kernels. The first build's wall
// time and the median's.
struct BuildTimes {
  double first_ms = 0, median_ms = 0;
  int runs = 0;
};
// " in 5.1 ms" or " in 5.1 ms (median of 3 builds; the first 21.7 ms)", for the build line.
std::string build_time_text(const BuildTimes& t);
template <class Build>
auto timed_build(int runs, Build build, BuildTimes& t) {
  std::vector<double> ms;
  std::optional<decltype(build())> tree;
  do {
    tree.reset();  // (the previous tree's device memory freed first)
    const auto t0 = std::chrono::steady_clock::now();
    tree.emplace(build());
    ms.push_back(ms_since(t0));
  } while (tree->built_on() == Device::Gpu && static_cast<int>(ms.size()) < runs);
  t.first_ms = ms.front();
  t.median_ms = median(ms);
  t.runs = static_cast<int>(ms.size());
  return std::move(*tree);
}
void add_build_json(nlohmann::json& j, const BuildTimes& t);
std::vector<int> parse_depths(const std::string& spec);  // "4-14" or "6,8,10,auto"; "" = none
int parse_depth(const std::string& spec);                 // a number or auto (kAutoDepth)
// --probe: full, lean, none, or auto (empty: the options' default).
std::optional<GuidedProbe> parse_probe(const std::string& spec);

// One run of a workload: its phase times, nodes per warp (count_nodes), the depth it used, a
// checksum, and its result as words (counts) or as digests of its words (set_result_digests), so
// variants can be compared exactly.
struct Measured {
  TraversalStats stats;
  std::uint64_t checksum = 0;
  std::vector<std::uint64_t> result;
};
using RunFn = std::function<Measured(const TraversalOptions&)>;

struct VariantRow {
  std::string name;
  double inspect = 0, schedule = 0, execute = 0, total = 0;  // pipelined: busy times; total = wall
  index_t chunks = 0, chunk = 0;                              // pipelined runs only
  double execute_only = 0;  // pipelined: the executor alone over the same schedule
  double nodes_per_warp = 0;
  index_t nodes_per_warp_max = 0;
  std::uint64_t checksum = 0;
  bool same_results = true;
  int depth = 0;
  bool auto_depth = false;   // the depth was chosen by --depth auto
  double depth_trial = 0;    // what that choice's trial cost
  bool auto_pick = false;    // the auto variant: what the runtime picked, and its trial's cost
  std::string pick_schedule, pick_executor;
  double auto_trial = 0;
  double auto_trial_call = 0;  // the wall time of the call the trial followed
};

struct Suite {
  std::vector<VariantRow> rows;
  bool all_same = true;
  int repeat = 1;
  bool rows_printed = false;  // run_suite printed the table's rows as they were measured
};

// The pipeline and memory options of a run (--pipeline, --chunk, --memory-budget).
struct PipelineSetting {
  bool on = false;
  bool inspector_first = true;
  bool ramp = true;
  index_t chunk = 0;
  std::size_t memory_budget = 0;
};

// Runs each variant once untimed (with the warp emulator's node counts for lockstep
// executors), then `repeat` timed runs; variants that use the inspector run at every depth.
// With the pipeline on, the inspector variants run pipelined and each timed run also times the
// executor alone over the same schedule. The table's header and rows are printed (and flushed)
// as the variants finish, so a crash keeps the rows before it; print_suite adds the summary.
Suite run_suite(const std::vector<Variant>& variants, const std::vector<int>& depths, int depth, Device device,
                int repeat, const RunFn& run, const PipelineSetting& pipeline = {});
// Adds --pipeline, --chunk, --memory-budget (MiB), --inspector-first and --ramp to a workload's
// command line.
void add_pipeline_options(CLI::App& app, PipelineArgs& args);
// --pipeline, --inspector-first and --ramp on / off; --chunk and --memory-budget (MiB) as given.
PipelineSetting parse_pipeline(const PipelineArgs& args);
// The summary under run_suite's rows (all of the table when the rows were not printed yet).
void print_suite(const Suite& s);
// The depth the inspector variants used (the first one's), or `fallback`.
int suite_depth(const Suite& s, int fallback);
// "device: gpu, <name>" or which CPU executors run and why.
void print_device_line(Device used, Device requested);
nlohmann::json suite_json(const Suite& s);
// The --json file: j dumped with `indent` spaces a level; throws where it cannot be opened.
void write_json(const std::string& path, const nlohmann::json& j, int indent = 2);

// A 64-bit hash of words (a multiply-xorshift chain): the checksum of result vectors that are not
// counts, and the digest of a block of them.
inline std::uint64_t hash_step(std::uint64_t h, std::uint64_t w) {
  h = (h ^ w) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}
constexpr std::uint64_t kHashSeed = 1469598103934665603ull;
template <class It>
std::uint64_t hash_words(It first, It last) {
  std::uint64_t h = kHashSeed;
  for (; first != last; ++first) h = hash_step(h, static_cast<std::uint64_t>(*first));
  return h;
}
inline std::uint64_t hash_words(const std::vector<std::uint64_t>& words) { return hash_words(words.begin(), words.end()); }

// A result of n words (word(i) for i < n) as one digest per kDigestBlock words, hashed in parallel,
// and its checksum over the digests. Comparing digests compares the words (two different blocks
// share a digest with probability about 2^-64) without holding them: 3x10^7 queries' k = 30
// neighbours are 1.8x10^9 words.
constexpr std::size_t kDigestBlock = 256;
template <class Word>
void set_result_digests(Measured& m, std::size_t n, const Word& word) {
  const std::size_t blocks = (n + kDigestBlock - 1) / kDigestBlock;
  m.result.assign(blocks, 0);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, blocks), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t b = r.begin(); b != r.end(); ++b) {
      std::uint64_t h = kHashSeed;
      const std::size_t end = std::min(n, (b + 1) * kDigestBlock);
      for (std::size_t i = b * kDigestBlock; i < end; ++i) h = hash_step(h, word(i));
      m.result[b] = h;
    }
  });
  m.checksum = hash_words(m.result);
}

// The input options every point-set workload shares (InputConfig), with the help texts that
// differ between workloads, and loading them: a CSV(.gz) file with chosen columns or a
// generator, normalised to the unit cube (`normalise`), and the query set.
struct InputHelp {
  const char* points;
  const char* generate;
  const char* queries;
  const char* seed;
  const char* shuffle;
};
void add_input_options(CLI::App& app, InputConfig& c, const InputHelp& help);
// "FILE: N incomplete rows skipped" when --skip-incomplete dropped any of its rows.
void report_skipped(const std::string& path, const PointSet& ps);
// The options of SuiteConfig; the help texts that differ between workloads.
struct SuiteHelp {
  const char* depth;
  const char* leaf_size;
  const char* variants;
};
void add_suite_options(CLI::App& app, SuiteConfig& c, const SuiteHelp& help);
struct Inputs {
  PointSet points;
  PointSet queries;
  std::string source;
};
// split: no --queries file: a seeded random half of the points builds the tree and the other
// half queries it (each half keeps the file order); otherwise the points query themselves.
Inputs load_inputs(const InputConfig& c, bool normalise, bool split);

// The points a PointSource names (bench.hpp).
PointSet load_source(const PointSource& c);

// Point correlation's radius: a number, or auto:K for a mean count of about K over a seeded
// sample of the queries.
float parse_radius(const std::string& spec, const KdTree& tree, const PointSet& queries, std::uint64_t seed);

}  // namespace bench
}  // namespace canopy
