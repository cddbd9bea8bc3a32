#include "runtime/point_correlation.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>
#include <string>

#include "core/checks.hpp"
#include "executor/cpu_executor.hpp"
#include "runtime/detail/pc_lists.hpp"
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.hpp"
#include "runtime/ragged.hpp"

namespace canopy {
namespace {

detail::PcWorkload workload(const KdTree& tree, const PcOptions& opt) {
  if (!std::isfinite(opt.radius) || opt.radius < 0.0f)
    throw Error("radius = " + std::to_string(opt.radius) + " must be finite and >= 0");
  detail::PcWorkload w;
  w.query_dims = tree.dims();
  w.radius2 = opt.radius * opt.radius;
  return w;
}

// run_lists' per-query radii, each finite and >= 0 (an error names the first that is not); a host
// copy when they are in device memory (empty otherwise).
std::vector<float> check_radii(const float* radii, index_t n, stream_t after) {
  std::vector<float> staged;
  if (!radii || n <= 0) return staged;
  const float* r = radii;
  if (is_device_pointer(radii)) {
    staged.resize(static_cast<std::size_t>(n));
    copy_memory(staged.data(), radii, staged.size() * sizeof(float), after);
    r = staged.data();
  }
  for (index_t i = 0; i < n; ++i)
    if (!std::isfinite(r[i]) || r[i] < 0.0f)
      throw Error("PointCorrelation::run_lists: radii[" + std::to_string(i) + "] = " + std::to_string(r[i]) +
                  " must be finite and >= 0");
  return staged;
}

}  // namespace

PointCorrelation::PointCorrelation(const KdTree& tree, Device device)
    : tree_(tree),
      engine_(std::make_unique<Engine<detail::PcWorkload>>(tree, device)),
      lists_(std::make_unique<detail::PcLists>()) {}
PointCorrelation::~PointCorrelation() = default;

Device PointCorrelation::device() const { return engine_->device(); }

PcResult PointCorrelation::run(const float* queries, index_t n, const PcOptions& opt) {
  const detail::PcWorkload w = workload(tree_, opt);
  PcResult r;
  r.counts.assign(static_cast<std::size_t>(std::max<index_t>(n, 0)), 0);
  CallData call;
  call.queries = queries;
  call.n = n;
  call.outputs[0] = r.counts.data();
  static_cast<TraversalStats&>(r) = engine_->run(w, call, opt);
  return r;
}

TraversalStats PointCorrelation::run(const float* queries, index_t n, const PcOptions& opt, index_t* counts) {
  const detail::PcWorkload w = workload(tree_, opt);
  if (!counts && n > 0) throw Error("PointCorrelation::run: the counts buffer is null");
  CallData call;
  call.queries = queries;
  call.n = n;
  call.outputs[0] = counts;
  return engine_->run(w, call, opt);
}

TraversalStats PointCorrelation::run_radii(const float* queries, index_t n, const float* radii, int n_radii,
                                          const PcOptions& opt, index_t* counts) {
  const std::string who = "PointCorrelation::run_radii: ";
  if (n_radii < 1 || n_radii > kMaxPcRadii)
    throw Error(who + "n_radii = " + std::to_string(n_radii) + " is outside 1.." + std::to_string(kMaxPcRadii));
  if (!radii) throw Error(who + "the radii are null");
  for (int j = 0; j < n_radii; ++j) {
    if (!std::isfinite(radii[j]) || radii[j] < 0.0f)
      throw Error(who + "radii[" + std::to_string(j) + "] = " + std::to_string(radii[j]) + " must be finite and >= 0");
    if (j > 0 && radii[j] < radii[j - 1])
      throw Error(who + "radii[" + std::to_string(j) + "] = " + std::to_string(radii[j]) + " is below radii[" +
                  std::to_string(j - 1) + "] (they must be non-decreasing)");
  }
  if (!counts && n > 0) throw Error(who + "the counts buffer is null");
  detail::PcWorkload w = workload(tree_, PcOptions{});  // its radii (checked above) come next
  w.set_radii(radii, n_radii);
  CallData call;
  call.queries = queries;
  call.n = n;
  call.outputs[0] = counts;
  return engine_->run(w, call, opt);
}

PcListResult PointCorrelation::run_lists(const float* queries, index_t n, const PcListOptions& opt) {
  RaggedResult<index_t> r = detail::into_vectors<index_t>(
      n, "PointCorrelation::run_lists",
      [&](index_t* offsets, const ItemBuffer<index_t>& items) { return run_lists(queries, n, opt, offsets, items); });
  PcListResult out;
  static_cast<RaggedStats&>(out) = std::move(r);
  out.offsets = std::move(r.offsets);
  out.indices = std::move(r.items);
  return out;
}

RaggedStats PointCorrelation::run_lists(const float* queries, index_t n, const PcListOptions& opt, index_t* offsets,
                                        const ItemBuffer<index_t>& indices) {
  const char* who = "PointCorrelation::run_lists";
  const float radius2 = workload(tree_, opt).radius2;
  detail::check_ragged_call(who, n, offsets);
  check_queries(queries, n, tree_.dims(), opt.stream);
  std::vector<float> radii = check_radii(opt.radii, n, opt.stream);
  RaggedOptions ro;
  static_cast<TraversalOptions&>(ro) = opt;
  ro.sort = opt.sorted;
  if (opt.device != Device::Cpu && device() == Device::Gpu) {
    const std::lock_guard<std::mutex> lock(lists_->mutex);
    if (!lists_->gpu) lists_->gpu = detail::make_pc_lists_gpu(tree_);
    return lists_->gpu->run(queries, opt.radii, n, radius2, ro, offsets, indices);
  }
  // The CPU reads host memory: device queries and radii go through the host.
  const std::vector<float> staged = detail::host_copy_of_queries(queries, n, tree_.dims(), opt.stream);
  const KdTreeView view = tree_.view();
  return dispatch_dims(view.dims, [&](auto md) {
    detail::PcListVisitor<decltype(md)::value> v;
    v.tree = view;
    v.queries = staged.empty() ? queries : staged.data();
    v.radii = radii.empty() ? opt.radii : radii.data();
    v.radius2 = radius2;
    return detail::ragged_cpu(view, v, n, ro, who, offsets, indices);
  });
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
    detail::PcWorkload w;
    w.radius2 = r * r;
    void* out[2] = {counts.data(), nullptr};
    w.with_visitor(view, sq.data(), out, [&](const auto& v) { execute_cpu(view, v, nullptr, s); });
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
