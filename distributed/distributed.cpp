#include "distributed/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/checks.hpp"

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

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string(call) + " failed: " + std::string(text, static_cast<std::size_t>(len)));
}

// This process's rank in comm, and the number of ranks.
struct Place {
  int rank = 0, ranks = 1;
};
Place place_in(MPI_Comm comm) {
  Place p;
  check_mpi(MPI_Comm_rank(comm, &p.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &p.ranks), "MPI_Comm_size");
  return p;
}

// Runs this rank's share; then every rank learns whether any share failed, and if one did,
// throws the lowest failing rank's message on all of them (so none waits in the gather). The
// message names the share: the library's indices count from its first item.
template <class F>
void run_share(MPI_Comm comm, const char* items, Share s, F&& f) {
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {
    error = std::string("(") + items + " " + std::to_string(s.begin) + ".." + std::to_string(s.begin + s.count - 1) +
            ", numbered from 0 below): " + e.what();
  }
  const auto [rank, ranks] = place_in(comm);
  const int mine = error.empty() ? ranks : rank;
  int failed = ranks;
  check_mpi(MPI_Allreduce(&mine, &failed, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (failed == ranks) return;
  int len = rank == failed ? static_cast<int>(error.size()) : 0;
  check_mpi(MPI_Bcast(&len, 1, MPI_INT, failed, comm), "MPI_Bcast");
  std::string text(static_cast<std::size_t>(len), '\0');
  if (rank == failed) text = error;
  if (len > 0) check_mpi(MPI_Bcast(&text[0], len, MPI_CHAR, failed, comm), "MPI_Bcast");
  throw Error("rank " + std::to_string(failed) + " of " + std::to_string(ranks) + " " + text);
}

// True where this rank holds every item's result after a gather.
bool holds_all(Gather mode, int rank) { return mode == Gather::All || (mode == Gather::Root && rank == 0); }

// Moves each rank's share of the results (`mine`: its share's items x width values) by `mode`,
// into out[n * width] at the items' original places where this rank holds all of them
// (holds_all; out is not touched elsewhere). Items travel as one MPI datatype of width values,
// so the counts stay within MPI's int for up to INT_MAX items whatever their width.
template <class T>
void gather_into(MPI_Comm comm, Gather mode, const T* mine, index_t n, index_t width, T* out, DistributedStats* st) {
  if (mode == Gather::Local) return;
  const auto [rank, ranks] = place_in(comm);
  if (n > static_cast<index_t>(INT_MAX))
    throw Error(std::to_string(n) + " results are more than one MPI message's " + std::to_string(INT_MAX) +
                " items (split the queries into several calls)");
  std::vector<int> count(static_cast<std::size_t>(ranks)), at(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const Share s = share_of(n, r, ranks);
    count[static_cast<std::size_t>(r)] = static_cast<int>(s.count);
    at[static_cast<std::size_t>(r)] = static_cast<int>(s.begin);
  }
  MPI_Datatype item;
  check_mpi(MPI_Type_contiguous(static_cast<int>(width * static_cast<index_t>(sizeof(T))), MPI_BYTE, &item),
            "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&item), "MPI_Type_commit");
  const int own = count[static_cast<std::size_t>(rank)];
  const int rc = mode == Gather::All
                     ? MPI_Allgatherv(mine, own, item, out, count.data(), at.data(), item, comm)
                     : MPI_Gatherv(mine, own, item, out, count.data(), at.data(), item, 0, comm);
  MPI_Type_free(&item);
  check_mpi(rc, mode == Gather::All ? "MPI_Allgatherv" : "MPI_Gatherv");
  if (st) {
    const std::uint64_t item_bytes = static_cast<std::uint64_t>(width) * sizeof(T);
    const std::uint64_t own_bytes = static_cast<std::uint64_t>(own) * item_bytes;
    const std::uint64_t others = (static_cast<std::uint64_t>(n) - static_cast<std::uint64_t>(own)) * item_bytes;
    if (mode == Gather::All)
      st->bytes_moved += own_bytes * static_cast<std::uint64_t>(ranks - 1) + others;  // sent to each, received from each
    else
      st->bytes_moved += rank == 0 ? others : own_bytes;
  }
}

// The results a rank returns: every item's (holds_all) or its own share's.
template <class T>
std::vector<T> gathered(MPI_Comm comm, Gather mode, std::vector<T> mine, index_t n, index_t width, DistributedStats* st) {
  if (!holds_all(mode, place_in(comm).rank)) {
    gather_into<T>(comm, mode, mine.data(), n, width, nullptr, st);
    return mine;
  }
  std::vector<T> out(static_cast<std::size_t>(n * width));
  gather_into(comm, mode, mine.data(), n, width, out.data(), st);
  return out;
}

// The shares' times: the slowest and the imbalance.
void finish_stats(MPI_Comm comm, DistributedStats* st, Clock::time_point start) {
  if (!st) return;
  const int ranks = place_in(comm).ranks;
  double sum = 0, most = 0;
  check_mpi(MPI_Allreduce(&st->local_ms, &sum, 1, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&st->local_ms, &most, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  st->ranks = ranks;
  st->slowest_local_ms = most;
  st->imbalance = sum > 0 ? most / (sum / ranks) : 1.0;
  st->total_ms = ms_since(start);
}

// This rank's share of n items, and the stats it starts.
Share my_share(MPI_Comm comm, index_t n, DistributedStats* st) {
  const auto [rank, ranks] = place_in(comm);
  if (n < 0) throw Error(std::to_string(n) + " queries");
  const Share s = share_of(n, rank, ranks);
  if (st) {
    *st = DistributedStats{};
    st->local_items = s.count;
  }
  return s;
}

}  // namespace

PcResult point_correlation(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                           const PcOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = pc.tree().dims();
  PcResult local;
  run_share(comm, "queries", s, [&] {
    const Clock::time_point t = Clock::now();
    local = pc.run(queries + s.begin * dims, s.count, options);
    if (stats) stats->local_ms = ms_since(t);
  });
  PcResult out;
  static_cast<TraversalStats&>(out) = static_cast<const TraversalStats&>(local);
  out.counts = gathered(comm, gather, std::move(local.counts), n, 1, stats);
  finish_stats(comm, stats, start);
  return out;
}

KnnResult nearest_neighbors(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                            const KnnOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  KnnResult local;
  run_share(comm, "queries", s, [&] {
    // k is checked here on every rank, also on those whose share is empty.
    if (options.k < 1 || options.k > nn.size())
      throw Error("k = " + std::to_string(options.k) + " is outside 1.." + std::to_string(nn.size()) +
                  " (the tree's points)");
    const Clock::time_point t = Clock::now();
    local = nn.run(queries + s.begin * nn.dims(), s.count, options);
    if (stats) stats->local_ms = ms_since(t);
  });
  KnnResult out;
  static_cast<TraversalStats&>(out) = static_cast<const TraversalStats&>(local);
  out.k = options.k;
  out.indices = gathered(comm, gather, std::move(local.indices), n, options.k, stats);
  out.distances = gathered(comm, gather, std::move(local.distances), n, options.k, stats);
  finish_stats(comm, stats, start);
  return out;
}

void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n, float* out,
                    const ForestRunOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  int width = 0;
  std::vector<float> local;
  run_share(comm, "rows", s, [&] {
    width = predictor.output_width(options.output);
    local.resize(static_cast<std::size_t>(s.count) * width);
    const Clock::time_point t = Clock::now();
    if (s.count > 0)
      predictor.predict(rows + s.begin * predictor.n_features(), s.count, local.data(), options);
    if (stats) stats->local_ms = ms_since(t);
  });
  if (holds_all(gather, place_in(comm).rank)) {
    gather_into(comm, gather, local.data(), n, width, out, stats);
  } else {
    gather_into(comm, gather, local.data(), n, width, static_cast<float*>(nullptr), stats);
    std::copy(local.begin(), local.end(), out + s.begin * width);
  }
  finish_stats(comm, stats, start);
}

BhResult barnes_hut(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const index_t n = bh.tree().size();
  const Share s = my_share(comm, n, stats);
  std::vector<float> local(static_cast<std::size_t>(s.count) * 3);
  TraversalStats ts;
  run_share(comm, "bodies", s, [&] {
    const Clock::time_point t = Clock::now();
    ts = bh.run(options, s.begin, s.count, local.data());
    if (stats) stats->local_ms = ms_since(t);
  });
  BhResult out;
  static_cast<TraversalStats&>(out) = ts;
  out.forces = gathered(comm, gather, std::move(local), n, 3, stats);
  finish_stats(comm, stats, start);
  return out;
}

// ---- the distributed tree ------------------------------------------------------------------------

PartitionedKdTree::PartitionedKdTree(MPI_Comm comm, const float* points, index_t n, int dims, int depth,
                                     const KdTreeOptions& options, std::uint64_t memory_budget)
    : comm_(comm), n_(n), dims_(dims) {
  const Place place = place_in(comm);
  const int rank = place.rank;
  ranks_ = place.ranks;
  if (depth < 1 || depth > 30) throw Error("partitioned tree: depth " + std::to_string(depth) + " is outside 1..30");
  const index_t wanted = index_t{1} << depth;
  if (n < ranks_) throw Error("partitioned tree: " + std::to_string(n) + " points for " + std::to_string(ranks_) + " ranks");
  // The top-tree: KdTree's own median splits, stopped at leaves of about n / 2^depth points.
  KdTreeOptions top;
  top.leaf_size = static_cast<int>(std::max<index_t>(1, (n + wanted - 1) / wanted));
  top.device = Device::Cpu;
  top_ = std::make_unique<KdTree>(KdTree::build(points, n, dims, top));
  const KdTreeView v = top_->view();
  for (node_id k = 0; k < v.n_nodes; ++k)
    if (v.is_leaf(k)) leaf_node_.push_back(k);  // depth-first ids: left to right
  const index_t L = static_cast<index_t>(leaf_node_.size());
  if (L < ranks_)
    throw Error("partitioned tree: the top-tree of depth " + std::to_string(depth) + " has " + std::to_string(L) +
                " leaves for " + std::to_string(ranks_) + " ranks (each rank owns at least one: a deeper top-tree)");
  // Contiguous runs of leaves balanced by points: a leaf goes to the rank its middle point
  // falls in, with no rank left out.
  owner_.resize(static_cast<std::size_t>(L));
  boxes_.resize(static_cast<std::size_t>(L) * 2 * dims);
  index_t before = 0;
  int prev = -1;
  for (index_t i = 0; i < L; ++i) {
    const KdNode& node = v.nodes[leaf_node_[static_cast<std::size_t>(i)]];
    const double middle = static_cast<double>(before) + node.count / 2.0;
    int r = static_cast<int>(middle * ranks_ / static_cast<double>(n));
    r = std::min(std::max(r, prev), prev + 1);
    r = std::min(std::max(r, ranks_ - static_cast<int>(L - i)), ranks_ - 1);
    owner_[static_cast<std::size_t>(i)] = prev = r;
    before += node.count;
    const node_id k = leaf_node_[static_cast<std::size_t>(i)];
    std::copy(v.lo(k), v.lo(k) + dims, boxes_.begin() + i * 2 * dims);
    std::copy(v.hi(k), v.hi(k) + dims, boxes_.begin() + i * 2 * dims + dims);
    if (r == rank)
      for (index_t p = node.first; p < node.first + node.count; ++p) ids_.push_back(v.point_ids[p]);
  }
  std::sort(ids_.begin(), ids_.end());  // original order: ties in kNN break as in one process
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
    std::vector<float> mine(static_cast<std::size_t>(count) * static_cast<std::size_t>(dims));
    for (std::size_t i = 0; i < ids_.size(); ++i)
      std::copy(points + ids_[i] * dims, points + (ids_[i] + 1) * dims, mine.begin() + static_cast<index_t>(i) * dims);
    local_ = std::make_unique<KdTree>(KdTree::build(mine.data(), count, dims, options));
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

// The ranks whose boxes come within sqrt(reach2) of q (the float distances the traversals
// compute may round below the exact one: a relative margin keeps every such point).
void ranks_within(const PartitionedKdTree& t, const float* q, double reach2, std::vector<char>& hit) {
  const int dims = t.dims();
  const double limit = reach2 * (1 + 1e-5) + 1e-30;
  std::fill(hit.begin(), hit.end(), 0);
  for (std::size_t i = 0; i < t.leaf_owner().size(); ++i) {
    const float* lo = t.leaf_boxes().data() + i * 2 * dims;
    if (!hit[static_cast<std::size_t>(t.leaf_owner()[i])] && box_distance2(q, lo, lo + dims, dims) <= limit)
      hit[static_cast<std::size_t>(t.leaf_owner()[i])] = 1;
  }
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
  std::vector<char> flat;
  flat.reserve(static_cast<std::size_t>(total));
  int at = 0;
  for (int r = 0; r < ranks; ++r) {
    sat[static_cast<std::size_t>(r)] = static_cast<int>(flat.size());
    flat.insert(flat.end(), out[static_cast<std::size_t>(r)].begin(), out[static_cast<std::size_t>(r)].end());
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
void put(std::vector<char>& b, const T* v, std::size_t count) {
  const char* p = reinterpret_cast<const char*>(v);
  b.insert(b.end(), p, p + count * sizeof(T));
}
template <class T>
const char* get(const char* p, T* v, std::size_t count) {
  std::memcpy(v, p, count * sizeof(T));
  return p + count * sizeof(T);
}

// Received queries: their ids and coordinates, in arrival order.
struct Inbox {
  std::vector<index_t> id;
  std::vector<int> from;
  std::vector<float> coords;
};
Inbox unpack_queries(const std::vector<std::vector<char>>& from, int dims) {
  Inbox in;
  const std::size_t rec = sizeof(index_t) + sizeof(float) * static_cast<std::size_t>(dims);
  for (std::size_t r = 0; r < from.size(); ++r)
    for (std::size_t at = 0; at + rec <= from[r].size(); at += rec) {
      index_t id;
      const char* p = get(from[r].data() + at, &id, 1);
      in.id.push_back(id);
      in.from.push_back(static_cast<int>(r));
      in.coords.resize(in.coords.size() + static_cast<std::size_t>(dims));
      get(p, in.coords.data() + in.coords.size() - static_cast<std::size_t>(dims), static_cast<std::size_t>(dims));
    }
  return in;
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
    std::vector<char> hit(static_cast<std::size_t>(ranks));
    const double r2 = static_cast<double>(options.radius) * options.radius;
    for (index_t i = s.begin; i < s.begin + s.count; ++i) {
      ranks_within(tree, queries + i * dims, r2, hit);
      for (int r = 0; r < ranks; ++r)
        if (hit[static_cast<std::size_t>(r)]) {
          put(out[static_cast<std::size_t>(r)], &i, 1);
          put(out[static_cast<std::size_t>(r)], queries + i * dims, static_cast<std::size_t>(dims));
        }
    }
  });
  const Inbox in = unpack_queries(exchange(comm, out, stats), dims);
  std::vector<std::vector<char>> reply(static_cast<std::size_t>(ranks));
  PcResult part;
  run_share(comm, "routed queries", Share{0, static_cast<index_t>(in.id.size())}, [&] {
    const Clock::time_point t = Clock::now();
    part = local.run(in.coords.data(), static_cast<index_t>(in.id.size()), options);
    if (stats) {
      stats->local_ms = ms_since(t);
      stats->local_items = static_cast<index_t>(in.id.size());
    }
  });
  for (std::size_t j = 0; j < in.id.size(); ++j) {
    put(reply[static_cast<std::size_t>(in.from[j])], &in.id[j], 1);
    put(reply[static_cast<std::size_t>(in.from[j])], &part.counts[j], 1);
  }
  std::vector<index_t> mine(static_cast<std::size_t>(s.count), 0);
  for (const std::vector<char>& b : exchange(comm, reply, stats))
    for (std::size_t at = 0; at + 2 * sizeof(index_t) <= b.size(); at += 2 * sizeof(index_t)) {
      index_t id, c;
      get(get(b.data() + at, &id, 1), &c, 1);
      mine[static_cast<std::size_t>(id - s.begin)] += c;  // each point is counted by its owner only
    }
  PcResult result;
  static_cast<TraversalStats&>(result) = static_cast<const TraversalStats&>(part);
  result.counts = gathered(comm, gather, std::move(mine), n, 1, stats);
  finish_stats(comm, stats, start);
  return result;
}

namespace {

// Candidates of one query: (distance, original index), the k best kept.
struct Candidates {
  std::vector<std::pair<float, index_t>> best;
  void add(float d, index_t id) { best.emplace_back(d, id); }
  void keep(int k) {
    std::sort(best.begin(), best.end());
    if (best.size() > static_cast<std::size_t>(k)) best.resize(static_cast<std::size_t>(k));
  }
};

// Runs the local search on received queries and packs each answer for its sender: id, then
// k (distance, original index) pairs, padded with (inf, -1).
std::vector<std::vector<char>> answer_knn(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                                          const Inbox& in, const KnnOptions& options, DistributedStats* stats) {
  const int k = options.k;
  const int k_local = static_cast<int>(std::min<index_t>(k, local.size()));
  KnnResult part;
  run_share(comm, "routed queries", Share{0, static_cast<index_t>(in.id.size())}, [&] {
    KnnOptions o = options;
    o.k = k_local;
    const Clock::time_point t = Clock::now();
    part = local.run(in.coords.data(), static_cast<index_t>(in.id.size()), o);
    if (stats) stats->local_ms += ms_since(t);
  });
  std::vector<std::vector<char>> reply(static_cast<std::size_t>(tree.ranks()));
  const float inf = std::numeric_limits<float>::infinity();
  const index_t none = -1;
  for (std::size_t j = 0; j < in.id.size(); ++j) {
    std::vector<char>& b = reply[static_cast<std::size_t>(in.from[j])];
    put(b, &in.id[j], 1);
    for (int c = 0; c < k; ++c) {
      if (c < k_local) {
        const std::size_t at = j * static_cast<std::size_t>(k_local) + static_cast<std::size_t>(c);
        const index_t id = tree.local_ids()[static_cast<std::size_t>(part.indices[at])];
        put(b, &part.distances[at], 1);
        put(b, &id, 1);
      } else {
        put(b, &inf, 1);
        put(b, &none, 1);
      }
    }
  }
  return reply;
}

void merge_knn(const std::vector<std::vector<char>>& from, const Share& s, int k, std::vector<Candidates>& cand) {
  const std::size_t rec = sizeof(index_t) + static_cast<std::size_t>(k) * (sizeof(float) + sizeof(index_t));
  for (const std::vector<char>& b : from)
    for (std::size_t at = 0; at + rec <= b.size(); at += rec) {
      index_t id;
      const char* p = get(b.data() + at, &id, 1);
      Candidates& c = cand[static_cast<std::size_t>(id - s.begin)];
      for (int j = 0; j < k; ++j) {
        float d;
        index_t gid;
        p = get(get(p, &d, 1), &gid, 1);
        if (gid >= 0) c.add(d, gid);
      }
      c.keep(k);
    }
}

}  // namespace

KnnResult nearest_neighbors(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local, const float* queries,
                            index_t n, const KnnOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = tree.dims(), ranks = tree.ranks(), k = options.k;
  // Round 1: each query to the rank that owns its top leaf.
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks));
  std::vector<int> first(static_cast<std::size_t>(s.count));
  run_share(comm, "queries", s, [&] {
    if (k < 1 || k > tree.global_size())
      throw Error("k = " + std::to_string(k) + " is outside 1.." + std::to_string(tree.global_size()) + " (the tree's points)");
    check_queries(queries + s.begin * dims, s.count, dims);  // numbered within the share, as run_share says
    for (index_t i = s.begin; i < s.begin + s.count; ++i) {
      const int r = tree.owner_of(queries + i * dims);
      first[static_cast<std::size_t>(i - s.begin)] = r;
      put(out[static_cast<std::size_t>(r)], &i, 1);
      put(out[static_cast<std::size_t>(r)], queries + i * dims, static_cast<std::size_t>(dims));
    }
  });
  std::vector<Candidates> cand(static_cast<std::size_t>(s.count));
  merge_knn(exchange(comm, answer_knn(comm, tree, local, unpack_queries(exchange(comm, out, stats), dims), options, stats), stats),
            s, k, cand);
  // Round 2: the k-th distance found bounds the other ranks (all of them while fewer than k).
  for (auto& b : out) b.clear();
  std::vector<char> hit(static_cast<std::size_t>(ranks));
  for (index_t i = s.begin; i < s.begin + s.count; ++i) {
    const Candidates& c = cand[static_cast<std::size_t>(i - s.begin)];
    const double bound = c.best.size() == static_cast<std::size_t>(k) ? static_cast<double>(c.best.back().first)
                                                                      : std::numeric_limits<double>::infinity();
    ranks_within(tree, queries + i * dims, bound * bound, hit);
    for (int r = 0; r < ranks; ++r)
      if (hit[static_cast<std::size_t>(r)] && r != first[static_cast<std::size_t>(i - s.begin)]) {
        put(out[static_cast<std::size_t>(r)], &i, 1);
        put(out[static_cast<std::size_t>(r)], queries + i * dims, static_cast<std::size_t>(dims));
      }
  }
  merge_knn(exchange(comm, answer_knn(comm, tree, local, unpack_queries(exchange(comm, out, stats), dims), options, stats), stats),
            s, k, cand);
  std::vector<index_t> idx(static_cast<std::size_t>(s.count) * k);
  std::vector<float> dist(idx.size());
  for (index_t i = 0; i < s.count; ++i)
    for (int j = 0; j < k; ++j) {
      const auto& b = cand[static_cast<std::size_t>(i)].best[static_cast<std::size_t>(j)];
      dist[static_cast<std::size_t>(i * k + j)] = b.first;
      idx[static_cast<std::size_t>(i * k + j)] = b.second;
    }
  KnnResult result;
  result.k = k;
  result.indices = gathered(comm, gather, std::move(idx), n, k, stats);
  result.distances = gathered(comm, gather, std::move(dist), n, k, stats);
  finish_stats(comm, stats, start);
  return result;
}

}  // namespace distributed
}  // namespace canopy
