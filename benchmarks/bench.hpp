// The benchmark driver's workloads; one entry per workload.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "layouts/forest.hpp"

namespace CLI {
class App;
}

namespace canopy {
namespace bench {

// Where the points and queries come from: --points (a CSV or CSV.gz file) with --columns, or
// --generate; --queries; --seed; --shuffle; --skip-incomplete.
struct InputConfig {
  std::string points;
  std::string generate;
  std::string queries;
  std::string columns;
  std::uint64_t seed = 1;
  bool shuffle_set = false;
  std::uint64_t shuffle_seed = 0;
  bool skip_incomplete = false;  // drop file rows with an empty field (io ReadOptions)
};

// --pipeline, --chunk, --memory-budget (MiB), --inspector-first and --ramp as given.
struct PipelineArgs {
  std::string pipeline = "off";
  std::int64_t chunk = 0;
  double memory_budget_mib = 0;
  std::string inspector_first = "on";
  std::string ramp = "on";
};

// How the variants of a traversal workload run: --depth, --depths (a sweep, e.g. "4-14"),
// --leaf-size, --device, --variants, --repeat, --json and the pipeline's options.
struct SuiteConfig {
  int depth = 0;
  std::string depths;
  int leaf_size = 8;
  std::string device = "auto";
  std::string variants = "all";
  int repeat = 5;
  std::string json;
  PipelineArgs pipeline;
};

struct PcConfig {
  InputConfig input{"", "uniform:400000:7", "", "", 1, false, 0};  // default: the points query themselves
  std::string radius = "auto:32";
  std::string output = "counts";  // counts (run) or lists (run_lists: the neighbour lists)
  SuiteConfig suite;
  // Set by the command line parser: whether the user chose the input and the repeat count.
  bool source_given = false;
  bool repeat_given = false;
};

// nn, knn, bt, vp (nearest neighbours on the kd-tree, ball tree, vp-tree) and bh (Barnes-Hut).
struct TraversalBenchConfig {
  std::string workload;  // nn, knn, bt, vp, bh
  InputConfig input;     // default per workload: uniform:400000:7, or plummer:1000000 for bh
  int k = 0;  // 0: 1 for nn, bt, vp; 8 for knn
  int check = 100;  // nn family: sampled queries checked against brute force (0: none)
  float theta = 0.5f;
  float softening = 0.01f;
  SuiteConfig suite;
  std::string probe = "auto";  // guided workloads: the inspector's probe
  std::int64_t row_cap = 0;
  bool source_given = false;
  bool repeat_given = false;
};

// The points of build and e2e: a CSV(.gz) file's columns (normalised to the unit cube) or a
// generator (benchmarks/bench_build.cpp: add_source_options, load_source).
struct PointSource {
  std::string points, columns;
  std::string generate = "uniform:1000000:3";
  std::uint64_t seed = 1;
  bool skip_incomplete = false;  // --skip-incomplete, as in InputConfig
};
void add_source_options(CLI::App& app, PointSource& c);

// canopy-bench build: tree builds on the CPU and the GPU (benchmarks/bench_build.cpp).
struct BuildConfig {
  PointSource source;
  std::string trees = "kd,octree";
  int leaf_size = 8;
  int repeat = 5;
  std::string json;
};
void add_build_options(CLI::App& app, BuildConfig& c);
int run_build(const BuildConfig& c);

// canopy-bench e2e: build + query end to end on the GPU (benchmarks/bench_e2e.cu).
struct E2eConfig {
  PointSource source;
  std::string queries;  // a generator spec for separate queries (seed + 1); empty: the points
  std::string workload = "pc";
  std::string radius = "auto:32";  // pc: a radius, or auto:M (a mean count of M)
  int k = 8;
  int repeat = 3;
  std::string json;
};
void add_e2e_options(CLI::App& app, E2eConfig& c);
int run_e2e(const E2eConfig& c);

// canopy-bench steps: Barnes-Hut time steps on the GPU (benchmarks/bench_steps.cu).
struct StepsConfig {
  std::string generate = "plummer:1000000";
  std::uint64_t seed = 1;
  int steps = 10;
  float dt = 1e-3f;
  float theta = 0.5f;
  float softening = 0.01f;
  std::string json;
};
void add_steps_options(CLI::App& app, StepsConfig& c);
int run_steps(const StepsConfig& c);

struct ScheduleConfig {
  std::int64_t queries = 1000000;
  std::int64_t top_leaves = 256;
  double density = 0.05;
  int repeat = 11;
  std::uint64_t seed = 1;
  std::string json;
};

// What both forest commands read (benchmarks/bench_forest.hpp adds the options): a model, a
// data file, batches of its rows, how they run; the defaults differ per command.
struct ForestInputs {
  ForestInputs(std::string batch_, int repeat_, int row_depth_)
      : batch(std::move(batch_)), repeat(repeat_), row_depth(row_depth_) {}
  std::string model, data, label;
  std::string batch;
  int repeat;
  int row_depth;  // adaptive layout: row scheduling's top-tree depth
  std::string output = "prob";
  std::string json;
  std::string graph = "on";  // ForestRunOptions::graph
};

struct ForestBenchConfig : ForestInputs {
  ForestBenchConfig() : ForestInputs("100000", 5, 0) {}
  std::string layouts = "all";
  std::string kernels = "all";
  std::string device = "auto";
  int subtree_depth = 6;
  int root_depth = 10;
  std::string predictions;
};

// canopy-bench forest-study: strategies, model, tuner and techniques on the adaptive layout.
struct ForestStudyConfig : ForestInputs {
  ForestStudyConfig() : ForestInputs("100,10000,1000000", 10, 4) {}
  std::string hardware_cache;
  bool tune = false;
  double jitter = 0.05;
};

// canopy-bench quality <workload>: schedules against the MST lower bound of the paper's Sched.
struct QualityConfig {
  std::string workload;  // pc, nn, knn, bt, vp, bh
  InputConfig input;     // default uniform:100000:7, bh plummer:100000
  std::string radius = "auto:32";
  int k = 0;
  float theta = 0.5f;
  float softening = 0.01f;
  std::string depths = "6,8,10,12";
  std::string probes = "full";  // guided workloads: the inspector's probes to compare
  std::int64_t row_cap = 0;
  int leaf_size = 8;
  std::int64_t sample = 4096;
  std::uint64_t sample_seed = 1;
  std::string json;
};

// canopy-bench dist (built with the MPI layer): pc, knn or forest under mpirun.
struct DistConfig {
  std::string workload = "pc";
  std::string distribute = "replicate";
  InputConfig input;  // default uniform:400000:3
  std::string radius = "auto:32";
  int k = 8;
  int top_depth = 0;
  std::string model, data, label;
  std::string device = "auto";
  std::string gather = "all";  // comma-separated: all, root, local (each timed in turn)
  int repeat = 3;
  int warmup = 2;  // untimed calls first (auto's prior, then its trial)
  int check = 1;
  int baseline = 1;          // rank 0 also times the one-process call (the whole tree, every query)
  int on_device = 0;         // replicate: queries or rows and results in each rank's device memory
  std::string variant = "auto";  // pc, knn: schedule x executor (canopy-bench's variant names)
  int presort = 0;               // pc, knn: queries in a spatial order first (a kd-tree's over them)
  std::string shard = "auto";    // pc, knn replicate: which queries a rank runs (distributed::Shard)
  index_t rows = 0;          // forest: rows (0: the file's; more: forest_batch's smoothed bootstrap)
  double jitter = 0.05;      // forest: forest_batch's jitter
  double memory_budget_mb = 0;  // partition: each rank's tree at most this (0: no limit)
  std::string json;
};

void add_pc_options(CLI::App& app, PcConfig& c);
void add_quality_options(CLI::App& app, QualityConfig& c);
int run_quality(const QualityConfig& c);
void add_traversal_options(CLI::App& app, TraversalBenchConfig& c);
int run_traversal(const TraversalBenchConfig& c);
void add_schedule_options(CLI::App& app, ScheduleConfig& c);
void add_forest_options(CLI::App& app, ForestBenchConfig& c);
int run_pc(const PcConfig& c);
int run_forest(const ForestBenchConfig& c);
void add_forest_study_options(CLI::App& app, ForestStudyConfig& c);
int run_forest_study(const ForestStudyConfig& c);
int run_schedule(const ScheduleConfig& c);
void add_dist_options(CLI::App& app, DistConfig& c);
int run_dist(const DistConfig& c);  // between MPI_Init and MPI_Finalize

}  // namespace bench
}  // namespace canopy
