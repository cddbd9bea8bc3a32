#include "runtime/barnes_hut.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include <tbb/parallel_for.h>

#include "executor/cpu_executor.hpp"
#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/bh_visitor.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/nbody_gpu.hpp"

namespace canopy {

BarnesHut::BarnesHut(const Octree& tree, Device device) : tree_(tree), device_(resolve_device(device)) {
  // The bodies in their original order are the queries.
  const index_t n = tree.size();
  xyz_.resize(static_cast<std::size_t>(n) * 3);
  mass_.resize(static_cast<std::size_t>(n));
  const std::vector<float>& b = tree.bodies();
  const std::vector<index_t>& ids = tree.body_ids();
  for (index_t i = 0; i < n; ++i) {
    std::copy_n(&b[i * 4], 3, &xyz_[ids[i] * 3]);
    mass_[ids[i]] = b[i * 4 + 3];
  }
  if (device_ == Device::Gpu) gpu_ = std::make_unique<detail::BhGpu>(tree, xyz_.data(), mass_.data());
}

BarnesHut::~BarnesHut() = default;

struct BarnesHut::Run {
  const BhOptions& opt;
  BhResult& res;
  index_t n;
  index_t* order = nullptr;  // the executor's order on the host; null = input order
  std::vector<index_t> buckets;
  BarnesHutVisitor v;  // host pointers
  bool pipelined = false;  // the pipeline has executed the schedule already
};

BhResult BarnesHut::run(const BhOptions& opt) {
  if (!std::isfinite(opt.theta) || opt.theta < 0.0f)
    throw Error("theta = " + std::to_string(opt.theta) + " must be finite and >= 0");
  if (!std::isfinite(opt.softening) || opt.softening < 0.0f)
    throw Error("softening = " + std::to_string(opt.softening) + " must be finite and >= 0");
  if (opt.depth == kAutoDepth) {
    // The bodies are the queries: the trial runs on all of them.
    return auto_depth_.run(opt, opt.device == Device::Cpu ? Device::Cpu : device_, tree_.size(), tree_.height(),
                           kDefaultOctreeDepth, [&](const BhOptions& o, const std::vector<index_t>*) { return run(o); });
  }
  BhResult res;
  res.begin(opt, device_, "BarnesHut", tree_.height(), kDefaultOctreeDepth);
  const index_t n = tree_.size();
  res.forces.assign(static_cast<std::size_t>(n) * 3, 0.0f);
  Run r{opt, res, n, nullptr, {}, {}};
  r.v.tree = tree_.view();
  r.v.bodies_xyz = xyz_.data();
  r.v.masses = mass_.data();
  r.v.forces = res.forces.data();
  r.v.theta2 = opt.theta * opt.theta;
  r.v.eps2 = opt.softening * opt.softening;
  if (res.device == Device::Cpu) {
    schedule_on_cpu(r);
  } else {
    gpu_->set_parameters(r.v.theta2, r.v.eps2);
    schedule_on_gpu(r);
  }
  if (opt.keep_schedule) res.keep(r.order, n, std::move(r.buckets));
  execute(r);
  return res;
}

void BarnesHut::schedule_on_cpu(Run& r) {
  const OctreeView view = r.v.tree;
  if (r.opt.schedule == ScheduleKind::Hybrid || r.opt.schedule == ScheduleKind::HybridDevice) {
    auto t0 = std::chrono::steady_clock::now();
    const TopTree top = TopTree::build(view, r.res.depth);
    const SchedulingMatrix matrix = inspect_cpu(view, top.view(), r.v, r.n);
    r.res.times.inspect_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    order_.resize(static_cast<std::size_t>(r.n));
    r.order = order_.data();
    sandpile_.run(matrix.view(), r.order, r.opt.keep_schedule ? &r.buckets : nullptr);
    r.res.times.schedule_ms = ms_since(t0);
  } else if (r.opt.schedule == ScheduleKind::LeafSort) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::int64_t> keys(static_cast<std::size_t>(r.n));
    const float* cube = view.cube(0);
    tbb::parallel_for(tbb::blocked_range<index_t>(0, r.n, 4096), [&](const tbb::blocked_range<index_t>& b) {
      for (index_t i = b.begin(); i < b.end(); ++i)
        keys[i] = static_cast<std::int64_t>(morton_key(xyz_[i * 3], xyz_[i * 3 + 1], xyz_[i * 3 + 2], cube));
    });
    Schedule sorted = sort_by_key(keys.data(), r.n);
    r.res.times.schedule_ms = ms_since(t0);
    order_.swap(sorted.order);
    r.order = order_.data();
    r.buckets.swap(sorted.bucket_offsets);
  }
}

void BarnesHut::schedule_on_gpu(Run& r) {
  const ScheduleKind kind = r.opt.schedule;
  TopTree top;  // cut once for the hybrid schedules
  if (kind == ScheduleKind::Hybrid || kind == ScheduleKind::HybridDevice) {
    top = TopTree::build(r.v.tree, r.res.depth);
    // The bodies, masses and forces are the queries and results.
    const std::size_t fixed = tree_.bytes() + static_cast<std::size_t>(r.n) * 7 * sizeof(float);
    r.pipelined = pipeline_if_planned(
        r.opt, r.n, tree_.bytes(), fixed, pipeline_bytes_per_query(false, top.size()), r.res,
        [&](const std::vector<index_t>& chunks) { return gpu_->pipelined(top, r.opt, chunks); }, [&] { return gpu_->download_order(); },
        order_, r.order, r.buckets);
    if (r.pipelined) return;
  }
  if (kind == ScheduleKind::Hybrid) {
    const SchedulingMatrixView matrix = gpu_->inspect(top, &r.res.times.inspect_ms);
    const auto t0 = std::chrono::steady_clock::now();
    r.order = gpu_->order_staging();  // the sandpile writes straight into pinned memory
    sandpile_.run(matrix, r.order, r.opt.keep_schedule ? &r.buckets : nullptr);
    gpu_->upload_order();
    r.res.times.schedule_ms = ms_since(t0);
    return;
  }
  if (kind == ScheduleKind::HybridDevice) {
    r.res.times.inspect_ms = gpu_->inspect_on_device(top);
    r.res.times.schedule_ms = gpu_->device_sandpile();
  } else if (kind == ScheduleKind::LeafSort) {
    r.res.times.schedule_ms = gpu_->morton_sort();
  } else {
    return;
  }
  // These orders stay on the device; fetch them only when asked, outside the timed regions.
  if (!r.opt.keep_schedule && !r.opt.count_nodes) return;
  order_ = gpu_->download_order();
  r.order = order_.data();
  if (kind == ScheduleKind::LeafSort) {
    const std::vector<std::uint64_t> keys = gpu_->download_sorted_keys();
    r.buckets = bucket_boundaries(r.n, [&](index_t i) { return keys[i]; });
  } else {
    const SchedulingMatrixView matrix = gpu_->download_matrix();
    r.buckets = bucket_boundaries(r.n, [&](index_t i) { return highest_column(matrix, r.order[i]); });
  }
}

void BarnesHut::execute(Run& r) {
  const BhOptions& opt = r.opt;
  BhResult& res = r.res;
  if (res.device == Device::Cpu) {
    const auto t0 = std::chrono::steady_clock::now();
    if (opt.executor == ExecutorKind::Independent)
      execute_cpu(r.v.tree, r.v, r.order, r.n);
    else
      res.warp_nodes = emulate_lockstep(r.v.tree, r.v, r.order, r.n, lockstep_mode(opt.executor));
    res.times.execute_ms = ms_since(t0);
    if (!opt.count_nodes) res.warp_nodes.clear();
  } else {
    const bool reordered = opt.schedule != ScheduleKind::InputOrder;
    if (!r.pipelined) res.times.execute_ms = gpu_->execute(opt.executor, reordered, nullptr);
    else if (opt.measure_overlap) res.pipeline.execute_only_ms = gpu_->execute(opt.executor, true, nullptr);
    gpu_->download(res.forces.data());
    if (opt.gpu_count_nodes && opt.executor != ExecutorKind::Independent)
      gpu_->execute(opt.executor, reordered, &res.gpu_warp_nodes);
  }
  if (opt.count_nodes && res.warp_nodes.empty()) {
    std::vector<float> scratch(res.forces.size());
    BarnesHutVisitor v = r.v;
    v.forces = scratch.data();
    res.warp_nodes = emulate_lockstep(v.tree, v, r.order, r.n, lockstep_mode(opt.executor));
  }
}

}  // namespace canopy
