#include "tests/gpu_trace.hpp"

#include <algorithm>

#include "inspector/device_matrix.cuh"
#include "layouts/device_copy.hpp"
#include "runtime/bh_visitor.hpp"
#include "runtime/engine.cuh"
#include "runtime/knn_visitor.hpp"
#include "runtime/pc_visitor.hpp"
#include "scheduler/device_schedule.hpp"

namespace canopy {
namespace test {
namespace {

template <class F>
void test_dims(int dims, F&& f) {
  if (dims == 2) return f(std::integral_constant<int, 2>{});
  if (dims == 7) return f(std::integral_constant<int, 8>{});
  throw Error("the GPU trace tests are built for 2 or 7 dimensions only");
}

template <class T>
T* upload(DeviceBuffer<T>& b, const std::vector<T>& v, cudaStream_t s) {
  b.reserve(v.size(), "a test array", s);
  copy_to_device(b.get(), v.data(), v.size(), s);
  return b.get();
}

template <class T>
std::vector<T> download(const DeviceBuffer<T>& b, std::size_t n, cudaStream_t s) {
  std::vector<T> out(n);
  copy_to_host(out.data(), b.get(), n, s);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

// The tracing side of a run: the visit sequences and, for lockstep kinds, nodes per warp.
struct Trace {
  DeviceBuffer<node_id> trace;
  DeviceBuffer<std::int32_t> lengths;
  DeviceBuffer<index_t> warp_nodes;
  index_t n;
  int capacity;
  Trace(index_t queries, int cap, cudaStream_t s) : n(queries), capacity(cap) {
    trace.reserve(static_cast<std::size_t>(n) * capacity, "trace", s);
    // Slots past a query's visits stay as they are on both sides: zero here as in the CPU
    // trace, whatever an earlier user of this device memory left there.
    CANOPY_CUDA_CHECK(cudaMemsetAsync(trace.get(), 0, static_cast<std::size_t>(n) * capacity * sizeof(node_id), s));
    lengths.reserve(static_cast<std::size_t>(n), "lengths", s);
    warp_nodes.reserve(static_cast<std::size_t>((n + 31) / 32), "warp nodes", s);
  }
  template <class Inner>
  TracingVisitor<Inner> wrap(const Inner& inner) const {
    TracingVisitor<Inner> v;
    v.inner = inner;
    v.trace = trace.get();
    v.lengths = lengths.get();
    v.capacity = capacity;
    return v;
  }
  // Step 3 over the given order (empty: the input order), then the trace back on the host.
  template <class Topology, class Visitor, class Out>
  void execute(const Topology& tree, const Visitor& v, const std::vector<index_t>& order, ExecutorKind kind,
               cudaStream_t s, Out& out) {
    DeviceSchedule schedule;
    if (!order.empty()) DeviceScheduler::upload(order, schedule, s);
    const bool lockstep = kind != ExecutorKind::Independent;
    gpu::execute(tree, v, order.empty() ? nullptr : &schedule, n, kind, s, lockstep ? warp_nodes.get() : nullptr);
    out.trace = download(trace, static_cast<std::size_t>(n) * capacity, s);
    out.lengths = download(lengths, static_cast<std::size_t>(n), s);
    if (lockstep) out.warp_nodes = download(warp_nodes, static_cast<std::size_t>((n + 31) / 32), s);
  }
};

// A kNN run's device side: the tree, the queries and the result slots, and f(visitor).
template <class Tree>
struct KnnOnDevice {
  Stream stream;  // first: the buffers below are freed in order on it
  DeviceCopy<Tree> tree;
  index_t n;
  int k;
  DeviceBuffer<float> queries, dist;
  DeviceBuffer<index_t> index;
  KnnOnDevice(const Tree& t, const std::vector<float>& q, int neighbours)
      : tree(t, stream.get()), n(static_cast<index_t>(q.size()) / t.dims()), k(neighbours) {
    upload(queries, q, stream.get());
    dist.reserve(static_cast<std::size_t>(n) * k, "distances", stream.get());
    index.reserve(static_cast<std::size_t>(n) * k, "indices", stream.get());
  }
  template <class F>
  void with_visitor(F&& f) const {
    test_dims(tree.view().dims, [&](auto md) {
      f(make_knn_visitor<decltype(md)::value>(tree.view(), queries.get(), k, dist.get(), index.get()));
    });
  }
};

template <class Tree>
KnnTraced traced_knn(const Tree& tree, const std::vector<float>& queries, int k, const std::vector<index_t>& order,
                     ExecutorKind kind, int capacity) {
  const KnnOnDevice<Tree> d(tree, queries, k);
  const cudaStream_t s = d.stream.get();
  Trace t(d.n, capacity, s);
  KnnTraced out;
  d.with_visitor([&](const auto& v) { t.execute(d.tree.view(), t.wrap(v), order, kind, s, out); });
  out.indices = download(d.index, static_cast<std::size_t>(d.n) * k, s);
  out.distances = download(d.dist, static_cast<std::size_t>(d.n) * k, s);
  return out;
}

// Step 1 alone, with the rows packed for the host.
template <class Tree>
PackedRows packed_rows(const Tree& tree, const std::vector<float>& queries, int k, int depth, GuidedRows rows) {
  const KnnOnDevice<Tree> d(tree, queries, k);
  const cudaStream_t s = d.stream.get();
  const TopTree top = TopTree::build(tree.view(), depth);
  DeviceTopTree dtop;
  dtop.upload(top, s);
  DeviceMatrix m;
  m.reserve(true, d.n, top.size(), rows, HostCopy::Packed, s);
  d.with_visitor([&](const auto& v) { gpu::inspect(d.tree.view(), dtop.view, v, rows, m, s); });
  gpu::finish_inspect(m, s);
  d.stream.sync();
  const GuidedMatrixView v = m.host_rows_view();
  PackedRows out;
  out.offsets.assign(v.offsets, v.offsets + v.rows + 1);
  out.entries.assign(v.entries, v.entries + out.offsets.back());
  out.rows = v.rows;
  out.cols = v.cols;
  out.width = v.width;
  return out;
}

}  // namespace

void allocate_device_bytes(std::size_t bytes, const char* what) {
  Stream stream;
  DeviceBuffer<unsigned char> b;
  b.reserve(bytes, what, stream.get());
}

std::vector<index_t> device_sandpile_order(const std::vector<std::uint64_t>& words, index_t rows, index_t cols) {
  Stream stream;
  const cudaStream_t s = stream.get();
  DeviceMatrix m;
  m.reserve(false, rows, cols, GuidedRows{}, HostCopy::None, s);
  copy_to_device(m.bits.get(), words.data(), words.size(), s);
  DeviceScheduler scheduler;
  DeviceSchedule schedule;
  scheduler.schedule(m, ScheduleKind::HybridDevice, TopTree{}, schedule, s, false);
  return DeviceScheduler::download(schedule, s).order;
}

std::vector<std::uint64_t> pc_matrix_gpu(const KdTree& tree, const std::vector<float>& queries, float radius,
                                         int depth) {
  Stream stream;
  const cudaStream_t s = stream.get();
  const DeviceCopy<KdTree> dtree(tree, s);
  const index_t n = static_cast<index_t>(queries.size()) / tree.dims();
  DeviceBuffer<float> dq;
  upload(dq, queries, s);
  const TopTree top = TopTree::build(tree.view(), depth);
  DeviceTopTree dtop;
  dtop.upload(top, s);
  DeviceMatrix m;
  m.reserve(false, n, top.size(), GuidedRows{}, HostCopy::Auto, s);
  dispatch_dims(tree.dims(), [&](auto md) {
    PointCorrelationVisitor<decltype(md)::value> v;
    v.tree = dtree.view();
    v.queries = dq.get();
    v.radius2 = radius * radius;
    gpu::inspect(dtree.view(), dtop.view, v, GuidedRows{}, m, s);
  });
  stream.sync();
  const SchedulingMatrixView h = m.host_bits_view();
  return std::vector<std::uint64_t>(h.words, h.words + h.rows * h.words_per_row);
}

Traced run_traced_gpu(const KdTree& tree, const std::vector<float>& queries, float radius,
                      const std::vector<index_t>& order, ExecutorKind kind, int capacity) {
  Stream stream;
  const cudaStream_t s = stream.get();
  const DeviceCopy<KdTree> dtree(tree, s);
  const index_t n = static_cast<index_t>(queries.size()) / tree.dims();
  DeviceBuffer<float> dq;
  DeviceBuffer<index_t> counts;
  upload(dq, queries, s);
  counts.reserve(static_cast<std::size_t>(n), "counts", s);
  Trace t(n, capacity, s);
  Traced out;
  dispatch_dims(tree.dims(), [&](auto md) {
    PointCorrelationVisitor<decltype(md)::value> inner;
    inner.tree = dtree.view();
    inner.queries = dq.get();
    inner.counts = counts.get();
    inner.radius2 = radius * radius;
    t.execute(dtree.view(), t.wrap(inner), order, kind, s, out);
  });
  out.counts = download(counts, static_cast<std::size_t>(n), s);
  return out;
}

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
  const cudaStream_t s = stream.get();
  DeviceBuffer<std::int32_t> matrix;
  upload(matrix, entries, s);
  DeviceSchedule schedule;
  schedule.size = rows;
  schedule.order.reserve(static_cast<std::size_t>(rows), "order", s);
  schedule.heads.reserve(static_cast<std::size_t>(rows), "heads", s);
  schedule.has_heads = true;
  DeviceGuidedScheduler scheduler;
  scheduler.run(matrix.get(), rows, cols, width, parents.data(), schedule.order.get(), schedule.heads.get(), s,
                max_bucket);
  return DeviceScheduler::download(schedule, s);
}

BhTraced run_traced_bh_gpu(const Octree& tree, const std::vector<float>& xyz, const std::vector<float>& mass,
                           float theta, float softening, const std::vector<index_t>& order, ExecutorKind kind,
                           int capacity) {
  Stream stream;
  const cudaStream_t s = stream.get();
  const DeviceCopy<Octree> dtree(tree, s);
  const index_t n = tree.size();
  DeviceBuffer<float> dxyz, dmass, forces;
  forces.reserve(static_cast<std::size_t>(n) * 3, "forces", s);
  Trace t(n, capacity, s);
  BarnesHutVisitor inner;
  inner.tree = dtree.view();
  inner.bodies_xyz = upload(dxyz, xyz, s);
  inner.masses = upload(dmass, mass, s);
  inner.forces = forces.get();
  inner.theta2 = theta * theta;
  inner.eps2 = softening * softening;
  BhTraced out;
  t.execute(dtree.view(), t.wrap(inner), order, kind, s, out);
  out.forces = download(forces, static_cast<std::size_t>(n) * 3, s);
  return out;
}

}  // namespace test
}  // namespace canopy
