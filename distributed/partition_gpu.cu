#include "distributed/partition_gpu.hpp"

#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/checks.hpp"
#include "core/cuda.cuh"
#include "core/device.hpp"
#include "core/rounding.hpp"
#include "layouts/geometry.hpp"

namespace canopy {
namespace distributed {
namespace detail {

// ---- memory other processes open --------------------------------------------------------------

void DeviceFree::operator()(void* p) const { cudaFree(p); }

void IpcMemory::reserve(std::size_t bytes, const char* what) {
  if (bytes <= bytes_ && ptr_) return;
  ptr_.reset();
  bytes_ = 0;
  const std::size_t want = std::max<std::size_t>(bytes, 1 << 20);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, want);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(std::string("not enough GPU memory for ") + what + ": " + std::to_string(want) + " bytes (" +
                cudaGetErrorString(e) + ")");
  }
  ptr_.reset(p);
  bytes_ = want;
}

IpcHandle IpcMemory::handle() const {
  static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(IpcHandle), "an IPC handle is 64 bytes");
  cudaIpcMemHandle_t h;
  CANOPY_CUDA_CHECK(cudaIpcGetMemHandle(&h, ptr_.get()));
  IpcHandle out;
  std::memcpy(out.bytes, &h, sizeof h);
  return out;
}

void IpcClose::operator()(void* p) const { cudaIpcCloseMemHandle(p); }

IpcPeer open_ipc(const IpcHandle& h) {
  cudaIpcMemHandle_t ch;
  std::memcpy(&ch, h.bytes, sizeof ch);
  void* p = nullptr;
  if (cudaIpcOpenMemHandle(&p, ch, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return IpcPeer(p);
}

void copy_device_async(void* dst, const void* src, std::size_t bytes, stream_t stream) {
  if (bytes == 0) return;
  CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}

void sync_stream(stream_t stream) { CANOPY_CUDA_CHECK(cudaStreamSynchronize(stream)); }

int current_device() {
  int d = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void StreamDestroy::operator()(stream_t s) const { cudaStreamDestroy(s); }

OwnStream make_stream() {
  cudaStream_t s = nullptr;
  CANOPY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return OwnStream(s);
}

// ---- the tree's device side -------------------------------------------------------------------

namespace {

constexpr int kBlock = 256;
unsigned grid_for(index_t n) { return static_cast<unsigned>(std::max<index_t>(1, (n + kBlock - 1) / kBlock)); }

// The top-tree's nodes and boxes (no points) and each leaf node's owner (-1: inner node).
struct TopOnDevice {
  KdTreeView view;
  const int* owner;
};

template <int W>
__device__ std::uint64_t reach(const TopOnDevice& top, const float (&q)[W], float reach2) {
  std::uint64_t mask = 0;
  node_id stack[KdTreeView::kMaxStack];
  int depth = 0;
  stack[depth++] = 0;
  while (depth > 0) {
    const node_id n = stack[--depth];
    if (!(box_distance2<W>(q, top.view.lo(n), top.view.hi(n)) <= reach2)) continue;
    if (top.view.is_leaf(n)) {
      mask |= std::uint64_t{1} << top.owner[n];
    } else {
      stack[depth++] = top.view.child(n, 1);
      stack[depth++] = top.view.child(n, 0);
    }
  }
  return mask;
}

template <int W>
__global__ void __launch_bounds__(kBlock)
route_kernel(TopOnDevice top, Route how, const float* queries, int dims, index_t count, float radius2, int k,
             const float* cand_d2, const int* found, int* first, std::uint64_t* masks) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float q[W];
  load_query(queries + i * dims, dims, q);
  std::uint64_t mask = 0;
  if (how == Route::Owner) {
    const int r = top.owner[top.view.find_leaf(q)];
    first[i] = r;
    mask = std::uint64_t{1} << r;
  } else if (how == Route::Radius) {
    mask = reach<W>(top, q, radius2);
  } else {
    const float bound2 = found[i] == k ? cand_d2[i * k + k - 1] : INFINITY;
    mask = reach<W>(top, q, bound2) & ~(std::uint64_t{1} << first[i]);
  }
  masks[i] = mask;
}

struct HasRank {
  const std::uint64_t* masks;
  int rank;
  __device__ bool operator()(index_t i) const { return (masks[i] >> rank) & 1; }
};

__global__ void __launch_bounds__(kBlock)
gather_kernel(const float* queries, int dims, const index_t* positions, index_t total, float* packed) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= total * dims) return;
  const index_t j = t / dims, d = t % dims;
  packed[t] = queries[positions[j] * dims + d];
}

__global__ void __launch_bounds__(kBlock)
add_kernel(const index_t* replies, const index_t* positions, index_t total, index_t* out) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= total) return;
  atomicAdd(reinterpret_cast<unsigned long long*>(out + positions[j]), static_cast<unsigned long long>(replies[j]));
}

// (squared distance, id) ascending; a padding entry (inf, -1) sorts after every point.
__device__ bool before(float da, index_t ia, float db, index_t ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return da < db || (da == db && ia < ib);
}

__host__ __device__ std::size_t ids_offset(int k) { return (static_cast<std::size_t>(k) * sizeof(float) + 7) / 8 * 8; }

// One (query, neighbour) pair per thread: the squared distance recomputed from this rank's
// point, the point named by its global id; (inf, -1) past the local search's k_local.
template <int W>
__global__ void __launch_bounds__(kBlock)
reply_kernel(const float* queries, int dims, index_t count, const index_t* local_idx, int k_local, int k,
             const float* points, const index_t* ids, char* records, std::size_t record) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= count * k) return;
  const index_t j = t / k;
  const int c = static_cast<int>(t % k);
  float dc = INFINITY;
  index_t ic = -1;
  if (c < k_local) {
    float q[W];
    load_query(queries + j * dims, dims, q);
    const index_t li = local_idx[j * k_local + c];
    dc = point_distance2<W>(q, points + li * W);  // the kNN visitor's arithmetic, on its padded rows
    ic = ids[li];
  }
  reinterpret_cast<float*>(records + j * record)[c] = dc;
  reinterpret_cast<index_t*>(records + j * record + ids_offset(k))[c] = ic;
}

// The local search orders by (distance, index); two squared distances may share a distance, so
// a run of equal distances is put in (squared distance, index) order (rarely more than one entry).
__global__ void __launch_bounds__(kBlock)
order_ties_kernel(index_t count, const float* local_dist, int k_local, int k, char* records, std::size_t record) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= count) return;
  const float* dist = local_dist + j * k_local;
  bool ties = false;
  for (int c = 1; c < k_local && !ties; ++c) ties = dist[c] == dist[c - 1];
  if (!ties) return;
  float* d2 = reinterpret_cast<float*>(records + j * record);
  index_t* id = reinterpret_cast<index_t*>(records + j * record + ids_offset(k));
  for (int c = 1; c < k_local; ++c) {
    const float dc = d2[c];
    const index_t ic = id[c];
    int at = c;
    while (at > 0 && before(dc, ic, d2[at - 1], id[at - 1])) {
      d2[at] = d2[at - 1];
      id[at] = id[at - 1];
      --at;
    }
    d2[at] = dc;
    id[at] = ic;
  }
}

// The first answers of queries that had none (each query's one record, from its owner): taken
// as they are, one value per thread.
__global__ void __launch_bounds__(kBlock)
take_kernel(const char* records, std::size_t record, const index_t* positions, index_t count, int k, float* cand_d2,
            index_t* cand_id, int* found) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= count * k) return;
  const index_t j = t / k;
  const int c = static_cast<int>(t % k);
  const index_t i = positions[j];
  const index_t* ri = reinterpret_cast<const index_t*>(records + j * record + ids_offset(k));
  cand_d2[i * k + c] = reinterpret_cast<const float*>(records + j * record)[c];
  cand_id[i * k + c] = ri[c];
  // The points come first, padding after: the last point's thread counts them.
  if (ri[c] >= 0 && (c == k - 1 || ri[c + 1] < 0)) found[i] = c + 1;
  if (c == 0 && ri[0] < 0) found[i] = 0;
}

__global__ void __launch_bounds__(kBlock)
merge_kernel(const char* records, std::size_t record, const index_t* positions, index_t count, int k, float* cand_d2,
             index_t* cand_id, int* found, float* tmp_d2, index_t* tmp_id) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= count) return;
  const index_t i = positions[j];
  const float* rd = reinterpret_cast<const float*>(records + j * record);
  const index_t* ri = reinterpret_cast<const index_t*>(records + j * record + ids_offset(k));
  float* cd = cand_d2 + i * k;
  index_t* ci = cand_id + i * k;
  float* td = tmp_d2 + j * k;
  index_t* ti = tmp_id + j * k;
  const int have = found[i];
  int a = 0, b = 0, out = 0;
  while (out < k) {
    const bool take_a = a < have && (b >= k || ri[b] < 0 || before(cd[a], ci[a], rd[b], ri[b]));
    if (take_a) {
      td[out] = cd[a];
      ti[out++] = ci[a++];
    } else if (b < k && ri[b] >= 0) {
      td[out] = rd[b];
      ti[out++] = ri[b++];
    } else {
      break;
    }
  }
  for (int c = 0; c < out; ++c) {
    cd[c] = td[c];
    ci[c] = ti[c];
  }
  found[i] = out;
}

__global__ void __launch_bounds__(kBlock)
finish_kernel(index_t count, int k, const float* cand_d2, const index_t* cand_id, const int* found, index_t* indices,
              float* distances) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= count * k) return;
  const bool have = static_cast<int>(t % k) < found[t / k];
  indices[t] = have ? cand_id[t] : -1;
  distances[t] = have ? sqrt_rn(cand_d2[t]) : INFINITY;
}

__global__ void __launch_bounds__(kBlock)
scatter_kernel(const std::uint32_t* compact, index_t words, const index_t* ids, index_t count, std::uint32_t* full) {
  const index_t t = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (t >= count * words) return;
  full[ids[t / words] * words + t % words] = compact[t];
}

template <class T>
T* upload(DeviceBuffer<T>& to, const T* from, std::size_t n, const char* what, cudaStream_t s) {
  to.reserve(std::max<std::size_t>(n, 1), what, s);
  copy_async(to.get(), from, n * sizeof(T), s);
  return to.get();
}

}  // namespace

struct PartitionGpu::Impl {
  Stream stream;  // first: the buffers below free on it
  int dims = 0, ranks = 1;
  TopOnDevice top{};
  DeviceBuffer<KdNode> nodes;
  DeviceBuffer<float> boxes, points;
  DeviceBuffer<int> owner;
  DeviceBuffer<index_t> ids;
  std::size_t bytes = 0;
  // Per call.
  DeviceBuffer<std::uint64_t> masks;
  DeviceBuffer<index_t> positions, selected;
  DeviceBuffer<float> packed;
  DeviceBuffer<unsigned char> temp;
  DeviceBuffer<float> cand_d2, tmp_d2;
  DeviceBuffer<index_t> cand_id, tmp_id;
  DeviceBuffer<int> found, first;
  DeviceBuffer<unsigned char> slots[8];
  PinnedBuffer<index_t> host_count;
};

PartitionGpu::PartitionGpu(const KdTree& top, const std::vector<node_id>& leaf_node, const std::vector<int>& owner,
                           int ranks, const std::vector<float>& local_points, const std::vector<index_t>& local_ids)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (ranks > 64) throw Error("queries in device memory: " + std::to_string(ranks) + " ranks, at most 64");
  const KdTreeView v = top.view();
  const cudaStream_t s = m.stream.get();
  m.dims = v.dims;
  m.ranks = ranks;
  m.top.view = v;
  m.top.view.points = nullptr;
  m.top.view.point_ids = nullptr;
  m.top.view.nodes = upload(m.nodes, v.nodes, static_cast<std::size_t>(v.n_nodes), "the top-tree's nodes", s);
  m.top.view.boxes =
      upload(m.boxes, v.boxes, static_cast<std::size_t>(v.n_nodes) * 2 * v.stride, "the top-tree's boxes", s);
  std::vector<int> node_owner(static_cast<std::size_t>(v.n_nodes), -1);
  for (std::size_t i = 0; i < leaf_node.size(); ++i) node_owner[static_cast<std::size_t>(leaf_node[i])] = owner[i];
  m.top.owner = upload(m.owner, node_owner.data(), node_owner.size(), "the top leaves' owners", s);
  // Padded as the trees' rows are, so the replies read them as the kNN visitor does.
  const int stride = padded_dims(v.dims);
  const std::size_t local = local_ids.size();
  std::vector<float> padded(local * static_cast<std::size_t>(stride), 0.0f);
  for (std::size_t i = 0; i < local; ++i)
    std::copy_n(local_points.begin() + static_cast<std::ptrdiff_t>(i * v.dims), v.dims, padded.begin() + i * stride);
  upload(m.points, padded.data(), padded.size(), "this rank's points", s);
  upload(m.ids, local_ids.data(), local_ids.size(), "this rank's point ids", s);
  m.bytes = static_cast<std::size_t>(v.n_nodes) * (sizeof(KdNode) + 2 * v.stride * sizeof(float) + sizeof(int)) +
            padded.size() * sizeof(float) + local * sizeof(index_t);
  m.host_count.reserve(1);
  m.stream.sync();
}

PartitionGpu::~PartitionGpu() = default;

stream_t PartitionGpu::stream() const { return impl_->stream.get(); }
std::size_t PartitionGpu::bytes() const { return impl_->bytes; }
const float* PartitionGpu::packed() const { return impl_->packed.get(); }
const index_t* PartitionGpu::positions() const { return impl_->positions.get(); }

std::vector<index_t> PartitionGpu::route(Route how, const float* queries, index_t count, float radius2, int k,
                                         int only) {
  Impl& m = *impl_;
  const cudaStream_t s = m.stream.get();
  std::vector<index_t> per_rank(static_cast<std::size_t>(m.ranks), 0);
  if (how != Route::Bound) {  // (a second round routes the queries its first round checked)
    const index_t bad = first_non_finite_on_device(queries, count * m.dims, s) / m.dims;
    if (bad < count) throw Error("query " + std::to_string(bad) + " has a NaN or infinite coordinate");
  }
  if (count == 0) return per_rank;
  m.masks.reserve(static_cast<std::size_t>(count), "the queries' destinations", s);
  if (how == Route::Owner) m.first.reserve(static_cast<std::size_t>(count), "the queries' first ranks", s);
  dispatch_dims(m.dims, [&](auto width) {
    constexpr int W = decltype(width)::value;
    route_kernel<W><<<grid_for(count), kBlock, 0, s>>>(m.top, how, queries, m.dims, count, radius2, k, m.cand_d2.get(),
                                                      m.found.get(), m.first.get(), m.masks.get());
    CANOPY_CUDA_CHECK_LAUNCH("route_kernel");
  });
  m.positions.reserve(static_cast<std::size_t>(count) * m.ranks, "the routed queries' positions", s);
  m.selected.reserve(1, "a selection count", s);
  index_t at = 0;
  for (int r = 0; r < m.ranks; ++r) {
    if (only >= 0 && r != only) continue;
    run_cub("cub::DeviceSelect::If (routing)", m.temp, "the routing's scratch", s, [&](void* t, std::size_t& b) {
      return cub::DeviceSelect::If(t, b, thrust::counting_iterator<index_t>(0), m.positions.get() + at, m.selected.get(),
                                   count, HasRank{m.masks.get(), r}, s);
    });
    CANOPY_CUDA_CHECK(cudaMemcpyAsync(m.host_count.get(), m.selected.get(), sizeof(index_t), cudaMemcpyDeviceToHost, s));
    m.stream.sync();
    per_rank[static_cast<std::size_t>(r)] = *m.host_count.get();
    at += *m.host_count.get();
  }
  m.packed.reserve(static_cast<std::size_t>(std::max<index_t>(at, 1)) * m.dims, "the routed queries", s);
  if (at > 0) {
    gather_kernel<<<grid_for(at * m.dims), kBlock, 0, s>>>(queries, m.dims, m.positions.get(), at, m.packed.get());
    CANOPY_CUDA_CHECK_LAUNCH("gather_kernel");
  }
  m.stream.sync();
  return per_rank;
}

void PartitionGpu::add_counts(const index_t* replies, index_t total, index_t* out, index_t count) {
  Impl& m = *impl_;
  const cudaStream_t s = m.stream.get();
  if (count > 0) CANOPY_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(count) * sizeof(index_t), s));
  if (total > 0) {
    add_kernel<<<grid_for(total), kBlock, 0, s>>>(replies, m.positions.get(), total, out);
    CANOPY_CUDA_CHECK_LAUNCH("add_kernel");
  }
  m.stream.sync();
}

std::size_t PartitionGpu::record_bytes(int k) { return ids_offset(k) + static_cast<std::size_t>(k) * sizeof(index_t); }

void PartitionGpu::knn_replies(const float* queries, index_t count, const index_t* local_idx, const float* local_dist,
                               int k_local, int k, void* records) {
  Impl& m = *impl_;
  const cudaStream_t s = m.stream.get();
  if (count > 0) {
    dispatch_dims(m.dims, [&](auto width) {
      constexpr int W = decltype(width)::value;
      reply_kernel<W><<<grid_for(count * k), kBlock, 0, s>>>(queries, m.dims, count, local_idx, k_local, k,
                                                            m.points.get(), m.ids.get(), static_cast<char*>(records),
                                                            record_bytes(k));
      CANOPY_CUDA_CHECK_LAUNCH("reply_kernel");
    });
    order_ties_kernel<<<grid_for(count), kBlock, 0, s>>>(count, local_dist, k_local, k, static_cast<char*>(records),
                                                         record_bytes(k));
    CANOPY_CUDA_CHECK_LAUNCH("order_ties_kernel");
  }
  m.stream.sync();
}

void PartitionGpu::begin_knn(index_t count, int k) {
  Impl& m = *impl_;
  const cudaStream_t s = m.stream.get();
  const std::size_t values = static_cast<std::size_t>(std::max<index_t>(count, 1)) * static_cast<std::size_t>(k);
  m.cand_d2.reserve(values, "the kNN candidates", s);
  m.cand_id.reserve(values, "the kNN candidates", s);
  m.tmp_d2.reserve(values, "the kNN merge", s);
  m.tmp_id.reserve(values, "the kNN merge", s);
  m.found.reserve(static_cast<std::size_t>(std::max<index_t>(count, 1)), "the kNN candidates", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(m.found.get(), 0, static_cast<std::size_t>(std::max<index_t>(count, 1)) * sizeof(int), s));
}

void PartitionGpu::merge(const void* records, index_t first, index_t count, int k, bool fresh) {
  Impl& m = *impl_;
  const cudaStream_t s = m.stream.get();
  if (count > 0 && fresh) {
    take_kernel<<<grid_for(count * k), kBlock, 0, s>>>(static_cast<const char*>(records), record_bytes(k),
                                                       m.positions.get() + first, count, k, m.cand_d2.get(),
                                                       m.cand_id.get(), m.found.get());
    CANOPY_CUDA_CHECK_LAUNCH("take_kernel");
  } else if (count > 0) {
    merge_kernel<<<grid_for(count), kBlock, 0, s>>>(static_cast<const char*>(records), record_bytes(k),
                                                    m.positions.get() + first, count, k, m.cand_d2.get(),
                                                    m.cand_id.get(), m.found.get(), m.tmp_d2.get(), m.tmp_id.get());
    CANOPY_CUDA_CHECK_LAUNCH("merge_kernel");
  }
  m.stream.sync();
}

void PartitionGpu::finish_knn(index_t count, int k, index_t* indices, float* distances) {
  Impl& m = *impl_;
  const cudaStream_t s = m.stream.get();
  if (count > 0) {
    finish_kernel<<<grid_for(count * k), kBlock, 0, s>>>(count, k, m.cand_d2.get(), m.cand_id.get(), m.found.get(),
                                                         indices, distances);
    CANOPY_CUDA_CHECK_LAUNCH("finish_kernel");
  }
  m.stream.sync();
}

void PartitionGpu::scatter_rows(const void* compact, std::size_t row_bytes, const index_t* ids, index_t count,
                                void* full) {
  Impl& m = *impl_;
  const index_t words = static_cast<index_t>(row_bytes / 4);
  if (count > 0 && words > 0) {
    scatter_kernel<<<grid_for(count * words), kBlock, 0, m.stream.get()>>>(
        static_cast<const std::uint32_t*>(compact), words, ids, count, static_cast<std::uint32_t*>(full));
    CANOPY_CUDA_CHECK_LAUNCH("scatter_kernel");
  }
  m.stream.sync();
}

void* PartitionGpu::scratch(int slot, std::size_t bytes) {
  Impl& m = *impl_;
  m.slots[slot].reserve(std::max<std::size_t>(bytes, 1), "the partitioned call's scratch", m.stream.get());
  return m.slots[slot].get();
}

}  // namespace detail
}  // namespace distributed
}  // namespace canopy
