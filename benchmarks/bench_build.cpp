// canopy-bench build: the trees built on the CPU (TBB, every host core) and on the GPU, timed
// side by side, and the GPU tree checked against the CPU tree bit for bit (exit status 2 if they
// differ).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include <tbb/task_arena.h>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/device.hpp"
#include "io/dataset.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"

namespace canopy {
namespace bench {

void add_source_options(CLI::App& app, PointSource& c) {
  app.add_option("--points", c.points, "a CSV(.gz) file of points (normalised to the unit cube)");
  app.add_option("--columns", c.columns, "the file's columns to use, e.g. 0-6 (default: all)");
  app.add_option("--generate", c.generate, "uniform:N:D or plummer:N when no --points")->capture_default_str();
  app.add_option("--seed", c.seed, "the generator's seed")->capture_default_str();
  app.add_flag("--skip-incomplete", c.skip_incomplete, "drop rows of --points with an empty field in the chosen columns");
}

PointSet load_source(const PointSource& c) {
  if (c.points.empty()) return generate(c.generate, c.seed);
  ReadOptions ro;
  ro.skip_incomplete = c.skip_incomplete;
  PointSet ps = read_csv(c.points, c.columns, ro);
  report_skipped(c.points, ps);
  normalize_unit_cube(ps);
  return ps;
}

void add_build_options(CLI::App& app, BuildConfig& c) {
  add_source_options(app, c.source);
  app.add_option("--trees", c.trees, "a list of kd, ball, vp, octree (the first three coordinates, masses 1/N)")
      ->capture_default_str();
  app.add_option("--leaf-size", c.leaf_size, "most points per leaf")->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed builds per device (the median is reported)")->capture_default_str();
  app.add_option("--json", c.json, "write the rows to this file");
}

namespace {

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

bool same_tree(const KdTree& a, const KdTree& b) {
  return a.height() == b.height() && same_bits(a.nodes(), b.nodes()) && same_bits(a.boxes(), b.boxes()) &&
         same_bits(a.points(), b.points()) && same_bits(a.point_ids(), b.point_ids());
}

bool same_tree(const BallTree& a, const BallTree& b) {
  return a.height() == b.height() && same_bits(a.nodes(), b.nodes()) && same_bits(a.centres(), b.centres()) &&
         same_bits(a.radii(), b.radii()) && same_bits(a.points(), b.points()) && same_bits(a.point_ids(), b.point_ids());
}

bool same_tree(const VpTree& a, const VpTree& b) {
  return a.height() == b.height() && same_bits(a.nodes(), b.nodes()) && same_bits(a.vantages(), b.vantages()) &&
         same_bits(a.mu(), b.mu()) && same_bits(a.parent(), b.parent()) && same_bits(a.shell_lo(), b.shell_lo()) &&
         same_bits(a.shell_hi(), b.shell_hi()) && same_bits(a.points(), b.points()) &&
         same_bits(a.point_ids(), b.point_ids());
}

bool same_tree(const Octree& a, const Octree& b) {
  return a.height() == b.height() && same_bits(a.nodes(), b.nodes()) && same_bits(a.child_ids(), b.child_ids()) &&
         same_bits(a.com(), b.com()) && same_bits(a.cubes(), b.cubes()) && same_bits(a.bodies(), b.bodies()) &&
         same_bits(a.body_ids(), b.body_ids());
}

double wall_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Row {
  std::string tree;
  double cpu_ms = 0, gpu_build_ms = 0, gpu_upload_ms = 0, gpu_download_ms = 0, gpu_wall_ms = 0;
  bool equal = false;
};

// Times build(stats) on both devices (a warm-up each, then `repeat` runs) and compares the trees.
template <class Tree, class CpuBuild, class GpuBuild>
Row measure(const char* name, int repeat, CpuBuild cpu_build, GpuBuild gpu_build) {
  Row r;
  r.tree = name;
  Tree cpu = cpu_build();
  std::vector<double> cpu_ms, build, upload, download, wall;
  for (int i = 0; i < repeat; ++i) cpu_ms.push_back(wall_ms([&] { cpu = cpu_build(); }));
  r.cpu_ms = median(cpu_ms);
  if (!gpu_available()) return r;
  GpuBuildStats st;
  Tree gpu = gpu_build(&st);
  for (int i = 0; i < repeat; ++i) {
    wall.push_back(wall_ms([&] { gpu = gpu_build(&st); }));
    build.push_back(st.build_ms);
    upload.push_back(st.upload_ms);
    download.push_back(st.download_ms);
  }
  r.gpu_build_ms = median(build);
  r.gpu_upload_ms = median(upload);
  r.gpu_download_ms = median(download);
  r.gpu_wall_ms = median(wall);
  r.equal = same_tree(gpu, cpu);
  return r;
}

// A tree built by Tree::build on the CPU and Tree::build_on_gpu from the same options (ball, vp).
template <class Tree, class Options>
Row measure_static(const char* name, const BuildConfig& c, const PointSet& ps) {
  const index_t n = ps.size();
  Options o;
  o.leaf_size = c.leaf_size;
  o.device = Device::Cpu;
  return measure<Tree>(
      name, c.repeat, [&] { return Tree::build(ps.data(), n, ps.dims, o); },
      [&](GpuBuildStats* st) { return Tree::build_on_gpu(ps.data(), n, ps.dims, o, st); });
}

}  // namespace

int run_build(const BuildConfig& c) {
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be at least 1");
  const PointSet ps = load_source(c.source);
  const std::string source = c.source.points.empty() ? c.source.generate : c.source.points;
  const index_t n = ps.size();
  std::printf("points %lld, %d-d (%s); leaf size %d; CPU: %d threads; GPU: %s\n", static_cast<long long>(n), ps.dims,
              source.c_str(), c.leaf_size, tbb::this_task_arena::max_concurrency(), gpu_description().c_str());

  // Each tree's row is printed (and flushed) once it is measured: a crash in a later build keeps it.
  const bool gpu = gpu_available();
  std::printf("\n| tree | CPU build ms | GPU build ms | GPU upload + download ms | GPU wall ms | CPU / GPU build | "
              "equal |\n| --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
  std::fflush(stdout);
  bool all_equal = true;
  nlohmann::json out = {{"source", source}, {"n", n}, {"dims", ps.dims}, {"leaf_size", c.leaf_size}, {"rows", {}}};
  auto add = [&](const Row& r) {
    if (gpu) {
      std::printf("| %s | %.1f | %.2f | %.2f + %.2f | %.1f | %.0f× | %s |\n", r.tree.c_str(), r.cpu_ms, r.gpu_build_ms,
                  r.gpu_upload_ms, r.gpu_download_ms, r.gpu_wall_ms, r.cpu_ms / r.gpu_build_ms,
                  r.equal ? "yes" : "NO");
      all_equal = all_equal && r.equal;
    } else {
      std::printf("| %s | %.1f | – | – | – | – | – |\n", r.tree.c_str(), r.cpu_ms);
    }
    std::fflush(stdout);
    out["rows"].push_back({{"tree", r.tree}, {"cpu_ms", r.cpu_ms}, {"gpu_build_ms", r.gpu_build_ms},
                           {"gpu_upload_ms", r.gpu_upload_ms}, {"gpu_download_ms", r.gpu_download_ms},
                           {"gpu_wall_ms", r.gpu_wall_ms}, {"equal", r.equal}});
  };
  std::stringstream list(c.trees);
  for (std::string t; std::getline(list, t, ',');) {
    if (t == "kd") {
      KdTreeOptions o;
      o.leaf_size = c.leaf_size;
      o.device = Device::Cpu;  // build() is the CPU row; the GPU row calls the GPU build itself
      KdTreeGpuBuilder builder;  // the rebuilds reuse its buffers, as a simulation's would
      add(measure<KdTree>(
          "kd", c.repeat, [&] { return KdTree::build(ps.data(), n, ps.dims, o); },
          [&](GpuBuildStats* st) { return builder.build(ps.data(), n, ps.dims, o, st); }));
    } else if (t == "ball") {
      add(measure_static<BallTree, BallTreeOptions>("ball", c, ps));
    } else if (t == "vp") {
      add(measure_static<VpTree, VpTreeOptions>("vp", c, ps));
    } else if (t == "octree") {
      if (ps.dims < 3) throw Error("--trees octree needs 3 coordinates; the points have " + std::to_string(ps.dims));
      std::vector<float> xyz(static_cast<std::size_t>(n) * 3);
      for (index_t i = 0; i < n; ++i)
        for (int a = 0; a < 3; ++a) xyz[i * 3 + a] = ps.coords[i * ps.dims + a];
      const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
      OctreeOptions o;
      o.leaf_size = c.leaf_size;
      o.device = Device::Cpu;
      add(measure<Octree>(
          "octree", c.repeat, [&] { return Octree::build(xyz.data(), mass.data(), n, o); },
          [&](GpuBuildStats* st) { return Octree::build_on_gpu(xyz.data(), mass.data(), n, o, st); }));
    } else {
      throw Error("--trees: unknown tree '" + t + "' (kd, ball, vp, octree)");
    }
  }

  if (!c.json.empty()) write_json(c.json, out);
  if (!all_equal) {
    std::fprintf(stderr, "canopy-bench build: a GPU tree differs from the CPU tree\n");
    return 2;
  }
  return 0;
}

}  // namespace bench
}  // namespace canopy
