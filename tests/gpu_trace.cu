#include "executor/gpu_kernels.cuh"
#include "runtime/bh_visitor.hpp"
#include "runtime/knn_gpu.cuh"
#include "scheduler/guided_gpu.hpp"
#include "gpu_trace.hpp"
#include "runtime/pc_visitor.hpp"
#include "scheduler/sandpile_gpu.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace test {

void allocate_device_bytes(std::size_t bytes, const char* what) {
  Stream stream;
  DeviceBuffer<unsigned char> b;
  b.reserve(bytes, what, stream.get());
}

std::vector<index_t> device_sandpile_order(const std::vector<std::uint64_t>& words, index_t rows, index_t cols) {
  Stream stream;
  DeviceBuffer<std::uint64_t> matrix;
  DeviceBuffer<index_t> order;
  matrix.reserve(words.size(), "matrix", stream.get());
  order.reserve(rows, "order", stream.get());
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
  nodes.reserve(tree.nodes().size(), "nodes", stream.get());
  boxes.reserve(tree.boxes().size(), "boxes", stream.get());
  points.reserve(tree.points().size(), "points", stream.get());
  dq.reserve(queries.size(), "queries", stream.get());
  counts.reserve(n, "counts", stream.get());
  warp_nodes.reserve((n + 31) / 32, "warp nodes", stream.get());
  trace.reserve(static_cast<std::size_t>(n) * capacity, "trace", stream.get());
  lengths.reserve(n, "lengths", stream.get());
  copy_to_device(nodes.get(), tree.nodes().data(), tree.nodes().size(), stream.get());
  copy_to_device(boxes.get(), tree.boxes().data(), tree.boxes().size(), stream.get());
  copy_to_device(points.get(), tree.points().data(), tree.points().size(), stream.get());
  copy_to_device(dq.get(), queries.data(), queries.size(), stream.get());
  if (!order.empty()) {
    dorder.reserve(order.size(), "order", stream.get());
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

namespace {

template <class F>
void test_dims(int dims, F&& f) {
  if (dims == 2) return f(std::integral_constant<int, 2>{});
  if (dims == 7) return f(std::integral_constant<int, 8>{});
  throw Error("the GPU trace tests are built for 2 or 7 dimensions only");
}

template <class Tree>
KnnTraced traced_knn(const Tree& tree, const std::vector<float>& queries, int k, const std::vector<index_t>& order,
                     ExecutorKind kind, int capacity) {
  detail::GpuTraversal g;
  const auto view = detail::device_view(g.mirror(), tree, g.stream());
  const index_t n = static_cast<index_t>(queries.size()) / tree.dims();
  g.set_query_count(n);
  DeviceBuffer<float> dq, dist;
  DeviceBuffer<index_t> index;
  DeviceBuffer<node_id> trace;
  DeviceBuffer<std::int32_t> lengths;
  dq.reserve(queries.size(), "queries", g.stream());
  dist.reserve(static_cast<std::size_t>(n) * k, "distances", g.stream());
  index.reserve(static_cast<std::size_t>(n) * k, "indices", g.stream());
  trace.reserve(static_cast<std::size_t>(n) * capacity, "trace", g.stream());
  lengths.reserve(n, "lengths", g.stream());
  copy_to_device(dq.get(), queries.data(), queries.size(), g.stream());
  if (!order.empty()) {
    std::copy(order.begin(), order.end(), g.order_staging());
    g.upload_order();
  }
  KnnTraced out;
  test_dims(tree.dims(), [&](auto md) {
    TracingVisitor<decltype(make_knn_visitor<decltype(md)::value>(view, dq.get(), k, dist.get(), index.get()))> v;
    v.inner = make_knn_visitor<decltype(md)::value>(view, dq.get(), k, dist.get(), index.get());
    v.trace = trace.get();
    v.lengths = lengths.get();
    v.capacity = capacity;
    g.execute(kind, view, v, !order.empty(), kind == ExecutorKind::Independent ? nullptr : &out.warp_nodes);
  });
  out.trace.resize(static_cast<std::size_t>(n) * capacity);
  out.lengths.resize(n);
  out.indices.resize(static_cast<std::size_t>(n) * k);
  out.distances.resize(static_cast<std::size_t>(n) * k);
  g.download(out.trace.data(), trace.get(), out.trace.size());
  g.download(out.lengths.data(), lengths.get(), out.lengths.size());
  g.download(out.indices.data(), index.get(), out.indices.size());
  g.download(out.distances.data(), dist.get(), out.distances.size());
  return out;
}

template <class Tree>
PackedRows packed_rows(const Tree& tree, const std::vector<float>& queries, int k, int depth, GuidedRows rows) {
  detail::GpuTraversal g;
  const auto view = detail::device_view(g.mirror(), tree, g.stream());
  const index_t n = static_cast<index_t>(queries.size()) / tree.dims();
  g.set_query_count(n);
  DeviceBuffer<float> dq, dist;
  DeviceBuffer<index_t> index;
  dq.reserve(queries.size(), "queries", g.stream());
  dist.reserve(static_cast<std::size_t>(n) * k, "distances", g.stream());
  index.reserve(static_cast<std::size_t>(n) * k, "indices", g.stream());
  copy_to_device(dq.get(), queries.data(), queries.size(), g.stream());
  const TopTree top = TopTree::build(tree.view(), depth);
  PackedRows out;
  test_dims(tree.dims(), [&](auto md) {
    double ms = 0;
    const GuidedMatrixView m = g.inspect_guided_to_host(
        view, top, make_knn_visitor<decltype(md)::value>(view, dq.get(), k, dist.get(), index.get()), rows, &ms);
    out.offsets.assign(m.offsets, m.offsets + m.rows + 1);
    out.entries.assign(m.entries, m.entries + out.offsets.back());
    out.rows = m.rows;
    out.cols = m.cols;
    out.width = m.width;
  });
  return out;
}

}  // namespace

KnnTraced run_traced_knn_gpu(const KdTree& tree, const std::vector<float>& queries, int k,
                             const std::vector<index_t>& order, ExecutorKind kind, int capacity) {
  return traced_knn(tree, queries, k, order, kind, capacity);
}
KnnTraced run_traced_knn_gpu(const BallTree& tree, const std::vector<float>& queries, int k,
                             const std::vector<index_t>& order, ExecutorKind kind, int capacity) {
  return traced_knn(tree, queries, k, order, kind, capacity);
}
KnnTraced run_traced_knn_gpu(const VpTree& tree, const std::vector<float>& queries, int k,
                             const std::vector<index_t>& order, ExecutorKind kind, int capacity) {
  return traced_knn(tree, queries, k, order, kind, capacity);
}
PackedRows guided_matrix_gpu(const KdTree& tree, const std::vector<float>& queries, int k, int depth,
                             GuidedRows rows) {
  return packed_rows(tree, queries, k, depth, rows);
}
PackedRows guided_matrix_gpu(const BallTree& tree, const std::vector<float>& queries, int k, int depth,
                             GuidedRows rows) {
  return packed_rows(tree, queries, k, depth, rows);
}
PackedRows guided_matrix_gpu(const VpTree& tree, const std::vector<float>& queries, int k, int depth,
                             GuidedRows rows) {
  return packed_rows(tree, queries, k, depth, rows);
}

Schedule device_guided_schedule(const std::vector<std::int32_t>& entries, index_t rows, index_t cols, index_t width,
                                const std::vector<node_id>& parents, index_t max_bucket) {
  Stream stream;
  DeviceBuffer<std::int32_t> matrix;
  DeviceBuffer<index_t> order;
  matrix.reserve(std::max<std::size_t>(entries.size(), 1), "matrix", stream.get());
  order.reserve(std::max<index_t>(rows, 1), "order", stream.get());
  copy_to_device(matrix.get(), entries.data(), entries.size(), stream.get());
  DeviceGuidedScheduler sched;
  sched.run(matrix.get(), rows, cols, width, parents.data(), order.get(), stream.get(), max_bucket);
  Schedule out;
  out.order.resize(static_cast<std::size_t>(rows));
  copy_to_host(out.order.data(), order.get(), out.order.size(), stream.get());
  stream.sync();
  out.bucket_offsets = sched.bucket_offsets(stream.get());
  return out;
}

BhTraced run_traced_bh_gpu(const Octree& tree, const std::vector<float>& xyz, const std::vector<float>& mass,
                           float theta, float softening, const std::vector<index_t>& order, ExecutorKind kind,
                           int capacity) {
  detail::GpuTraversal g;
  detail::DeviceMirror& mir = g.mirror();
  OctreeView view = tree.view();
  view.nodes = mir.copy(tree.nodes(), "nodes", g.stream());
  view.child_ids = mir.copy(tree.child_ids(), "child ids", g.stream());
  view.com = mir.copy(tree.com(), "com", g.stream());
  view.cubes = mir.copy(tree.cubes(), "cubes", g.stream());
  view.bodies = mir.copy(tree.bodies(), "bodies", g.stream());
  view.body_ids = mir.copy(tree.body_ids(), "body ids", g.stream());
  const index_t n = tree.size();
  g.set_query_count(n);
  DeviceBuffer<float> forces;
  DeviceBuffer<node_id> trace;
  DeviceBuffer<std::int32_t> lengths;
  forces.reserve(static_cast<std::size_t>(n) * 3, "forces", g.stream());
  trace.reserve(static_cast<std::size_t>(n) * capacity, "trace", g.stream());
  lengths.reserve(n, "lengths", g.stream());
  if (!order.empty()) {
    std::copy(order.begin(), order.end(), g.order_staging());
    g.upload_order();
  }
  TracingVisitor<BarnesHutVisitor> v;
  v.inner.tree = view;
  v.inner.bodies_xyz = mir.copy(xyz, "xyz", g.stream());
  v.inner.masses = mir.copy(mass, "mass", g.stream());
  v.inner.forces = forces.get();
  v.inner.theta2 = theta * theta;
  v.inner.eps2 = softening * softening;
  v.trace = trace.get();
  v.lengths = lengths.get();
  v.capacity = capacity;
  BhTraced out;
  g.execute(kind, view, v, !order.empty(), kind == ExecutorKind::Independent ? nullptr : &out.warp_nodes);
  out.trace.resize(static_cast<std::size_t>(n) * capacity);
  out.lengths.resize(n);
  out.forces.resize(static_cast<std::size_t>(n) * 3);
  g.download(out.trace.data(), trace.get(), out.trace.size());
  g.download(out.lengths.data(), lengths.get(), out.lengths.size());
  g.download(out.forces.data(), forces.get(), out.forces.size());
  return out;
}

}  // namespace test
}  // namespace canopy
