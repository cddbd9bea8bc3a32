// Canopy's public API for decision-forest inference. Compiles with a plain C++ compiler.
//
//   canopy::Forest model = canopy::Forest::load("model.json");  // XGBoost or Canopy JSON
//   canopy::ForestConfig cfg;
//   cfg.layout = canopy::ForestLayout::Hierarchical;             // csr, reorg or hierarchical
//   canopy::ForestPredictor predictor(model, cfg);                // builds the layout, uploads it
//   canopy::ForestRunOptions run;
//   run.output = canopy::ForestOutput::Prob;
//   run.kernel = canopy::ForestKernel::Hybrid;                    // GPU kernels; ignored on the CPU
//   std::vector<float> out(n * predictor.output_width(run.output));
//   canopy::ForestTimes t = predictor.predict(rows, n, out.data(), run);
//
// rows are row-major float32 [n][n_features], NaN = missing.
#pragma once

#include <cstddef>
#include <memory>

#include "layouts/forest.hpp"
#include "layouts/forest_layouts.hpp"
#include "runtime/common.hpp"
#include "runtime/device.hpp"

namespace canopy {

// The GPU kernels (the CPU has one executor, TBB tasks over rows, and ignores the choice).
enum class ForestKernel {
  Direct,      // one thread per row over every tree (Tahoe's "direct", the paper's independent)
  Hybrid,      // Shah et al.: root subtrees in shared memory, the rest from global memory;
               // hierarchical layout only
  SharedData,  // FIL / Tahoe "shared data": rows cached in shared memory, the trees split across
               // the threads of a block, each chunk's leaves added in tree order
};
const char* to_string(ForestKernel k);

struct ForestConfig {
  ForestLayout layout = ForestLayout::Csr;
  Device device = Device::Auto;
  HierarchicalOptions hierarchical;  // used by ForestLayout::Hierarchical
};

struct ForestRunOptions {
  ForestOutput output = ForestOutput::Prob;
  ForestKernel kernel = ForestKernel::Direct;
};

struct ForestTimes {
  double upload_ms = 0;    // GPU: the rows to the device (CUDA events)
  double kernel_ms = 0;    // GPU: the kernel (CUDA events); CPU: the executor (wall clock)
  double download_ms = 0;  // GPU: the predictions back (CUDA events)
  double total_ms = 0;     // wall clock of the whole predict() call
};

namespace detail {
class ForestGpuEngine;
}

class ForestPredictor {
 public:
  // Builds the layout from `forest` (which need not outlive the predictor) and, on the GPU,
  // uploads it. Device::Auto picks the GPU when there is one.
  explicit ForestPredictor(const Forest& forest, const ForestConfig& config = {});
  ~ForestPredictor();
  ForestPredictor(const ForestPredictor&) = delete;
  ForestPredictor& operator=(const ForestPredictor&) = delete;

  Device device() const;
  ForestLayout layout() const;
  int n_features() const;
  // Values per row of an output kind (the Class output of a regressor is an Error).
  int output_width(ForestOutput out) const;
  // Bytes of the layout's arrays (the same on the host and the device).
  std::size_t footprint_bytes() const;
  // Whether predict() accepts this kernel here (always true on the CPU, which ignores it).
  bool supports(ForestKernel k) const;
  // Layout details for reports, e.g. "subtree depth 6, root depth 9, 1234 subtrees".
  std::string layout_details() const;

  // rows: [n_rows][n_features()]; out: [n_rows][output_width(opt.output)].
  ForestTimes predict(const float* rows, index_t n_rows, float* out, const ForestRunOptions& opt = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canopy
