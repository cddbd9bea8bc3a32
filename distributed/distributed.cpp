#include "distributed/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <vector>

namespace canopy {
namespace distributed {

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
  int rank = 0, ranks = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
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

// out[n * width] on every rank from each rank's share of `mine` (its share's items x width),
// in rank order: the original order.
template <class T>
void all_gather(MPI_Comm comm, const T* mine, index_t n, index_t width, T* out, DistributedStats* st) {
  int rank = 0, ranks = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
  const std::uint64_t total = static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(width) * sizeof(T);
  if (total > static_cast<std::uint64_t>(INT_MAX))
    throw Error("the gathered results take " + std::to_string(total) + " bytes, more than one MPI message's " +
                std::to_string(INT_MAX) + " (split the queries into several calls)");
  std::vector<int> bytes(static_cast<std::size_t>(ranks)), at(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const Share s = share_of(n, r, ranks);
    bytes[static_cast<std::size_t>(r)] = static_cast<int>(s.count * width * static_cast<index_t>(sizeof(T)));
    at[static_cast<std::size_t>(r)] = static_cast<int>(s.begin * width * static_cast<index_t>(sizeof(T)));
  }
  check_mpi(MPI_Allgatherv(mine, bytes[static_cast<std::size_t>(rank)], MPI_BYTE, out, bytes.data(), at.data(), MPI_BYTE,
                           comm),
            "MPI_Allgatherv");
  if (st) {
    // Sent to every other rank, received from every other rank.
    const std::uint64_t sent = static_cast<std::uint64_t>(bytes[static_cast<std::size_t>(rank)]) * static_cast<std::uint64_t>(ranks - 1);
    st->bytes_moved += sent + (total - static_cast<std::uint64_t>(bytes[static_cast<std::size_t>(rank)]));
  }
}

// The shares' times: the slowest and the imbalance.
void finish_stats(MPI_Comm comm, DistributedStats* st, Clock::time_point start) {
  if (!st) return;
  int ranks = 1;
  check_mpi(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
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
  int rank = 0, ranks = 1;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &ranks), "MPI_Comm_size");
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
                           const PcOptions& options, DistributedStats* stats) {
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
  out.counts.resize(static_cast<std::size_t>(n));
  all_gather(comm, local.counts.data(), n, 1, out.counts.data(), stats);
  finish_stats(comm, stats, start);
  return out;
}

KnnResult nearest_neighbors(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                            const KnnOptions& options, DistributedStats* stats) {
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
  out.indices.resize(static_cast<std::size_t>(n) * options.k);
  out.distances.resize(static_cast<std::size_t>(n) * options.k);
  all_gather(comm, local.indices.data(), n, options.k, out.indices.data(), stats);
  all_gather(comm, local.distances.data(), n, options.k, out.distances.data(), stats);
  finish_stats(comm, stats, start);
  return out;
}

void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n, float* out,
                    const ForestRunOptions& options, DistributedStats* stats) {
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
  all_gather(comm, local.data(), n, width, out, stats);
  finish_stats(comm, stats, start);
}

}  // namespace distributed
}  // namespace canopy
