// PointCorrelation::run_lists on the GPU: the ragged engine (runtime/ragged.cuh) with
// detail::PcListVisitor over a device copy of the kd-tree.
#include <string>

#include "core/cuda.cuh"
#include "layouts/device_copy.hpp"
#include "runtime/detail/pc_lists.hpp"
#include "runtime/ragged.cuh"

namespace canopy {
namespace detail {
namespace {

std::string mib(std::size_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }

class PcListsGpuImpl final : public PcListsGpu {
 public:
  explicit PcListsGpuImpl(const KdTree& tree) : host_(tree.topology_view()), tree_(tree, core_.stream()) {
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(core_.stream()));
  }

  RaggedStats run(const float* queries, const float* radii, index_t n, float radius2, index_t upper_from,
                  const RaggedOptions& opt, index_t* offsets, const ItemBuffer<index_t>& indices) override {
    const int dims = host_.dims;
    const std::size_t query_floats = static_cast<std::size_t>(std::max<index_t>(n, 0)) * dims;
    const std::size_t radius_floats = radii ? static_cast<std::size_t>(std::max<index_t>(n, 0)) : 0;
    const std::size_t fixed = tree_.bytes() + (query_floats + radius_floats) * sizeof(float);
    if (opt.memory_budget > 0 && fixed > opt.memory_budget)
      throw OutOfMemory("PointCorrelation::run_lists: the tree (" + mib(tree_.bytes()) + ") and the queries (" +
                        mib(fixed - tree_.bytes()) + ") do not fit the memory budget (" + mib(opt.memory_budget) +
                        "); pass fewer queries a call");
    const float* dq = on_device(queries_, queries, query_floats, "the queries");
    const float* dr = on_device(radii_, radii, radius_floats, "the radii");
    return dispatch_dims(dims, [&](auto md) {
      PcListVisitor<decltype(md)::value> v;
      v.tree = tree_.view();
      v.queries = dq;
      v.radii = dr;
      v.radius2 = radius2;
      v.upper_from = upper_from;
      return core_.run(host_, tree_.view(), v, n, opt, "PointCorrelation::run_lists", fixed, false, offsets, indices);
    });
  }

 private:
  // The caller's floats where a kernel reads them: in place when in device memory, else copied.
  const float* on_device(DeviceBuffer<float>& buffer, const float* data, std::size_t n, const char* what) {
    if (n == 0 || is_device_pointer(data)) return data;
    buffer.reserve(n, what, core_.stream());
    copy_to_device(buffer.get(), data, n, core_.stream());
    return buffer.get();
  }

  RaggedGpu core_;  // first: its stream frees the buffers below
  KdTreeView host_;
  DeviceCopy<KdTree> tree_;
  DeviceBuffer<float> queries_, radii_;
};

}  // namespace

std::unique_ptr<PcListsGpu> make_pc_lists_gpu(const KdTree& tree) { return std::make_unique<PcListsGpuImpl>(tree); }

}  // namespace detail
}  // namespace canopy
