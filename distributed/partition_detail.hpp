// Internals the partitioned kd-tree (partitioned_kd.cpp) and the partitioned Barnes-Hut
// (partitioned_bh.cpp) share: the top-tree cut and the byte exchange between ranks.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "distributed/distributed.hpp"
#include "distributed/partition_gpu.hpp"
#include "layouts/kdtree.hpp"

namespace canopy {
namespace distributed {
namespace detail {

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
TopCut cut_top_tree(const float* points, index_t n, int dims, int depth, int ranks, const char* what);

// MPI_Alltoallv of byte messages: out[d] goes to rank d; returns what every rank sent here, in
// rank order.
std::vector<std::vector<char>> exchange(MPI_Comm comm, const std::vector<std::vector<char>>& out, DistributedStats* st);

// How device bytes travel between the ranks (partitioned_device.cpp): the MPI library itself
// where it is CUDA-aware, CUDA IPC where every rank is on one host, else through host memory.
enum class Transport { Host, Ipc, CudaAwareMpi };
const char* to_string(Transport t);

// Byte runs between the ranks' device memory. Each rank keeps a mailbox (device memory the
// others can write to, with IPC) that receives one exchange's bytes and holds them until the next.
class DeviceExchange {
 public:
  DeviceExchange(MPI_Comm comm, stream_t stream);  // collective: the transport is agreed here
  ~DeviceExchange();
  DeviceExchange(const DeviceExchange&) = delete;
  DeviceExchange& operator=(const DeviceExchange&) = delete;
  Transport transport() const { return kind_; }
  stream_t stream() const { return stream_; }

  // What arrived: sender r's bytes at base + at[r], size[r] of them, senders in rank order with
  // no gaps (runs of whole records stay contiguous).
  struct Inbox {
    const char* base = nullptr;
    std::vector<std::uint64_t> at, size;
    std::uint64_t total = 0;
  };
  // Collective: bytes[r] bytes from from[r] (device memory) go to rank r. The work queued on
  // stream() so far is finished first.
  Inbox run(const std::vector<const void*>& from, const std::vector<std::uint64_t>& bytes, DistributedStats* st);

 private:
  bool connect(std::size_t bytes);
  MPI_Comm comm_;
  stream_t stream_;
  int rank_ = 0, ranks_ = 1;
  Transport kind_ = Transport::Host;
  IpcMemory box_;
  std::vector<IpcPeer> peers_;
};

// The exchange of the replicated calls' device gathers: one per communicator (a duplicate of
// it, so its messages never meet the caller's) and device, made by the first such call
// (collective) and kept for the process's life.
DeviceExchange& device_exchange(MPI_Comm comm);

// Collective: each rank's share of n rows of row_bytes bytes (`share`, device memory; rows
// share_of(n, rank, ranks)) goes by `mode` (Root: to rank 0, All: to every rank) through `ex`;
// place(r, rows, begin, count) puts rank r's rows where they belong (device work on ex.stream(),
// finished before this returns).
void move_device_shares(DeviceExchange& ex, MPI_Comm comm, Gather mode, const void* share, index_t n,
                        std::size_t row_bytes, DistributedStats* st,
                        const std::function<void(int, const void*, index_t, index_t)>& place);

// A partitioned tree's device side (PartitionedKdTree::device_side).
struct PartitionDevice {
  std::unique_ptr<PartitionGpu> gpu;
  std::unique_ptr<DeviceExchange> exchange;
};

}  // namespace detail
}  // namespace distributed
}  // namespace canopy
