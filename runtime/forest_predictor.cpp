#include "runtime/forest_predictor.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <type_traits>
#include <variant>

#include "executor/forest_cpu.hpp"
#include "runtime/detail/forest_choices.hpp"
#include "runtime/detail/forest_engine.hpp"
#include "scheduler/forest_rows.hpp"
#include "scheduler/tree_similarity.hpp"

namespace canopy {

namespace {

// Tahoe's tree rearrangement for the adaptive layout: the SimHash + LSH order of the trees in
// canonical (layout) order, and how much it evens out the trees dealt to a block's threads.
AdaptiveOptions adaptive_options(const Forest& forest, const ForestConfig& config, AdaptiveReport* report) {
  AdaptiveOptions opt;
  opt.node_rearrangement = config.adaptive.node_rearrangement;
  const ForestCommon common(forest);
  const std::vector<std::vector<double>> prob = forest_node_probabilities(forest);
  std::vector<ForestTree> trees;
  std::vector<std::vector<double>> probs;
  std::vector<double> depth;  // a tree's work: its expected depth, the training-weighted path length
  for (index_t src : common.order) {
    const ForestTree& tree = forest.trees()[static_cast<std::size_t>(src)];
    const std::vector<double>& p = prob[static_cast<std::size_t>(src)];
    std::vector<int> level(static_cast<std::size_t>(tree.size()), 0);
    double expected = 0;
    for (std::size_t k = 0; k < level.size(); ++k) {  // breadth-first: parents first
      if (tree.left[k] < 0) {
        expected += p[k] * level[k];
        continue;
      }
      level[static_cast<std::size_t>(tree.left[k])] = level[static_cast<std::size_t>(tree.right[k])] = level[k] + 1;
    }
    trees.push_back(tree);
    probs.push_back(p);
    depth.push_back(expected);
  }
  std::vector<index_t> identity(trees.size());
  for (std::size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<index_t>(i);
  report->threads = 32;  // a warp's lanes: where uneven trees keep lanes waiting
  report->cv_model_order = round_robin_cv(depth, identity, report->threads);
  report->cv_rearranged = report->cv_model_order;
  if (config.adaptive.tree_rearrangement) {
    TreeSimilarityOptions so;
    so.token_nodes = config.adaptive.token_nodes;
    so.hash_bits = config.adaptive.hash_bits;
    so.chunks = config.adaptive.chunks;
    TreeOrdering ordering = similarity_order(trees, probs, so);
    report->similarity_ms = ordering.seconds * 1e3;
    report->cv_rearranged = round_robin_cv(depth, ordering.order, report->threads);
    opt.tree_order = std::move(ordering.order);
  }
  return opt;
}

// The layout the predictor was built with; every layout's arrays and view.
using AnyForestLayout = std::variant<CsrForest, ReorgForest, HierarchicalForest, AdaptiveForest>;

// ForestLayout::Auto on the CPU: the layout its executor ran fastest on every model measured
// (docs/forests.md, "What runs when").
constexpr ForestLayout kCpuAutoLayout = ForestLayout::Hierarchical;

ForestLayout resolve_layout(ForestLayout layout, Device device) {
  if (layout != ForestLayout::Auto) return layout;
  return device == Device::Gpu ? ForestLayout::Adaptive : kCpuAutoLayout;
}

AnyForestLayout build_layout(const Forest& forest, ForestLayout layout, const ForestConfig& config,
                             AdaptiveReport* report) {
  switch (layout) {
    case ForestLayout::Csr: return CsrForest::build(forest);
    case ForestLayout::Reorg: return ReorgForest::build(forest);
    case ForestLayout::Hierarchical: return HierarchicalForest::build(forest, config.hierarchical);
    case ForestLayout::Adaptive: break;
    case ForestLayout::Auto: throw Error("build_layout: the auto layout is resolved first");
  }
  const auto b0 = std::chrono::steady_clock::now();
  const AdaptiveOptions opt = adaptive_options(forest, config, report);
  AdaptiveForest a = AdaptiveForest::build(forest, opt);
  report->build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - b0).count();
  double visits = 0;
  for (double e : a.expected_visits) visits += e;
  report->expected_visits = visits / static_cast<double>(a.expected_visits.size());
  report->details = a.details();
  return a;
}

// The leaf output on the CPU, for any layout: the leaf index within each tree, found the way
// the layout's own walk finds it, then mapped to the model's node id.
void predict_leaves(const AnyForestLayout& forest, const float* rows, index_t n_rows, float* out) {
  std::visit(
      [&](const auto& l) {
        const auto v = l.view();
        if constexpr (std::is_same<std::decay_t<decltype(l)>, AdaptiveForest>::value) {
          predict_forest_leaves_cpu(
              l.common, rows, n_rows,
              [&](index_t t, const float* row) {
                const std::uint32_t k = adaptive_walk(v.nodes + v.tree_begin[t], 1, v.depth[t], v.feature_bits,
                                                      v.feature_mask, [row](int f) { return row[f]; }, v.common.categories);
                return static_cast<index_t>(l.leaf_number[static_cast<std::size_t>(v.tree_begin[t] + k)]);
              },
              out);
        } else {
          predict_forest_leaves_cpu(
              l.common, rows, n_rows,
              [&](index_t t, const float* row) { return static_cast<index_t>(forest_index(find_leaf(v, t, row).info)); },
              out);
        }
      },
      forest);
}

}  // namespace

struct ForestPredictor::Impl {
  Impl(const Forest& forest, const ForestConfig& config, Device device)
      : layout(resolve_layout(config.layout, device)), device(device),
        forest(build_layout(forest, layout, config, &adaptive_report)) {}

  ForestLayout layout;
  Device device;
  int n_features = 0;
  static constexpr int kOutputs = static_cast<int>(ForestOutput::Proba) + 1;
  int width[kOutputs] = {};          // per ForestOutput; 0 = not available
  std::string missing[kOutputs];     // why not (a regressor's class and proba outputs)
  AdaptiveReport adaptive_report;  // before `forest`, which fills it
  const AnyForestLayout forest;    // the GPU engine reads it: it outlives `gpu`
  std::unique_ptr<detail::ForestGpu> gpu;
  // One GPU call at a time (predict, optimize, model_estimates, tune, schedule_rows): the GPU
  // engine's buffers, events, stream, graphs and Auto's state are its one set. The layout above
  // is read-only after construction, so CPU calls share it without the lock.
  std::mutex gpu_mutex;

  template <class F>
  decltype(auto) with_view(F&& f) const {
    return std::visit([&](const auto& l) -> decltype(auto) { return f(l.view()); }, forest);
  }
  const AdaptiveForest& adaptive() const { return std::get<AdaptiveForest>(forest); }
};

ForestPredictor::ForestPredictor(const Forest& forest, const ForestConfig& config) {
  if (forest.n_trees() == 0) throw Error(forest.source() + ": the model has no trees");
  impl_ = std::make_unique<Impl>(forest, config, resolve_device(config.device));
  Impl& m = *impl_;
  m.n_features = forest.n_features();
  for (int o = 0; o < Impl::kOutputs; ++o) {
    try {
      m.width[o] = forest.output_width(static_cast<ForestOutput>(o));
    } catch (const Error& e) {
      m.missing[o] = e.what();
    }
  }
  // Refuses forests wider than the executors accumulate, before any work is done.
  m.with_view([](const auto& v) { dispatch_forest_sums(v.common, [](auto) {}); });
  if (m.device == Device::Gpu)
    m.gpu = std::visit(
        [&](const auto& l) -> std::unique_ptr<detail::ForestGpu> {
          if constexpr (std::is_same<std::decay_t<decltype(l)>, AdaptiveForest>::value)
            return detail::make_forest_gpu(l, config, detail::forest_fingerprint(forest, config.adaptive));
          else
            return detail::make_forest_gpu(l);
        },
        m.forest);
}

ForestPredictor::~ForestPredictor() = default;

Device ForestPredictor::device() const { return impl_->device; }
ForestLayout ForestPredictor::layout() const { return impl_->layout; }
int ForestPredictor::n_features() const { return impl_->n_features; }

int ForestPredictor::output_width(ForestOutput out) const {
  const int o = static_cast<int>(out);
  if (o < 0 || o >= Impl::kOutputs) throw Error("output_width: output " + std::to_string(o) + " is not a ForestOutput");
  const int w = impl_->width[o];
  if (w == 0) throw Error(impl_->missing[o]);
  return w;
}

std::size_t ForestPredictor::footprint_bytes() const {
  return std::visit([](const auto& l) { return l.footprint_bytes(); }, impl_->forest);
}

std::string ForestPredictor::layout_details() const {
  return std::visit([](const auto& l) { return l.details(); }, impl_->forest);
}

bool ForestPredictor::supports(ForestKernel k) const {
  if (impl_->device == Device::Cpu) return true;
  switch (k) {
    case ForestKernel::Hybrid: return impl_->layout == ForestLayout::Hierarchical;
    case ForestKernel::Direct:
    case ForestKernel::SharedData:
    case ForestKernel::Auto: return true;
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest: return impl_->layout == ForestLayout::Adaptive;
  }
  return false;
}

const char* to_string(ForestTuning t) {
  switch (t) {
    case ForestTuning::Fixed: return "fixed";
    case ForestTuning::Prior: return "prior";
    case ForestTuning::Refining: return "refining";
    case ForestTuning::Tuned: return "tuned";
  }
  return "?";
}

ForestTimes ForestPredictor::predict(const float* rows, index_t n_rows, const ForestRunOptions& opt, float* out) {
  return run(rows, n_rows, out, false, opt);
}

ForestTimes ForestPredictor::predict_f64(const float* rows, index_t n_rows, const ForestRunOptions& opt, double* out) {
  if (opt.output == ForestOutput::Leaf) throw Error("predict: the leaf output is float32 (its ids are exact below 2^24)");
  return run(rows, n_rows, reinterpret_cast<float*>(out), true, opt);
}

ForestTimes ForestPredictor::run(const float* rows, index_t n_rows, float* out, bool f64, const ForestRunOptions& opt) {
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (n_rows < 0) throw Error("predict: n_rows = " + std::to_string(n_rows) + " is negative");
  const int values = output_width(opt.output);
  const int width = f64 ? 2 * values : values;  // floats per row of `out`
  if (n_rows > 0 && (rows == nullptr || out == nullptr)) throw Error("predict: rows or out is a null pointer");
  if (!supports(opt.kernel))
    throw Error(std::string("the ") + to_string(opt.kernel) + " kernel needs the " +
                (opt.kernel == ForestKernel::Hybrid ? "hierarchical" : "adaptive") + " layout (this predictor uses " +
                to_string(m.layout) + ")");
  if (opt.row_schedule_depth < 0)
    throw Error("row_schedule_depth = " + std::to_string(opt.row_schedule_depth) + " must be >= 0");
  ForestTimes times;
  times.layout = m.layout;
  if (m.device == Device::Cpu) times.kernel = ForestKernel::Direct;  // the CPU's one executor
  if (n_rows > 0) {
    if (m.device == Device::Gpu) {
      const std::lock_guard<std::mutex> lock(m.gpu_mutex);
      m.gpu->predict(rows, n_rows, out, width, f64, opt, &times);
    } else if (opt.output == ForestOutput::Leaf) {
      predict_leaves(m.forest, rows, n_rows, out);
    } else {
      m.with_view([&](const auto& v) { predict_forest_cpu(v, rows, n_rows, opt.output, width, out, f64); });
    }
  }
  times.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (m.device == Device::Cpu) times.kernel_ms = times.wall_ms;
  return times;
}

std::vector<ForestTuned> ForestPredictor::optimize(const float* rows, index_t n_rows,
                                                   const std::vector<index_t>& batch_sizes, const ForestRunOptions& opt) {
  Impl& m = *impl_;
  if (m.device != Device::Gpu) return {};
  if (n_rows < 1 || rows == nullptr) throw Error("optimize: the rows are empty or a null pointer");
  if (opt.output == ForestOutput::Leaf) return {};
  if (!supports(opt.kernel))
    throw Error(std::string("optimize: the ") + to_string(opt.kernel) + " kernel does not run on the " + to_string(m.layout) +
                " layout");
  const std::lock_guard<std::mutex> lock(m.gpu_mutex);
  return m.gpu->optimize(rows, n_rows, batch_sizes, output_width(opt.output), opt);
}

std::vector<ForestTrial> ForestPredictor::model_estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt) {
  if (impl_->device != Device::Gpu) throw Error("the performance model describes the GPU strategies; this predictor runs on the CPU");
  if (n_rows < 1 || rows == nullptr) throw Error("model_estimates: the batch has no rows");
  const std::lock_guard<std::mutex> lock(impl_->gpu_mutex);
  return impl_->gpu->estimates(rows, n_rows, opt);
}

std::vector<ForestTrial> ForestPredictor::tune(const float* rows, index_t n_rows, const ForestRunOptions& opt, int repeat) {
  if (impl_->device != Device::Gpu) throw Error("the tuner times GPU schedules; this predictor runs on the CPU");
  if (rows == nullptr) throw Error("tune: rows is a null pointer");
  if (opt.output == ForestOutput::Leaf) throw Error("tune: the leaf output has one kernel; there is nothing to tune");
  const int width = output_width(opt.output);
  const std::lock_guard<std::mutex> lock(impl_->gpu_mutex);
  return impl_->gpu->tune(rows, n_rows, width, opt, repeat);
}

const AdaptiveReport& ForestPredictor::adaptive_report() const {
  if (impl_->layout != ForestLayout::Adaptive) throw Error("adaptive_report: this predictor uses the " + std::string(to_string(impl_->layout)) + " layout");
  return impl_->adaptive_report;
}

std::vector<index_t> ForestPredictor::schedule_rows(const float* rows, index_t n_rows, int depth, stream_t stream) {
  Impl& m = *impl_;
  if (m.layout != ForestLayout::Adaptive) throw Error("schedule_rows: row scheduling needs the adaptive layout");
  if (n_rows < 0) throw Error("schedule_rows: n_rows = " + std::to_string(n_rows) + " is negative");
  if (n_rows > 0 && rows == nullptr) throw Error("schedule_rows: rows is a null pointer");
  int max_depth = 0;
  for (int d : m.adaptive().depth) max_depth = std::max(max_depth, d);
  check_row_schedule_depth(depth, max_depth);
  if (m.device == Device::Gpu) {
    const std::lock_guard<std::mutex> lock(m.gpu_mutex);
    return m.gpu->row_order(rows, n_rows, depth, stream);
  }
  return forest_row_order(m.adaptive().view(), rows, n_rows, depth);
}

double ForestPredictor::nodes_per_warp(const float* rows, index_t n_rows, const index_t* order, index_t max_warps) const {
  const Impl& m = *impl_;
  if (m.layout != ForestLayout::Adaptive) throw Error("nodes_per_warp: the warp emulator reads the adaptive layout");
  return forest_nodes_per_warp(m.adaptive().view(), rows, n_rows, order, max_warps).nodes_per_warp;
}

}  // namespace canopy
