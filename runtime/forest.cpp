#include "runtime/forest.hpp"

#include <chrono>
#include <string>

#include "executor/forest_cpu.hpp"
#include "runtime/forest_gpu.hpp"

namespace canopy {

const char* to_string(ForestKernel k) {
  switch (k) {
    case ForestKernel::Direct: return "direct";
    case ForestKernel::Hybrid: return "hybrid";
    case ForestKernel::SharedData: return "shared-data";
  }
  return "?";
}

struct ForestPredictor::Impl {
  ForestLayout layout = ForestLayout::Csr;
  Device device = Device::Cpu;
  int n_features = 0;
  int width[3] = {0, 0, 0};  // per ForestOutput; 0 = not available
  std::string no_class;      // why the class output is not available
  std::unique_ptr<CsrForest> csr;
  std::unique_ptr<ReorgForest> reorg;
  std::unique_ptr<HierarchicalForest> hier;
  std::unique_ptr<detail::ForestGpuEngine> gpu;

  template <class F>
  decltype(auto) with_view(F&& f) const {
    switch (layout) {
      case ForestLayout::Csr: return f(csr->view());
      case ForestLayout::Reorg: return f(reorg->view());
      case ForestLayout::Hierarchical: break;
    }
    return f(hier->view());
  }
};

ForestPredictor::ForestPredictor(const Forest& forest, const ForestConfig& config) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (forest.n_trees() == 0) throw Error(forest.source() + ": the model has no trees");
  m.layout = config.layout;
  m.n_features = forest.n_features();
  m.width[static_cast<int>(ForestOutput::Margin)] = forest.output_width(ForestOutput::Margin);
  m.width[static_cast<int>(ForestOutput::Prob)] = forest.output_width(ForestOutput::Prob);
  try {
    m.width[static_cast<int>(ForestOutput::Class)] = forest.output_width(ForestOutput::Class);
  } catch (const Error& e) {
    m.no_class = e.what();
  }
  switch (config.layout) {
    case ForestLayout::Csr: m.csr = std::make_unique<CsrForest>(CsrForest::build(forest)); break;
    case ForestLayout::Reorg: m.reorg = std::make_unique<ReorgForest>(ReorgForest::build(forest)); break;
    case ForestLayout::Hierarchical:
      m.hier = std::make_unique<HierarchicalForest>(HierarchicalForest::build(forest, config.hierarchical));
      break;
  }
  // Refuses forests wider than the executors accumulate, before any work is done.
  m.with_view([](const auto& v) { dispatch_forest_sums(v.common, [](auto) {}); });
  m.device = resolve_device(config.device);
  if (m.device == Device::Gpu) {
    switch (config.layout) {
      case ForestLayout::Csr: m.gpu = std::make_unique<detail::ForestGpuEngine>(*m.csr); break;
      case ForestLayout::Reorg: m.gpu = std::make_unique<detail::ForestGpuEngine>(*m.reorg); break;
      case ForestLayout::Hierarchical: m.gpu = std::make_unique<detail::ForestGpuEngine>(*m.hier); break;
    }
  }
}

ForestPredictor::~ForestPredictor() = default;

Device ForestPredictor::device() const { return impl_->device; }
ForestLayout ForestPredictor::layout() const { return impl_->layout; }
int ForestPredictor::n_features() const { return impl_->n_features; }

int ForestPredictor::output_width(ForestOutput out) const {
  const int w = impl_->width[static_cast<int>(out)];
  if (w == 0) throw Error(impl_->no_class);
  return w;
}

std::size_t ForestPredictor::footprint_bytes() const {
  switch (impl_->layout) {
    case ForestLayout::Csr: return impl_->csr->footprint_bytes();
    case ForestLayout::Reorg: return impl_->reorg->footprint_bytes();
    case ForestLayout::Hierarchical: break;
  }
  return impl_->hier->footprint_bytes();
}

std::string ForestPredictor::layout_details() const {
  const Impl& m = *impl_;
  switch (m.layout) {
    case ForestLayout::Csr:
      return std::to_string(m.csr->info.size()) + " nodes, " + std::to_string(m.csr->children.size()) + " child entries";
    case ForestLayout::Reorg:
      return std::to_string(m.reorg->level_begin.size() - 1) + " levels, " + std::to_string(m.reorg->nodes.size()) +
             " slots (" + std::to_string(m.reorg->padding_nodes) + " padding)";
    case ForestLayout::Hierarchical: break;
  }
  return "subtree depth " + std::to_string(m.hier->subtree_depth) + ", root depth " + std::to_string(m.hier->root_depth) +
         ", " + std::to_string(m.hier->n_subtrees()) + " subtrees, " + std::to_string(m.hier->padding_nodes) +
         " padding nodes";
}

bool ForestPredictor::supports(ForestKernel k) const {
  if (impl_->device == Device::Cpu) return true;
  return k != ForestKernel::Hybrid || impl_->layout == ForestLayout::Hierarchical;
}

ForestTimes ForestPredictor::predict(const float* rows, index_t n_rows, float* out, const ForestRunOptions& opt) {
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (n_rows < 0) throw Error("predict: n_rows = " + std::to_string(n_rows) + " is negative");
  const int width = output_width(opt.output);
  if (n_rows > 0 && (rows == nullptr || out == nullptr)) throw Error("predict: rows or out is a null pointer");
  if (!supports(opt.kernel))
    throw Error(std::string("the ") + to_string(opt.kernel) + " kernel needs the hierarchical layout (this predictor uses " +
                to_string(m.layout) + ")");
  ForestTimes times;
  if (n_rows > 0) {
    if (m.device == Device::Gpu) {
      m.gpu->predict(rows, n_rows, out, width, opt.output, opt.kernel, &times);
    } else {
      m.with_view([&](const auto& v) { predict_forest_cpu(v, rows, n_rows, opt.output, width, out); });
    }
  }
  times.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (m.device == Device::Cpu) times.kernel_ms = times.total_ms;
  return times;
}

}  // namespace canopy
