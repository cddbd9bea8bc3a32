#include "distributed/distributed.hpp"
#include "distributed/mpi_detail.hpp"
#include "distributed/partition_detail.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/device.hpp"
#include "core/rounding.hpp"
#include "layouts/geometry.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "inspector/inspector.hpp"
#include "runtime/pc_visitor.hpp"
#include "scheduler/spatial_order.hpp"

namespace canopy {
namespace distributed {

const char* to_string(Gather g) {
  switch (g) {
    case Gather::All: return "all";
    case Gather::Root: return "root";
    case Gather::Local: return "local";
  }
  return "?";
}

Gather parse_gather(const std::string& name) {
  for (Gather g : {Gather::All, Gather::Root, Gather::Local})
    if (name == to_string(g)) return g;
  throw Error("gather '" + name + "': all, root or local");
}

Share share_of(index_t n, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error("share_of: rank " + std::to_string(rank) + " of " + std::to_string(ranks) + " ranks");
  if (n < 0) throw Error("share_of: " + std::to_string(n) + " items");
  const index_t base = n / ranks, extra = n % ranks;
  Share s;
  s.begin = rank * base + std::min<index_t>(rank, extra);
  s.count = base + (rank < extra ? 1 : 0);
  return s;
}

const char* to_string(Shard s) {
  switch (s) {
    case Shard::Auto: return "auto";
    case Shard::Input: return "input";
    case Shard::Spatial: return "spatial";
  }
  return "?";
}

Shard parse_shard(const std::string& name) {
  for (Shard s : {Shard::Auto, Shard::Input, Shard::Spatial})
    if (name == to_string(s)) return s;
  throw Error("shard '" + name + "': auto, input or spatial");
}

int spatial_shard_depth(const KdTree& tree, int ranks) {
  int d = 8;
  while (d < SpatialOrder::kMaxDepth && (1 << (d - 8)) < ranks) ++d;
  return std::max(1, std::min({d, SpatialOrder::kMaxDepth, tree.height() - 1}));
}

using namespace detail;  // NOLINT: this file is the layer the helpers serve

namespace {

// Auto's choice. A random half of the queries is half as dense as the whole, so the warps of a
// sorted call lose coherence (two H100s: pc 1.68x one GPU, 1.97x for spatially ordered input);
// spatial shards keep the density. Measured where the queries are on the device; host queries
// pay a host sort and gather that the measurement did not repay (benchmarks/RESULTS.md).
// Collective: every rank takes the same path (spatial only where every rank can), and a rank
// that cannot take Spatial fails the call on every rank.
bool spatial_shards(MPI_Comm comm, Shard shard, const KdTree* tree, const float* queries, index_t n) {
  int want = 0;
  run_share(comm, "queries", Share{0, n}, [&] {
    if (shard == Shard::Spatial && !tree) throw Error("shard spatial: the search tree is not a kd-tree");
    want = shard == Shard::Spatial ||
           (shard == Shard::Auto && tree && place_in(comm).ranks > 1 && n > 0 && is_device_pointer(queries));
  });
  int all = 0;
  check_mpi(MPI_Allreduce(&want, &all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  return all == 1;
}

// One thread's spatial order and its scratch, kept from call to call.
SpatialOrder& thread_order() {
  thread_local SpatialOrder order;
  return order;
}

// A result array of the caller's: [n] rows of row_bytes bytes.
struct ResultRows {
  void* full;
  std::size_t row_bytes;
};

// A replicated call over spatial shards: this rank's positions s of the queries' spatial order,
// run by run(queries, count, compact results) into scratch, then scattered to their queries'
// places; All and Root move the compact shares (positions of the order) and place them.
template <class Run>
void run_spatial(MPI_Comm comm, const KdTree& tree, const float* queries, index_t n, stream_t stream, Share s,
                 const std::vector<ResultRows>& outs, Gather gather, DistributedStats* stats, Run&& run) {
  SpatialOrder& order = thread_order();
  const auto [rank, ranks] = place_in(comm);
  std::vector<void*> compact(outs.size());
  run_timed_share(comm, "queries (positions of the spatial order)", s, stats, [&] {
    order.compute(tree, spatial_shard_depth(tree, ranks), queries, n, stream);
    const std::size_t query_bytes = static_cast<std::size_t>(tree.dims()) * sizeof(float);
    auto* mine = static_cast<float*>(order.buffer(0, static_cast<std::size_t>(s.count) * query_bytes, order.on_device()));
    order.gather(queries, query_bytes, s.begin, s.count, mine, stream);
    for (std::size_t k = 0; k < outs.size(); ++k)
      compact[k] = order.buffer(static_cast<int>(k) + 1, static_cast<std::size_t>(s.count) * outs[k].row_bytes,
                                is_device_pointer(outs[k].full));
    run(mine, s.count, compact);
    for (std::size_t k = 0; k < outs.size(); ++k)
      order.scatter(compact[k], outs[k].row_bytes, s.begin, s.count, outs[k].full, stream);
  });
  if (gather == Gather::Local) return;
  if (on_device_everywhere(comm, outs.front().full, "result buffers")) {
    // GPU to GPU: the compact shares travel, and each lands at its queries' places.
    for (std::size_t k = 0; k < outs.size(); ++k)
      move_device_shares(device_exchange(comm), comm, gather, compact[k], n, outs[k].row_bytes, stats,
                         [&](int, const void* rows, index_t begin, index_t count) {
                           order.scatter(rows, outs[k].row_bytes, begin, count, outs[k].full, stream);
                         });
    return;
  }
  const bool all = holds_all(gather, rank);
  std::vector<unsigned char> placed;
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const std::size_t rb = outs[k].row_bytes;
    const auto* mine = static_cast<const unsigned char*>(compact[k]);
    if (all) {
      placed.resize(static_cast<std::size_t>(n) * rb);
      std::copy_n(mine, static_cast<std::size_t>(s.count) * rb, placed.begin() + static_cast<std::ptrdiff_t>(s.begin * rb));
    }
    gather_in_place(comm, gather, all ? placed.data() : nullptr, mine, n, static_cast<index_t>(rb), stats);
    if (!all) continue;
    const std::vector<index_t>& ids = order.host_order();
    auto* full = static_cast<unsigned char*>(outs[k].full);
    tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1 << 14), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t j = r.begin(); j < r.end(); ++j)
        if (j < s.begin || j >= s.begin + s.count)
          std::memcpy(full + static_cast<std::size_t>(ids[static_cast<std::size_t>(j)]) * rb, placed.data() + j * rb, rb);
    });
  }
}

}  // namespace

TraversalStats point_correlation_into(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                                 const PcOptions& options, index_t* counts, DistributedStats* stats, Gather gather,
                                 Shard shard) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = pc.tree().dims();
  TraversalStats ts;
  if (spatial_shards(comm, shard, &pc.tree(), queries, n)) {
    run_spatial(comm, pc.tree(), queries, n, options.stream, s, {{counts, sizeof(index_t)}},
                gather, stats, [&](const float* q, index_t m, const std::vector<void*>& out) {
                  ts = pc.run(q, m, options, static_cast<index_t*>(out[0]));
                });
    finish_stats(comm, stats, start);
    return ts;
  }
  run_timed_share(comm, "queries", s, stats, [&] {
    ts = pc.run(queries + s.begin * dims, s.count, options, counts + s.begin);
  });
  gather_in_place(comm, gather, counts, counts + s.begin, n, 1, stats);
  finish_stats(comm, stats, start);
  return ts;
}

PcResult point_correlation(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                           const PcOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  ResultBuffer<index_t> buf(gather, place_in(comm).rank, n, s, 1);
  TraversalStats ts;
  run_timed_share(comm, "queries", s, stats, [&] {
    ts = pc.run(queries + s.begin * pc.tree().dims(), s.count, options, buf.share);
  });
  gather_in_place(comm, gather, buf.full, buf.share, n, 1, stats);
  PcResult out;
  static_cast<TraversalStats&>(out) = ts;
  out.counts = std::move(buf.values);
  finish_stats(comm, stats, start);
  return out;
}

namespace {

// k is checked on every rank, also on those whose share is empty.
void check_k(const NearestNeighbors& nn, int k) {
  if (k < 1 || k > nn.size())
    throw Error("k = " + std::to_string(k) + " is outside 1.." + std::to_string(nn.size()) + " (the tree's points)");
}

}  // namespace

TraversalStats nearest_neighbors_into(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                                 const KnnOptions& options, index_t* indices, float* distances,
                                 DistributedStats* stats, Gather gather, Shard shard) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const index_t k = options.k;
  TraversalStats ts;
  if (spatial_shards(comm, shard, nn.kd_tree(), queries, n)) {
    const std::size_t kk = static_cast<std::size_t>(std::max(options.k, 0));
    run_spatial(comm, *nn.kd_tree(), queries, n, options.stream, s,
                {{indices, kk * sizeof(index_t)}, {distances, kk * sizeof(float)}},
                gather, stats, [&](const float* q, index_t m, const std::vector<void*>& out) {
                  check_k(nn, options.k);
                  ts = nn.run(q, m, options, static_cast<index_t*>(out[0]), static_cast<float*>(out[1]));
                });
    finish_stats(comm, stats, start);
    return ts;
  }
  run_timed_share(comm, "queries", s, stats, [&] {
    check_k(nn, options.k);
    ts = nn.run(queries + s.begin * nn.dims(), s.count, options, indices + s.begin * k, distances + s.begin * k);
  });
  gather_in_place(comm, gather, indices, indices + s.begin * k, n, k, stats);
  gather_in_place(comm, gather, distances, distances + s.begin * k, n, k, stats);
  finish_stats(comm, stats, start);
  return ts;
}

KnnResult nearest_neighbors(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                            const KnnOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int rank = place_in(comm).rank;
  const index_t k = std::max(options.k, 0);
  ResultBuffer<index_t> idx(gather, rank, n, s, k);
  ResultBuffer<float> dist(gather, rank, n, s, k);
  TraversalStats ts;
  run_timed_share(comm, "queries", s, stats, [&] {
    check_k(nn, options.k);
    ts = nn.run(queries + s.begin * nn.dims(), s.count, options, idx.share, dist.share);
  });
  gather_in_place(comm, gather, idx.full, idx.share, n, k, stats);
  gather_in_place(comm, gather, dist.full, dist.share, n, k, stats);
  KnnResult out;
  static_cast<TraversalStats&>(out) = ts;
  out.k = options.k;
  out.indices = std::move(idx.values);
  out.distances = std::move(dist.values);
  finish_stats(comm, stats, start);
  return out;
}

void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n,
                    const ForestRunOptions& options, float* out, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  index_t width = 0;
  run_timed_share(comm, "rows", s, stats, [&] {
    width = predictor.output_width(options.output);
    if (s.count > 0)
      predictor.predict(rows + s.begin * predictor.n_features(), s.count, options, out + s.begin * width);
  });
  gather_in_place(comm, gather, out, out + s.begin * width, n, width, stats);
  finish_stats(comm, stats, start);
}

TraversalStats barnes_hut_into(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, float* forces,
                          DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const index_t n = bh.tree().size();
  const Share s = my_share(comm, n, stats);
  TraversalStats ts;
  run_timed_share(comm, "bodies", s, stats, [&] {
    ts = bh.run(options, s.begin, s.count, forces + s.begin * 3);
  });
  gather_in_place(comm, gather, forces, forces + s.begin * 3, n, 3, stats);
  finish_stats(comm, stats, start);
  return ts;
}

BhResult barnes_hut(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const index_t n = bh.tree().size();
  const Share s = my_share(comm, n, stats);
  ResultBuffer<float> buf(gather, place_in(comm).rank, n, s, 3);
  TraversalStats ts;
  run_timed_share(comm, "bodies", s, stats, [&] {
    ts = bh.run(options, s.begin, s.count, buf.share);
  });
  gather_in_place(comm, gather, buf.full, buf.share, n, 3, stats);
  BhResult out;
  static_cast<TraversalStats&>(out) = ts;
  out.forces = std::move(buf.values);
  finish_stats(comm, stats, start);
  return out;
}

}  // namespace distributed
}  // namespace canopy
