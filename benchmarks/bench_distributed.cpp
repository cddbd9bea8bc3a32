// canopy-bench dist: the MPI layer (distributed/) under mpirun, one GPU per rank where there
// are GPUs. Every rank loads the same input; rank 0 prints per-rank and total times, the result
// bytes moved, the load imbalance, and (--check) whether the results equal one process's.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <thread>
#include <memory>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "benchmarks/bench_forest.hpp"
#include "distributed/distributed.hpp"
#include "io/forest_data.hpp"
#include "layouts/octree.hpp"
#include "runtime/barnes_hut.hpp"

namespace canopy {
namespace bench {

void add_dist_options(CLI::App& app, DistConfig& c) {
  app.add_option("--workload", c.workload, "pc, knn, bh (the points are the bodies, equal masses) or forest")
      ->capture_default_str();
  app.add_option("--distribute", c.distribute,
                 "replicate (every rank the whole tree, the queries sharded) or partition (the points split by "
                 "the top-tree, queries routed; pc, knn, and bh with the others' essential cells imported; forest: "
                 "the trees split, each row's sums passed from rank to rank)")
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
  app.add_option("--gather", c.gather,
                 "where the results go, comma-separated modes each timed in turn: all (every rank), root (rank 0), "
                 "local (each rank its share)")
      ->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed calls (the median is reported)")->capture_default_str();
  app.add_option("--warmup", c.warmup, "untimed calls first (auto's prior, then its trial)")->capture_default_str();
  app.add_option("--check", c.check, "1: rank 0 compares the results with one process's")->capture_default_str();
  app.add_option("--baseline", c.baseline,
                 "1: rank 0 also times the one-process call (the whole tree or forest, every query, one device) "
                 "and reports the speedup")
      ->capture_default_str();
  app.add_option("--on-device", c.on_device,
                 "1 puts the queries or rows and the results in each rank's device memory, as a simulation "
                 "holding its data on the GPU (gathered GPU to GPU; partition, pc and knn: also routed and moved "
                 "GPU to GPU); 0 host memory. Buffers are reused from call to call either way")
      ->capture_default_str();
  app.add_option("--variant", c.variant,
                 "pc, knn: the schedule x executor of every call, the baseline's too (auto: the API's default)")
      ->capture_default_str();
  app.add_option("--presort", c.presort,
                 "pc, knn: 1 puts the queries in a spatial order first (the tree order of a kd-tree built over "
                 "them), as a program that keeps its particles sorted; the baseline gets the same order")
      ->capture_default_str();
  app.add_option("--shard", c.shard,
                 "pc, knn replicate: the queries a rank runs: input (a contiguous run of the input), spatial (a run "
                 "of the queries' order by the tree's top cells), auto (spatial for device queries); knn partition "
                 "with --on-device 1: input, or spatial/auto (each rank the queries in its own top leaves)")
      ->capture_default_str();
  app.add_option("--rows", c.rows, "forest: rows (0: the file's; more: copies moved by --jitter)")->capture_default_str();
  app.add_option("--jitter", c.jitter, "forest: standard deviations the copies past the file's rows move by")
      ->capture_default_str();
  app.add_option("--memory-budget-mb", c.memory_budget_mb,
                 "partition: the most MiB a rank's tree or forest layout may take (0: no limit); over it the build "
                 "fails on every rank")
      ->capture_default_str();
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
  double bytes, items, tree_bytes;
  double gpu_used;  // bytes of its GPU's memory in use after the calls (every process on that GPU)
  double route_ms, move_ms, combine_ms;  // a partitioned device call's steps (DistributedStats)
};

double gpu_bytes_in_use() {
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<double>(total - free);
}

// A workload as the driver times it: the distributed call (keeping its result), the
// one-process call on rank 0 (keeping its result), and whether rank 0's distributed result
// equals the one-process one (its own share of it under Gather::Local).
struct DistWorkload {
  std::function<void(distributed::Gather, distributed::DistributedStats*)> call;
  std::function<void()> one;
  std::function<bool(distributed::Gather, index_t share)> same;
  std::function<void()> clear;  // the replicated results' buffers emptied (0xff) before the check's call
  // Rows rank 0 keeps under Gather::Local where that is not its share of the input order (the
  // partitioned kNN's owner shards), from the check call's stats; null: the share.
  std::function<index_t(const distributed::DistributedStats&)> local_rows;
  index_t items = 0;
  double tree_bytes = 0;  // this rank's tree (partition) or the whole tree
  std::string what;
  std::shared_ptr<std::string> note;  // what the check found, when results are not bits to compare
};

struct Timing {
  std::vector<double> total;
  distributed::DistributedStats last;
};

Timing time_calls(int warmup, int repeat, distributed::Gather g, const DistWorkload& w) {
  Timing t;
  for (int i = 0; i < warmup; ++i) w.call(g, &t.last);
  for (int r = 0; r < repeat; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    w.call(g, &t.last);
    t.total.push_back(t.last.wall_ms);
  }
  return t;
}

// MPI_Barrier, but a waiting rank sleeps between polls instead of spinning on a core.
void idle_barrier() {
  MPI_Request r;
  MPI_Ibarrier(MPI_COMM_WORLD, &r);
  for (int done = 0;;) {
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

double ms_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The caller's buffer of a replicated call: host memory, or device memory (--on-device), made
// once and reused by every call, as a program holds its arrays.
template <class T>
class Buffer {
 public:
  Buffer(std::size_t n, bool device) : n_(n), device_(device) {
    if (device_) {
      const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&d_), std::max<std::size_t>(n, 1) * sizeof(T));
      if (e != cudaSuccess) throw Error(std::string("cudaMalloc of a benchmark buffer: ") + cudaGetErrorString(e));
    } else {
      h_.resize(n);
    }
  }
  Buffer(const std::vector<T>& from, bool device) : Buffer(from.size(), device) {
    if (device_) copy_memory(d_, from.data(), from.size() * sizeof(T));
    else h_ = from;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (d_) cudaFree(d_);
  }
  // Every byte set to 0xff: index results -1, float results NaN (what a call did not write).
  void clear() {
    if (device_) {
      // Finished before the call: its work runs on non-blocking streams, which the legacy
      // stream's memset does not order against.
      cudaError_t e = cudaMemset(d_, 0xff, n_ * sizeof(T));
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
      if (e != cudaSuccess) throw Error(std::string("cudaMemset of a benchmark buffer: ") + cudaGetErrorString(e));
    } else {
      std::memset(static_cast<void*>(h_.data()), 0xff, n_ * sizeof(T));
    }
  }
  T* data() { return device_ ? d_ : h_.data(); }
  const T* data() const { return device_ ? d_ : h_.data(); }
  // The first `count` values, on the host.
  std::vector<T> head(std::size_t count) const {
    std::vector<T> v(std::min(count, n_));
    copy_memory(v.data(), data(), v.size() * sizeof(T));
    return v;
  }

 private:
  std::size_t n_;
  bool device_;
  std::vector<T> h_;
  T* d_ = nullptr;
};

// Rows of `width` index values written by a call into a cleared buffer (first value not -1):
// each equal to one process's row, and `rows` of them (a spatial shard's rows lie anywhere).
bool same_written_rows(const std::vector<index_t>& one, const std::vector<index_t>& got, std::size_t width,
                       std::size_t rows, const std::vector<float>* one_d = nullptr,
                       const std::vector<float>* got_d = nullptr) {
  if (width == 0 || one.size() != got.size()) return false;
  std::size_t written = 0;
  for (std::size_t r = 0; r * width < got.size(); ++r) {
    if (got[r * width] == -1) continue;
    ++written;
    const std::size_t a = r * width, b = a + width;
    if (!std::equal(got.begin() + a, got.begin() + b, one.begin() + a)) return false;
    if (one_d && std::memcmp(got_d->data() + a, one_d->data() + a, width * sizeof(float)) != 0) return false;
  }
  return written == rows;
}

template <class T>
bool equal_prefix(const std::vector<T>& one, const std::vector<T>& part, std::size_t items) {
  return part.size() >= items && one.size() >= items && std::equal(part.begin(), part.begin() + items, one.begin());
}

DistWorkload forest_workload(const DistConfig& c, Device device, bool partition, bool one_needed,
                             std::vector<std::shared_ptr<void>>& keep) {
  if (c.model.empty() || c.data.empty()) throw Error("forest: --model and --data are needed");
  auto f = std::make_shared<Forest>(Forest::load(c.model));
  const ForestData d = read_forest_csv(c.data, c.label);
  const index_t n = c.rows > 0 ? c.rows : d.n_rows;
  const bool dev = c.on_device != 0;
  auto rows = std::make_shared<Buffer<float>>(forest_batch(d, n, c.jitter), dev);
  ForestConfig cfg;
  cfg.device = device;
  cfg.layout = ForestLayout::Adaptive;
  // Replicate: every rank the whole forest. Partition: each rank its run of the trees in the
  // same layout (the leaf kernel finds their leaves), rank 0 the whole forest too for the check
  // or the baseline.
  std::shared_ptr<ForestPredictor> p;
  std::shared_ptr<distributed::PartitionedForest> part;
  if (partition)
    part = std::make_shared<distributed::PartitionedForest>(
        MPI_COMM_WORLD, *f, cfg, static_cast<std::uint64_t>(c.memory_budget_mb * 1024 * 1024));
  if (!partition || one_needed) p = std::make_shared<ForestPredictor>(*f, cfg);
  auto run = std::make_shared<ForestRunOptions>();
  run->output = ForestOutput::Margin;
  const Device used = p ? p->device() : part->local().device();
  if (used == Device::Gpu) run->kernel = ForestKernel::Auto;
  const std::size_t w = static_cast<std::size_t>(p ? p->output_width(run->output) : part->output_width(run->output));
  auto out = std::make_shared<Buffer<float>>(static_cast<std::size_t>(n) * w, dev);
  auto one = std::make_shared<Buffer<float>>(one_needed ? static_cast<std::size_t>(n) * w : 0, dev);
  keep.insert(keep.end(), {f, rows, p, part, run, out, one});
  DistWorkload wl;
  wl.call = [=](distributed::Gather g, distributed::DistributedStats* st) {
    if (partition)
      part->predict(rows->data(), n, *run, out->data(), st, g);
    else
      distributed::predict_forest(MPI_COMM_WORLD, *p, rows->data(), n, *run, out->data(), st, g);
  };
  wl.one = [=] { p->predict(rows->data(), n, *run, one->data()); };
  wl.same = [=](distributed::Gather, index_t share) {
    const std::size_t values = static_cast<std::size_t>(share) * w;
    const std::vector<float> a = one->head(values), b = out->head(values);
    return std::memcmp(a.data(), b.data(), values * sizeof(float)) == 0;
  };
  wl.items = n;
  wl.tree_bytes = static_cast<double>(partition ? part->local_bytes() : p->footprint_bytes());
  wl.what = "forest " + f->describe() + ", " + std::to_string(n) + " rows (" + c.data + ")";
  if (partition)
    wl.what += "; rank 0 holds trees " + std::to_string(part->first_tree()) + ".." +
               std::to_string(part->first_tree() + part->local_trees() - 1) + " of " + std::to_string(f->n_trees()) +
               (p ? ", the whole forest's layout " + std::to_string(p->footprint_bytes()) + " bytes" : std::string());
  return wl;
}

// pc and knn over a kd-tree: replicated (every rank the whole tree) or partitioned.
DistWorkload search_workload(const DistConfig& c, Device device, bool partition, bool one_needed, bool dev, int rank,
                             int ranks, std::vector<std::shared_ptr<void>>& keep) {
  DistWorkload w;
  auto in = std::make_shared<Inputs>(load_inputs(c.input, /*normalise=*/true, /*split=*/false));
  const index_t n = in->points.size(), m = in->queries.size();
  const int dims = in->points.dims;
  KdTreeOptions to;
  to.device = build_device(device);
  if (c.presort && m > 0) {
    // The same order on every rank: the tree is built from the same queries.
    const KdTree sorter = KdTree::build(in->queries.data(), m, dims, to);
    const std::vector<index_t>& order = sorter.point_ids();
    std::vector<float> sorted(in->queries.coords.size());
    for (index_t i = 0; i < m; ++i)
      std::copy_n(in->queries.coords.begin() + order[static_cast<std::size_t>(i)] * dims, dims, sorted.begin() + i * dims);
    in->queries.coords.swap(sorted);
  }
  std::shared_ptr<KdTree> whole;  // replicate: every rank; partition: rank 0 for the check or baseline only
  std::shared_ptr<distributed::PartitionedKdTree> part;
  if (partition) {
    int depth = c.top_depth;
    if (depth == 0)
      while ((index_t{1} << depth) < 4 * ranks) ++depth;
    const auto budget = static_cast<std::uint64_t>(c.memory_budget_mb * 1024 * 1024);
    part = std::make_shared<distributed::PartitionedKdTree>(MPI_COMM_WORLD, in->points.data(), n, dims, depth, to, budget);
  }
  if (!partition || one_needed) whole = std::make_shared<KdTree>(KdTree::build(in->points.data(), n, dims, to));
  const KdTree& searched = partition ? part->local() : *whole;
  w.tree_bytes = static_cast<double>(searched.bytes());
  // --on-device: every rank holds the queries in its device memory (the calls read their share).
  const distributed::Shard shard = distributed::parse_shard(c.shard);
  auto dq = std::make_shared<Buffer<float>>(dev ? in->queries.coords : std::vector<float>{}, dev);
  keep.insert(keep.end(), {in, whole, part, dq});
  const float* q = dev ? dq->data() : in->queries.data();
  if (c.workload == "pc") {
    auto o = std::make_shared<PcOptions>();
    o->device = device;
    const Variant v = parse_variants(c.variant, /*guided=*/false).at(0);
    o->schedule = v.schedule;
    o->executor = v.executor;
    // The radius from one process's tree on rank 0, the same on every rank.
    float r = 0;
    if (rank == 0) r = parse_radius(c.radius, whole ? *whole : searched, in->queries, c.input.seed);
    MPI_Bcast(&r, 1, MPI_FLOAT, 0, MPI_COMM_WORLD);
    o->radius = r;
    auto pc = std::make_shared<PointCorrelation>(searched, device);
    auto one_pc = one_needed ? std::make_shared<PointCorrelation>(*whole, device) : nullptr;
    auto res = std::make_shared<PcResult>();
    // Replicate and device queries: the calls into buffers made once (partition from the host
    // returns its counts).
    const bool into = !partition || dev;
    auto counts = std::make_shared<Buffer<index_t>>(into ? static_cast<std::size_t>(m) : 0, dev);
    auto one = std::make_shared<Buffer<index_t>>(one_needed ? static_cast<std::size_t>(m) : 0, dev);
    keep.insert(keep.end(), {o, pc, one_pc, res, counts, one});
    w.call = [=](distributed::Gather g, distributed::DistributedStats* st) {
      if (partition && dev)
        distributed::point_correlation_into(MPI_COMM_WORLD, *part, *pc, q, m, *o, counts->data(), st, g);
      else if (partition)
        *res = distributed::point_correlation(MPI_COMM_WORLD, *part, *pc, q, m, *o, st, g);
      else
        distributed::point_correlation_into(MPI_COMM_WORLD, *pc, q, m, *o, counts->data(), st, g, shard);
    };
    w.one = [=] { one_pc->run(q, m, *o, one->data()); };
    if (into) w.clear = [=] { counts->clear(); };
    w.same = [=](distributed::Gather, index_t share) {
      const std::size_t items = static_cast<std::size_t>(share);
      if (into)
        return same_written_rows(one->head(static_cast<std::size_t>(m)), counts->head(static_cast<std::size_t>(m)), 1,
                                 items);
      const std::vector<index_t>& got = res->counts;
      return got.size() == items && equal_prefix(one->head(items), got, items);
    };
    w.what = "pc radius " + std::to_string(r) + ", " + c.variant;
  } else {
    auto o = std::make_shared<KnnOptions>();
    o->device = device;
    const Variant v = parse_variants(c.variant, /*guided=*/true).at(0);
    o->schedule = v.schedule;
    o->executor = v.executor;
    o->k = c.k;
    auto nn = std::make_shared<NearestNeighbors>(searched, device);
    auto one_nn = one_needed ? std::make_shared<NearestNeighbors>(*whole, device) : nullptr;
    auto res = std::make_shared<KnnResult>();
    const std::size_t values = static_cast<std::size_t>(m) * static_cast<std::size_t>(std::max(c.k, 0));
    const bool into = !partition || dev;
    auto idx = std::make_shared<Buffer<index_t>>(into ? values : 0, dev);
    auto dist = std::make_shared<Buffer<float>>(into ? values : 0, dev);
    auto one_idx = std::make_shared<Buffer<index_t>>(one_needed ? values : 0, dev);
    auto one_dist = std::make_shared<Buffer<float>>(one_needed ? values : 0, dev);
    keep.insert(keep.end(), {o, nn, one_nn, res, idx, dist, one_idx, one_dist});
    const int k = c.k;
    w.call = [=](distributed::Gather g, distributed::DistributedStats* st) {
      if (partition && dev)
        distributed::nearest_neighbors_into(MPI_COMM_WORLD, *part, *nn, q, m, *o, idx->data(), dist->data(), st, g,
                                            shard);
      else if (partition)
        *res = distributed::nearest_neighbors(MPI_COMM_WORLD, *part, *nn, q, m, *o, st, g);
      else
        distributed::nearest_neighbors_into(MPI_COMM_WORLD, *nn, q, m, *o, idx->data(), dist->data(), st, g, shard);
    };
    w.one = [=] { one_nn->run(q, m, *o, one_idx->data(), one_dist->data()); };
    if (into)
      w.clear = [=] {
        idx->clear();
        dist->clear();
      };
    w.same = [=](distributed::Gather, index_t share) {
      const std::size_t items = static_cast<std::size_t>(share) * static_cast<std::size_t>(k);
      if (into) {
        const std::vector<float> od = one_dist->head(values), gd = dist->head(values);
        return same_written_rows(one_idx->head(values), idx->head(values), static_cast<std::size_t>(k),
                                 static_cast<std::size_t>(share), &od, &gd);
      }
      const std::vector<index_t>& gi = res->indices;
      const std::vector<float>& gd = res->distances;
      return gi.size() == items && equal_prefix(one_idx->head(items), gi, items) &&
             equal_prefix(one_dist->head(items), gd, items);
    };
    // Owner shards (partitioned, device queries, shard auto or spatial): rank 0 keeps its own rows.
    if (partition && dev && shard != distributed::Shard::Input)
      w.local_rows = [](const distributed::DistributedStats& st) { return st.local_items; };
    w.what = "knn k " + std::to_string(c.k) + ", " + c.variant;
  }
  w.items = m;
  w.what += ", " + std::to_string(n) + " points (" + in->source + "), " + std::to_string(m) + " queries" +
            (c.presort ? " in a spatial order" : "") + (partition && !dev ? "" : ", shard " + c.shard);
  if (partition)
    w.what += ", top-tree of " + std::to_string(part->leaf_owner().size()) + " leaves; the whole tree " +
              (whole ? std::to_string(whole->bytes()) + " bytes" : std::string("not built"));
  return w;
}

// Barnes-Hut: replicated bodies or partitioned ones.
DistWorkload bh_workload(const DistConfig& c, Device device, bool partition, bool one_needed, int ranks,
                         std::vector<std::shared_ptr<void>>& keep) {
  DistWorkload w;
  auto in = std::make_shared<Inputs>(load_inputs(c.input, /*normalise=*/true, /*split=*/false));
  if (in->points.dims != 3) throw Error("bh: the bodies need 3 coordinates, not " + std::to_string(in->points.dims));
  const index_t n = in->points.size();
  const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
  OctreeOptions oo;
  oo.device = build_device(device);
  auto o = std::make_shared<BhOptions>();
  o->device = device;
  auto res = std::make_shared<BhResult>(), one = std::make_shared<BhResult>();
  std::shared_ptr<Octree> tree;  // replicate: every rank; partition: rank 0 for the check or baseline only
  std::shared_ptr<BarnesHut> bh;
  std::shared_ptr<distributed::PartitionedBarnesHut> part;
  if (partition) {
    int depth = c.top_depth;
    if (depth == 0)
      while ((index_t{1} << depth) < 4 * ranks) ++depth;
    part = std::make_shared<distributed::PartitionedBarnesHut>(MPI_COMM_WORLD, in->points.data(), mass.data(), n,
                                                                depth, oo);
  }
  if (!partition || one_needed) {
    tree = std::make_shared<Octree>(Octree::build(in->points.data(), mass.data(), n, oo));
    bh = std::make_shared<BarnesHut>(*tree, device);
  }
  keep.insert(keep.end(), {in, tree, bh, part, o, res, one});
  w.call = [=](distributed::Gather g, distributed::DistributedStats* st) {
    *res = partition ? part->run(*o, st, g) : distributed::barnes_hut(MPI_COMM_WORLD, *bh, *o, st, g);
  };
  w.one = [=] { *one = bh->run(*o); };
  if (!partition) {
    w.same = [=](distributed::Gather, index_t share) {
      const std::size_t items = static_cast<std::size_t>(share) * 3;
      return res->forces.size() == items && one->forces.size() >= items &&
             std::memcmp(one->forces.data(), res->forces.data(), items * sizeof(float)) == 0;
    };
  } else {
    // Partitioned forces are a Barnes-Hut walk over other cells: compared with one process's
    // by their relative difference, within the opening angle's own error (median at most
    // theta^2 / 10; one process's own median error against the direct sum is ~theta^2 / 70).
    auto note = std::make_shared<std::string>();
    w.note = note;
    w.same = [=](distributed::Gather g, index_t) {
      const std::vector<index_t>& ids = part->local_ids();
      const bool all = res->forces.size() == one->forces.size();
      if (!all && res->forces.size() != ids.size() * 3) return false;
      std::vector<double> rel;
      const std::size_t bodies = all ? one->forces.size() / 3 : ids.size();
      for (std::size_t i = 0; i < bodies; ++i) {
        const std::size_t at = all ? i : static_cast<std::size_t>(ids[i]);
        double diff = 0, norm = 0;
        for (int d = 0; d < 3; ++d) {
          diff += std::pow(static_cast<double>(res->forces[i * 3 + d]) - one->forces[at * 3 + d], 2);
          norm += std::pow(static_cast<double>(one->forces[at * 3 + d]), 2);
        }
        rel.push_back(std::sqrt(diff / std::max(norm, 1e-300)));
      }
      std::sort(rel.begin(), rel.end());
      const double med = rel.empty() ? 0 : rel[rel.size() / 2], p99 = rel.empty() ? 0 : rel[(rel.size() - 1) * 99 / 100];
      char text[200];
      std::snprintf(text, sizeof text, "gather %s: relative difference to one process's forces: median %.3g, 99th percentile %.3g, largest %.3g",
                    distributed::to_string(g), med, p99, rel.empty() ? 0.0 : rel.back());
      *note += std::string(text) + "\n";
      return med <= static_cast<double>(o->theta) * o->theta / 10;
    };
  }
  w.items = n;
  w.what = "bh theta " + std::to_string(o->theta) + ", " + std::to_string(n) + " bodies (" + in->source + ")";
  if (partition) w.what += ", " + std::to_string(part->local_ids().size()) + " of them on rank 0";
  return w;
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
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be >= 1");
  if (c.warmup < 0) throw Error("--warmup " + std::to_string(c.warmup) + " must be >= 0");
  if (!(c.memory_budget_mb >= 0)) throw Error("--memory-budget-mb must be >= 0");
  std::vector<distributed::Gather> modes;
  {
    std::stringstream list(c.gather);
    for (std::string g; std::getline(list, g, ',');) modes.push_back(distributed::parse_gather(g));
  }
  if (modes.empty()) throw Error("--gather: no mode given");
  const bool one_needed = rank == 0 && (c.check || c.baseline);
  const bool dev = c.on_device != 0;
  if (dev && (c.workload == "bh" || (partition && c.workload == "forest")))
    throw Error("--on-device 1: pc, knn (replicate or partition) and forest (replicate)");

  std::vector<std::shared_ptr<void>> keep;  // what the workload's closures use
  DistWorkload w;
  if (c.workload == "forest") {
    w = forest_workload(c, device, partition, one_needed, keep);
  } else if (c.workload == "pc" || c.workload == "knn") {
    w = search_workload(c, device, partition, one_needed, dev, rank, ranks, keep);
  } else if (c.workload == "bh") {
    w = bh_workload(c, device, partition, one_needed, ranks, keep);
  } else {
    throw Error("--workload " + c.workload + ": pc, knn, bh or forest");
  }

  // Each gather mode in turn; then, on rank 0, the one-process call (the baseline) and the check.
  std::vector<Timing> timings;
  for (distributed::Gather g : modes) timings.push_back(time_calls(c.warmup, c.repeat, g, w));
  double one_ms = 0;
  bool same = true;
  if (one_needed) {
    std::vector<double> ms;
    for (int i = 0; i < (c.baseline ? c.warmup + c.repeat : 1); ++i) ms.push_back(ms_of(w.one));
    if (c.baseline) one_ms = median(std::vector<double>(ms.begin() + c.warmup, ms.end()));
  }
  idle_barrier();  // the other ranks wait without spinning: the baseline keeps every core
  std::vector<int> same_per_mode;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    // The last timed call's results are the last mode's: with several modes, each runs again.
    // Replicated pc and kNN run into cleared buffers, so the check sees which rows a rank wrote.
    if (c.check && w.clear) w.clear();
    distributed::DistributedStats check_stats;
    if (c.check && (modes.size() > 1 || w.clear)) w.call(modes[i], &check_stats);
    const bool all_here = modes[i] == distributed::Gather::All || modes[i] == distributed::Gather::Root;
    const index_t share = all_here     ? w.items
                          : w.local_rows ? w.local_rows(check_stats)
                                         : distributed::share_of(w.items, 0, ranks).count;
    const bool ok = rank != 0 || !c.check || w.same(modes[i], share);
    same_per_mode.push_back(ok);
    same = same && ok;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::vector<RankRow>> rows_per_mode;
  for (const Timing& t : timings) {
    RankRow mine{t.last.local_ms, median(t.total), static_cast<double>(t.last.bytes_moved),
                 static_cast<double>(t.last.local_items), w.tree_bytes, gpu_bytes_in_use(),
                 t.last.route_ms, t.last.move_ms, t.last.combine_ms};
    std::vector<RankRow> rows(static_cast<std::size_t>(ranks));
    MPI_Gather(&mine, sizeof mine, MPI_BYTE, rows.data(), sizeof mine, MPI_BYTE, 0, MPI_COMM_WORLD);
    rows_per_mode.push_back(rows);
  }
  if (rank != 0) return 0;
  std::printf("dist: %s, %s over %d ranks, device %s%s; median of %d calls after %d untimed\n", w.what.c_str(),
              c.distribute.c_str(), ranks, c.device.c_str(), dev ? ", queries and results in device memory" : "",
              c.repeat, c.warmup);
  if (c.baseline) std::printf("one process, one device: %.3f ms (rank 0, the whole tree, every query)\n", one_ms);
  nlohmann::json per_mode = nlohmann::json::array();
  for (std::size_t i = 0; i < modes.size(); ++i) {
    std::printf("gather %s (data through %s):\n%6s %12s %12s %14s %12s %14s %14s\n", distributed::to_string(modes[i]),
                timings[i].last.transport, "rank", "items", "local ms", "bytes moved", "call ms", "tree bytes",
                "GPU bytes used");
    double bytes = 0, slowest = 0;
    nlohmann::json per = nlohmann::json::array();
    for (int r = 0; r < ranks; ++r) {
      const RankRow& x = rows_per_mode[i][static_cast<std::size_t>(r)];
      std::printf("%6d %12.0f %12.3f %14.0f %12.3f %14.0f %14.0f\n", r, x.items, x.local_ms, x.bytes, x.total_ms,
                  x.tree_bytes, x.gpu_used);
      if (x.route_ms + x.move_ms + x.combine_ms > 0)
        std::printf("%6s steps: route %.3f ms, move %.3f ms, local %.3f ms, combine %.3f ms\n", "", x.route_ms,
                    x.move_ms, x.local_ms, x.combine_ms);
      bytes += x.bytes;
      slowest = std::max(slowest, x.total_ms);
      per.push_back({{"rank", r}, {"items", x.items}, {"local_ms", x.local_ms}, {"bytes_moved", x.bytes},
                     {"call_ms", x.total_ms}, {"tree_bytes", x.tree_bytes}, {"gpu_bytes_used", x.gpu_used},
                     {"route_ms", x.route_ms}, {"move_ms", x.move_ms}, {"combine_ms", x.combine_ms}});
    }
    const double imbalance = timings[i].last.imbalance;
    std::printf("total: %.3f ms (slowest rank's call), %.0f bytes moved, queries and results (%.1f per item), load "
                "imbalance %.3f",
                slowest, bytes, w.items > 0 ? bytes / static_cast<double>(w.items) : 0.0, imbalance);
    if (c.baseline && slowest > 0) std::printf(", %.2fx one process", one_ms / slowest);
    std::printf("\n");
    if (c.check && w.note)
      std::printf("results %s one process's (Barnes-Hut's tolerance)\n", same_per_mode[i] ? "within" : "NOT within");
    else if (c.check)
      std::printf("results %s one process's\n", same_per_mode[i] ? "identical to" : "DIFFER from");
    per_mode.push_back({{"gather", distributed::to_string(modes[i])}, {"transport", timings[i].last.transport},
                        {"total_ms", slowest}, {"bytes_moved", bytes},
                        {"imbalance", imbalance}, {"speedup", c.baseline && slowest > 0 ? nlohmann::json(one_ms / slowest) : nlohmann::json()},
                        {"identical", c.check ? nlohmann::json(bool(same_per_mode[i])) : nlohmann::json()},
                        {"per_rank", per}});
  }
  if (w.note) std::printf("%s", w.note->c_str());
  if (!c.json.empty())
    write_json(c.json, {{"workload", c.workload}, {"distribute", c.distribute}, {"ranks", ranks}, {"what", w.what},
                        {"on_device", dev},
                        {"one_process_ms", c.baseline ? nlohmann::json(one_ms) : nlohmann::json()}, {"modes", per_mode}});
  return c.check && !same ? 1 : 0;
}

}  // namespace bench
}  // namespace canopy
