#include "distributed/distributed.hpp"
#include "distributed/mpi_detail.hpp"

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
  const char* what;
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
    for (const ResultRows& o : outs) check_gather_buffer(gather, o.full, o.what);
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

TraversalStats point_correlation(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                                 const PcOptions& options, index_t* counts, DistributedStats* stats, Gather gather,
                                 Shard shard) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = pc.tree().dims();
  TraversalStats ts;
  if (spatial_shards(comm, shard, &pc.tree(), queries, n)) {
    run_spatial(comm, pc.tree(), queries, n, options.stream, s, {{counts, sizeof(index_t), "the counts buffer"}},
                gather, stats, [&](const float* q, index_t m, const std::vector<void*>& out) {
                  ts = pc.run(q, m, options, static_cast<index_t*>(out[0]));
                });
    finish_stats(comm, stats, start);
    return ts;
  }
  run_timed_share(comm, "queries", s, stats, [&] {
    check_gather_buffer(gather, counts, "the counts buffer");
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

TraversalStats nearest_neighbors(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                                 const KnnOptions& options, index_t* indices, float* distances,
                                 DistributedStats* stats, Gather gather, Shard shard) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const index_t k = options.k;
  TraversalStats ts;
  if (spatial_shards(comm, shard, nn.kd_tree(), queries, n)) {
    const std::size_t kk = static_cast<std::size_t>(std::max(options.k, 0));
    run_spatial(comm, *nn.kd_tree(), queries, n, options.stream, s,
                {{indices, kk * sizeof(index_t), "the indices buffer"}, {distances, kk * sizeof(float), "the distances buffer"}},
                gather, stats, [&](const float* q, index_t m, const std::vector<void*>& out) {
                  check_k(nn, options.k);
                  ts = nn.run(q, m, options, static_cast<index_t*>(out[0]), static_cast<float*>(out[1]));
                });
    finish_stats(comm, stats, start);
    return ts;
  }
  run_timed_share(comm, "queries", s, stats, [&] {
    check_k(nn, options.k);
    check_gather_buffer(gather, indices, "the indices buffer");
    check_gather_buffer(gather, distances, "the distances buffer");
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

void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n, float* out,
                    const ForestRunOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  index_t width = 0;
  run_timed_share(comm, "rows", s, stats, [&] {
    width = predictor.output_width(options.output);
    check_gather_buffer(gather, out, "the output buffer");
    if (s.count > 0)
      predictor.predict(rows + s.begin * predictor.n_features(), s.count, out + s.begin * width, options);
  });
  gather_in_place(comm, gather, out, out + s.begin * width, n, width, stats);
  finish_stats(comm, stats, start);
}

TraversalStats barnes_hut(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, float* forces,
                          DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const index_t n = bh.tree().size();
  const Share s = my_share(comm, n, stats);
  TraversalStats ts;
  run_timed_share(comm, "bodies", s, stats, [&] {
    check_gather_buffer(gather, forces, "the forces buffer");
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

// ---- the distributed tree ------------------------------------------------------------------------

namespace {

// The cut both partitioned kinds share: KdTree's own median splits of the points, stopped at
// leaves of about n / 2^depth points (its top-tree), and contiguous runs of those leaves
// balanced by points, one run per rank; every rank computes the same cut.
struct TopCut {
  std::unique_ptr<KdTree> top;
  std::vector<node_id> leaf_node;           // the top-tree's leaves, left to right
  std::vector<int> owner;                   // per leaf
  std::vector<float> boxes;                 // per leaf: lo[dims], hi[dims]
  std::vector<std::vector<index_t>> ids;    // per rank: its points' original indices, ascending
};

TopCut cut_top_tree(const float* points, index_t n, int dims, int depth, int ranks, const char* what) {
  if (depth < 1 || depth > 30) throw Error(std::string(what) + ": depth " + std::to_string(depth) + " is outside 1..30");
  const index_t wanted = index_t{1} << depth;
  if (n < ranks) throw Error(std::string(what) + ": " + std::to_string(n) + " points for " + std::to_string(ranks) + " ranks");
  TopCut cut;
  KdTreeOptions top;
  top.leaf_size = static_cast<int>(std::max<index_t>(1, (n + wanted - 1) / wanted));
  top.device = Device::Cpu;
  cut.top = std::make_unique<KdTree>(KdTree::build(points, n, dims, top));
  const KdTreeView v = cut.top->view();
  for (node_id k = 0; k < v.n_nodes; ++k)
    if (v.is_leaf(k)) cut.leaf_node.push_back(k);  // depth-first ids: left to right
  const index_t L = static_cast<index_t>(cut.leaf_node.size());
  if (L < ranks)
    throw Error(std::string(what) + ": the top-tree of depth " + std::to_string(depth) + " has " + std::to_string(L) +
                " leaves for " + std::to_string(ranks) + " ranks (each rank owns at least one: a deeper top-tree)");
  // A leaf goes to the rank its middle point falls in, with no rank left out.
  cut.owner.resize(static_cast<std::size_t>(L));
  cut.boxes.resize(static_cast<std::size_t>(L) * 2 * dims);
  cut.ids.resize(static_cast<std::size_t>(ranks));
  index_t before = 0;
  int prev = -1;
  for (index_t i = 0; i < L; ++i) {
    const node_id k = cut.leaf_node[static_cast<std::size_t>(i)];
    const KdNode& node = v.nodes[k];
    const double middle = static_cast<double>(before) + node.count / 2.0;
    int r = static_cast<int>(middle * ranks / static_cast<double>(n));
    r = std::min(std::max(r, prev), prev + 1);
    r = std::min(std::max(r, ranks - static_cast<int>(L - i)), ranks - 1);
    cut.owner[static_cast<std::size_t>(i)] = prev = r;
    before += node.count;
    std::copy(v.lo(k), v.lo(k) + dims, cut.boxes.begin() + i * 2 * dims);
    std::copy(v.hi(k), v.hi(k) + dims, cut.boxes.begin() + i * 2 * dims + dims);
    std::vector<index_t>& mine = cut.ids[static_cast<std::size_t>(r)];
    mine.insert(mine.end(), v.point_ids + node.first, v.point_ids + node.first + node.count);
  }
  // Original order: kNN ties break as in one process; Barnes-Hut's own bodies come first.
  tbb::parallel_for(std::size_t{0}, cut.ids.size(), [&](std::size_t r) { std::sort(cut.ids[r].begin(), cut.ids[r].end()); });
  return cut;
}

}  // namespace

PartitionedKdTree::PartitionedKdTree(MPI_Comm comm, const float* points, index_t n, int dims, int depth,
                                     const KdTreeOptions& options, std::uint64_t memory_budget)
    : comm_(comm), n_(n), dims_(dims) {
  const Place place = place_in(comm);
  ranks_ = place.ranks;
  TopCut cut = cut_top_tree(points, n, dims, depth, ranks_, "partitioned tree");
  top_ = std::move(cut.top);
  leaf_node_ = std::move(cut.leaf_node);
  owner_ = std::move(cut.owner);
  boxes_ = std::move(cut.boxes);
  ids_ = std::move(cut.ids[static_cast<std::size_t>(place.rank)]);
  // Built under run_share: a rank over its budget or out of memory fails every rank.
  const index_t count = static_cast<index_t>(ids_.size());
  run_share(comm, "local points", Share{0, count}, [&] {
    const auto over = [&](std::uint64_t need, const char* what) {
      if (memory_budget > 0 && need > memory_budget)
        throw Error("partitioned tree: this rank's " + std::to_string(count) + " of " + std::to_string(n) + " points " +
                    what + " " + std::to_string(need) + " bytes, over the memory budget of " +
                    std::to_string(memory_budget) + " bytes per rank (more ranks spread the points thinner)");
    };
    // Before the build, the points and their ids alone (what the tree holds at the least).
    over(static_cast<std::uint64_t>(count) * (sizeof(float) * padded_dims(dims) + sizeof(index_t)), "need at least");
    points_.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(dims));
    tbb::parallel_for(index_t{0}, count, [&](index_t i) {
      const index_t id = ids_[static_cast<std::size_t>(i)];
      std::copy(points + id * dims, points + (id + 1) * dims, points_.begin() + i * dims);
    });
    local_ = std::make_unique<KdTree>(KdTree::build(points_.data(), count, dims, options));
    over(local_->bytes(), "take a tree of");
  });
}

int PartitionedKdTree::owner_of(const float* q) const {
  const node_id leaf = top_->view().find_leaf(q);
  const auto at = std::lower_bound(leaf_node_.begin(), leaf_node_.end(), leaf);
  return owner_[static_cast<std::size_t>(at - leaf_node_.begin())];
}

namespace {

// The squared distance from q to a box, in double: at most the exact squared distance to any
// point inside it.
double box_distance2(const float* q, const float* lo, const float* hi, int dims) {
  double d2 = 0;
  for (int d = 0; d < dims; ++d) {
    const double below = static_cast<double>(lo[d]) - q[d], above = static_cast<double>(q[d]) - hi[d];
    const double gap = std::max(0.0, std::max(below, above));
    d2 += gap * gap;
  }
  return d2;
}

// hit[r] = 1 for the ranks whose boxes come within sqrt(reach2) of q (the float distances the
// traversals compute may round below the exact one: a relative margin keeps every such point).
void ranks_within(const PartitionedKdTree& t, const float* q, double reach2, std::uint8_t* hit) {
  const int dims = t.dims();
  const double limit = reach2 * (1 + 1e-5) + 1e-30;
  std::fill(hit, hit + t.ranks(), std::uint8_t{0});
  for (std::size_t i = 0; i < t.leaf_owner().size(); ++i) {
    const float* lo = t.leaf_boxes().data() + i * 2 * dims;
    if (!hit[t.leaf_owner()[i]] && box_distance2(q, lo, lo + dims, dims) <= limit) hit[t.leaf_owner()[i]] = 1;
  }
}

// The inspector as the router: each query's traversal through the top-tree with the
// point-correlation visitor (the descend test its traversals make, radius2 computed as
// PointCorrelation computes it) reaches the top leaves that may hold points within the radius;
// to[i * ranks + r] = 1 for the owners of those leaves. A point within the radius lies in a top
// leaf whose box passes the same float test, so no rank that holds one is missed.
void route_radius(const PartitionedKdTree& t, const float* queries, index_t count, float radius2, std::uint8_t* to) {
  const KdTreeView top = t.top().view();
  const std::vector<node_id>& leaves = t.top_leaf_nodes();
  TopTreeView columns;
  columns.leaves = leaves.data();
  columns.n_leaves = static_cast<index_t>(leaves.size());
  columns.depth = top.height;  // every leaf of the top-tree is a column
  columns.first_leaf = leaves.front();
  columns.last_leaf = leaves.back();
  const index_t words = (columns.n_leaves + 63) / 64;
  const int ranks = t.ranks();
  dispatch_dims(t.dims(), [&](auto width) {
    PointCorrelationVisitor<decltype(width)::value> v;
    v.tree = top;
    v.queries = queries;
    v.radius2 = radius2;
    tbb::parallel_for(tbb::blocked_range<index_t>(0, count), [&](const tbb::blocked_range<index_t>& range) {
      std::vector<std::uint64_t> row(static_cast<std::size_t>(words));
      for (index_t i = range.begin(); i < range.end(); ++i) {
        inspect_row(top, columns, v, i, row.data(), words);
        for (index_t w = 0; w < words; ++w)
          for (std::uint64_t bits = row[static_cast<std::size_t>(w)]; bits; bits &= bits - 1) {
            const index_t c = w * 64 + __builtin_ctzll(bits);
            to[i * ranks + t.leaf_owner()[static_cast<std::size_t>(c)]] = 1;
          }
      }
    });
  });
}

// MPI_Alltoallv of byte messages: out[d] goes to rank d; returns what every rank sent here, in
// rank order.
std::vector<std::vector<char>> exchange(MPI_Comm comm, const std::vector<std::vector<char>>& out, DistributedStats* st) {
  const int ranks = static_cast<int>(out.size());
  std::vector<int> send(static_cast<std::size_t>(ranks)), recv(send), sat(send), rat(send);
  std::uint64_t total = 0, in = 0;
  for (int r = 0; r < ranks; ++r) {
    total += out[static_cast<std::size_t>(r)].size();
    send[static_cast<std::size_t>(r)] = static_cast<int>(std::min<std::size_t>(out[static_cast<std::size_t>(r)].size(), INT_MAX));
  }
  check_mpi(MPI_Alltoall(send.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  for (int r = 0; r < ranks; ++r) in += static_cast<std::uint64_t>(recv[static_cast<std::size_t>(r)]);
  // MPI counts are ints: a rank over the limit stops every rank, not only itself (the others
  // would wait in MPI_Alltoallv for ever).
  const int over = total > static_cast<std::uint64_t>(INT_MAX) || in > static_cast<std::uint64_t>(INT_MAX);
  int any = 0;
  check_mpi(MPI_Allreduce(&over, &any, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (any)
    throw Error("a rank's routed queries or results exceed one MPI message's " + std::to_string(INT_MAX) +
                " bytes (split the queries into several calls)");
  std::vector<char> flat(static_cast<std::size_t>(total));
  int at = 0;
  for (int r = 0; r < ranks; ++r) {
    sat[static_cast<std::size_t>(r)] = at;
    std::copy(out[static_cast<std::size_t>(r)].begin(), out[static_cast<std::size_t>(r)].end(), flat.begin() + at);
    at += send[static_cast<std::size_t>(r)];
  }
  at = 0;
  for (int r = 0; r < ranks; ++r) {
    rat[static_cast<std::size_t>(r)] = at;
    at += recv[static_cast<std::size_t>(r)];
  }
  std::vector<char> got(static_cast<std::size_t>(in));
  check_mpi(MPI_Alltoallv(flat.data(), send.data(), sat.data(), MPI_BYTE, got.data(), recv.data(), rat.data(), MPI_BYTE, comm),
            "MPI_Alltoallv");
  if (st) st->bytes_moved += total + in;
  std::vector<std::vector<char>> from(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    from[static_cast<std::size_t>(r)].assign(got.begin() + rat[static_cast<std::size_t>(r)],
                                             got.begin() + rat[static_cast<std::size_t>(r)] + recv[static_cast<std::size_t>(r)]);
  return from;
}

template <class T>
char* put(char* b, const T* v, std::size_t count) {
  std::memcpy(b, v, count * sizeof(T));
  return b + count * sizeof(T);
}
template <class T>
const char* get(const char* p, T* v, std::size_t count) {
  std::memcpy(v, p, count * sizeof(T));
  return p + count * sizeof(T);
}

// Fixed-size records for each rank, built in parallel: item i (0..items-1) goes to the ranks r
// with to[i * ranks + r], in item order within each rank's message; write(i, at) writes its
// `record` bytes at `at`.
template <class Write>
std::vector<std::vector<char>> pack(const std::vector<std::uint8_t>& to, int ranks, index_t items, std::size_t record,
                                    Write&& write) {
  const index_t block = 4096, blocks = (items + block - 1) / block;
  // Per block and rank: how many records, then where they start.
  std::vector<index_t> at(static_cast<std::size_t>(blocks * ranks));
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    for (index_t i = b * block; i < std::min(items, (b + 1) * block); ++i)
      for (int r = 0; r < ranks; ++r) at[static_cast<std::size_t>(b * ranks + r)] += to[static_cast<std::size_t>(i * ranks + r)];
  });
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    index_t sum = 0;
    for (index_t b = 0; b < blocks; ++b) {
      const index_t c = at[static_cast<std::size_t>(b * ranks + r)];
      at[static_cast<std::size_t>(b * ranks + r)] = sum;
      sum += c;
    }
    out[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(sum) * record);
  }
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    std::vector<index_t> next(at.begin() + b * ranks, at.begin() + (b + 1) * ranks);
    for (index_t i = b * block; i < std::min(items, (b + 1) * block); ++i)
      for (int r = 0; r < ranks; ++r)
        if (to[static_cast<std::size_t>(i * ranks + r)])
          write(i, out[static_cast<std::size_t>(r)].data() + static_cast<std::size_t>(next[static_cast<std::size_t>(r)]++) * record);
  });
  return out;
}

// Queries of this rank's share sent where `to` says: (id, coordinates) records.
std::vector<std::vector<char>> pack_queries(const std::vector<std::uint8_t>& to, int ranks, Share s,
                                            const float* queries, int dims) {
  return pack(to, ranks, s.count, sizeof(index_t) + sizeof(float) * static_cast<std::size_t>(dims),
              [&](index_t i, char* at) {
                const index_t id = s.begin + i;
                put(put(at, &id, 1), queries + id * dims, static_cast<std::size_t>(dims));
              });
}

// Received queries: their ids and coordinates, in arrival order (sender by sender); first[r] is
// the first of those sender r sent.
struct Inbox {
  std::vector<index_t> id;
  std::vector<float> coords;
  std::vector<index_t> first;  // [ranks + 1]
};
Inbox unpack_queries(const std::vector<std::vector<char>>& from, int dims) {
  Inbox in;
  const std::size_t rec = sizeof(index_t) + sizeof(float) * static_cast<std::size_t>(dims);
  in.first.push_back(0);
  for (const std::vector<char>& b : from) in.first.push_back(in.first.back() + static_cast<index_t>(b.size() / rec));
  in.id.resize(static_cast<std::size_t>(in.first.back()));
  in.coords.resize(in.id.size() * static_cast<std::size_t>(dims));
  for (std::size_t r = 0; r < from.size(); ++r)
    tbb::parallel_for(in.first[r], in.first[r + 1], [&](index_t j) {
      const char* p = from[r].data() + static_cast<std::size_t>(j - in.first[r]) * rec;
      get(get(p, &in.id[static_cast<std::size_t>(j)], 1), in.coords.data() + j * dims, static_cast<std::size_t>(dims));
    });
  return in;
}

// Replies to the senders of an inbox, one `record`-byte record per received query, in the order
// each sender sent them: write(j, at) writes received query j's.
template <class Write>
std::vector<std::vector<char>> pack_replies(const Inbox& in, std::size_t record, Write&& write) {
  std::vector<std::vector<char>> reply(in.first.size() - 1);
  for (std::size_t r = 0; r + 1 < in.first.size(); ++r) {
    reply[r].resize(static_cast<std::size_t>(in.first[r + 1] - in.first[r]) * record);
    tbb::parallel_for(in.first[r], in.first[r + 1], [&](index_t j) {
      write(j, reply[r].data() + static_cast<std::size_t>(j - in.first[r]) * record);
    });
  }
  return reply;
}

// Runs each record of each sender's message through f(record), in parallel within a message
// (a message names each query once) and message after message.
template <class F>
void for_each_record(const std::vector<std::vector<char>>& from, std::size_t record, F&& f) {
  for (const std::vector<char>& b : from)
    tbb::parallel_for(std::size_t{0}, b.size() / record, [&](std::size_t j) { f(b.data() + j * record); });
}

}  // namespace

PcResult point_correlation(MPI_Comm comm, const PartitionedKdTree& tree, PointCorrelation& local, const float* queries,
                           index_t n, const PcOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = tree.dims(), ranks = tree.ranks();
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks));
  run_share(comm, "queries", s, [&] {
    if (!(std::isfinite(options.radius) && options.radius >= 0))
      throw Error("radius " + std::to_string(options.radius) + " must be finite and >= 0");
    check_queries(queries + s.begin * dims, s.count, dims);  // numbered within the share, as run_share says
    std::vector<std::uint8_t> to(static_cast<std::size_t>(s.count * ranks));
    route_radius(tree, queries + s.begin * dims, s.count, options.radius * options.radius, to.data());
    out = pack_queries(to, ranks, s, queries, dims);
  });
  const Inbox in = unpack_queries(exchange(comm, out, stats), dims);
  PcResult part;
  run_share(comm, "routed queries", Share{0, static_cast<index_t>(in.id.size())}, [&] {
    const Clock::time_point t = Clock::now();
    part = local.run(in.coords.data(), static_cast<index_t>(in.id.size()), options);
    if (stats) {
      stats->local_ms = ms_since(t);
      stats->local_items = static_cast<index_t>(in.id.size());
    }
  });
  const std::size_t rec = 2 * sizeof(index_t);
  const auto reply = pack_replies(in, rec, [&](index_t j, char* at) {
    put(put(at, &in.id[static_cast<std::size_t>(j)], 1), &part.counts[static_cast<std::size_t>(j)], 1);
  });
  std::vector<index_t> mine(static_cast<std::size_t>(s.count), 0);
  for_each_record(exchange(comm, reply, stats), rec, [&](const char* p) {
    index_t id, c;
    get(get(p, &id, 1), &c, 1);
    mine[static_cast<std::size_t>(id - s.begin)] += c;  // each point is counted by its owner only
  });
  PcResult result;
  static_cast<TraversalStats&>(result) = static_cast<const TraversalStats&>(part);
  result.counts = gathered(comm, gather, std::move(mine), n, 1, stats);
  finish_stats(comm, stats, start);
  return result;
}

namespace {

// The k best candidates of each query of a share so far, ascending by (squared distance,
// original index): the single-process kNN's order. Distances travel squared because two
// different squared distances can round to one distance, and the order must not change.
struct Candidates {
  int k;
  std::vector<float> d2;        // [queries][k]
  std::vector<index_t> id;      // [queries][k]
  std::vector<int> found;       // [queries]
  Candidates(index_t queries, int k_)
      : k(k_), d2(static_cast<std::size_t>(queries * k_)), id(d2.size()), found(static_cast<std::size_t>(queries)) {}
  // Merges a sorted list of (d2, id) pairs (id < 0: none) into query i's.
  void merge(index_t i, const char* p) {
    float* d = d2.data() + i * k;
    index_t* x = id.data() + i * k;
    thread_local std::vector<std::pair<float, index_t>> both;
    both.clear();
    for (int j = 0; j < found[static_cast<std::size_t>(i)]; ++j) both.emplace_back(d[j], x[j]);
    for (int j = 0; j < k; ++j) {
      float dj;
      index_t xj;
      p = get(get(p, &dj, 1), &xj, 1);
      if (xj >= 0) both.emplace_back(dj, xj);
    }
    std::sort(both.begin(), both.end());
    const int keep = static_cast<int>(std::min<std::size_t>(both.size(), static_cast<std::size_t>(k)));
    for (int j = 0; j < keep; ++j) {
      d[j] = both[static_cast<std::size_t>(j)].first;
      x[j] = both[static_cast<std::size_t>(j)].second;
    }
    found[static_cast<std::size_t>(i)] = keep;
  }
};

// The squared distance the kNN visitor computes between a query and a point (both `dims` floats).
float distance2(const float* q, const float* p, int dims) {
  return dispatch_dims(dims, [&](auto width) {
    constexpr int W = decltype(width)::value;
    float a[W], b[W];
    load_query(q, dims, a);
    load_query(p, dims, b);
    return point_distance2<W>(a, b);
  });
}

// Runs the local search on received queries and packs each answer for its sender: id, then k
// (squared distance, original index) pairs, padded with (inf, -1).
std::vector<std::vector<char>> answer_knn(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                                          const Inbox& in, const KnnOptions& options, DistributedStats* stats) {
  const int k = options.k, dims = tree.dims();
  const int k_local = static_cast<int>(std::min<index_t>(k, local.size()));
  KnnResult part;
  run_share(comm, "routed queries", Share{0, static_cast<index_t>(in.id.size())}, [&] {
    KnnOptions o = options;
    o.k = k_local;
    const Clock::time_point t = Clock::now();
    part = local.run(in.coords.data(), static_cast<index_t>(in.id.size()), o);
    if (stats) stats->local_ms += ms_since(t);
  });
  const float inf = std::numeric_limits<float>::infinity();
  const index_t none = -1;
  return pack_replies(in, sizeof(index_t) + static_cast<std::size_t>(k) * (sizeof(float) + sizeof(index_t)),
                      [&](index_t j, char* at) {
                        at = put(at, &in.id[static_cast<std::size_t>(j)], 1);
                        for (int c = 0; c < k; ++c) {
                          if (c < k_local) {
                            const index_t li = part.indices[static_cast<std::size_t>(j * k_local + c)];
                            const float d2 = distance2(in.coords.data() + j * dims, tree.local_points().data() + li * dims, dims);
                            const index_t id = tree.local_ids()[static_cast<std::size_t>(li)];
                            at = put(put(at, &d2, 1), &id, 1);
                          } else {
                            at = put(put(at, &inf, 1), &none, 1);
                          }
                        }
                      });
}

void merge_knn(const std::vector<std::vector<char>>& from, const Share& s, int k, Candidates& cand) {
  for_each_record(from, sizeof(index_t) + static_cast<std::size_t>(k) * (sizeof(float) + sizeof(index_t)),
                  [&](const char* p) {
                    index_t id;
                    p = get(p, &id, 1);
                    cand.merge(id - s.begin, p);
                  });
}

}  // namespace

KnnResult nearest_neighbors(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local, const float* queries,
                            index_t n, const KnnOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = tree.dims(), ranks = tree.ranks(), k = options.k;
  // Round 1: each query to the rank that owns its top leaf.
  std::vector<std::vector<char>> out;
  std::vector<int> first(static_cast<std::size_t>(s.count));
  run_share(comm, "queries", s, [&] {
    if (k < 1 || k > tree.global_size())
      throw Error("k = " + std::to_string(k) + " is outside 1.." + std::to_string(tree.global_size()) + " (the tree's points)");
    check_queries(queries + s.begin * dims, s.count, dims);  // numbered within the share, as run_share says
    std::vector<std::uint8_t> to(static_cast<std::size_t>(s.count * ranks));
    tbb::parallel_for(index_t{0}, s.count, [&](index_t i) {
      const int r = tree.owner_of(queries + (s.begin + i) * dims);
      first[static_cast<std::size_t>(i)] = r;
      to[static_cast<std::size_t>(i * ranks + r)] = 1;
    });
    out = pack_queries(to, ranks, s, queries, dims);
  });
  Candidates cand(s.count, k);
  merge_knn(exchange(comm, answer_knn(comm, tree, local, unpack_queries(exchange(comm, out, stats), dims), options, stats), stats),
            s, k, cand);
  // Round 2: the k-th squared distance found bounds the other ranks (all of them while fewer
  // than k are known).
  std::vector<std::uint8_t> to(static_cast<std::size_t>(s.count * ranks));
  tbb::parallel_for(index_t{0}, s.count, [&](index_t i) {
    const double bound2 = cand.found[static_cast<std::size_t>(i)] == k ? static_cast<double>(cand.d2[static_cast<std::size_t>(i * k + k - 1)])
                                                                        : std::numeric_limits<double>::infinity();
    std::uint8_t* hit = to.data() + i * ranks;
    ranks_within(tree, queries + (s.begin + i) * dims, bound2, hit);
    hit[first[static_cast<std::size_t>(i)]] = 0;
  });
  merge_knn(exchange(comm, answer_knn(comm, tree, local, unpack_queries(exchange(comm, pack_queries(to, ranks, s, queries, dims), stats), dims),
                                      options, stats),
                     stats),
            s, k, cand);
  std::vector<float> dist(cand.d2.size());
  tbb::parallel_for(std::size_t{0}, dist.size(), [&](std::size_t j) { dist[j] = sqrt_rn(cand.d2[j]); });
  KnnResult result;
  result.k = k;
  result.indices = gathered(comm, gather, std::move(cand.id), n, k, stats);
  result.distances = gathered(comm, gather, std::move(dist), n, k, stats);
  finish_stats(comm, stats, start);
  return result;
}

// ---- Barnes-Hut over partitioned bodies -----------------------------------------------------------

PartitionedBarnesHut::PartitionedBarnesHut(MPI_Comm comm, const float* xyz, const float* mass, index_t n, int depth,
                                           const OctreeOptions& options)
    : comm_(comm), n_(n), options_(options) {
  const Place place = place_in(comm);
  rank_ = place.rank;
  ranks_ = place.ranks;
  TopCut cut = cut_top_tree(xyz, n, 3, depth, ranks_, "partitioned Barnes-Hut");
  ids_ = std::move(cut.ids);
  // Every rank's bounding box (the same on every rank: the cut is).
  boxes_.assign(static_cast<std::size_t>(ranks_) * 6, 0.0f);
  for (int r = 0; r < ranks_; ++r) {
    float* b = boxes_.data() + r * 6;
    for (int d = 0; d < 3; ++d) {
      b[d] = std::numeric_limits<float>::infinity();
      b[3 + d] = -std::numeric_limits<float>::infinity();
    }
    for (index_t id : ids_[static_cast<std::size_t>(r)])
      for (int d = 0; d < 3; ++d) {
        b[d] = std::min(b[d], xyz[id * 3 + d]);
        b[3 + d] = std::max(b[3 + d], xyz[id * 3 + d]);
      }
  }
  const std::vector<index_t>& mine = local_ids();
  const index_t count = static_cast<index_t>(mine.size());
  xyz_.resize(static_cast<std::size_t>(count) * 3);
  mass_.resize(static_cast<std::size_t>(count));
  run_share(comm, "local bodies", Share{0, count}, [&] {
    tbb::parallel_for(index_t{0}, count, [&](index_t i) {
      const index_t id = mine[static_cast<std::size_t>(i)];
      std::copy(xyz + id * 3, xyz + id * 3 + 3, xyz_.begin() + i * 3);
      mass_[static_cast<std::size_t>(i)] = mass[id];
    });
    OctreeOptions own = options;
    own.device = Device::Cpu;  // walked on the host when the others import from it
    own_ = std::make_unique<Octree>(Octree::build(xyz_.data(), mass_.data(), count, own));
  });
}

PartitionedBarnesHut::~PartitionedBarnesHut() = default;

namespace {

// Squared distance, in double, from the box lo[3], hi[3] to the point p.
double box_point_distance2(const float* lo, const float* hi, const float* p) {
  double d2 = 0;
  for (int d = 0; d < 3; ++d) {
    const double gap = std::max(0.0, std::max(static_cast<double>(lo[d]) - p[d], static_cast<double>(p[d]) - hi[d]));
    d2 += gap * gap;
  }
  return d2;
}

// What a rank whose bodies lie in `box` (lo[3], hi[3]) needs of `tree`: (x, y, z, mass)
// records, in the tree's depth-first order. A cell is sent whole when no body in the box would
// open it: the box misses its cube and side^2 < theta^2 d^2 for the box's nearest point (with a
// margin over the walk's float rounding); else its children, and at a leaf its bodies.
std::vector<float> essential_part(const OctreeView& tree, const float* box, float theta) {
  std::vector<float> out;
  if (tree.n_nodes == 0) return out;
  const double theta2 = static_cast<double>(theta) * theta;
  std::vector<node_id> stack{0};
  while (!stack.empty()) {
    const node_id n = stack.back();
    stack.pop_back();
    const float* c = tree.cube(n);
    const float* com = tree.node_com(n);
    if (!(com[3] > 0.0f)) continue;  // no mass: no force
    bool touches = true;
    for (int d = 0; d < 3; ++d)
      if (box[3 + d] < c[d] - c[3] || box[d] > c[d] + c[3]) touches = false;
    const double side = 2.0 * c[3];
    if (!touches && side * side < theta2 * box_point_distance2(box, box + 3, com) * (1 - 1e-4)) {
      out.insert(out.end(), com, com + 4);
      continue;
    }
    if (tree.is_leaf(n)) {
      const OctNode node = tree.nodes[n];
      out.insert(out.end(), tree.body(node.first), tree.body(node.first + node.count));
      continue;
    }
    for (int i = tree.child_count(n) - 1; i >= 0; --i) stack.push_back(tree.child(n, i));
  }
  return out;
}

}  // namespace

BhResult PartitionedBarnesHut::run(const BhOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const index_t count = static_cast<index_t>(local_ids().size());
  if (stats) {
    *stats = DistributedStats{};
    stats->local_items = count;
  }
  // What each other rank needs of this one's bodies.
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks_));
  run_share(comm_, "bodies", Share{0, count}, [&] {
    if (!(std::isfinite(options.theta) && options.theta >= 0))
      throw Error("theta " + std::to_string(options.theta) + " must be finite and >= 0");
    const OctreeView v = own_->view();
    tbb::parallel_for(0, ranks_, [&](int r) {
      if (r == rank_ || ids_[static_cast<std::size_t>(r)].empty()) return;
      const std::vector<float> part = essential_part(v, boxes_.data() + r * 6, options.theta);
      out[static_cast<std::size_t>(r)].resize(part.size() * sizeof(float));
      std::memcpy(out[static_cast<std::size_t>(r)].data(), part.data(), part.size() * sizeof(float));
    });
  });
  const std::vector<std::vector<char>> in = exchange(comm_, out, stats);
  // This rank's bodies first (their forces are the run's), then what arrived, rank by rank.
  std::vector<float> xyz = xyz_, mass = mass_;
  for (const std::vector<char>& b : in)
    for (std::size_t at = 0; at + 4 * sizeof(float) <= b.size(); at += 4 * sizeof(float)) {
      float r[4];
      std::memcpy(r, b.data() + at, sizeof r);
      xyz.insert(xyz.end(), r, r + 3);
      mass.push_back(r[3]);
    }
  imported_ = static_cast<index_t>(mass.size()) - count;
  std::vector<float> forces(static_cast<std::size_t>(count) * 3);
  TraversalStats ts;
  run_timed_share(comm_, "bodies", Share{0, count}, stats, [&] {
    OctreeOptions oo = options_;
    if (options.device == Device::Cpu) oo.device = Device::Cpu;
    const Octree tree = Octree::build(xyz.data(), mass.data(), static_cast<index_t>(mass.size()), oo);
    BarnesHut bh(tree, options.device);
    if (count > 0) ts = bh.run(options, 0, count, forces.data());
  });
  BhResult result;
  static_cast<TraversalStats&>(result) = ts;
  if (!holds_all(gather, rank_) && gather != Gather::Root) {
    result.forces = std::move(forces);
  } else {
    // Gathered in rank order, then put at each body's place.
    std::vector<int> cnt(static_cast<std::size_t>(ranks_)), at(cnt);
    index_t total = 0;
    for (int r = 0; r < ranks_; ++r) {
      cnt[static_cast<std::size_t>(r)] = static_cast<int>(ids_[static_cast<std::size_t>(r)].size());
      at[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += cnt[static_cast<std::size_t>(r)];
    }
    MPI_Datatype item;
    check_mpi(MPI_Type_contiguous(3, MPI_FLOAT, &item), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&item), "MPI_Type_commit");
    const bool all = holds_all(gather, rank_);
    std::vector<float> by_rank(all ? static_cast<std::size_t>(total) * 3 : 0);
    const int rc = gather == Gather::All
                       ? MPI_Allgatherv(forces.data(), static_cast<int>(count), item, by_rank.data(), cnt.data(), at.data(),
                                        item, comm_)
                       : MPI_Gatherv(forces.data(), static_cast<int>(count), item, by_rank.data(), cnt.data(), at.data(),
                                     item, 0, comm_);
    MPI_Type_free(&item);
    check_mpi(rc, gather == Gather::All ? "MPI_Allgatherv" : "MPI_Gatherv");
    if (stats) {
      const std::uint64_t own = static_cast<std::uint64_t>(count) * 12, others = static_cast<std::uint64_t>(n_ - count) * 12;
      stats->bytes_moved += gather == Gather::All ? own * static_cast<std::uint64_t>(ranks_ - 1) + others
                                                  : (rank_ == 0 ? others : own);
    }
    if (all) {
      result.forces.resize(static_cast<std::size_t>(n_) * 3);
      for (int r = 0; r < ranks_; ++r)
        tbb::parallel_for(std::size_t{0}, ids_[static_cast<std::size_t>(r)].size(), [&](std::size_t i) {
          const index_t id = ids_[static_cast<std::size_t>(r)][i];
          std::copy_n(by_rank.begin() + (at[static_cast<std::size_t>(r)] + static_cast<index_t>(i)) * 3, 3,
                      result.forces.begin() + id * 3);
        });
    } else {
      result.forces = std::move(forces);
    }
  }
  finish_stats(comm_, stats, start);
  return result;
}

}  // namespace distributed
}  // namespace canopy
