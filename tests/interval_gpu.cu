#include "tests/interval_device.cuh"

namespace canopy {
namespace test {

struct IntervalGpu::Impl : IntervalDevice {  // the base first: its stream frees the buffers below
  DeviceBuffer<float> xs;
  DeviceBuffer<std::int64_t> sums;
  DeviceBuffer<std::int32_t> counts, lengths;
  DeviceBuffer<node_id> trace;
  explicit Impl(const GraphTree<Interval>& g) : IntervalDevice(g) {}

  template <bool Guided>
  IntervalRun run(const std::vector<float>& x, const TraversalOptions& opt, int capacity) {
    const cudaStream_t s = t.stream();
    const std::size_t n = x.size();
    xs.reserve(n, "xs", s);
    sums.reserve(n, "sums", s);
    counts.reserve(n, "counts", s);
    lengths.reserve(n, "lengths", s);
    trace.reserve(n * capacity, "trace", s);
    // Slots past a query's visits are compared too: zero them, as the CPU trace is (they held
    // whatever an earlier user of the memory left, and the pipeline test failed after others).
    CANOPY_CUDA_CHECK(cudaMemsetAsync(trace.get(), 0, n * capacity * sizeof(node_id), s));
    copy_to_device(xs.get(), x.data(), n, s);
    TracingVisitor<IntervalVisitor<Guided>> v;
    v.inner.tree = dtree.view();
    v.inner.iv = dtree.payload();
    v.inner.xs = xs.get();
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
};

IntervalGpu::IntervalGpu(const GraphTree<Interval>& tree) : impl_(std::make_unique<Impl>(tree)) {}
IntervalGpu::~IntervalGpu() = default;

IntervalRun IntervalGpu::run(const std::vector<float>& xs, bool guided, const TraversalOptions& opt, int capacity) {
  return guided ? impl_->run<true>(xs, opt, capacity) : impl_->run<false>(xs, opt, capacity);
}

IntervalRun run_interval_gpu(const GraphTree<Interval>& tree, const std::vector<float>& xs, bool guided,
                             const TraversalOptions& opt, int capacity) {
  return IntervalGpu(tree).run(xs, guided, opt, capacity);
}

}  // namespace test
}  // namespace canopy
