#include "runtime/custom.cuh"
#include "tests/interval_tree.hpp"

namespace canopy {
namespace test {

template <bool Guided>
IntervalRun run_interval(const GraphTree<Interval>& tree, const std::vector<float>& xs, const TraversalOptions& opt,
                         int capacity) {
  Traverser t;
  const cudaStream_t s = t.stream();
  DeviceGraphTree<Interval> dtree(tree, s);
  const std::size_t n = xs.size();
  DeviceBuffer<float> dx;
  DeviceBuffer<std::int64_t> sums;
  DeviceBuffer<std::int32_t> counts, lengths;
  DeviceBuffer<node_id> trace;
  dx.reserve(std::max<std::size_t>(n, 1), "xs", s);
  sums.reserve(std::max<std::size_t>(n, 1), "sums", s);
  counts.reserve(std::max<std::size_t>(n, 1), "counts", s);
  lengths.reserve(std::max<std::size_t>(n, 1), "lengths", s);
  trace.reserve(std::max<std::size_t>(n * capacity, 1), "trace", s);
  copy_to_device(dx.get(), xs.data(), n, s);
  TracingVisitor<IntervalVisitor<Guided>> v;
  v.inner.tree = dtree.view();
  v.inner.iv = dtree.payload();
  v.inner.xs = dx.get();
  v.inner.sums = sums.get();
  v.inner.counts = counts.get();
  v.trace = trace.get();
  v.lengths = lengths.get();
  v.capacity = capacity;
  TraversalStats st = t.run(tree.view(), dtree.view(), v, static_cast<index_t>(n), opt);
  IntervalRun out;
  out.counts.resize(n);
  out.sums.resize(n);
  out.lengths.resize(n);
  out.trace.resize(n * capacity);
  copy_to_host(out.counts.data(), counts.get(), n, s);
  copy_to_host(out.sums.data(), sums.get(), n, s);
  copy_to_host(out.lengths.data(), lengths.get(), n, s);
  copy_to_host(out.trace.data(), trace.get(), n * capacity, s);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
  out.order = std::move(st.schedule.order);
  out.gpu_warp_nodes = std::move(st.gpu_warp_nodes);
  return out;
}

IntervalRun run_interval_gpu(const GraphTree<Interval>& tree, const std::vector<float>& xs, bool guided,
                             const TraversalOptions& opt, int capacity) {
  return guided ? run_interval<true>(tree, xs, opt, capacity) : run_interval<false>(tree, xs, opt, capacity);
}

}  // namespace test
}  // namespace canopy
