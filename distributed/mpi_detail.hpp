// The MPI layer's shared plumbing (distributed.cpp, partitioned_forest.cpp): collective error
// agreement, gathers in place, per-call statistics. Internal: not installed.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "distributed/distributed.hpp"

namespace canopy {
namespace distributed {
namespace detail {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

inline void check_mpi(int rc, const char* call) {
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
inline Place place_in(MPI_Comm comm) {
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

// run_share for a rank's own share of the work, its wall time into stats->local_ms.
template <class F>
void run_timed_share(MPI_Comm comm, const char* items, Share s, DistributedStats* stats, F&& f) {
  run_share(comm, items, s, [&] {
    const Clock::time_point t = Clock::now();
    f();
    if (stats) stats->local_ms = ms_since(t);
  });
}

// Every rank's share of n items as MPI's varying-count collectives take it (n <= INT_MAX).
struct ShareCounts {
  std::vector<int> count, at;
};
inline ShareCounts share_counts(index_t n, int ranks) {
  ShareCounts c;
  for (int r = 0; r < ranks; ++r) {
    const Share s = share_of(n, r, ranks);
    c.count.push_back(static_cast<int>(s.count));
    c.at.push_back(static_cast<int>(s.begin));
  }
  return c;
}

// True where this rank holds every item's result after a gather.
inline bool holds_all(Gather mode, int rank) { return mode == Gather::All || (mode == Gather::Root && rank == 0); }

// Collective: whether `p` (each rank's buffer; `what` names them in the error) is device memory,
// the same on every rank (an error on every rank if not). Device rows gather through
// gather_device_rows: GPU to GPU, by the transport the MPI layer picks (partitioned_device.cpp).
bool on_device_everywhere(MPI_Comm comm, const void* p, const char* what);
// Each rank's share of n rows already at its items' places in `rows` (room for n, device memory),
// moved by `mode` into the other ranks' buffers.
void gather_device_rows(MPI_Comm comm, Gather mode, void* rows, index_t n, std::size_t row_bytes, DistributedStats* st);

// Moves the results by `mode`, in place: `full` (room for n items of `width` values, or null
// where this rank does not hold them all) already holds this rank's share at its items' places,
// or `share` holds it (ranks sending to the root). Device buffers (full on every rank) move GPU
// to GPU (gather_device_rows), host buffers by MPI. Items travel as one MPI datatype of width values, so the
// counts stay within MPI's int for up to INT_MAX items whatever their width.
template <class T>
void gather_in_place(MPI_Comm comm, Gather mode, T* full, const T* share, index_t n, index_t width,
                     DistributedStats* st) {
  if (mode == Gather::Local) return;
  if (on_device_everywhere(comm, full ? static_cast<const void*>(full) : share, "result buffers")) {
    gather_device_rows(comm, mode, full, n, static_cast<std::size_t>(width) * sizeof(T), st);
    return;
  }
  const auto [rank, ranks] = place_in(comm);
  if (n > static_cast<index_t>(INT_MAX))
    throw Error(std::to_string(n) + " results are more than one MPI message's " + std::to_string(INT_MAX) +
                " items (split the queries into several calls)");
  if (st) st->transport = "host memory";
  const ShareCounts sc = share_counts(n, ranks);
  const std::vector<int>& count = sc.count;
  const std::vector<int>& at = sc.at;
  MPI_Datatype item;
  check_mpi(MPI_Type_contiguous(static_cast<int>(width * static_cast<index_t>(sizeof(T))), MPI_BYTE, &item),
            "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&item), "MPI_Type_commit");
  const int own = count[static_cast<std::size_t>(rank)];
  const int rc = mode == Gather::All ? MPI_Allgatherv(MPI_IN_PLACE, 0, item, full, count.data(), at.data(), item, comm)
                 : rank == 0        ? MPI_Gatherv(MPI_IN_PLACE, 0, item, full, count.data(), at.data(), item, 0, comm)
                                    : MPI_Gatherv(share, own, item, nullptr, nullptr, nullptr, item, 0, comm);
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

// A share computed apart (the partitioned calls), gathered by `mode`: every item's results
// where this rank holds them all, else the share itself.
template <class T>
std::vector<T> gathered(MPI_Comm comm, Gather mode, std::vector<T> mine, index_t n, index_t width, DistributedStats* st) {
  const auto [rank, ranks] = place_in(comm);
  if (!holds_all(mode, rank)) {
    gather_in_place<T>(comm, mode, nullptr, mine.data(), n, width, st);
    return mine;
  }
  std::vector<T> out(static_cast<std::size_t>(n * width));
  std::copy(mine.begin(), mine.end(), out.begin() + share_of(n, rank, ranks).begin * width);
  gather_in_place(comm, mode, out.data(), static_cast<const T*>(nullptr), n, width, st);
  return out;
}

// A vector-returning call's buffer: every item's (holds_all) or its share's, and where this
// rank's share goes in it.
template <class T>
struct ResultBuffer {
  std::vector<T> values;
  T* share = nullptr;
  T* full = nullptr;
  ResultBuffer(Gather mode, int rank, index_t n, Share s, index_t width) {
    const bool all = holds_all(mode, rank);
    values.resize(static_cast<std::size_t>((all ? n : s.count) * width));
    full = all ? values.data() : nullptr;
    share = values.data() + (all ? s.begin * width : 0);
  }
};

// The shares' times: the slowest and the imbalance.
inline void finish_stats(MPI_Comm comm, DistributedStats* st, Clock::time_point start) {
  if (!st) return;
  const int ranks = place_in(comm).ranks;
  double sum = 0, most = 0;
  check_mpi(MPI_Allreduce(&st->local_ms, &sum, 1, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&st->local_ms, &most, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  st->ranks = ranks;
  st->slowest_local_ms = most;
  st->imbalance = sum > 0 ? most / (sum / ranks) : 1.0;
  st->wall_ms = ms_since(start);
}

// This rank's share of n items, and the stats it starts.
inline Share my_share(MPI_Comm comm, index_t n, DistributedStats* st) {
  const auto [rank, ranks] = place_in(comm);
  if (n < 0) throw Error(std::to_string(n) + " queries");
  const Share s = share_of(n, rank, ranks);
  if (st) {
    *st = DistributedStats{};
    st->local_items = s.count;
  }
  return s;
}

}  // namespace detail
}  // namespace distributed
}  // namespace canopy
