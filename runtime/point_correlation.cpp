#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include "executor/cpu_executor.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/point_correlation.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/pc_gpu.hpp"
#include "runtime/pc_visitor.hpp"

namespace canopy {
namespace {

std::vector<std::int64_t> leaf_keys(const KdTreeView& tree, const float* queries, const index_t* order, index_t n) {
  std::vector<std::int64_t> keys(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1024), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i)
      keys[i] = tree.find_leaf(queries + (order ? order[i] : i) * tree.dims);
  });
  return keys;
}

}  // namespace

const char* to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::InputOrder: return "input-order";
    case ScheduleKind::Hybrid: return "hybrid";
    case ScheduleKind::HybridDevice: return "hybrid-device";
    case ScheduleKind::LeafSort: return "leaf-sort";
  }
  return "?";
}


PointCorrelation::PointCorrelation(const KdTree& tree, Device device)
    : tree_(tree), device_(resolve_device(device)) {
  if (device_ == Device::Gpu) gpu_ = std::make_unique<detail::PcGpuEngine>(tree);
}

PointCorrelation::~PointCorrelation() = default;

// One run's working set: what the schedule and execute steps share.
struct PointCorrelation::Run {
  const float* queries;
  index_t n;
  const PcOptions& opt;
  KdTreeView view;
  float radius2;
  PcResult& res;
  index_t* order = nullptr;  // the executor's order on the host; null = input order
  std::vector<index_t> buckets;
  bool pipelined = false;    // the pipeline has executed the schedule already

  template <class MaxDim>
  PointCorrelationVisitor<MaxDim::value> visitor(MaxDim, index_t* counts) const {
    PointCorrelationVisitor<MaxDim::value> v;
    v.tree = view;
    v.queries = queries;
    v.counts = counts;
    v.radius2 = radius2;
    return v;
  }
};

PcResult PointCorrelation::run(const float* queries, index_t n, const PcOptions& opt) {
  if (!std::isfinite(opt.radius) || opt.radius < 0.0f)
    throw Error("radius = " + std::to_string(opt.radius) + " must be finite and >= 0");
  const KdTreeView view = tree_.view();
  check_queries(queries, n, view.dims);
  if (opt.depth == kAutoDepth) {
    return auto_depth_.run(opt, opt.device == Device::Cpu ? Device::Cpu : device_, n, view.height, kDefaultTopTreeDepth,
                           [&](const PcOptions& o, const std::vector<index_t>* rows) {
                             if (!rows) return run(queries, n, o);
                             const std::vector<float> sample = gather_rows(queries, view.dims, *rows);
                             return run(sample.data(), static_cast<index_t>(rows->size()), o);
                           });
  }

  if (opt.memory_budget > 0 && opt.device != Device::Cpu && device_ == Device::Gpu && opt.depth >= 0 &&
      opt.depth <= view.height) {
    // Queries and results that do not fit the budget beside the tree: one call per batch,
    // each leaving room for its whole matrix.
    const TopTree top = TopTree::build(view, opt.depth > 0 ? opt.depth : std::min(kDefaultTopTreeDepth, view.height));
    const index_t batch = budget_batch(opt, n, tree_.bytes(), view.dims * sizeof(float) + sizeof(index_t),
                                       pipeline_bytes_per_query(false, top.size()));
    if (batch < n) {
      PcResult all;
      all.counts.resize(static_cast<std::size_t>(n));
      for (index_t a = 0; a < n; a += batch) {
        const index_t m = std::min(batch, n - a);
        PcResult part = run(queries + a * view.dims, m, opt);
        std::copy(part.counts.begin(), part.counts.end(), all.counts.begin() + a);
        append_batch(all, std::move(part), a, a == 0);
      }
      return all;
    }
  }

  PcResult res;
  res.begin(opt, device_, "PointCorrelation", view.height, kDefaultTopTreeDepth);
  res.counts.assign(static_cast<std::size_t>(n), 0);
  if (n == 0) {
    if (opt.keep_schedule) res.schedule = input_order(0);
    return res;
  }
  Run r{queries, n, opt, view, opt.radius * opt.radius, res, nullptr, {}};
  if (res.device == Device::Cpu) {
    schedule_on_cpu(r);
  } else {
    gpu_->set_queries(queries, n);
    schedule_on_gpu(r);
  }
  if (opt.keep_schedule) res.keep(r.order, n, std::move(r.buckets));
  execute(r);
  return res;
}

void PointCorrelation::schedule_on_cpu(Run& r) {
  if (r.opt.schedule == ScheduleKind::Hybrid || r.opt.schedule == ScheduleKind::HybridDevice) {
    auto t0 = std::chrono::steady_clock::now();
    const TopTree top = TopTree::build(r.view, r.res.depth);
    const SchedulingMatrix matrix = dispatch_dims(r.view.dims, [&](auto md) {
      return inspect_cpu(r.view, top.view(), r.visitor(md, nullptr), r.n);
    });
    r.res.times.inspect_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    order_.resize(static_cast<std::size_t>(r.n));
    r.order = order_.data();
    sandpile_.run(matrix.view(), r.order, r.opt.keep_schedule ? &r.buckets : nullptr);
    r.res.times.schedule_ms = ms_since(t0);
  } else if (r.opt.schedule == ScheduleKind::LeafSort) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<std::int64_t> keys = leaf_keys(r.view, r.queries, nullptr, r.n);
    Schedule sorted = sort_by_key(keys.data(), r.n);
    r.res.times.schedule_ms = ms_since(t0);
    order_.swap(sorted.order);
    r.order = order_.data();
    r.buckets.swap(sorted.bucket_offsets);
  }
}

void PointCorrelation::schedule_on_gpu(Run& r) {
  const ScheduleKind kind = r.opt.schedule;
  TopTree top;  // cut once for the hybrid schedules
  if (kind == ScheduleKind::Hybrid || kind == ScheduleKind::HybridDevice) {
    top = TopTree::build(r.view, r.res.depth);
    const std::size_t fixed = tree_.bytes() + static_cast<std::size_t>(r.n) * (r.view.dims * sizeof(float) + sizeof(index_t));
    r.pipelined = pipeline_if_planned(
        r.opt, r.n, tree_.bytes(), fixed, pipeline_bytes_per_query(false, top.size()), r.res,
        [&](const std::vector<index_t>& chunks) { return gpu_->pipelined(top, r.radius2, r.opt, chunks); },
        [&] { return gpu_->download_order(); }, order_, r.order, r.buckets);
    if (r.pipelined) return;
  }
  if (kind == ScheduleKind::Hybrid) {
    const SchedulingMatrixView matrix = gpu_->inspect(top, r.radius2, &r.res.times.inspect_ms);
    const auto t0 = std::chrono::steady_clock::now();
    r.order = gpu_->order_staging(r.n);  // the sandpile writes straight into pinned memory
    sandpile_.run(matrix, r.order, r.opt.keep_schedule ? &r.buckets : nullptr);
    gpu_->upload_order(r.n);
    r.res.times.schedule_ms = ms_since(t0);
    return;
  }
  if (kind == ScheduleKind::HybridDevice) {
    r.res.times.inspect_ms = gpu_->inspect_on_device(top, r.radius2);
    r.res.times.schedule_ms = gpu_->device_sandpile();
  } else if (kind == ScheduleKind::LeafSort) {
    r.res.times.schedule_ms = gpu_->leaf_sort();
  } else {
    return;
  }
  // These orders stay on the device; fetch them only when asked, outside the timed regions.
  if (!r.opt.keep_schedule && !r.opt.count_nodes) return;
  order_ = gpu_->download_order();
  r.order = order_.data();
  if (kind == ScheduleKind::LeafSort) {
    const std::vector<std::int64_t> keys = leaf_keys(r.view, r.queries, r.order, r.n);
    r.buckets = bucket_boundaries(r.n, [&](index_t i) { return keys[i]; });
  } else {
    const SchedulingMatrixView matrix = gpu_->download_matrix();
    r.buckets = bucket_boundaries(r.n, [&](index_t i) { return highest_column(matrix, r.order[i]); });
  }
}

void PointCorrelation::execute(Run& r) {
  const PcOptions& opt = r.opt;
  PcResult& res = r.res;
  const bool reordered = opt.schedule != ScheduleKind::InputOrder;
  if (res.device == Device::Cpu) {
    const auto t0 = std::chrono::steady_clock::now();
    dispatch_dims(r.view.dims, [&](auto md) {
      const auto v = r.visitor(md, res.counts.data());
      if (opt.executor == ExecutorKind::Independent)
        execute_cpu(r.view, v, r.order, r.n);
      else
        res.warp_nodes = emulate_lockstep(r.view, v, r.order, r.n, lockstep_mode(opt.executor));
    });
    res.times.execute_ms = ms_since(t0);
    if (!opt.count_nodes) res.warp_nodes.clear();
  } else {
    if (!r.pipelined) res.times.execute_ms = gpu_->execute(opt.executor, r.radius2, reordered, nullptr);
    else if (opt.measure_overlap) res.pipeline.execute_only_ms = gpu_->execute(opt.executor, r.radius2, true, nullptr);
    gpu_->download_counts(res.counts.data());
    if (opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent)
      gpu_->execute(opt.executor, r.radius2, reordered, &res.gpu_warp_nodes);
  }
  if (opt.count_nodes && res.warp_nodes.empty()) {
    std::vector<index_t> scratch(static_cast<std::size_t>(r.n));
    dispatch_dims(r.view.dims, [&](auto md) {
      res.warp_nodes = emulate_lockstep(r.view, r.visitor(md, scratch.data()), r.order, r.n,
                                        lockstep_mode(opt.executor));
    });
  }
}

TraversalStats PointCorrelation::run(const float* queries, index_t n, const PcOptions& opt, index_t* counts) {
  if (!counts && n > 0) throw Error("PointCorrelation::run: the counts buffer is null");
  const std::vector<float> staged = stage_queries(queries, n, tree_.view().dims);
  PcResult r = run(staged.empty() ? queries : staged.data(), n, opt);
  copy_memory(counts, r.counts.data(), r.counts.size() * sizeof(index_t));
  return std::move(static_cast<TraversalStats&>(r));
}

float estimate_radius(const KdTree& tree, const float* queries, index_t n_queries, double target_mean,
                      std::uint64_t seed, index_t sample) {
  if (!(target_mean > 0.0)) throw Error("radius auto: the target mean count must be > 0");
  if (n_queries <= 0) throw Error("radius auto: there are no queries to sample");
  const KdTreeView view = tree.view();
  check_queries(queries, n_queries, view.dims);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<index_t> pick(0, n_queries - 1);
  const index_t s = std::min(sample, n_queries);
  std::vector<float> sq(static_cast<std::size_t>(s) * view.dims);
  for (index_t i = 0; i < s; ++i) {
    const index_t q = s == n_queries ? i : pick(rng);
    std::copy(queries + q * view.dims, queries + (q + 1) * view.dims, sq.begin() + i * view.dims);
  }
  std::vector<index_t> counts(static_cast<std::size_t>(s));
  auto mean_count = [&](float r) {
    dispatch_dims(view.dims, [&](auto md) {
      PointCorrelationVisitor<decltype(md)::value> v;
      v.tree = view;
      v.queries = sq.data();
      v.counts = counts.data();
      v.radius2 = r * r;
      execute_cpu(view, v, nullptr, s);
    });
    return std::accumulate(counts.begin(), counts.end(), 0.0) / static_cast<double>(s);
  };
  double diameter2 = 0;
  for (int d = 0; d < view.dims; ++d) {
    const double e = static_cast<double>(view.hi(0)[d]) - view.lo(0)[d];
    diameter2 += e * e;
  }
  const float diameter = static_cast<float>(std::sqrt(diameter2));
  if (diameter == 0.0f) return 0.0f;  // every point coincides: any radius counts them all
  float lo = 0.0f, hi = diameter * 1e-6f;
  while (hi < diameter && mean_count(hi) < target_mean) {
    lo = hi;
    hi *= 2.0f;
  }
  if (hi >= diameter) return diameter;
  for (int it = 0; it < 40 && hi - lo > hi * 1e-4f; ++it) {
    const float mid = 0.5f * (lo + hi);
    if (mean_count(mid) < target_mean) lo = mid; else hi = mid;
  }
  return hi;
}

}  // namespace canopy
