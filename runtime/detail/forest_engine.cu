#include "runtime/detail/forest_engine.hpp"

#include <algorithm>
#include <vector>

#include "executor/forest_kernels.cuh"
#include "runtime/detail/forest_engine.cuh"

namespace canopy {
namespace detail {

ForestGpuEngine::Impl::Impl() {
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev));
  int optin = 0;
  CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  smem_optin = static_cast<std::size_t>(optin);
}

ForestCommonView ForestGpuEngine::Impl::upload_common(const ForestCommon& c) {
  ForestCommonView v = c.view();
  v.group_begin = upload(c.group_begin, "the forest's output groups");
  v.base_margin = upload(c.base_margin, "the forest's base margins");
  v.class_values = upload(c.class_values, "the forest's class values");
  v.tree_leaf_begin = upload(c.tree_leaf_begin, "the forest's leaf offsets");
  v.leaf_values = upload(c.leaf_values, "the forest's leaf values");
  n_features = c.n_features;
  return v;
}

namespace {

template <class View>
void run_seed_layout(const View& v, const gpu::ForestBatch& b, ForestKernel kernel, int sm_count, cudaStream_t stream) {
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    switch (kernel) {
      case ForestKernel::Direct: gpu::launch_forest_direct<Sums>(v, b, sm_count, stream); break;
      case ForestKernel::Hybrid:
        if constexpr (std::is_same<View, HierarchicalForestView>::value)
          gpu::launch_forest_hybrid<Sums>(v, b, sm_count, stream);
        else
          throw Error("the hybrid kernel needs the hierarchical layout");
        break;
      case ForestKernel::SharedData: gpu::launch_forest_shared_data<Sums>(v, b, sm_count, stream); break;
      default:
        throw Error(std::string("the ") + to_string(kernel) + " strategy needs the adaptive layout");
    }
  });
}

}  // namespace

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

ForestGpuEngine::ForestGpuEngine(const AdaptiveForest& l) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.layout = ForestLayout::Adaptive;
  m.adaptive = l.view();
  m.adaptive.common = m.upload_common(l.common);
  m.adaptive.nodes = m.upload(l.nodes, "the adaptive nodes");
  m.adaptive.leaf = m.upload(l.leaf, "the adaptive leaf values");
  m.adaptive.tree_begin = m.upload(l.tree_begin, "the adaptive tree offsets");
  m.adaptive.depth = m.upload(l.depth, "the adaptive tree depths");
  m.adaptive.inter = m.upload(l.inter, "the adaptive interleaved nodes");
  m.adaptive.inter_tree = m.upload(l.inter_tree, "the adaptive tree order");
  m.tree_begin = l.tree_begin;
  m.host = &l;
  double visits = 0;
  for (double e : l.expected_visits) visits += e;
  m.mean_visits = l.expected_visits.empty() ? 0 : visits / static_cast<double>(l.expected_visits.size());
  for (int d : l.depth) m.max_depth = std::max(m.max_depth, d);
  m.stream.sync();
}

ForestGpuEngine::~ForestGpuEngine() = default;

void ForestGpuEngine::predict(const float* rows, index_t n_rows, float* out, int width, const ForestRunOptions& opt,
                              ForestTimes* times) {
  Impl& m = *impl_;
  const std::size_t n_in = static_cast<std::size_t>(n_rows) * m.n_features;
  const std::size_t n_out = static_cast<std::size_t>(n_rows) * width;
  m.rows.reserve(n_in, "the rows", m.stream.get());
  m.out.reserve(n_out, "the predictions", m.stream.get());
  ForestKernel kernel = opt.kernel;
  ForestSchedule schedule;
  if (m.layout == ForestLayout::Adaptive) {
    if (kernel == ForestKernel::Hybrid) throw Error("the hybrid kernel needs the hierarchical layout");
    if (kernel == ForestKernel::Auto) {
      const std::vector<ForestTrial> est = m.estimates(rows, n_rows, opt);
      kernel = est.front().kernel;  // feasible, smallest estimate first
    }
    schedule = m.resolve(kernel, opt.schedule, n_rows);
  } else if (kernel == ForestKernel::Auto) {
    throw Error(std::string("the auto strategy needs the adaptive layout (this predictor uses ") + to_string(m.layout) + ")");
  }
  m.start.record(m.stream.get());
  copy_to_device(m.rows.get(), rows, n_in, m.stream.get());
  m.uploaded.record(m.stream.get());
  const index_t* order = nullptr;
  if (m.layout == ForestLayout::Adaptive && opt.row_schedule_depth > 0) order = m.schedule_rows(n_rows, opt.row_schedule_depth);
  m.scheduled.record(m.stream.get());
  if (m.layout == ForestLayout::Adaptive) {
    gpu::AdaptiveBatch b;
    b.rows = order ? m.rows_sorted.get() : m.rows.get();
    b.order = order;
    b.n_rows = n_rows;
    b.out = m.out.get();
    b.width = width;
    b.output = opt.output;
    m.run_adaptive(b, kernel, schedule);
  } else {
    gpu::ForestBatch b;
    b.rows = m.rows.get();
    b.n_rows = n_rows;
    b.out = m.out.get();
    b.width = width;
    b.output = opt.output;
    switch (m.layout) {
      case ForestLayout::Csr: run_seed_layout(m.csr, b, kernel, m.sm_count, m.stream.get()); break;
      case ForestLayout::Reorg: run_seed_layout(m.reorg, b, kernel, m.sm_count, m.stream.get()); break;
      default: run_seed_layout(m.hier, b, kernel, m.sm_count, m.stream.get()); break;
    }
  }
  m.computed.record(m.stream.get());
  copy_to_host(out, m.out.get(), n_out, m.stream.get());
  m.done.record(m.stream.get());
  m.stream.sync();
  times->upload_ms = m.uploaded.since(m.start);
  times->schedule_ms = m.scheduled.since(m.uploaded);
  times->kernel_ms = m.computed.since(m.scheduled);
  times->download_ms = m.done.since(m.computed);
  times->kernel = kernel;
  times->schedule = schedule;
}

std::vector<ForestTrial> ForestGpuEngine::estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt) {
  if (impl_->layout != ForestLayout::Adaptive) throw Error("the performance model needs the adaptive layout");
  return impl_->estimates(rows, n_rows, opt);
}

}  // namespace detail
}  // namespace canopy
