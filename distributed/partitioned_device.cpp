// The MPI layer's device side (issue 39): a partitioned kd-tree's calls with queries and results
// in device memory (the queries routed on the GPU by the top-tree, moved GPU to GPU, answered
// there, and their answers moved back and combined there), and the replicated calls' gathers of
// device results. The bytes travel by CUDA-aware MPI where the MPI library has it,
// else by CUDA IPC between the ranks of one host (MPI carries the handles and the barriers), else
// through host memory: chosen when the tree first takes device queries, the same on every rank.
#include "distributed/mpi_detail.hpp"
#include "distributed/partition_detail.hpp"
#include "distributed/partition_gpu.hpp"

#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <cstring>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/device.hpp"

namespace canopy {
namespace distributed {

using namespace detail;  // NOLINT: this file is the layer the helpers serve

namespace detail {

const char* to_string(Transport t) {
  static const char* const names[] = {"host memory", "CUDA IPC", "CUDA-aware MPI"};  // Transport's order
  return names[static_cast<int>(t)];
}

namespace {

// Whether this MPI library passes device buffers itself (Open MPI's extension; false elsewhere).
bool mpi_is_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// CANOPY_DIST_TRANSPORT=host|ipc|mpi caps the choice (tests and measurements take each path).
Transport transport_cap() {
  const char* env = std::getenv("CANOPY_DIST_TRANSPORT");
  const std::string want = env ? env : "";
  if (want.empty() || want == "auto" || want == "mpi") return Transport::CudaAwareMpi;
  if (want == "ipc") return Transport::Ipc;
  if (want == "host") return Transport::Host;
  throw Error("CANOPY_DIST_TRANSPORT=" + want + ": auto, mpi, ipc or host");
}

}  // namespace

DeviceExchange::DeviceExchange(MPI_Comm comm, stream_t stream) : comm_(comm), stream_(stream) {
  const Place p = place_in(comm);
  rank_ = p.rank;
  ranks_ = p.ranks;
  peers_.resize(static_cast<std::size_t>(ranks_));
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int on_node = 0;
  check_mpi(MPI_Comm_size(node, &on_node), "MPI_Comm_size");
  MPI_Comm_free(&node);
  int want = 0;
  run_share(comm, "transport", Share{0, 0}, [&] {
    const Transport cap = transport_cap();
    if (mpi_is_cuda_aware() && cap == Transport::CudaAwareMpi)
      want = static_cast<int>(Transport::CudaAwareMpi);
    else if (on_node == ranks_ && cap != Transport::Host)
      want = static_cast<int>(Transport::Ipc);
    else
      want = static_cast<int>(Transport::Host);
  });
  int agreed = 0;
  check_mpi(MPI_Allreduce(&want, &agreed, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  kind_ = static_cast<Transport>(agreed);
  if (kind_ == Transport::Ipc && !connect(1 << 20)) kind_ = Transport::Host;
}

DeviceExchange::~DeviceExchange() = default;

// Every rank's mailbox of at least `bytes` (this rank's), opened by every other rank. Collective;
// false on every rank if any rank could not open a peer's.
bool DeviceExchange::connect(std::size_t bytes) {
  int ok = 1;
  IpcHandle mine{};
  run_share(comm_, "mailbox", Share{0, 0}, [&] {
    box_.reserve(bytes, "this rank's mailbox (received queries and answers)");
    mine = box_.handle();
  });
  std::vector<IpcHandle> handles(static_cast<std::size_t>(ranks_));
  check_mpi(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, handles.data(), sizeof mine, MPI_BYTE, comm_), "MPI_Allgather");
  for (int r = 0; r < ranks_; ++r) {
    if (r == rank_) continue;
    peers_[static_cast<std::size_t>(r)] = open_ipc(handles[static_cast<std::size_t>(r)]);
    ok = ok && peers_[static_cast<std::size_t>(r)];
  }
  int all = 0;
  check_mpi(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
  if (!all)
    for (auto& p : peers_) p.reset();
  return all == 1;
}

DeviceExchange::Inbox DeviceExchange::run(const std::vector<const void*>& from, const std::vector<std::uint64_t>& bytes,
                                          DistributedStats* st) {
  sync_stream(stream_);
  struct Timer {  // the step's time into st->move_ms, however it ends
    DistributedStats* st;
    Clock::time_point start;
    ~Timer() {
      if (st) st->move_ms += ms_since(start);
    }
  } timer{st, Clock::now()};
  const std::size_t R = static_cast<std::size_t>(ranks_), me = static_cast<std::size_t>(rank_);
  std::vector<std::uint64_t> all(R * R);  // all[s * R + d]: bytes from s to d
  check_mpi(MPI_Allgather(bytes.data(), ranks_, MPI_UINT64_T, all.data(), ranks_, MPI_UINT64_T, comm_), "MPI_Allgather");
  Inbox in;
  in.at.assign(R, 0);
  in.size.assign(R, 0);
  for (std::size_t s = 0; s < R; ++s) {
    in.at[s] = in.total;
    in.size[s] = all[s * R + me];
    in.total += in.size[s];
  }
  if (st) {
    for (std::size_t r = 0; r < R; ++r)
      if (r != me) st->bytes_moved += bytes[r] + in.size[r];
    st->transport = to_string(kind_);
  }
  if (kind_ == Transport::Host) {
    std::vector<std::vector<char>> out(R);
    run_share(comm_, "device to host copies", Share{0, 0}, [&] {
      for (std::size_t r = 0; r < R; ++r) {
        out[r].resize(bytes[r]);
        if (bytes[r]) copy_memory(out[r].data(), from[r], bytes[r]);
      }
    });
    const std::vector<std::vector<char>> got = exchange(comm_, out, nullptr);
    run_share(comm_, "mailbox", Share{0, 0}, [&] {
      box_.reserve(in.total, "this rank's mailbox");
      for (std::size_t s = 0; s < R; ++s)
        if (in.size[s]) copy_memory(static_cast<char*>(box_.get()) + in.at[s], got[s].data(), in.size[s]);
    });
    in.base = static_cast<const char*>(box_.get());
    return in;
  }
  if (kind_ == Transport::CudaAwareMpi) {
    run_share(comm_, "mailbox", Share{0, 0}, [&] {
      box_.reserve(in.total, "this rank's mailbox");
      if (in.total > INT_MAX) throw Error("a rank's routed queries or answers exceed one MPI message's bytes");
    });
    const char* base = nullptr;
    for (std::size_t r = 0; r < R; ++r)
      if (bytes[r] && (!base || static_cast<const char*>(from[r]) < base)) base = static_cast<const char*>(from[r]);
    std::vector<int> sc(R), sd(R), rc(R), rd(R);
    for (std::size_t r = 0; r < R; ++r) {
      sc[r] = static_cast<int>(bytes[r]);
      sd[r] = bytes[r] ? static_cast<int>(static_cast<const char*>(from[r]) - base) : 0;
      rc[r] = static_cast<int>(in.size[r]);
      rd[r] = static_cast<int>(in.at[r]);
    }
    check_mpi(MPI_Alltoallv(base, sc.data(), sd.data(), MPI_BYTE, box_.get(), rc.data(), rd.data(), MPI_BYTE, comm_),
              "MPI_Alltoallv (device buffers)");
    in.base = static_cast<const char*>(box_.get());
    return in;
  }
  // CUDA IPC: each rank writes into the receivers' mailboxes, between two barriers (the first:
  // every receiver is done with what its mailbox held; the second: every write has landed).
  int grow = in.total > box_.bytes(), any = 0;
  check_mpi(MPI_Allreduce(&grow, &any, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
  if (any) {
    for (auto& p : peers_) p.reset();
    check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
    if (!connect(grow ? in.total + in.total / 4 : box_.bytes()))
      throw Error("CUDA IPC: a rank could not open another rank's mailbox after it grew");
  }
  check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
  // (run_share's agreement is the second barrier, and a failed copy fails every rank)
  run_share(comm_, "device copies", Share{0, 0}, [&] {
    for (std::size_t d = 0; d < R; ++d) {
      if (!bytes[d]) continue;
      std::uint64_t at = 0;  // where this rank's bytes land in d's mailbox
      for (std::size_t s = 0; s < me; ++s) at += all[s * R + d];
      char* to = static_cast<char*>(d == me ? box_.get() : peers_[d].get());
      copy_device_async(to + at, from[d], bytes[d], stream_);
    }
    sync_stream(stream_);
  });
  in.base = static_cast<const char*>(box_.get());
  return in;
}

void move_device_shares(DeviceExchange& ex, MPI_Comm comm, Gather mode, const void* share, index_t n,
                        std::size_t row_bytes, DistributedStats* st,
                        const std::function<void(int, const void*, index_t, index_t)>& place) {
  if (mode == Gather::Local) return;
  const auto [rank, ranks] = place_in(comm);
  const Share s = share_of(n, rank, ranks);
  std::vector<const void*> from(static_cast<std::size_t>(ranks), share);
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(ranks), 0);
  for (int r = 0; r < ranks; ++r)
    if (r != rank && (mode == Gather::All || r == 0)) bytes[static_cast<std::size_t>(r)] = s.count * row_bytes;
  const DeviceExchange::Inbox in = ex.run(from, bytes, st);
  const Clock::time_point t = Clock::now();
  for (int r = 0; r < ranks; ++r)
    if (in.size[static_cast<std::size_t>(r)]) {
      const Share theirs = share_of(n, r, ranks);
      place(r, in.base + in.at[static_cast<std::size_t>(r)], theirs.begin, theirs.count);
    }
  sync_stream(ex.stream());
  if (st) st->combine_ms += ms_since(t);
}

DeviceExchange& device_exchange(MPI_Comm comm) {
  // Kept for the process's life (never freed: the ranks' IPC mappings of one another's mailboxes
  // would otherwise have to be torn down together).
  struct Entry {
    MPI_Comm comm;
    int device;
    OwnStream stream = make_stream();
    std::unique_ptr<DeviceExchange> exchange;
  };
  static std::mutex lock;
  static std::vector<Entry*> entries;
  const std::lock_guard<std::mutex> hold(lock);
  const int device = current_device();
  for (Entry* e : entries) {
    int same = MPI_UNEQUAL;
    check_mpi(MPI_Comm_compare(comm, e->comm, &same), "MPI_Comm_compare");
    if (e->device == device && (same == MPI_IDENT || same == MPI_CONGRUENT)) return *e->exchange;
  }
  auto* e = new Entry;
  check_mpi(MPI_Comm_dup(comm, &e->comm), "MPI_Comm_dup");
  e->device = device;
  e->exchange = std::make_unique<DeviceExchange>(e->comm, e->stream.get());
  entries.push_back(e);
  return *e->exchange;
}

}  // namespace detail

PartitionedKdTree::~PartitionedKdTree() = default;

// Made by the first call with device queries, on every rank together.
detail::PartitionDevice& PartitionedKdTree::device_side() const {
  if (device_) return *device_;
  auto side = std::make_unique<PartitionDevice>();
  run_share(comm_, "the device side", Share{0, 0}, [&] {
    side->gpu = std::make_unique<PartitionGpu>(*top_, leaf_node_, owner_, ranks_, points_, ids_);
  });
  side->exchange = std::make_unique<DeviceExchange>(comm_, side->gpu->stream());
  device_ = std::move(side);
  return *device_;
}

const char* PartitionedKdTree::transport() const { return device_ ? to_string(device_->exchange->transport()) : ""; }
std::uint64_t PartitionedKdTree::device_bytes() const { return device_ ? device_->gpu->bytes() : 0; }

namespace {

// Where each rank's bytes come from: runs of bytes[r] bytes laid end to end from `base`, rank after rank.
std::vector<const void*> runs(const void* base, const std::vector<std::uint64_t>& bytes) {
  std::vector<const void*> from(bytes.size());
  std::uint64_t at = 0;
  for (std::size_t r = 0; r < bytes.size(); ++r) {
    from[r] = static_cast<const char*>(base) + at;
    at += bytes[r];
  }
  return from;
}
std::vector<std::uint64_t> scaled(const std::vector<index_t>& per, std::size_t record) {
  std::vector<std::uint64_t> b(per.size());
  for (std::size_t r = 0; r < per.size(); ++r) b[r] = static_cast<std::uint64_t>(per[r]) * record;
  return b;
}
// An inbox's runs re-measured in another record size (answers to the queries it brought).
std::vector<std::uint64_t> rescaled(const std::vector<std::uint64_t>& size, std::size_t from, std::size_t to) {
  std::vector<std::uint64_t> b(size.size());
  for (std::size_t r = 0; r < size.size(); ++r) b[r] = size[r] / from * to;
  return b;
}

// Rows of row_bytes bytes, this rank's share at its items' places in `rows` (room for n), moved
// by `mode`: Root fills rank 0's rows, All every rank's.
void gather_rows(MPI_Comm comm, DeviceExchange& ex, Gather mode, void* rows, index_t n, std::size_t row_bytes,
                 DistributedStats* st) {
  const auto [rank, ranks] = place_in(comm);
  char* base = static_cast<char*>(rows);
  move_device_shares(ex, comm, mode, base + share_of(n, rank, ranks).begin * row_bytes, n, row_bytes, st,
                     [&](int, const void* from, index_t begin, index_t count) {
                       copy_device_async(base + begin * row_bytes, from, static_cast<std::size_t>(count) * row_bytes,
                                         ex.stream());
                     });
}

}  // namespace

namespace detail {

bool on_device_everywhere(MPI_Comm comm, const void* p, const char* what) {
  const int dev = p && is_device_pointer(p);
  int lo = 0, hi = 0;
  check_mpi(MPI_Allreduce(&dev, &lo, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&dev, &hi, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (lo != hi)
    throw Error(std::string("some ranks' ") + what + " are device memory and some host memory: the same kind on every rank");
  return dev == 1;
}

void gather_device_rows(MPI_Comm comm, Gather mode, void* rows, index_t n, std::size_t row_bytes, DistributedStats* st) {
  if (mode == Gather::Local) return;
  gather_rows(comm, device_exchange(comm), mode, rows, n, row_bytes, st);
}

}  // namespace detail

namespace {

// Every rank agrees that the queries and buffers are all in device memory, or all in host memory.
bool device_call(MPI_Comm comm, const float* queries, index_t n, std::initializer_list<const void*> outs,
                 stream_t caller) {
  run_share(comm, "queries", Share{0, n}, [&] {
    const bool dev = is_device_pointer(queries);
    for (const void* p : outs)
      if (p && is_device_pointer(p) != dev)
        throw Error("the queries and the result buffers must all be device memory or all host memory");
    if (dev && caller) sync_stream(caller);
  });
  return on_device_everywhere(comm, queries, "queries");
}

// A vector call's results placed in a buffer with room for n rows.
template <class T>
void place(const std::vector<T>& v, T* out, Gather mode, MPI_Comm comm, index_t n, index_t width) {
  const auto [rank, ranks] = place_in(comm);
  const index_t at = holds_all(mode, rank) ? 0 : share_of(n, rank, ranks).begin;
  std::copy(v.begin(), v.end(), out + at * width);
}

}  // namespace

TraversalStats point_correlation_into(MPI_Comm comm, const PartitionedKdTree& tree, PointCorrelation& local,
                                      const float* queries, index_t n, const PcOptions& options, index_t* counts,
                                      DistributedStats* stats, Gather gather) {
  if (!device_call(comm, queries, n, {counts}, options.stream)) {
    PcResult r = point_correlation(comm, tree, local, queries, n, options, stats, gather);
    place(r.counts, counts, gather, comm, n, 1);
    return r;
  }
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = tree.dims();
  const std::size_t qb = sizeof(float) * static_cast<std::size_t>(dims);
  PartitionDevice& side = tree.device_side();
  std::vector<index_t> per;
  run_share(comm, "queries", s, [&] {
    if (!(std::isfinite(options.radius) && options.radius >= 0))
      throw Error("radius " + std::to_string(options.radius) + " must be finite and >= 0");
    const Clock::time_point t = Clock::now();
    per = side.gpu->route(Route::Radius, queries + s.begin * dims, s.count, options.radius * options.radius, 0);
    if (stats) stats->route_ms += ms_since(t);
  });
  const std::vector<std::uint64_t> out = scaled(per, qb);
  const DeviceExchange::Inbox in = side.exchange->run(runs(side.gpu->packed(), out), out, stats);
  const index_t got = static_cast<index_t>(in.total / qb);
  auto* replies = static_cast<index_t*>(side.gpu->scratch(0, static_cast<std::size_t>(got) * sizeof(index_t)));
  TraversalStats ts;
  run_share(comm, "routed queries", Share{0, got}, [&] {
    const Clock::time_point t = Clock::now();
    PcOptions o = options;
    o.stream = nullptr;
    ts = local.run(reinterpret_cast<const float*>(in.base), got, o, replies);
    if (stats) {
      stats->local_ms = ms_since(t);
      stats->local_items = got;
    }
  });
  const std::vector<std::uint64_t> back = rescaled(in.size, qb, sizeof(index_t));
  const DeviceExchange::Inbox answers = side.exchange->run(runs(replies, back), back, stats);
  std::int64_t sent = 0;
  for (index_t c : per) sent += c;
  const Clock::time_point t = Clock::now();
  side.gpu->add_counts(reinterpret_cast<const index_t*>(answers.base), sent, counts + s.begin, s.count);
  if (stats) stats->combine_ms += ms_since(t);
  gather_rows(comm, *side.exchange, gather, counts, n, sizeof(index_t), stats);
  finish_stats(comm, stats, start);
  return ts;
}

namespace {

// One round of the device kNN: the queries routed `how`, answered by the ranks they reach, the
// answers merged into the candidates.
void knn_round(MPI_Comm comm, PartitionDevice& side, NearestNeighbors& local, Route how, const float* queries, Share s,
               int dims, const KnnOptions& options, DistributedStats* stats, TraversalStats& ts) {
  const int k = options.k;
  const int k_local = static_cast<int>(std::min<index_t>(k, local.size()));
  const std::size_t qb = sizeof(float) * static_cast<std::size_t>(dims), rb = PartitionGpu::record_bytes(k);
  std::vector<index_t> per;
  run_share(comm, "queries", s, [&] {
    const Clock::time_point t = Clock::now();
    per = side.gpu->route(how, queries + s.begin * dims, s.count, 0, k);
    if (stats) stats->route_ms += ms_since(t);
  });
  const std::vector<std::uint64_t> out = scaled(per, qb);
  const DeviceExchange::Inbox in = side.exchange->run(runs(side.gpu->packed(), out), out, stats);
  const index_t got = static_cast<index_t>(in.total / qb);
  void* records = side.gpu->scratch(2, static_cast<std::size_t>(got) * rb);
  run_share(comm, "routed queries", Share{0, got}, [&] {
    const std::size_t values = static_cast<std::size_t>(got) * static_cast<std::size_t>(k_local);
    auto* idx = static_cast<index_t*>(side.gpu->scratch(0, values * sizeof(index_t)));
    auto* dist = static_cast<float*>(side.gpu->scratch(1, values * sizeof(float)));
    KnnOptions o = options;
    o.k = k_local;
    o.stream = nullptr;
    const Clock::time_point t = Clock::now();
    const auto* q = reinterpret_cast<const float*>(in.base);
    ts = local.run(q, got, o, idx, dist);
    const Clock::time_point r = Clock::now();
    side.gpu->knn_replies(q, got, idx, dist, k_local, k, records);
    if (stats) {
      stats->local_ms += std::chrono::duration<double, std::milli>(r - t).count();
      stats->combine_ms += ms_since(r);
      stats->local_items += got;
    }
  });
  const std::vector<std::uint64_t> back = rescaled(in.size, qb, rb);
  const DeviceExchange::Inbox answers = side.exchange->run(runs(records, back), back, stats);
  const Clock::time_point t = Clock::now();
  index_t first = 0;
  for (std::size_t r = 0; r < per.size(); ++r) {
    side.gpu->merge(answers.base + answers.at[r], first, per[r], k, how == Route::Owner);
    first += per[r];
  }
  if (stats) stats->combine_ms += ms_since(t);
}

}  // namespace

namespace {

// Rows this rank computed (compact, `count` of them, their query ids) go by `mode` to rank 0 or
// to every rank, which puts them at their ids' places: ids travel once, then each array's rows.
struct OwnedRows {
  const void* compact;
  std::size_t row_bytes;
  void* full;
};
void gather_owned(MPI_Comm comm, PartitionDevice& side, Gather mode, const index_t* ids, index_t count,
                  const std::vector<OwnedRows>& arrays, DistributedStats* st) {
  if (mode == Gather::Local) return;
  const auto [rank, ranks] = place_in(comm);
  const auto to = [&](std::size_t row_bytes) {
    std::vector<std::uint64_t> bytes(static_cast<std::size_t>(ranks), 0);
    for (int r = 0; r < ranks; ++r)
      if (r != rank && (mode == Gather::All || r == 0)) bytes[static_cast<std::size_t>(r)] = count * row_bytes;
    return bytes;
  };
  DeviceExchange& ex = *side.exchange;
  const DeviceExchange::Inbox in = ex.run(std::vector<const void*>(static_cast<std::size_t>(ranks), ids),
                                          to(sizeof(index_t)), st);
  auto* got = static_cast<index_t*>(side.gpu->scratch(7, in.total));  // (the mailbox's next message overwrites it)
  copy_device_async(got, in.base, in.total, ex.stream());
  for (const OwnedRows& a : arrays) {
    const DeviceExchange::Inbox rows =
        ex.run(std::vector<const void*>(static_cast<std::size_t>(ranks), a.compact), to(a.row_bytes), st);
    const Clock::time_point t = Clock::now();
    for (int r = 0; r < ranks; ++r) {
      const std::size_t from = static_cast<std::size_t>(r);
      side.gpu->scatter_rows(rows.base + rows.at[from], a.row_bytes, got + in.at[from] / sizeof(index_t),
                             static_cast<index_t>(in.size[from] / sizeof(index_t)), a.full);
    }
    if (st) st->combine_ms += ms_since(t);
  }
}

// Input shards: this rank answers its share of the input order; each query goes to the owner of
// its top leaf, then to the other ranks within its k-th squared distance (all of them while fewer
// than k are known), and the answers come back.
TraversalStats knn_input_shards(MPI_Comm comm, const PartitionedKdTree& tree, PartitionDevice& side,
                                NearestNeighbors& local, const float* queries, index_t n, const KnnOptions& options,
                                index_t* indices, float* distances, DistributedStats* stats, Gather gather) {
  const Share s = share_of(n, place_in(comm).rank, place_in(comm).ranks);
  const int dims = tree.dims(), k = options.k;
  run_share(comm, "queries", s, [&] { side.gpu->begin_knn(s.count, k); });
  TraversalStats ts;
  knn_round(comm, side, local, Route::Owner, queries, s, dims, options, stats, ts);
  knn_round(comm, side, local, Route::Bound, queries, s, dims, options, stats, ts);
  const std::size_t width = static_cast<std::size_t>(k);
  const Clock::time_point t = Clock::now();
  side.gpu->finish_knn(s.count, k, indices + s.begin * k, distances + s.begin * k);
  if (stats) stats->combine_ms += ms_since(t);
  gather_rows(comm, *side.exchange, gather, indices, n, width * sizeof(index_t), stats);
  gather_rows(comm, *side.exchange, gather, distances, n, width * sizeof(float), stats);
  return ts;
}

// Owner shards: every rank holds every query, so each answers the queries in its own top leaves
// (their first round stays on the rank), and only those within reach of another rank's leaves
// travel, in the second round. The results stay at their queries' places on the answering rank.
TraversalStats knn_owner_shards(MPI_Comm comm, const PartitionedKdTree& tree, PartitionDevice& side,
                                NearestNeighbors& local, const float* queries, index_t n, const KnnOptions& options,
                                index_t* indices, float* distances, DistributedStats* stats, Gather gather) {
  const int rank = place_in(comm).rank, dims = tree.dims(), k = options.k;
  const std::size_t qb = sizeof(float) * static_cast<std::size_t>(dims);
  index_t own = 0;
  float* own_q = nullptr;
  index_t* own_ids = nullptr;
  run_share(comm, "queries", Share{0, n}, [&] {
    const Clock::time_point t = Clock::now();
    own = side.gpu->route(Route::Owner, queries, n, 0, k, rank)[static_cast<std::size_t>(rank)];
    own_q = static_cast<float*>(side.gpu->scratch(3, static_cast<std::size_t>(own) * qb));
    own_ids = static_cast<index_t*>(side.gpu->scratch(4, static_cast<std::size_t>(own) * sizeof(index_t)));
    copy_device_async(own_q, side.gpu->packed(), static_cast<std::size_t>(own) * qb, side.gpu->stream());
    copy_device_async(own_ids, side.gpu->positions(), static_cast<std::size_t>(own) * sizeof(index_t),
                      side.gpu->stream());
    sync_stream(side.gpu->stream());
    side.gpu->begin_knn(own, k);
    if (stats) stats->route_ms += ms_since(t);
  });
  TraversalStats ts;
  const Share mine{0, own};
  knn_round(comm, side, local, Route::Owner, own_q, mine, dims, options, stats, ts);  // (to this rank alone)
  knn_round(comm, side, local, Route::Bound, own_q, mine, dims, options, stats, ts);
  if (stats) stats->local_items = own;
  const std::size_t width = static_cast<std::size_t>(k);
  auto* ci = static_cast<index_t*>(side.gpu->scratch(5, static_cast<std::size_t>(own) * width * sizeof(index_t)));
  auto* cd = static_cast<float*>(side.gpu->scratch(6, static_cast<std::size_t>(own) * width * sizeof(float)));
  const Clock::time_point t = Clock::now();
  side.gpu->finish_knn(own, k, ci, cd);
  side.gpu->scatter_rows(ci, width * sizeof(index_t), own_ids, own, indices);
  side.gpu->scatter_rows(cd, width * sizeof(float), own_ids, own, distances);
  if (stats) stats->combine_ms += ms_since(t);
  gather_owned(comm, side, gather, own_ids, own,
               {{ci, width * sizeof(index_t), indices}, {cd, width * sizeof(float), distances}}, stats);
  return ts;
}

}  // namespace

TraversalStats nearest_neighbors_into(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                                      const float* queries, index_t n, const KnnOptions& options, index_t* indices,
                                      float* distances, DistributedStats* stats, Gather gather, Shard shard) {
  const bool dev = device_call(comm, queries, n, {indices, distances}, options.stream);
  if (!dev) {
    if (shard == Shard::Spatial) throw Error("shard spatial: a partitioned tree's owner shards need device queries");
    KnnResult r = nearest_neighbors(comm, tree, local, queries, n, options, stats, gather);
    place(r.indices, indices, gather, comm, n, options.k);
    place(r.distances, distances, gather, comm, n, options.k);
    return r;
  }
  const Clock::time_point start = Clock::now();
  my_share(comm, n, stats);
  PartitionDevice& side = tree.device_side();
  run_share(comm, "queries", Share{0, n}, [&] {
    if (options.k < 1 || options.k > tree.global_size())
      throw Error("k = " + std::to_string(options.k) + " is outside 1.." + std::to_string(tree.global_size()) +
                  " (the tree's points)");
  });
  if (stats) stats->local_items = 0;
  const TraversalStats ts =
      shard == Shard::Input
          ? knn_input_shards(comm, tree, side, local, queries, n, options, indices, distances, stats, gather)
          : knn_owner_shards(comm, tree, side, local, queries, n, options, indices, distances, stats, gather);
  finish_stats(comm, stats, start);
  return ts;
}

}  // namespace distributed
}  // namespace canopy
