// The kNN GPU implementation, templated on the tree; knn_gpu_{kd,ball,vp}.cu instantiate it.
#pragma once

#include "runtime/knn_gpu.hpp"
#include "runtime/knn_visitor.hpp"
#include "runtime/traversal_gpu.cuh"

namespace canopy {
namespace detail {

// Device views of the three trees: the host view with every array mirrored on the device.
inline KdTreeView device_view(DeviceMirror& m, const KdTree& t, cudaStream_t s) {
  KdTreeView v = t.view();
  v.nodes = m.copy(t.nodes(), "the kd-tree nodes", s);
  v.boxes = m.copy(t.boxes(), "the kd-tree boxes", s);
  v.points = m.copy(t.points(), "the kd-tree points", s);
  v.point_ids = m.copy(t.point_ids(), "the kd-tree point ids", s);
  return v;
}
inline BallTreeView device_view(DeviceMirror& m, const BallTree& t, cudaStream_t s) {
  BallTreeView v = t.view();
  v.nodes = m.copy(t.nodes(), "the ball-tree nodes", s);
  v.centres = m.copy(t.centres(), "the ball-tree centres", s);
  v.radii = m.copy(t.radii(), "the ball-tree radii", s);
  v.points = m.copy(t.points(), "the ball-tree points", s);
  v.point_ids = m.copy(t.point_ids(), "the ball-tree point ids", s);
  return v;
}
inline VpTreeView device_view(DeviceMirror& m, const VpTree& t, cudaStream_t s) {
  VpTreeView v = t.view();
  v.nodes = m.copy(t.nodes(), "the vp-tree nodes", s);
  v.vantages = m.copy(t.vantages(), "the vp-tree vantage points", s);
  v.mu = m.copy(t.mu(), "the vp-tree split radii", s);
  v.parent = m.copy(t.parent(), "the vp-tree parents", s);
  v.shell_lo = m.copy(t.shell_lo(), "the vp-tree shells", s);
  v.shell_hi = m.copy(t.shell_hi(), "the vp-tree shells", s);
  v.points = m.copy(t.points(), "the vp-tree points", s);
  v.point_ids = m.copy(t.point_ids(), "the vp-tree point ids", s);
  return v;
}

template <class Tree>
class KnnGpuImpl final : public KnnGpu {
 public:
  explicit KnnGpuImpl(const Tree& tree) {
    view_ = device_view(g_.mirror(), tree, g_.stream());
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(g_.stream()));
  }

  void set_queries(const float* queries, index_t n, int k) override {
    const std::size_t vals = static_cast<std::size_t>(n) * view_.dims;
    const std::size_t slots = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
    queries_.reserve(vals, "the queries", g_.stream());
    dist_.reserve(slots, "the neighbour distances", g_.stream());
    index_.reserve(slots, "the neighbour indices", g_.stream());
    copy_to_device(queries_.get(), queries, vals, g_.stream());
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(g_.stream()));
    g_.set_query_count(n);
    k_ = k;
  }
  GuidedMatrixView inspect(const TopTree& top, GuidedRows rows, double* ms) override {
    GuidedMatrixView m;
    with_visitor([&](const auto& v) { m = g_.inspect_guided_to_host(view_, top, v, rows, ms); });
    return m;
  }
  double inspect_on_device(const TopTree& top, GuidedRows rows) override {
    double ms = 0;
    with_visitor([&](const auto& v) { ms = g_.inspect_guided_on_device(view_, top, v, rows); });
    return ms;
  }
  double device_schedule(const TopTree& top) override { return g_.device_guided_schedule(top); }
  std::vector<index_t> device_buckets() override { return g_.device_guided_buckets(); }
  index_t* order_staging() override { return g_.order_staging(); }
  void upload_order() override { g_.upload_order(); }
  double leaf_sort() override {
    double ms = 0;
    with_visitor([&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      ms = g_.sort_by_key(GreedyLeafKey<decltype(view_), V>{view_, v}, static_cast<std::uint64_t>(view_.n_nodes));
    });
    return ms;
  }
  std::vector<index_t> download_order() override { return g_.download_order(); }
  std::vector<std::uint64_t> download_sorted_keys() override { return g_.download_sorted_keys(); }
  double execute(ExecutorKind kind, bool use_order, std::vector<index_t>* warp_nodes) override {
    double ms = 0;
    with_visitor([&](const auto& v) { ms = g_.execute(kind, view_, v, use_order, warp_nodes); });
    return ms;
  }
  void download(float* distances, index_t* indices) override {
    const std::size_t slots = static_cast<std::size_t>(g_.queries()) * static_cast<std::size_t>(k_);
    copy_to_host(distances, dist_.get(), slots, g_.stream());
    g_.download(indices, index_.get(), slots);
  }
  PipelineStats pipelined(const TopTree& top, const TraversalOptions& opt, GuidedRows rows,
                          const std::vector<index_t>& chunks) override {
    PipelineStats st;
    with_visitor([&](const auto& v) { st = g_.pipelined(view_, top, v, opt, chunks, rows); });
    return st;
  }

 private:
  template <class F>
  void with_visitor(F&& f) {
    dispatch_dims(view_.dims, [&](auto md) {
      f(make_knn_visitor<decltype(md)::value>(view_, queries_.get(), k_, dist_.get(), index_.get()));
    });
  }

  GpuTraversal g_;
  decltype(std::declval<const Tree&>().view()) view_;
  DeviceBuffer<float> queries_, dist_;
  DeviceBuffer<index_t> index_;
  int k_ = 1;
};

}  // namespace detail
}  // namespace canopy
