#include "runtime/forest_gpu.hpp"

#include <vector>

#include "executor/forest_kernels.cuh"
#include "runtime/cuda_support.cuh"

namespace canopy {
namespace detail {

struct ForestGpuEngine::Impl {
  ForestLayout layout = ForestLayout::Csr;
  CsrForestView csr;  // device pointers
  ReorgForestView reorg;
  HierarchicalForestView hier;
  std::vector<DeviceBuffer<unsigned char>> arrays;  // every uploaded layout array
  DeviceBuffer<float> rows, out;
  Stream stream;
  Event start, uploaded, computed, done;
  int sm_count = 1;
  int n_features = 0;

  Impl() {
    int dev = 0;
    CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
    CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev));
  }

  template <class T>
  const T* upload(const std::vector<T>& v, const char* what) {
    if (v.empty()) return nullptr;
    DeviceBuffer<unsigned char> buf;
    buf.reserve(v.size() * sizeof(T), what);
    CANOPY_CUDA_CHECK(cudaMemcpyAsync(buf.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream.get()));
    arrays.push_back(std::move(buf));
    return reinterpret_cast<const T*>(arrays.back().get());
  }

  ForestCommonView upload_common(const ForestCommon& c) {
    ForestCommonView v = c.view();
    v.group_begin = upload(c.group_begin, "the forest's output groups");
    v.base_margin = upload(c.base_margin, "the forest's base margins");
    v.class_values = upload(c.class_values, "the forest's class values");
    v.tree_leaf_begin = upload(c.tree_leaf_begin, "the forest's leaf offsets");
    v.leaf_values = upload(c.leaf_values, "the forest's leaf values");
    n_features = c.n_features;
    return v;
  }

  template <class View>
  void run(const View& v, const gpu::ForestBatch& b, ForestKernel kernel) {
    dispatch_forest_sums(v.common, [&](auto sums) {
      using Sums = decltype(sums);
      switch (kernel) {
        case ForestKernel::Direct: gpu::launch_forest_direct<Sums>(v, b, sm_count, stream.get()); break;
        case ForestKernel::Hybrid:
          if constexpr (std::is_same<View, HierarchicalForestView>::value)
            gpu::launch_forest_hybrid<Sums>(v, b, sm_count, stream.get());
          else
            throw Error("the hybrid kernel needs the hierarchical layout");
          break;
        case ForestKernel::SharedData: gpu::launch_forest_shared_data<Sums>(v, b, sm_count, stream.get()); break;
      }
    });
  }
};

ForestGpuEngine::ForestGpuEngine(const CsrForest& l) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.layout = ForestLayout::Csr;
  m.csr = l.view();
  m.csr.common = m.upload_common(l.common);
  m.csr.tree_node_begin = m.upload(l.tree_node_begin, "the CSR tree offsets");
  m.csr.tree_child_begin = m.upload(l.tree_child_begin, "the CSR tree child offsets");
  m.csr.info = m.upload(l.info, "the CSR feature ids");
  m.csr.value = m.upload(l.value, "the CSR values");
  m.csr.child_index = m.upload(l.child_index, "the CSR child indices");
  m.csr.children = m.upload(l.children, "the CSR children");
  m.stream.sync();
}

ForestGpuEngine::ForestGpuEngine(const ReorgForest& l) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.layout = ForestLayout::Reorg;
  m.reorg = l.view();
  m.reorg.common = m.upload_common(l.common);
  m.reorg.level_begin = m.upload(l.level_begin, "the reorg level offsets");
  m.reorg.nodes = m.upload(l.nodes, "the reorg nodes");
  m.reorg.child_slot = m.upload(l.child_slot, "the reorg child slots");
  m.stream.sync();
}

ForestGpuEngine::ForestGpuEngine(const HierarchicalForest& l) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.layout = ForestLayout::Hierarchical;
  m.hier = l.view();
  m.hier.common = m.upload_common(l.common);
  m.hier.root_nodes = m.upload(l.root_nodes, "the root subtrees");
  m.hier.nodes = m.upload(l.nodes, "the subtrees");
  m.hier.subtree_node_begin = m.upload(l.subtree_node_begin, "the subtree offsets");
  m.hier.connection_begin = m.upload(l.connection_begin, "the subtree connection offsets");
  m.hier.connections = m.upload(l.connections, "the subtree connections");
  m.stream.sync();
}

ForestGpuEngine::~ForestGpuEngine() = default;

void ForestGpuEngine::predict(const float* rows, index_t n_rows, float* out, int width, ForestOutput output,
                              ForestKernel kernel, ForestTimes* times) {
  Impl& m = *impl_;
  const std::size_t n_in = static_cast<std::size_t>(n_rows) * m.n_features;
  const std::size_t n_out = static_cast<std::size_t>(n_rows) * width;
  m.rows.reserve(n_in, "the rows");
  m.out.reserve(n_out, "the predictions");
  gpu::ForestBatch b;
  b.rows = m.rows.get();
  b.n_rows = n_rows;
  b.out = m.out.get();
  b.width = width;
  b.output = output;
  m.start.record(m.stream.get());
  copy_to_device(m.rows.get(), rows, n_in, m.stream.get());
  m.uploaded.record(m.stream.get());
  switch (m.layout) {
    case ForestLayout::Csr: m.run(m.csr, b, kernel); break;
    case ForestLayout::Reorg: m.run(m.reorg, b, kernel); break;
    case ForestLayout::Hierarchical: m.run(m.hier, b, kernel); break;
  }
  m.computed.record(m.stream.get());
  copy_to_host(out, m.out.get(), n_out, m.stream.get());
  m.done.record(m.stream.get());
  m.stream.sync();
  times->upload_ms = m.uploaded.since(m.start);
  times->kernel_ms = m.computed.since(m.uploaded);
  times->download_ms = m.done.since(m.computed);
}

}  // namespace detail
}  // namespace canopy
