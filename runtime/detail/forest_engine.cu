// ForestEngine<Layout>: what every layout's GPU call shares, and the seed layouts' kernels.
#include "runtime/detail/forest_engine.cuh"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace canopy {
namespace detail {

GpuLimits current_gpu_limits() {
  GpuLimits g;
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&g.sm_count, cudaDevAttrMultiProcessorCount, dev));
  int optin = 0;
  CANOPY_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  g.smem_optin = static_cast<std::size_t>(optin);
  return g;
}

std::vector<ForestTrial> ForestGpu::estimates(const float*, index_t, const ForestRunOptions&) {
  throw Error("the performance model needs the adaptive layout");
}
std::vector<index_t> ForestGpu::row_order(const float*, index_t, int, stream_t) {
  throw Error("row scheduling needs the adaptive layout");
}
std::vector<ForestTrial> ForestGpu::tune(const float*, index_t, int, const ForestRunOptions&, int) {
  throw Error("the tuner needs the adaptive layout");
}
std::vector<ForestTuned> ForestGpu::optimize(const float*, index_t, const std::vector<index_t>&, int,
                                             const ForestRunOptions&) {
  return {};  // one kernel per layout: nothing to tune
}

namespace {

template <class View>
void launch_seed_kernel(const View& v, const gpu::ForestBatch& b, ForestKernel kernel, int sm_count, cudaStream_t stream) {
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
      case ForestKernel::SharedForest:
      case ForestKernel::SplitSharedForest:
      case ForestKernel::Auto:
        throw Error(std::string("the ") + to_string(kernel) + " strategy needs the adaptive layout");
    }
  });
}

}  // namespace

template <class Layout>
ForestEngine<Layout>::ForestEngine(const Layout& layout)
    : host_(&layout), gpu_(current_gpu_limits()), forest_(layout, stream_.get()),
      steps_(layout, forest_.view(), gpu_, stream_.get()) {
  stream_.sync();
}

template <class Layout>
const float* ForestEngine<Layout>::device_rows(const float* rows, index_t n_rows) {
  if (is_device_pointer(rows)) return rows;
  const std::size_t n = static_cast<std::size_t>(n_rows) * view().common.n_features;
  rows_.reserve(n, "the rows", stream());
  copy_async(rows_.get(), rows, n * sizeof(float), stream());
  return rows_.get();
}

template <class Layout>
float* ForestEngine<Layout>::out_buffer(std::size_t n) {
  out_.reserve(n, "the predictions", stream());
  return out_.get();
}

template <class Layout>
void ForestEngine<Layout>::predict(const float* rows, index_t n_rows, float* out, int width, bool f64,
                                   ForestKernel kernel, const ForestRunOptions& opt, ForestTimes* times,
                                   ForestTrialRuns* trials) {
  ForestSchedule schedule;
  if (opt.output == ForestOutput::Leaf) {
    kernel = ForestKernel::Direct;  // a thread per (row, tree): the only kernel of this output
  } else if constexpr (kAdaptive) {
    schedule = steps_.resolve(kernel, opt.schedule, n_rows);
  } else if (kernel == ForestKernel::Auto) {
    kernel = ForestKernel::Direct;  // the seed layouts' fastest at every batch size measured
  }
  const std::size_t n_out = static_cast<std::size_t>(n_rows) * width;
  const CallerStream caller = on_caller_stream(opt.stream);
  // An event marks a phase only when the call has that phase: each record outside a graph is
  // host time on the call's path before the kernel's launch (two back-to-back records land
  // about 3 us apart on an H200), which a batch of 100 rows, 10-15 us in all, feels.
  // The host's pointer queries go before the first event too.
  Batch b;
  b.n_rows = n_rows;
  b.out = is_device_pointer(out) ? out : out_buffer(n_out);  // device memory: written in place
  b.width = width;
  b.output = opt.output;
  b.f64 = f64;
  const bool uploaded = !is_device_pointer(rows);
  b.rows = rows;
  if (uploaded) {
    start_.record(stream());
    b.rows = device_rows(rows, n_rows);
  }
  Event& after_upload = uploaded ? uploaded_ : start_;  // where the phases after the upload start
  const bool leaves = opt.output == ForestOutput::Leaf;
  bool scheduled = false;
  if constexpr (kAdaptive) {
    if (opt.row_schedule_depth > 0 && !leaves) {
      after_upload.record(stream());
      steps_.schedule_rows(opt.row_schedule_depth, &b);
      scheduled_.record(stream());
      scheduled = true;
    }
  }
  // The kernel's phase: from `before` (recorded here unless row scheduling did) to computed_.
  Event& before = scheduled ? scheduled_ : after_upload;
  auto enqueue = [&](bool in_graph) {
    if (!scheduled) record_in_graph(before, stream(), in_graph);
    launch(b, kernel, schedule);
    record_in_graph(computed_, stream(), in_graph);
  };
  // The shared-forest strategies may grow their carry buffer inside the call: never replayed.
  const bool replayable = opt.graph && !scheduled && kernel != ForestKernel::SharedForest &&
                          kernel != ForestKernel::SplitSharedForest;
  bool replayed = false;
  if (replayable) {
    ForestLaunchKey key;
    key.kernel = kernel;
    key.schedule = schedule;
    key.rows = b.rows;
    key.out = b.out;
    key.n_rows = n_rows;
    key.width = width;
    key.output = opt.output;
    key.f64 = f64;
    if (leaves) predict_leaves_tables();  // (uploads once: never inside a capture)
    replayed = graphs_.run(key, stream(), enqueue);
  } else {
    enqueue(false);
  }
  bool trialled = false;
  if constexpr (kAdaptive) {
    trialled = trials && !trials->runs.empty() && !leaves;
    if (trialled) run_trials(b, trials);
  }
  const bool downloaded = b.out != out;
  if (downloaded) {
    copy_async(out, b.out, n_out * sizeof(float), stream());
    done_.record(stream());
  }
  stream_.sync();
  if (trialled) {
    trials->ms.assign(trials->runs.size(), INFINITY);
    for (std::size_t i = 0; i < trials->runs.size(); ++i)
      if (trial_ran_[i]) trials->ms[i] = trial_events_[2 * i + 1].since(trial_events_[2 * i]);
  }
  times->upload_ms = uploaded ? uploaded_.since(start_) : 0;
  times->schedule_ms = scheduled ? scheduled_.since(after_upload) : 0;
  times->kernel_ms = computed_.since(before);
  times->download_ms = downloaded ? done_.since(computed_) : 0;
  times->kernel = kernel;
  times->schedule = schedule;
  times->graph = replayed;
}

template <class Layout>
void ForestEngine<Layout>::run_trials(const Batch& b, const ForestTrialRuns* trials) {
  if constexpr (kAdaptive) {
    Batch t = b;
    trial_out_.reserve(static_cast<std::size_t>(b.n_rows) * b.width, "Auto's trial predictions", stream());
    t.out = trial_out_.get();
    while (trial_events_.size() < 2 * trials->runs.size()) trial_events_.emplace_back();
    trial_ran_.assign(trials->runs.size(), 0);
    for (std::size_t i = 0; i < trials->runs.size(); ++i) {
      t.n_rows = i < trials->rows.size() && trials->rows[i] > 0 ? std::min(b.n_rows, trials->rows[i]) : b.n_rows;
      trial_events_[2 * i].record(stream());
      try {
        steps_.run(t, trials->runs[i].first, trials->runs[i].second);
        trial_ran_[i] = 1;
      } catch (const Error&) {
        // a schedule this forest or batch cannot take: the trial's time stays +inf
      }
      trial_events_[2 * i + 1].record(stream());
    }
  }
}

template <class Layout>
void ForestEngine<Layout>::launch(const Batch& b, ForestKernel kernel, const ForestSchedule& schedule) {
  if (b.output == ForestOutput::Leaf) {
    predict_leaves(b.rows, b.n_rows, b.out);
  } else if constexpr (kAdaptive) {
    steps_.run(b, kernel, schedule);
  } else {
    launch_seed_kernel(view(), b, kernel, gpu_.sm_count, stream());
  }
}

template <class Layout>
void ForestEngine<Layout>::predict_leaves_tables() {
  const ForestCommon& c = host_->common;
  if (!leaf_table_) {
    leaf_id_begin_.reserve(c.leaf_id_begin.size(), "the leaf output's tree offsets", stream());
    leaf_order_.reserve(c.order.size(), "the leaf output's tree order", stream());
    leaf_source_id_.reserve(std::max<std::size_t>(c.leaf_source_id.size(), 1), "the leaf output's node ids", stream());
    copy_async(leaf_id_begin_.get(), c.leaf_id_begin.data(), c.leaf_id_begin.size() * sizeof(index_t), stream());
    copy_async(leaf_order_.get(), c.order.data(), c.order.size() * sizeof(index_t), stream());
    copy_async(leaf_source_id_.get(), c.leaf_source_id.data(), c.leaf_source_id.size() * sizeof(std::int32_t), stream());
    if constexpr (kAdaptive) {
      leaf_number_.reserve(host_->leaf_number.size(), "the adaptive layout's leaf numbers", stream());
      copy_async(leaf_number_.get(), host_->leaf_number.data(), host_->leaf_number.size() * sizeof(std::int32_t), stream());
    }
    leaf_table_ = true;
  }
}

template <class Layout>
void ForestEngine<Layout>::predict_leaves(const float* rows, index_t n_rows, float* out) {
  predict_leaves_tables();
  gpu::ForestLeafTable lt;
  lt.id_begin = leaf_id_begin_.get();
  lt.order = leaf_order_.get();
  lt.source_id = leaf_source_id_.get();
  lt.leaf_number = leaf_number_.get();
  gpu::launch_forest_leaves(view(), rows, n_rows, lt, out, stream());
}

template class ForestEngine<CsrForest>;
template class ForestEngine<ReorgForest>;
template class ForestEngine<HierarchicalForest>;
template class ForestEngine<AdaptiveForest>;

namespace {

// A seed layout's engine as ForestPredictor sees it.
template <class Layout>
class SeedForestGpu final : public ForestGpu {
 public:
  explicit SeedForestGpu(const Layout& layout) : engine_(layout) {}
  void predict(const float* rows, index_t n_rows, float* out, int width, bool f64, const ForestRunOptions& opt,
               ForestTimes* times) override {
    engine_.predict(rows, n_rows, out, width, f64, opt.kernel, opt, times);
  }

 private:
  ForestEngine<Layout> engine_;
};

}  // namespace

std::unique_ptr<ForestGpu> make_forest_gpu(const CsrForest& l) { return std::make_unique<SeedForestGpu<CsrForest>>(l); }
std::unique_ptr<ForestGpu> make_forest_gpu(const ReorgForest& l) { return std::make_unique<SeedForestGpu<ReorgForest>>(l); }
std::unique_ptr<ForestGpu> make_forest_gpu(const HierarchicalForest& l) {
  return std::make_unique<SeedForestGpu<HierarchicalForest>>(l);
}

}  // namespace detail
}  // namespace canopy
