// The device side of a PartitionedKdTree's calls with queries in device memory (issue 39): the
// top-tree's nodes and their owners on the GPU, the routing of queries by it, packing by
// destination, the kNN candidates' merge; and device memory other processes can open (CUDA IPC),
// the ranks' mailboxes. CUDA-free and MPI-free; partitioned_device.cpp holds the collectives.
// Internal: not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/types.hpp"
#include "layouts/kdtree.hpp"

namespace canopy {
namespace distributed {
namespace detail {

// Device memory of plain cudaMalloc (a stream-ordered pool's cannot be exported), which other
// processes of the host open by its handle.
struct IpcHandle {
  char bytes[64];  // cudaIpcMemHandle_t
};
struct DeviceFree {
  void operator()(void* p) const;
};
class IpcMemory {
 public:
  // Room for `bytes` (contents dropped when it grows).
  void reserve(std::size_t bytes, const char* what);
  void* get() const { return ptr_.get(); }
  std::size_t bytes() const { return bytes_; }
  IpcHandle handle() const;

 private:
  std::unique_ptr<void, DeviceFree> ptr_;
  std::size_t bytes_ = 0;
};
// Another process's IpcMemory opened here (peer access enabled as needed); null where the
// driver refuses.
struct IpcClose {
  void operator()(void* p) const;
};
using IpcPeer = std::unique_ptr<void, IpcClose>;
IpcPeer open_ipc(const IpcHandle& h);
// Copies device bytes (any device of this host, opened peers' memory included) on the stream.
void copy_device_async(void* dst, const void* src, std::size_t bytes, stream_t stream);
void sync_stream(stream_t stream);
int current_device();
// A non-blocking stream of the current device.
struct StreamDestroy {
  void operator()(stream_t s) const;
};
using OwnStream = std::unique_ptr<CUstream_st, StreamDestroy>;
OwnStream make_stream();

// Which ranks a query goes to.
enum class Route {
  Radius,  // owners of the top leaves whose boxes come within the radius (box_distance2 <= radius2)
  Owner,   // the owner of the top leaf the query descends into (KdTreeView::find_leaf)
  Bound,   // owners of the top leaves within the query's k-th candidate distance, but its Owner
};

class PartitionGpu {
 public:
  // top: the top-tree (its nodes and boxes travel; its points do not); owner[i]: the rank of
  // leaf leaf_node[i]; local_points [local][dims] and local_ids: this rank's points in local id
  // order (the kNN replies recompute squared distances from them and name points by global id).
  PartitionGpu(const KdTree& top, const std::vector<node_id>& leaf_node, const std::vector<int>& owner, int ranks,
               const std::vector<float>& local_points, const std::vector<index_t>& local_ids);
  ~PartitionGpu();
  PartitionGpu(const PartitionGpu&) = delete;
  PartitionGpu& operator=(const PartitionGpu&) = delete;

  stream_t stream() const;
  std::size_t bytes() const;  // device memory held for the tree (not the scratch)

  // Routes queries[count][dims] (device memory, a share's) and packs them by destination, rank
  // by rank, in query order: packed() [sum of the counts][dims], positions() their query
  // positions 0..count-1. Returns the queries per rank. Route::Bound reads the candidates of the
  // last begin_knn() (k each), Route::Owner records each query's owner for it. only >= 0: packs
  // the queries of that rank alone (the others' counts are 0). Throws naming the first query with
  // a NaN or infinite coordinate.
  std::vector<index_t> route(Route how, const float* queries, index_t count, float radius2, int k, int only = -1);
  const float* packed() const;
  const index_t* positions() const;

  // pc: out[positions()[j]] += replies[j] for the `total` packed queries (out zeroed first where
  // `zero` holds out's `count` values).
  void add_counts(const index_t* replies, index_t total, index_t* out, index_t count);

  // kNN, per received query j of `count` (coordinates queries[j]): records of k (squared
  // distance, global id) pairs, ascending, from the local search's results [count][k_local]
  // (padded with (inf, -1)). record_bytes(k) each.
  static std::size_t record_bytes(int k);
  void knn_replies(const float* queries, index_t count, const index_t* local_idx, const float* local_dist, int k_local,
                   int k, void* records);
  // Candidates of `count` queries, none found yet.
  void begin_knn(index_t count, int k);
  // Merges `count` records (in the order the queries were packed, from packed position `first`);
  // `fresh`: each is its query's first answer, taken as it is.
  void merge(const void* records, index_t first, index_t count, int k, bool fresh);
  // The candidates as results: indices[count][k], distances[count][k] (sqrt of the squared).
  void finish_knn(index_t count, int k, index_t* indices, float* distances);

  // full[ids[j]] = compact[j] for rows of row_bytes bytes (a multiple of 4), device memory.
  void scatter_rows(const void* compact, std::size_t row_bytes, const index_t* ids, index_t count, void* full);

  // Scratch device memory kept between calls: slot 0..7.
  void* scratch(int slot, std::size_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace detail
}  // namespace distributed
}  // namespace canopy
