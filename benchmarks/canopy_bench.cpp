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
#include <string>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_forest.hpp"

int main(int argc, char** argv) {
  // Every line of every table reaches a pipe or a file as it is printed: a crash (a signal ends
  // the process without flushing stdio) keeps the rows printed before it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"canopy-bench: hybrid CPU-GPU scheduling of tree traversals"};
  app.require_subcommand(0, 1);

  canopy::bench::PcConfig pc;
  CLI::App* pc_cmd = app.add_subcommand("pc", "point correlation on a kd-tree (the default)");
  canopy::bench::add_pc_options(*pc_cmd, pc);

  canopy::bench::ScheduleConfig sc;
  CLI::App* sc_cmd = app.add_subcommand("schedule", "the sandpile scheduler alone on a random matrix");
  canopy::bench::add_schedule_options(*sc_cmd, sc);

  canopy::bench::BuildConfig bc;
  CLI::App* bc_cmd = app.add_subcommand("build", "tree builds on the CPU and the GPU, checked equal bit for bit");
  canopy::bench::add_build_options(*bc_cmd, bc);

  canopy::bench::E2eConfig ec;
  CLI::App* ec_cmd = app.add_subcommand("e2e", "build + query end to end on the GPU, data on the device");
  canopy::bench::add_e2e_options(*ec_cmd, ec);

  canopy::bench::StepsConfig stc;
  CLI::App* st_cmd = app.add_subcommand("steps", "Barnes-Hut time steps on the GPU: rebuild + forces + leapfrog");
  canopy::bench::add_steps_options(*st_cmd, stc);

  // The other tree-traversal workloads share one option set.
  const char* traversal_names[][2] = {{"nn", "nearest neighbour on a kd-tree"},
                                      {"knn", "k nearest neighbours on a kd-tree (--k, default 8)"},
                                      {"bt", "nearest neighbour on a ball tree"},
                                      {"vp", "nearest neighbour on a vantage-point tree"},
                                      {"bh", "Barnes-Hut forces on an octree (--theta, --softening)"}};
  canopy::bench::TraversalBenchConfig tc[5];
  CLI::App* tc_cmd[5];
  for (int i = 0; i < 5; ++i) {
    tc[i].workload = traversal_names[i][0];
    tc_cmd[i] = app.add_subcommand(traversal_names[i][0], traversal_names[i][1]);
    canopy::bench::add_traversal_options(*tc_cmd[i], tc[i]);
  }

  canopy::bench::QualityConfig qc;
  CLI::App* qc_cmd = app.add_subcommand("quality", "schedules against the MST lower bound on the optimal schedule");
  canopy::bench::add_quality_options(*qc_cmd, qc);

  canopy::bench::ForestBenchConfig fc;
  CLI::App* fc_cmd = app.add_subcommand("forest", "decision-forest inference (XGBoost / scikit-learn models)");
  canopy::bench::add_forest_options(*fc_cmd, fc);

  canopy::bench::ForestStudyConfig fs;
  CLI::App* fs_cmd = app.add_subcommand("forest-study", "forest strategies, performance model, tuner and techniques (GPU)");
  canopy::bench::add_forest_study_options(*fs_cmd, fs);

  canopy::bench::ForestServeConfig fsv;
  CLI::App* fsv_cmd = app.add_subcommand("forest-serve", "the default forest call under random batch sizes, cold and warm cache");
  canopy::bench::add_forest_serve_options(*fsv_cmd, fsv);

#if defined(CANOPY_WITH_MPI)
  canopy::bench::DistConfig dc;
  dc.input.generate = "uniform:400000:3";
  CLI::App* dc_cmd = app.add_subcommand("dist", "pc, knn or forest over MPI ranks (run under mpirun)");
  canopy::bench::add_dist_options(*dc_cmd, dc);
#endif
  CLI11_PARSE(app, argc, argv);
  pc.source_given = pc_cmd->count("--points") + pc_cmd->count("--generate") > 0;
  pc.repeat_given = pc_cmd->count("--repeat") > 0;
  for (int i = 0; i < 5; ++i) {
    tc[i].source_given = tc_cmd[i]->count("--points") + tc_cmd[i]->count("--generate") > 0;
    tc[i].repeat_given = tc_cmd[i]->count("--repeat") > 0;
  }
  try {
#if defined(CANOPY_WITH_MPI)
    if (*dc_cmd) {
      if (dc_cmd->count("--points") > 0) dc.input.generate.clear();
      MPI_Init(&argc, &argv);
      int rc = 1;
      try {
        rc = canopy::bench::run_dist(dc);
      } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "canopy-bench: error: %s\n", e.what());
      }
      MPI_Finalize();
      return rc;
    }
#endif
    for (int i = 0; i < 5; ++i)
      if (*tc_cmd[i]) return canopy::bench::run_traversal(tc[i]);
    if (*sc_cmd) return canopy::bench::run_schedule(sc);
    if (*bc_cmd) return canopy::bench::run_build(bc);
    if (*ec_cmd) return canopy::bench::run_e2e(ec);
    if (*st_cmd) return canopy::bench::run_steps(stc);
    if (*qc_cmd) return canopy::bench::run_quality(qc);
    if (*fc_cmd) return canopy::bench::run_forest(fc);
    if (*fs_cmd) return canopy::bench::run_forest_study(fs);
    if (*fsv_cmd) return canopy::bench::run_forest_serve(fsv);
    return canopy::bench::run_pc(pc);
  } catch (const std::exception& e) {
    std::fflush(stdout);  // what was printed before the error comes first
    std::fprintf(stderr, "canopy-bench: error: %s\n", e.what());
    return 1;
  }
}
