// The GPU side shared by the traversal workloads (nearest neighbours on three trees,
// Barnes-Hut): device mirrors of a tree's arrays, the inspector (unguided bit rows or guided
// visit-order rows), the device sandpile, sorting by a per-query key, the order upload and the
// executors, each phase timed with CUDA events on one non-blocking stream. A workload supplies
// the topology and visitor (with device pointers); this owns the buffers, reused from call to
// call. Include from .cu files only.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <memory>
#include <vector>

#include "executor/gpu_kernels.cuh"
#include "inspector/inspector.cuh"
#include "layouts/top_tree.hpp"
#include "core/cuda.cuh"
#include "scheduler/guided_gpu.hpp"
#include "scheduler/sandpile_gpu.hpp"
#include "runtime/pipeline.cuh"

namespace canopy {
namespace detail {

// Device copies of host vectors, freed together.
class DeviceMirror {
 public:
  template <class T>
  T* copy(const std::vector<T>& v, const char* what, cudaStream_t stream) {
    auto buf = std::make_unique<DeviceBuffer<T>>();
    buf->reserve(std::max<std::size_t>(v.size(), 1), what, stream);
    copy_to_device(buf->get(), v.data(), v.size(), stream);
    T* p = buf->get();
    holders_.push_back(std::make_unique<Holder<T>>(std::move(buf)));
    return p;
  }

 private:
  struct Base {
    virtual ~Base() = default;
  };
  template <class T>
  struct Holder : Base {
    explicit Holder(std::unique_ptr<DeviceBuffer<T>> b) : buf(std::move(b)) {}
    std::unique_ptr<DeviceBuffer<T>> buf;
  };
  std::vector<std::unique_ptr<Base>> holders_;
};

constexpr int kKeyBlock = 256;

template <class KeyOf>
__global__ void __launch_bounds__(kKeyBlock)
query_key_kernel(KeyOf key_of, index_t n, std::uint64_t* keys, index_t* ids) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  keys[i] = key_of(i);
  ids[i] = i;
}

inline int bits_for(std::uint64_t max_value) {
  int b = 1;
  while (b < 64 && (std::uint64_t{1} << b) <= max_value) ++b;
  return b;
}

class GpuTraversal {
 public:
  cudaStream_t stream() const { return stream_.get(); }
  index_t queries() const { return n_; }
  void set_query_count(index_t n) { n_ = n; }
  DeviceMirror& mirror() { return mirror_; }

  // The top-tree's leaves on the device (the inspector's column lookup).
  TopTreeView upload_top(const TopTree& t) {
    top_leaves_.reserve(t.leaves().size(), "the top-tree leaves", stream());
    copy_to_device(top_leaves_.get(), t.leaves().data(), t.leaves().size(), stream());
    TopTreeView v = t.view();
    v.leaves = top_leaves_.get();
    cols_ = t.size();
    return v;
  }

  // Unguided inspector; the bit matrix stays on the device (for device_sandpile()).
  template <class Topology, class Visitor>
  double inspect_bits(const Topology& tree, const TopTree& top, const Visitor& v) {
    const TopTreeView dtop = upload_top(top);
    bits_.reserve(static_cast<std::size_t>(words_per_row(cols_) * n_), "the scheduling matrix", stream());
    start_.record(stream());
    gpu::launch_inspector(tree, dtop, v, n_, bits_.get(), stream());
    stop_.record(stream());
    return stop_.since(start_);
  }

  // Unguided inspector + asynchronous copy of the matrix into pinned host memory.
  template <class Topology, class Visitor>
  SchedulingMatrixView inspect_bits_to_host(const Topology& tree, const TopTree& top, const Visitor& v, double* ms) {
    const TopTreeView dtop = upload_top(top);
    const std::size_t words = static_cast<std::size_t>(words_per_row(cols_) * n_);
    bits_.reserve(words, "the scheduling matrix", stream());
    host_bits_.reserve(words);
    start_.record(stream());
    gpu::launch_inspector(tree, dtop, v, n_, bits_.get(), stream());
    copy_to_host(host_bits_.get(), bits_.get(), words, stream());
    stop_.record(stream());
    *ms = stop_.since(start_);
    return {host_bits_.get(), n_, cols_, words_per_row(cols_)};
  }

  SchedulingMatrixView download_bits() {
    const std::size_t words = static_cast<std::size_t>(words_per_row(cols_) * n_);
    host_bits_.reserve(words);
    copy_to_host(host_bits_.get(), bits_.get(), words, stream());
    stream_.sync();
    return {host_bits_.get(), n_, cols_, words_per_row(cols_)};
  }

  double device_sandpile() {
    order_.reserve(static_cast<std::size_t>(n_), "the schedule", stream());
    start_.record(stream());
    sandpile_.run(bits_.get(), n_, words_per_row(cols_), order_.get(), stream());
    stop_.record(stream());
    return stop_.since(start_);
  }

  // Guided inspector + copy of the rows into pinned host memory, packed: nearest-neighbour
  // rows are short, so only their entries (and one offset per row) cross PCIe.
  template <class Topology, class Visitor>
  GuidedMatrixView inspect_guided_to_host(const Topology& tree, const TopTree& top, const Visitor& v, GuidedRows rows,
                                          double* ms) {
    const TopTreeView dtop = upload_top(top);
    const std::size_t n = static_cast<std::size_t>(n_);
    width_ = rows.width(cols_);
    guided_.reserve(static_cast<std::size_t>(width_) * n, "the guided scheduling matrix", stream());
    sizes_.reserve(n + 1, "the guided row sizes", stream());
    offsets_.reserve(n + 1, "the guided row offsets", stream());
    max_len_.reserve(1, "the longest-row counter", stream());
    std::size_t scan_bytes = 0;
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, sizes_.get(), offsets_.get(), n + 1, stream()));
    sort_temp_.reserve(scan_bytes, "the row-offset scan scratch space", stream());
    host_offsets_.reserve(n + 1);
    start_.record(stream());
    CANOPY_CUDA_CHECK(cudaMemsetAsync(max_len_.get(), 0, sizeof(unsigned long long), stream()));
    CANOPY_CUDA_CHECK(cudaMemsetAsync(sizes_.get() + n, 0, sizeof(index_t), stream()));
    gpu::launch_guided_inspector(tree, dtop, v, n_, rows, guided_.get(), sizes_.get(), max_len_.get(), stream());
    CANOPY_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(sort_temp_.get(), scan_bytes, sizes_.get(), offsets_.get(), n + 1,
                                                    stream()));
    copy_to_host(host_offsets_.get(), offsets_.get(), n + 1, stream());
    unsigned long long longest = 0;
    copy_to_host(&longest, max_len_.get(), 1, stream());
    stream_.sync();
    const index_t total = host_offsets_.get()[n];
    packed_.reserve(static_cast<std::size_t>(total), "the packed guided rows", stream());
    host_guided_.reserve(static_cast<std::size_t>(total));
    gpu::launch_pack_guided_rows(guided_.get(), width_, n_, offsets_.get(), packed_.get(), stream());
    copy_to_host(host_guided_.get(), packed_.get(), static_cast<std::size_t>(total), stream());
    stop_.record(stream());
    *ms = stop_.since(start_);
    GuidedMatrixView m;
    m.entries = host_guided_.get();
    m.rows = n_;
    m.cols = cols_;
    m.width = static_cast<index_t>(longest) + 1;
    m.offsets = host_offsets_.get();
    return m;
  }

  // The guided inspector alone: the rows stay on the device for device_guided_schedule().
  template <class Topology, class Visitor>
  double inspect_guided_on_device(const Topology& tree, const TopTree& top, const Visitor& v, GuidedRows rows) {
    const TopTreeView dtop = upload_top(top);
    const std::size_t n = static_cast<std::size_t>(n_);
    width_ = rows.width(cols_);
    guided_.reserve(static_cast<std::size_t>(width_) * n, "the guided scheduling matrix", stream());
    sizes_.reserve(n + 1, "the guided row sizes", stream());
    max_len_.reserve(1, "the longest-row counter", stream());
    start_.record(stream());
    gpu::launch_guided_inspector(tree, dtop, v, n_, rows, guided_.get(), sizes_.get(), max_len_.get(), stream());
    stop_.record(stream());
    return stop_.since(start_);
  }

  // The guided scheduler on the device rows of the last inspection (DeviceGuidedScheduler::
  // supports() must hold for the top-tree); the order stays on the device.
  double device_guided_schedule(const TopTree& top) {
    order_.reserve(static_cast<std::size_t>(n_), "the schedule", stream());
    start_.record(stream());
    guided_scheduler_.run(guided_.get(), n_, cols_, width_, top.parents().data(), order_.get(), stream());
    stop_.record(stream());
    return stop_.since(start_);
  }
  std::vector<index_t> device_guided_buckets() { return guided_scheduler_.bucket_offsets(stream()); }

  // Pinned host memory for a schedule; upload_order() sends it to the device.
  index_t* order_staging() {
    host_order_.reserve(static_cast<std::size_t>(n_));
    return host_order_.get();
  }
  void upload_order() {
    order_.reserve(static_cast<std::size_t>(n_), "the schedule", stream());
    copy_to_device(order_.get(), host_order_.get(), static_cast<std::size_t>(n_), stream());
    stream_.sync();
  }

  // The hand-tuned baseline: a stable radix sort of the queries by key_of(i) (a device
  // functor), keys below 2^end_bit. The order stays on the device.
  template <class KeyOf>
  double sort_by_key(const KeyOf& key_of, std::uint64_t max_key) {
    const index_t n = n_;
    keys_in_.reserve(n, "the sort keys", stream());
    keys_out_.reserve(n, "the sort keys", stream());
    ids_.reserve(n, "the sort ids", stream());
    order_.reserve(n, "the schedule", stream());
    const int end_bit = bits_for(max_key);
    std::size_t temp_bytes = 0;
    CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in_.get(), keys_out_.get(), ids_.get(),
                                                      order_.get(), n, 0, end_bit, stream()));
    sort_temp_.reserve(temp_bytes, "the sort scratch space", stream());
    start_.record(stream());
    query_key_kernel<<<static_cast<unsigned>((n + kKeyBlock - 1) / kKeyBlock), kKeyBlock, 0, stream()>>>(
        key_of, n, keys_in_.get(), ids_.get());
    CANOPY_CUDA_CHECK_LAUNCH("query_key_kernel");
    CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp_.get(), temp_bytes, keys_in_.get(), keys_out_.get(),
                                                      ids_.get(), order_.get(), n, 0, end_bit, stream()));
    stop_.record(stream());
    return stop_.since(start_);
  }

  // The sorted keys of the last sort_by_key, in schedule order (for bucket boundaries).
  std::vector<std::uint64_t> download_sorted_keys() {
    std::vector<std::uint64_t> out(static_cast<std::size_t>(n_));
    copy_to_host(out.data(), keys_out_.get(), out.size(), stream());
    stream_.sync();
    return out;
  }

  std::vector<index_t> download_order() {
    std::vector<index_t> out(static_cast<std::size_t>(n_));
    copy_to_host(out.data(), order_.get(), out.size(), stream());
    stream_.sync();
    return out;
  }

  // Runs an executor over the queries in the device order (use_order) or the input order.
  // With warp_nodes, the instrumented lockstep kernel also counts the nodes of each warp.
  template <class Topology, class Visitor>
  double execute(ExecutorKind kind, const Topology& tree, const Visitor& v, bool use_order,
                 std::vector<index_t>* warp_nodes) {
    const index_t warps = (n_ + 31) / 32;
    index_t* wn = nullptr;
    if (warp_nodes && kind != ExecutorKind::Independent) {
      warp_nodes_.reserve(static_cast<std::size_t>(warps), "the per-warp node counts", stream());
      wn = warp_nodes_.get();
    }
    start_.record(stream());
    gpu::launch_executor(kind, tree, v, use_order ? order_.get() : nullptr, n_, wn, stream());
    stop_.record(stream());
    const double ms = stop_.since(start_);
    if (wn) {
      warp_nodes->resize(static_cast<std::size_t>(warps));
      copy_to_host(warp_nodes->data(), wn, warp_nodes->size(), stream());
      stream_.sync();
    }
    return ms;
  }

  // The pipelined hybrid run (runtime/pipeline.cuh) in the chunks given as boundaries
  // (chunk_boundaries); the schedule lands in the order buffer, so execute(kind, ...,
  // use_order = true, ...) re-runs it.
  template <class Topology, class Visitor>
  PipelineStats pipelined(const Topology& tree, const TopTree& top, const Visitor& v, const TraversalOptions& opt,
                          const std::vector<index_t>& chunks, GuidedRows rows = {}) {
    order_.reserve(static_cast<std::size_t>(n_), "the schedule", stream());
    if (!pipeline_) pipeline_ = std::make_unique<Pipeline>();
    return pipeline_->run(tree, top, v, chunks, opt.schedule, opt.executor, rows, opt.pipeline_inspector_first,
                          order_.get(), static_cast<cudaStream_t>(opt.stream));
  }

  template <class T>
  void download(T* dst, const T* src, std::size_t n) {
    copy_to_host(dst, src, n, stream());
    stream_.sync();
  }

 private:
  Stream stream_;
  Event start_, stop_;
  DeviceMirror mirror_;
  std::unique_ptr<Pipeline> pipeline_;
  DeviceSandpile sandpile_;
  DeviceGuidedScheduler guided_scheduler_;
  DeviceBuffer<node_id> top_leaves_;
  DeviceBuffer<std::uint64_t> bits_, keys_in_, keys_out_;
  DeviceBuffer<std::int32_t> guided_, packed_;
  DeviceBuffer<index_t> sizes_, offsets_;
  PinnedBuffer<index_t> host_offsets_;
  DeviceBuffer<unsigned long long> max_len_;
  DeviceBuffer<index_t> order_, ids_, warp_nodes_;
  DeviceBuffer<unsigned char> sort_temp_;
  PinnedBuffer<std::uint64_t> host_bits_;
  PinnedBuffer<std::int32_t> host_guided_;
  PinnedBuffer<index_t> host_order_;
  index_t n_ = 0;
  index_t cols_ = 0;
  index_t width_ = 0;  // entries per guided row of the last guided inspection
};

}  // namespace detail
}  // namespace canopy
