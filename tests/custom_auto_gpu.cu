#include "tests/custom_auto.hpp"
#include "tests/interval_device.cuh"

namespace canopy {
namespace test {

struct CountGpu::Impl : IntervalDevice {  // the base first: its stream frees the buffers below
  std::size_t n;
  DeviceBuffer<float> xs;
  DeviceBuffer<std::int32_t> counts;
  DeviceBuffer<std::uint32_t> hist;
  Impl(const GraphTree<Interval>& g, const std::vector<float>& x) : IntervalDevice(g), n(x.size()) {
    const cudaStream_t s = t.stream();
    xs.reserve(n, "xs", s);
    counts.reserve(n, "counts", s);
    hist.reserve(kCountBins, "hist", s);
    copy_to_device(xs.get(), x.data(), n, s);
  }
};

CountGpu::CountGpu(const GraphTree<Interval>& tree, const std::vector<float>& xs)
    : impl_(std::make_unique<Impl>(tree, xs)) {}
CountGpu::~CountGpu() = default;

void CountGpu::reset(std::int32_t count_fill) {
  Impl& m = *impl_;
  const cudaStream_t s = m.t.stream();
  CANOPY_CUDA_CHECK(cudaMemsetAsync(m.counts.get(), count_fill == 0 ? 0 : 0xff, m.n * sizeof(std::int32_t), s));
  CANOPY_CUDA_CHECK(cudaMemsetAsync(m.hist.get(), 0, kCountBins * sizeof(std::uint32_t), s));
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
}

CountRun CountGpu::run(bool writing, const TraversalOptions& opt) {
  Impl& m = *impl_;
  const cudaStream_t s = m.t.stream();
  auto fill = [&](LeafCountBase& b) {
    b.iv = m.dtree.payload();
    b.xs = m.xs.get();
    b.counts = m.counts.get();
    b.hist = writing ? nullptr : m.hist.get();
  };
  const index_t n = static_cast<index_t>(m.n);
  TraversalStats st;
  if (writing) {
    WritingCounter v;
    fill(v);
    st = m.t.run(m.tree.view(), m.dtree.view(), v, n, opt);
  } else {
    AddingCounter v;
    fill(v);
    st = m.t.run(m.tree.view(), m.dtree.view(), v, n, opt);
  }
  CountRun out = read();
  out.stats = std::move(st);
  return out;
}

CountRun CountGpu::read() {
  Impl& m = *impl_;
  const cudaStream_t s = m.t.stream();
  CountRun out;
  out.counts.resize(m.n);
  out.hist.resize(kCountBins);
  copy_to_host(out.counts.data(), m.counts.get(), m.n, s);
  copy_to_host(out.hist.data(), m.hist.get(), kCountBins, s);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

}  // namespace test
}  // namespace canopy
