#include "runtime/knn.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include <tbb/parallel_for.h>

#include "executor/cpu_executor.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/knn_gpu.hpp"
#include "runtime/knn_visitor.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/guided_gpu.hpp"

namespace canopy {

const char* to_string(SearchTree t) {
  switch (t) {
    case SearchTree::Kd: return "kd-tree";
    case SearchTree::Ball: return "ball tree";
    case SearchTree::Vp: return "vantage-point tree";
  }
  return "?";
}

NearestNeighbors::NearestNeighbors(const KdTree& tree, Device device)
    : kind_(SearchTree::Kd), kd_(&tree), device_(resolve_device(device)) {
  if (device_ == Device::Gpu) gpu_ = detail::make_knn_gpu(tree);
}
NearestNeighbors::NearestNeighbors(const BallTree& tree, Device device)
    : kind_(SearchTree::Ball), ball_(&tree), device_(resolve_device(device)) {
  if (device_ == Device::Gpu) gpu_ = detail::make_knn_gpu(tree);
}
NearestNeighbors::NearestNeighbors(const VpTree& tree, Device device)
    : kind_(SearchTree::Vp), vp_(&tree), device_(resolve_device(device)) {
  if (device_ == Device::Gpu) gpu_ = detail::make_knn_gpu(tree);
}
NearestNeighbors::~NearestNeighbors() = default;

template <class F>
decltype(auto) NearestNeighbors::with_tree(F&& f) const {
  switch (kind_) {
    case SearchTree::Kd: return f(*kd_);
    case SearchTree::Ball: return f(*ball_);
    case SearchTree::Vp: break;
  }
  return f(*vp_);
}

int NearestNeighbors::dims() const {
  return with_tree([](const auto& t) { return t.dims(); });
}
index_t NearestNeighbors::size() const {
  return with_tree([](const auto& t) { return t.size(); });
}
int NearestNeighbors::height() const {
  return with_tree([](const auto& t) { return t.height(); });
}

// One run's working set: what the schedule and execute steps share.
struct NearestNeighbors::Run {
  const float* queries;
  index_t n;
  const KnnOptions& opt;
  KnnResult& res;
  index_t* order = nullptr;  // the executor's order on the host; null = input order
  std::vector<index_t> buckets;
  bool pipelined = false;    // the pipeline has executed the schedule already

  // f(host view, host visitor) writing into (dist, index).
  template <class F>
  void with_visitor(const NearestNeighbors& nn, float* dist, index_t* index, F&& f) const {
    nn.with_tree([&](const auto& tree) {
      const auto view = tree.view();
      dispatch_dims(view.dims, [&](auto md) {
        f(view, make_knn_visitor<decltype(md)::value>(view, queries, opt.k, dist, index));
      });
    });
  }
  template <class F>
  void with_visitor(const NearestNeighbors& nn, F&& f) const {
    with_visitor(nn, res.distances.data(), res.indices.data(), std::forward<F>(f));
  }
};

KnnResult NearestNeighbors::run(const float* queries, index_t n, const KnnOptions& opt) {
  const index_t points = size();
  if (opt.k < 1 || opt.k > points)
    throw Error("k = " + std::to_string(opt.k) + " is outside 1.." + std::to_string(points) + " (the " +
                to_string(kind_) + " has " + std::to_string(points) + " points)");
  check_queries(queries, n, dims());
  if (opt.depth == kAutoDepth) {
    const Device where = opt.device == Device::Cpu ? Device::Cpu : device_;
    return auto_depth_.run(opt, where, n, height(), guided_default_depth(opt, where),
                           [&](const KnnOptions& o, const std::vector<index_t>* rows) {
                             if (!rows) return run(queries, n, o);
                             const std::vector<float> sample = gather_rows(queries, dims(), *rows);
                             return run(sample.data(), static_cast<index_t>(rows->size()), o);
                           });
  }

  if (opt.memory_budget > 0 && opt.device != Device::Cpu && device_ == Device::Gpu && opt.depth >= 0 &&
      opt.depth <= height() && opt.k >= 1 && opt.k <= size()) {
    // Queries and results that do not fit the budget beside the tree: one call per batch,
    // each leaving room for its whole matrix.
    const int d = opt.depth > 0 ? opt.depth : std::min(guided_default_depth(opt, Device::Gpu), height());
    const TopTree top = with_tree([&](const auto& tree) { return TopTree::build(tree.view(), d); });
    const std::size_t k = static_cast<std::size_t>(opt.k);
    const index_t batch = budget_batch(opt, n, with_tree([](const auto& t) { return t.bytes(); }),
                                       dims() * sizeof(float) + k * (sizeof(float) + sizeof(index_t)),
                                       pipeline_bytes_per_query(true, guided_rows(opt, Device::Gpu).width(top.size())));
    if (batch < n) {
      KnnResult all;
      all.k = opt.k;
      all.indices.resize(static_cast<std::size_t>(n) * k);
      all.distances.resize(static_cast<std::size_t>(n) * k);
      for (index_t a = 0; a < n; a += batch) {
        const index_t m = std::min(batch, n - a);
        KnnResult part = run(queries + a * dims(), m, opt);
        std::copy(part.indices.begin(), part.indices.end(), all.indices.begin() + a * opt.k);
        std::copy(part.distances.begin(), part.distances.end(), all.distances.begin() + a * opt.k);
        append_batch(all, std::move(part), a, a == 0);
      }
      return all;
    }
  }

  KnnResult res;
  res.begin(opt, device_, "NearestNeighbors", height(), kDefaultTopTreeDepth, TraversalStats::Guided::BuiltinTree);
  res.k = opt.k;
  const std::size_t slots = static_cast<std::size_t>(n) * static_cast<std::size_t>(opt.k);
  res.indices.assign(slots, -1);
  res.distances.assign(slots, 0.0f);
  if (n == 0) {
    if (opt.keep_schedule) res.schedule = input_order(0);
    return res;
  }
  Run r{queries, n, opt, res, nullptr, {}};
  if (res.device == Device::Cpu) {
    schedule_on_cpu(r);
  } else {
    gpu_->set_queries(queries, n, opt.k);
    schedule_on_gpu(r);
  }
  if (opt.keep_schedule) res.keep(r.order, n, std::move(r.buckets));
  execute(r);
  return res;
}

void NearestNeighbors::schedule_on_cpu(Run& r) {
  const ScheduleKind kind = r.opt.schedule;
  if (kind == ScheduleKind::Hybrid || kind == ScheduleKind::HybridDevice) {
    auto t0 = std::chrono::steady_clock::now();
    GuidedMatrix matrix;
    TopTree top;
    r.with_visitor(*this, [&](const auto& view, const auto& v) {
      top = TopTree::build(view, r.res.depth);
      matrix = inspect_cpu_guided(view, top.view(), v, r.n, r.res.rows);
    });
    r.res.times.inspect_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    order_.resize(static_cast<std::size_t>(r.n));
    r.order = order_.data();
    guided_schedule(matrix.view(), top.parents().data(), r.order, r.opt.keep_schedule ? &r.buckets : nullptr);
    r.res.times.schedule_ms = ms_since(t0);
  } else if (kind == ScheduleKind::LeafSort) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::int64_t> keys(static_cast<std::size_t>(r.n));
    r.with_visitor(*this, [&](const auto& view, const auto& v) {
      tbb::parallel_for(tbb::blocked_range<index_t>(0, r.n, 1024), [&](const tbb::blocked_range<index_t>& b) {
        for (index_t i = b.begin(); i < b.end(); ++i) keys[i] = greedy_leaf(view, v, i);
      });
    });
    Schedule sorted = sort_by_key(keys.data(), r.n);
    r.res.times.schedule_ms = ms_since(t0);
    order_.swap(sorted.order);
    r.order = order_.data();
    r.buckets.swap(sorted.bucket_offsets);
  }
}

void NearestNeighbors::schedule_on_gpu(Run& r) {
  const ScheduleKind kind = r.opt.schedule;
  if (kind == ScheduleKind::Hybrid || kind == ScheduleKind::HybridDevice) {
    const TopTree top = with_tree([&](const auto& tree) { return TopTree::build(tree.view(), r.res.depth); });
    const std::size_t tree_bytes = with_tree([](const auto& tree) { return tree.bytes(); });
    const std::size_t fixed = tree_bytes + static_cast<std::size_t>(r.n) *
                                               (dims() * sizeof(float) + r.opt.k * (sizeof(float) + sizeof(index_t)));
    r.pipelined = pipeline_if_planned(
        r.opt, r.n, tree_bytes, fixed, pipeline_bytes_per_query(true, r.res.rows.width(top.size())), r.res,
        [&](const std::vector<index_t>& chunks) { return gpu_->pipelined(top, r.opt, r.res.rows, chunks); },
        [&] { return gpu_->download_order(); },
        order_, r.order, r.buckets);
    if (r.pipelined) return;
    if (kind == ScheduleKind::HybridDevice && DeviceGuidedScheduler::supports(top.parents().data(), top.size(), r.n)) {
      r.res.times.inspect_ms = gpu_->inspect_on_device(top, r.res.rows);
      r.res.times.schedule_ms = gpu_->device_schedule(top);
      // The order stays on the device; fetch it only when asked, outside the timed regions.
      if (!r.opt.keep_schedule && !r.opt.count_nodes) return;
      order_ = gpu_->download_order();
      r.order = order_.data();
      r.buckets = gpu_->device_buckets();
      return;
    }
    const GuidedMatrixView matrix = gpu_->inspect(top, r.res.rows, &r.res.times.inspect_ms);
    const auto t0 = std::chrono::steady_clock::now();
    r.order = gpu_->order_staging();  // the scheduler writes straight into pinned memory
    guided_schedule(matrix, top.parents().data(), r.order, r.opt.keep_schedule ? &r.buckets : nullptr);
    gpu_->upload_order();
    r.res.times.schedule_ms = ms_since(t0);
  } else if (kind == ScheduleKind::LeafSort) {
    r.res.times.schedule_ms = gpu_->leaf_sort();
    // The order stays on the device; fetch it only when asked, outside the timed region.
    if (!r.opt.keep_schedule && !r.opt.count_nodes) return;
    order_ = gpu_->download_order();
    r.order = order_.data();
    const std::vector<std::uint64_t> keys = gpu_->download_sorted_keys();
    r.buckets = bucket_boundaries(r.n, [&](index_t i) { return keys[i]; });
  }
}

void NearestNeighbors::execute(Run& r) {
  const KnnOptions& opt = r.opt;
  KnnResult& res = r.res;
  if (res.device == Device::Cpu) {
    const auto t0 = std::chrono::steady_clock::now();
    r.with_visitor(*this, [&](const auto& view, const auto& v) {
      if (opt.executor == ExecutorKind::Independent)
        execute_cpu(view, v, r.order, r.n);
      else
        res.warp_nodes = emulate_lockstep(view, v, r.order, r.n, lockstep_mode(opt.executor));
    });
    res.times.execute_ms = ms_since(t0);
    if (!opt.count_nodes) res.warp_nodes.clear();
  } else {
    const bool reordered = opt.schedule != ScheduleKind::InputOrder;
    if (!r.pipelined) res.times.execute_ms = gpu_->execute(opt.executor, reordered, nullptr);
    else if (opt.measure_overlap) res.pipeline.execute_only_ms = gpu_->execute(opt.executor, true, nullptr);
    gpu_->download(res.distances.data(), res.indices.data());
    if (opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent)
      gpu_->execute(opt.executor, reordered, &res.gpu_warp_nodes);
  }
  if (opt.count_nodes && res.warp_nodes.empty()) {
    std::vector<float> dist(res.distances.size());
    std::vector<index_t> index(res.indices.size());
    r.with_visitor(*this, dist.data(), index.data(), [&](const auto& view, const auto& v) {
      res.warp_nodes = emulate_lockstep(view, v, r.order, r.n, lockstep_mode(opt.executor));
    });
  }
}

TraversalStats NearestNeighbors::run(const float* queries, index_t n, const KnnOptions& opt, index_t* indices,
                                     float* distances) {
  if ((!indices || !distances) && n > 0) throw Error("NearestNeighbors::run: an output buffer is null");
  const std::vector<float> staged = stage_queries(queries, n, dims());
  KnnResult r = run(staged.empty() ? queries : staged.data(), n, opt);
  copy_memory(indices, r.indices.data(), r.indices.size() * sizeof(index_t));
  copy_memory(distances, r.distances.data(), r.distances.size() * sizeof(float));
  return std::move(static_cast<TraversalStats&>(r));
}

}  // namespace canopy
