// canopy-bench: the benchmark driver.
//   canopy-bench                 point correlation on the default workload (uniform:400000:7;
//                                without a GPU, uniform:50000:7 once, so it ends in about a minute)
//   canopy-bench pc [options]    point correlation, every variant side by side
//   canopy-bench schedule [...]  the sandpile scheduler alone on a random scheduling matrix
//   canopy-bench build [...]     the trees built on the CPU and the GPU, checked equal
//   canopy-bench e2e [...]       build + query end to end on the GPU (pc or knn)
//   canopy-bench steps [...]     Barnes-Hut time steps on the GPU: rebuild, forces, leapfrog
//   canopy-bench nn|knn|bt|vp [...]  nearest neighbours on a kd-tree, ball tree or vp-tree
//   canopy-bench bh [...]        Barnes-Hut forces on an octree
//   canopy-bench quality <workload> [...]  each schedule's Δ against the MST lower bound
//   canopy-bench forest [...]    decision-forest inference, every layout x kernel x device
//   canopy-bench forest-study [...]  the adaptive layout's strategies, model, tuner, techniques
//   canopy-bench forest-serve [...]  the default forest call under random batch sizes: latency
//                                from an empty cache and from a filled one
//   canopy-bench dist [...]      under mpirun: the MPI layer, replicated or partitioned (where
//                                Canopy was built with MPI)
#include <CLI/CLI.hpp>
#if defined(CANOPY_WITH_MPI)
#include <mpi.h>
#endif

#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_forest.hpp"

namespace {

// A subcommand and how it runs; its config lives as long as the run closure.
struct Subcommand {
  CLI::App* cmd;
  std::function<int()> run;
};

// Registers `name` with add_options bound to `config`; run(config, cmd) runs it after parsing.
template <class Config, class Run>
void add_subcommand(CLI::App& app, std::vector<Subcommand>& subs, const char* name, const char* help,
                    void (*add_options)(CLI::App&, Config&), Run run, Config config = Config{}) {
  auto cfg = std::make_shared<Config>(std::move(config));
  CLI::App* cmd = app.add_subcommand(name, help);
  add_options(*cmd, *cfg);
  subs.push_back({cmd, [cfg, cmd, run] { return run(*cfg, *cmd); }});
}

// The workload's run function as is.
template <class Config>
auto plain(int (*run)(const Config&)) {
  return [run](Config& c, CLI::App&) { return run(c); };
}

// pc and the traversal workloads pick their defaults by whether the point source and --repeat
// were given on the command line.
template <class Config>
auto with_given(int (*run)(const Config&)) {
  return [run](Config& c, CLI::App& cmd) {
    c.source_given = cmd.count("--points") + cmd.count("--generate") > 0;
    c.repeat_given = cmd.count("--repeat") > 0;
    return run(c);
  };
}

void print_error(const std::exception& e) {
  std::fflush(stdout);  // what was printed before the error comes first
  std::fprintf(stderr, "canopy-bench: error: %s\n", e.what());
}

}  // namespace

int main(int argc, char** argv) {
  namespace cb = canopy::bench;
  // Every line of every table reaches a pipe or a file as it is printed: a crash (a signal ends
  // the process without flushing stdio) keeps the rows printed before it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"canopy-bench: hybrid CPU-GPU scheduling of tree traversals"};
  app.require_subcommand(0, 1);

  std::vector<Subcommand> subs;  // subs[0], pc, also runs when no subcommand is given
  add_subcommand(app, subs, "pc", "point correlation on a kd-tree (the default)", cb::add_pc_options, with_given(cb::run_pc));
  add_subcommand(app, subs, "schedule", "the sandpile scheduler alone on a random matrix", cb::add_schedule_options,
                 plain(cb::run_schedule));
  add_subcommand(app, subs, "build", "tree builds on the CPU and the GPU, checked equal bit for bit", cb::add_build_options,
                 plain(cb::run_build));
  add_subcommand(app, subs, "e2e", "build + query end to end on the GPU, data on the device", cb::add_e2e_options,
                 plain(cb::run_e2e));
  add_subcommand(app, subs, "steps", "Barnes-Hut time steps on the GPU: rebuild + forces + leapfrog", cb::add_steps_options,
                 plain(cb::run_steps));

  // The other tree-traversal workloads share one option set.
  const char* traversal_names[][2] = {{"nn", "nearest neighbour on a kd-tree"},
                                      {"knn", "k nearest neighbours on a kd-tree (--k, default 8)"},
                                      {"bt", "nearest neighbour on a ball tree"},
                                      {"vp", "nearest neighbour on a vantage-point tree"},
                                      {"bh", "Barnes-Hut forces on an octree (--theta, --softening)"}};
  for (const auto& t : traversal_names) {
    cb::TraversalBenchConfig tc;
    tc.workload = t[0];
    add_subcommand(app, subs, t[0], t[1], cb::add_traversal_options, with_given(cb::run_traversal), tc);
  }

  add_subcommand(app, subs, "quality", "schedules against the MST lower bound on the optimal schedule",
                 cb::add_quality_options, plain(cb::run_quality));
  add_subcommand(app, subs, "forest", "decision-forest inference (XGBoost / scikit-learn models)", cb::add_forest_options,
                 plain(cb::run_forest));
  add_subcommand(app, subs, "forest-study", "forest strategies, performance model, tuner and techniques (GPU)",
                 cb::add_forest_study_options, plain(cb::run_forest_study));
  add_subcommand(app, subs, "forest-serve", "the default forest call under random batch sizes, cold and warm cache",
                 cb::add_forest_serve_options, plain(cb::run_forest_serve));

#if defined(CANOPY_WITH_MPI)
  cb::DistConfig dc;
  dc.input.generate = "uniform:400000:3";
  auto run_dist = [&argc, &argv](cb::DistConfig& c, CLI::App& cmd) {
    if (cmd.count("--points") > 0) c.input.generate.clear();
    MPI_Init(&argc, &argv);
    int rc = 1;
    try {
      rc = cb::run_dist(c);
    } catch (const std::exception& e) {
      print_error(e);
    }
    MPI_Finalize();
    return rc;
  };
  add_subcommand(app, subs, "dist", "pc, knn or forest over MPI ranks (run under mpirun)", cb::add_dist_options, run_dist,
                 dc);
#endif
  CLI11_PARSE(app, argc, argv);
  try {
    for (const Subcommand& s : subs)
      if (*s.cmd) return s.run();
    return subs[0].run();
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }
}
