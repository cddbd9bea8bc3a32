#include "runtime/ragged.cuh"
#include "tests/interval_device.cuh"
#include "tests/ragged_visitors.hpp"

namespace canopy {
namespace test {
namespace {

template <bool Guided>
RaggedResult<node_id> run_leaves(IntervalDevice& d, const float* xs, index_t n, const RaggedOptions& opt,
                                 bool device_outputs) {
  RaggedTraverser t;
  IntervalLeaves<Guided> v;
  v.tree = d.dtree.view();
  v.iv = d.dtree.payload();
  v.xs = xs;
  if (!device_outputs) return t.run(d.tree.view(), d.dtree.view(), v, n, opt);
  // Into device buffers, then copied back.
  DeviceBuffer<index_t> offsets;
  DeviceBuffer<node_id> leaves;
  offsets.reserve(static_cast<std::size_t>(n) + 1, "offsets", t.stream());
  RaggedResult<node_id> r;
  static_cast<RaggedStats&>(r) = t.run(d.tree.view(), d.dtree.view(), v, n, opt, offsets.get(), [&](index_t total) {
    leaves.reserve(static_cast<std::size_t>(total) + 1, "leaves", t.stream());
    return leaves.get();
  });
  r.offsets.resize(static_cast<std::size_t>(n) + 1);
  r.items.resize(static_cast<std::size_t>(r.total));
  copy_to_host(r.offsets.data(), offsets.get(), r.offsets.size(), t.stream());
  copy_to_host(r.items.data(), leaves.get(), r.items.size(), t.stream());
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(t.stream()));
  return r;
}

}  // namespace

RaggedResult<node_id> interval_leaves_gpu(const GraphTree<Interval>& tree, const std::vector<float>& xs, bool guided,
                                          const RaggedOptions& opt, bool device_outputs) {
  IntervalDevice d(tree);
  DeviceBuffer<float> dx;
  dx.reserve(std::max<std::size_t>(xs.size(), 1), "xs", d.t.stream());
  copy_to_device(dx.get(), xs.data(), xs.size(), d.t.stream());
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(d.t.stream()));
  const index_t n = static_cast<index_t>(xs.size());
  return guided ? run_leaves<true>(d, dx.get(), n, opt, device_outputs)
                : run_leaves<false>(d, dx.get(), n, opt, device_outputs);
}

}  // namespace test
}  // namespace canopy
