#include "executor/gpu_kernels.cuh"
#include "gpu_trace.hpp"
#include "runtime/point_correlation.hpp"
#include "scheduler/sandpile_gpu.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace test {

void allocate_device_bytes(std::size_t bytes, const char* what) {
  DeviceBuffer<unsigned char> b;
  b.reserve(bytes, what);
}

std::vector<index_t> device_sandpile_order(const std::vector<std::uint64_t>& words, index_t rows, index_t cols) {
  Stream stream;
  DeviceBuffer<std::uint64_t> matrix;
  DeviceBuffer<index_t> order;
  matrix.reserve(words.size(), "matrix");
  order.reserve(rows, "order");
  copy_to_device(matrix.get(), words.data(), words.size(), stream.get());
  DeviceSandpile sandpile;
  sandpile.run(matrix.get(), rows, words_per_row(cols), order.get(), stream.get());
  std::vector<index_t> out(static_cast<std::size_t>(rows));
  copy_to_host(out.data(), order.get(), out.size(), stream.get());
  stream.sync();
  return out;
}

Traced run_traced_gpu(const KdTree& tree, const std::vector<float>& queries, float radius,
                      const std::vector<index_t>& order, ExecutorKind kind, int capacity) {
  const index_t n = static_cast<index_t>(queries.size()) / tree.dims();
  Stream stream;
  DeviceBuffer<KdNode> nodes;
  DeviceBuffer<float> boxes, points, dq;
  DeviceBuffer<index_t> counts, dorder, warp_nodes;
  DeviceBuffer<node_id> trace;
  DeviceBuffer<std::int32_t> lengths;
  nodes.reserve(tree.nodes().size(), "nodes");
  boxes.reserve(tree.boxes().size(), "boxes");
  points.reserve(tree.points().size(), "points");
  dq.reserve(queries.size(), "queries");
  counts.reserve(n, "counts");
  warp_nodes.reserve((n + 31) / 32, "warp nodes");
  trace.reserve(static_cast<std::size_t>(n) * capacity, "trace");
  lengths.reserve(n, "lengths");
  copy_to_device(nodes.get(), tree.nodes().data(), tree.nodes().size(), stream.get());
  copy_to_device(boxes.get(), tree.boxes().data(), tree.boxes().size(), stream.get());
  copy_to_device(points.get(), tree.points().data(), tree.points().size(), stream.get());
  copy_to_device(dq.get(), queries.data(), queries.size(), stream.get());
  if (!order.empty()) {
    dorder.reserve(order.size(), "order");
    copy_to_device(dorder.get(), order.data(), order.size(), stream.get());
  }
  KdTreeView view = tree.view();
  view.nodes = nodes.get();
  view.boxes = boxes.get();
  view.points = points.get();
  view.point_ids = nullptr;
  dispatch_dims(view.dims, [&](auto md) {
    TracingVisitor<PointCorrelationVisitor<decltype(md)::value>> v;
    v.inner.tree = view;
    v.inner.queries = dq.get();
    v.inner.counts = counts.get();
    v.inner.radius2 = radius * radius;
    v.trace = trace.get();
    v.lengths = lengths.get();
    v.capacity = capacity;
    gpu::launch_executor(kind, view, v, order.empty() ? nullptr : dorder.get(), n,
                         kind == ExecutorKind::Independent ? nullptr : warp_nodes.get(), stream.get());
  });
  Traced out;
  out.trace.resize(static_cast<std::size_t>(n) * capacity);
  out.lengths.resize(n);
  out.counts.resize(n);
  copy_to_host(out.trace.data(), trace.get(), out.trace.size(), stream.get());
  copy_to_host(out.lengths.data(), lengths.get(), out.lengths.size(), stream.get());
  copy_to_host(out.counts.data(), counts.get(), out.counts.size(), stream.get());
  if (kind != ExecutorKind::Independent) {
    out.warp_nodes.resize((n + 31) / 32);
    copy_to_host(out.warp_nodes.data(), warp_nodes.get(), out.warp_nodes.size(), stream.get());
  }
  stream.sync();
  return out;
}

}  // namespace test
}  // namespace canopy
