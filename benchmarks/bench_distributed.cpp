// canopy-bench dist: the MPI layer (distributed/) under mpirun, one GPU per rank where there
// are GPUs. Every rank loads the same input; rank 0 prints per-rank and total times, the result
// bytes moved, the load imbalance, and (--check) whether the results equal one process's.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "distributed/distributed.hpp"
#include "io/forest_data.hpp"
#include "layouts/octree.hpp"
#include "runtime/barnes_hut.hpp"

namespace canopy {
namespace bench {

void add_dist_options(CLI::App& app, DistConfig& c) {
  app.add_option("--workload", c.workload, "pc, knn, bh (the points are the bodies, unit masses) or forest")
      ->capture_default_str();
  app.add_option("--distribute", c.distribute,
                 "replicate (every rank the whole tree, the queries sharded) or partition (the points split by "
                 "the top-tree, queries routed; pc and knn)")
      ->capture_default_str();
  add_input_options(app, c.input,
                    {"CSV or CSV.gz with a header row (normalised to [0,1])", "generated points instead: uniform:N:D",
                     "CSV(.gz) or generator of queries (default: the points themselves)", "seed of --generate",
                     "put the queries in a random order (seed)"});
  app.add_option("--radius", c.radius, "pc: radius R, or auto:K for a mean count of about K")->capture_default_str();
  app.add_option("--k", c.k, "knn: neighbours per query")->capture_default_str();
  app.add_option("--top-depth", c.top_depth,
                 "partition: levels of the top-tree that splits the points (0: ranks x 4 leaves at least)")
      ->capture_default_str();
  app.add_option("--model", c.model, "forest: the model file");
  app.add_option("--data", c.data, "forest: CSV(.gz) rows");
  app.add_option("--label", c.label, "forest: the label column, left out of the features");
  app.add_option("--device", c.device, "auto, cpu or gpu (each rank takes GPU local-rank mod count)")->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed calls (the median is reported)")->capture_default_str();
  app.add_option("--check", c.check, "1: rank 0 compares the results with one process's")->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file (rank 0)");
}

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// One call's numbers on every rank, gathered on rank 0.
struct RankRow {
  double local_ms, total_ms;
  double bytes, items;
};

struct Timing {
  std::vector<double> total;
  distributed::DistributedStats last;
};

template <class F>
Timing time_calls(int repeat, F&& call) {
  Timing t;
  call(&t.last);  // warm-up (the GPU engines' first call)
  for (int r = 0; r < repeat; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    call(&t.last);
    t.total.push_back(t.last.total_ms);
  }
  return t;
}

}  // namespace

int run_dist(const DistConfig& c) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Device device = parse_device(c.device);
  int gpus = 0;
  if (device != Device::Cpu && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
    const int local = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("MPI_LOCALRANKID", rank));
    cudaSetDevice(local % gpus);
  }
  const bool partition = c.distribute == "partition";
  if (!partition && c.distribute != "replicate")
    throw Error("--distribute " + c.distribute + ": replicate or partition");
  if (partition && (c.workload == "forest" || c.workload == "bh"))
    throw Error("--distribute partition: pc and knn only (" + c.workload + " is replicated)");
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be >= 1");

  Timing t;
  bool same = true;  // rank 0: the results equal one process's
  index_t n_items = 0;
  std::string what;
  if (c.workload == "forest") {
    if (c.model.empty() || c.data.empty()) throw Error("forest: --model and --data are needed");
    const Forest f = Forest::load(c.model);
    const ForestData d = read_forest_csv(c.data, c.label);
    ForestConfig cfg;
    cfg.device = device;
    cfg.layout = ForestLayout::Adaptive;
    ForestPredictor p(f, cfg);
    ForestRunOptions run;
    run.output = ForestOutput::Margin;
    if (p.device() == Device::Gpu) run.kernel = ForestKernel::Auto;
    const int w = p.output_width(run.output);
    std::vector<float> out(static_cast<std::size_t>(d.n_rows) * w);
    t = time_calls(c.repeat, [&](distributed::DistributedStats* st) {
      distributed::predict_forest(MPI_COMM_WORLD, p, d.values.data(), d.n_rows, out.data(), run, st);
    });
    if (rank == 0 && c.check) {
      std::vector<float> one(out.size());
      p.predict(d.values.data(), d.n_rows, one.data(), run);
      same = std::memcmp(one.data(), out.data(), one.size() * sizeof(float)) == 0;
    }
    n_items = d.n_rows;
    what = "forest " + f.describe() + ", " + std::to_string(d.n_rows) + " rows";
  } else if (c.workload == "pc" || c.workload == "knn") {
    const Inputs in = load_inputs(c.input, /*normalise=*/true, /*split=*/false);
    const index_t n = in.points.size(), m = in.queries.size();
    const int dims = in.points.dims;
    KdTreeOptions to;
    to.device = build_device(device);
    std::unique_ptr<KdTree> whole;  // replicate: every rank; partition: rank 0 with --check only
    std::unique_ptr<distributed::PartitionedKdTree> part;
    if (partition) {
      int depth = c.top_depth;
      if (depth == 0)
        while ((index_t{1} << depth) < 4 * ranks) ++depth;
      part = std::make_unique<distributed::PartitionedKdTree>(MPI_COMM_WORLD, in.points.data(), n, dims, depth, to);
    }
    if (!partition || (rank == 0 && c.check)) whole = std::make_unique<KdTree>(KdTree::build(in.points.data(), n, dims, to));
    const KdTree& searched = partition ? part->local() : *whole;
    if (c.workload == "pc") {
      PcOptions o;
      o.device = device;
      // The radius from one process's tree on rank 0, the same on every rank.
      float r = 0;
      if (rank == 0) r = parse_radius(c.radius, whole ? *whole : searched, in.queries, c.input.seed);
      MPI_Bcast(&r, 1, MPI_FLOAT, 0, MPI_COMM_WORLD);
      o.radius = r;
      PointCorrelation pc(searched, device);
      PcResult res;
      t = time_calls(c.repeat, [&](distributed::DistributedStats* st) {
        res = partition ? distributed::point_correlation(MPI_COMM_WORLD, *part, pc, in.queries.data(), m, o, st)
                        : distributed::point_correlation(MPI_COMM_WORLD, pc, in.queries.data(), m, o, st);
      });
      if (rank == 0 && c.check) {
        PointCorrelation one(*whole, device);
        same = one.run(in.queries.data(), m, o).counts == res.counts;
      }
      what = "pc radius " + std::to_string(r);
    } else {
      KnnOptions o;
      o.device = device;
      o.k = c.k;
      NearestNeighbors nn(searched, device);
      KnnResult res;
      t = time_calls(c.repeat, [&](distributed::DistributedStats* st) {
        res = partition ? distributed::nearest_neighbors(MPI_COMM_WORLD, *part, nn, in.queries.data(), m, o, st)
                        : distributed::nearest_neighbors(MPI_COMM_WORLD, nn, in.queries.data(), m, o, st);
      });
      if (rank == 0 && c.check) {
        NearestNeighbors one(*whole, device);
        const KnnResult r1 = one.run(in.queries.data(), m, o);
        same = r1.indices == res.indices && r1.distances == res.distances;
      }
      what = "knn k " + std::to_string(c.k);
    }
    n_items = m;
    what += ", " + std::to_string(n) + " points (" + in.source + "), " + std::to_string(m) + " queries";
    if (partition)
      what += ", top-tree of " + std::to_string(part->leaf_owner().size()) + " leaves; this rank's tree " +
              std::to_string(part->local().size()) + " points";
  } else if (c.workload == "bh") {
    const Inputs in = load_inputs(c.input, /*normalise=*/true, /*split=*/false);
    if (in.points.dims != 3) throw Error("bh: the bodies need 3 coordinates, not " + std::to_string(in.points.dims));
    const index_t n = in.points.size();
    const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
    OctreeOptions oo;
    oo.device = build_device(device);
    const Octree tree = Octree::build(in.points.data(), mass.data(), n, oo);
    BarnesHut bh(tree, device);
    BhOptions o;
    o.device = device;
    BhResult res;
    t = time_calls(c.repeat, [&](distributed::DistributedStats* st) { res = distributed::barnes_hut(MPI_COMM_WORLD, bh, o, st); });
    if (rank == 0 && c.check) {
      const BhResult one = bh.run(o);
      same = std::memcmp(one.forces.data(), res.forces.data(), one.forces.size() * sizeof(float)) == 0;
    }
    n_items = n;
    what = "bh theta " + std::to_string(o.theta) + ", " + std::to_string(n) + " bodies (" + in.source + ")";
  } else {
    throw Error("--workload " + c.workload + ": pc, knn, bh or forest");
  }

  RankRow mine{t.last.local_ms, median(t.total), static_cast<double>(t.last.bytes_moved), static_cast<double>(t.last.local_items)};
  std::vector<RankRow> rows(static_cast<std::size_t>(ranks));
  MPI_Gather(&mine, sizeof mine, MPI_BYTE, rows.data(), sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank != 0) return 0;
  std::printf("dist: %s, %s over %d ranks, device %s; median of %d calls\n", what.c_str(), c.distribute.c_str(), ranks,
              c.device.c_str(), c.repeat);
  std::printf("%6s %12s %12s %14s %12s\n", "rank", "items", "local ms", "bytes moved", "call ms");
  double bytes = 0, slowest = 0;
  nlohmann::json per = nlohmann::json::array();
  for (int r = 0; r < ranks; ++r) {
    const RankRow& x = rows[static_cast<std::size_t>(r)];
    std::printf("%6d %12.0f %12.3f %14.0f %12.3f\n", r, x.items, x.local_ms, x.bytes, x.total_ms);
    bytes += x.bytes;
    slowest = std::max(slowest, x.total_ms);
    per.push_back({{"rank", r}, {"items", x.items}, {"local_ms", x.local_ms}, {"bytes_moved", x.bytes}, {"call_ms", x.total_ms}});
  }
  std::printf("total: %.3f ms (slowest rank's call), %.0f bytes moved, queries and results (%.1f per query), load imbalance %.3f\n",
              slowest, bytes, n_items > 0 ? bytes / static_cast<double>(n_items) : 0.0, t.last.imbalance);
  if (c.check) std::printf("results %s one process's\n", same ? "identical to" : "DIFFER from");
  if (!c.json.empty())
    write_json(c.json, {{"workload", c.workload}, {"distribute", c.distribute}, {"ranks", ranks}, {"what", what},
                        {"total_ms", slowest}, {"bytes_moved", bytes}, {"imbalance", t.last.imbalance},
                        {"identical", c.check ? nlohmann::json(same) : nlohmann::json()}, {"per_rank", per}});
  return c.check && !same ? 1 : 0;
}

}  // namespace bench
}  // namespace canopy
