#include "tests/interval_device.cuh"
#include "tests/shared_traverser.hpp"

namespace canopy {
namespace test {

struct SharedTraverser::Impl : IntervalDevice {
  using IntervalDevice::IntervalDevice;

  template <bool Guided>
  IntervalResults run(const std::vector<float>& x, TraversalOptions opt) {
    Stream s;  // the call's own (first: it frees the buffers below, which go before it)
    const std::size_t n = x.size();
    DeviceBuffer<float> xs;
    DeviceBuffer<std::int64_t> sums;
    DeviceBuffer<std::int32_t> counts;
    xs.reserve(n, "xs", s.get());
    sums.reserve(n, "sums", s.get());
    counts.reserve(n, "counts", s.get());
    copy_to_device(xs.get(), x.data(), n, s.get());
    IntervalVisitor<Guided> v;
    v.tree = dtree.view();
    v.iv = dtree.payload();
    v.xs = xs.get();
    v.sums = sums.get();
    v.counts = counts.get();
    opt.stream = s.get();  // the call starts after the copy above; s waits for the call
    t.run(tree.view(), dtree.view(), v, static_cast<index_t>(n), opt);
    IntervalResults out;
    out.counts.resize(n);
    out.sums.resize(n);
    copy_to_host(out.counts.data(), counts.get(), n, s.get());
    copy_to_host(out.sums.data(), sums.get(), n, s.get());
    s.sync();
    return out;
  }
};

SharedTraverser::SharedTraverser(const GraphTree<Interval>& tree) : impl_(std::make_unique<Impl>(tree)) {}
SharedTraverser::~SharedTraverser() = default;

IntervalResults SharedTraverser::run(const std::vector<float>& xs, bool guided, TraversalOptions opt) {
  return guided ? impl_->run<true>(xs, opt) : impl_->run<false>(xs, opt);
}

}  // namespace test
}  // namespace canopy
