#include <cub/device/device_radix_sort.cuh>

#include "executor/gpu_kernels.cuh"
#include "inspector/inspector.cuh"
#include "core/cuda.cuh"
#include "runtime/pc_gpu.hpp"
#include "runtime/pipeline.cuh"
#include "runtime/pc_visitor.hpp"
#include "scheduler/sandpile_gpu.hpp"

namespace canopy {
namespace detail {
namespace {

constexpr int kLeafKeyBlock = 256;

__global__ void __launch_bounds__(kLeafKeyBlock)
leaf_key_kernel(KdTreeView tree, const float* queries, index_t n, node_id* keys, index_t* ids) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  keys[i] = tree.find_leaf(queries + i * tree.dims);
  ids[i] = i;
}

int bits_for(index_t max_value) {
  int b = 1;
  while (b < 63 && (index_t{1} << b) <= max_value) ++b;
  return b;
}

}  // namespace

struct PcGpuEngine::Impl {
  Stream stream;  // first: the buffers below are freed in order on it
  KdTreeView view;  // device pointers
  DeviceBuffer<KdNode> nodes;
  DeviceBuffer<float> boxes, points, queries;
  DeviceBuffer<index_t> counts, order, warp_nodes, ids_in;
  DeviceBuffer<node_id> top_leaves, keys_in, keys_out;
  DeviceBuffer<std::uint64_t> matrix;
  DeviceBuffer<unsigned char> sort_temp;
  PinnedBuffer<std::uint64_t> host_matrix;
  PinnedBuffer<index_t> host_order;  // staging, so the upload is a true asynchronous copy
  Event start, stop;
  DeviceSandpile sandpile;
  std::unique_ptr<Pipeline> pipeline;
  index_t n_queries = 0;
  index_t matrix_cols = 0;

  // Launches the inspector for top into `matrix` (not timed, not synchronised).
  void launch_inspector(const TopTree& t, float radius2) {
    const index_t words = words_per_row(t.size()) * n_queries;
    top_leaves.reserve(t.leaves().size(), "the top-tree leaves", stream.get());
    matrix.reserve(static_cast<std::size_t>(words), "the scheduling matrix", stream.get());
    copy_to_device(top_leaves.get(), t.leaves().data(), t.leaves().size(), stream.get());
    TopTreeView dtop = t.view();
    dtop.leaves = top_leaves.get();
    matrix_cols = t.size();
    start.record(stream.get());
    with_visitor(radius2, [&](const auto& v) {
      gpu::launch_inspector(view, dtop, v, n_queries, matrix.get(), stream.get());
    });
  }

  template <class F>
  void with_visitor(float radius2, F&& f) {
    dispatch_dims(view.dims, [&](auto max_dim) {
      PointCorrelationVisitor<decltype(max_dim)::value> v;
      v.tree = view;
      v.queries = queries.get();
      v.counts = counts.get();
      v.radius2 = radius2;
      f(v);
    });
  }
};

PcGpuEngine::PcGpuEngine(const KdTree& tree) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.nodes.reserve(tree.nodes().size(), "the kd-tree nodes", m.stream.get());
  m.boxes.reserve(tree.boxes().size(), "the kd-tree boxes", m.stream.get());
  m.points.reserve(tree.points().size(), "the kd-tree points", m.stream.get());
  copy_to_device(m.nodes.get(), tree.nodes().data(), tree.nodes().size(), m.stream.get());
  copy_to_device(m.boxes.get(), tree.boxes().data(), tree.boxes().size(), m.stream.get());
  copy_to_device(m.points.get(), tree.points().data(), tree.points().size(), m.stream.get());
  m.stream.sync();
  m.view = tree.view();
  m.view.nodes = m.nodes.get();
  m.view.boxes = m.boxes.get();
  m.view.points = m.points.get();
  m.view.point_ids = nullptr;  // point correlation never needs them on the device
}

PcGpuEngine::~PcGpuEngine() = default;

void PcGpuEngine::set_queries(const float* queries, index_t n) {
  Impl& m = *impl_;
  const std::size_t vals = static_cast<std::size_t>(n) * m.view.dims;
  m.queries.reserve(vals, "the queries", m.stream.get());
  m.counts.reserve(static_cast<std::size_t>(n), "the results", m.stream.get());
  copy_to_device(m.queries.get(), queries, vals, m.stream.get());
  m.stream.sync();
  m.n_queries = n;
}

SchedulingMatrixView PcGpuEngine::inspect(const TopTree& top, float radius2, double* ms) {
  Impl& m = *impl_;
  const index_t words = words_per_row(top.size()) * m.n_queries;
  m.host_matrix.reserve(static_cast<std::size_t>(words));
  m.launch_inspector(top, radius2);
  copy_to_host(m.host_matrix.get(), m.matrix.get(), static_cast<std::size_t>(words), m.stream.get());
  m.stop.record(m.stream.get());
  *ms = m.stop.since(m.start);
  return {m.host_matrix.get(), m.n_queries, top.size(), words_per_row(top.size())};
}

double PcGpuEngine::inspect_on_device(const TopTree& top, float radius2) {
  Impl& m = *impl_;
  m.launch_inspector(top, radius2);
  m.stop.record(m.stream.get());
  return m.stop.since(m.start);
}

double PcGpuEngine::device_sandpile() {
  Impl& m = *impl_;
  m.order.reserve(static_cast<std::size_t>(m.n_queries), "the schedule", m.stream.get());
  m.start.record(m.stream.get());
  m.sandpile.run(m.matrix.get(), m.n_queries, words_per_row(m.matrix_cols), m.order.get(), m.stream.get());
  m.stop.record(m.stream.get());
  return m.stop.since(m.start);
}

index_t* PcGpuEngine::order_staging(index_t n) {
  impl_->host_order.reserve(static_cast<std::size_t>(n));
  return impl_->host_order.get();
}

void PcGpuEngine::upload_order(index_t n) {
  Impl& m = *impl_;
  m.order.reserve(static_cast<std::size_t>(n), "the schedule", m.stream.get());
  copy_to_device(m.order.get(), m.host_order.get(), static_cast<std::size_t>(n), m.stream.get());
  m.stream.sync();
}

double PcGpuEngine::leaf_sort() {
  Impl& m = *impl_;
  const index_t n = m.n_queries;
  if (n == 0) return 0.0;
  m.keys_in.reserve(n, "the leaf-sort keys", m.stream.get());
  m.keys_out.reserve(n, "the leaf-sort keys", m.stream.get());
  m.ids_in.reserve(n, "the leaf-sort ids", m.stream.get());
  m.order.reserve(n, "the schedule", m.stream.get());
  const int end_bit = bits_for(m.view.n_nodes);
  std::size_t temp_bytes = 0;
  CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, m.keys_in.get(), m.keys_out.get(),
                                                    m.ids_in.get(), m.order.get(), n, 0, end_bit, m.stream.get()));
  m.sort_temp.reserve(temp_bytes, "the leaf-sort scratch space", m.stream.get());
  m.start.record(m.stream.get());
  leaf_key_kernel<<<static_cast<unsigned>((n + kLeafKeyBlock - 1) / kLeafKeyBlock), kLeafKeyBlock, 0,
                    m.stream.get()>>>(m.view, m.queries.get(), n, m.keys_in.get(), m.ids_in.get());
  CANOPY_CUDA_CHECK_LAUNCH("leaf_key_kernel");
  // Radix sort is stable: queries in one leaf keep their input order.
  CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(m.sort_temp.get(), temp_bytes, m.keys_in.get(),
                                                    m.keys_out.get(), m.ids_in.get(), m.order.get(), n, 0,
                                                    end_bit, m.stream.get()));
  m.stop.record(m.stream.get());
  return m.stop.since(m.start);
}

std::vector<index_t> PcGpuEngine::download_order() {
  Impl& m = *impl_;
  std::vector<index_t> out(static_cast<std::size_t>(m.n_queries));
  copy_to_host(out.data(), m.order.get(), out.size(), m.stream.get());
  m.stream.sync();
  return out;
}

SchedulingMatrixView PcGpuEngine::download_matrix() {
  Impl& m = *impl_;
  const index_t words = words_per_row(m.matrix_cols) * m.n_queries;
  m.host_matrix.reserve(static_cast<std::size_t>(words));
  copy_to_host(m.host_matrix.get(), m.matrix.get(), static_cast<std::size_t>(words), m.stream.get());
  m.stream.sync();
  return {m.host_matrix.get(), m.n_queries, m.matrix_cols, words_per_row(m.matrix_cols)};
}

double PcGpuEngine::execute(ExecutorKind kind, float radius2, bool use_order,
                            std::vector<index_t>* gpu_warp_nodes) {
  Impl& m = *impl_;
  const index_t warps = (m.n_queries + 31) / 32;
  index_t* wn = nullptr;
  if (gpu_warp_nodes && kind != ExecutorKind::Independent) {
    m.warp_nodes.reserve(static_cast<std::size_t>(warps), "the per-warp node counts", m.stream.get());
    wn = m.warp_nodes.get();
  }
  const index_t* order = use_order ? m.order.get() : nullptr;
  m.start.record(m.stream.get());
  m.with_visitor(radius2, [&](const auto& v) {
    gpu::launch_executor(kind, m.view, v, order, m.n_queries, wn, m.stream.get());
  });
  m.stop.record(m.stream.get());
  const double ms = m.stop.since(m.start);
  if (wn) {
    gpu_warp_nodes->resize(static_cast<std::size_t>(warps));
    copy_to_host(gpu_warp_nodes->data(), wn, gpu_warp_nodes->size(), m.stream.get());
    m.stream.sync();
  }
  return ms;
}

PipelineStats PcGpuEngine::pipelined(const TopTree& top, float radius2, const TraversalOptions& opt,
                                     const std::vector<index_t>& chunks) {
  Impl& m = *impl_;
  m.order.reserve(static_cast<std::size_t>(m.n_queries), "the schedule", m.stream.get());
  if (!m.pipeline) m.pipeline = std::make_unique<Pipeline>();
  PipelineStats st;
  m.with_visitor(radius2, [&](const auto& v) {
    st = m.pipeline->run(m.view, top, v, chunks, opt.schedule, opt.executor, GuidedRows{},
                         opt.pipeline_inspector_first, m.order.get(), static_cast<cudaStream_t>(opt.stream));
  });
  return st;
}

void PcGpuEngine::download_counts(index_t* out) {
  Impl& m = *impl_;
  copy_to_host(out, m.counts.get(), static_cast<std::size_t>(m.n_queries), m.stream.get());
  m.stream.sync();
}

}  // namespace detail
}  // namespace canopy
