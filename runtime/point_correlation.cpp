#include "runtime/point_correlation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "core/checks.hpp"
#include "executor/cpu_executor.hpp"
#include "runtime/detail/workloads.hpp"
#include "runtime/engine.hpp"

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

}  // namespace

PointCorrelation::PointCorrelation(const KdTree& tree, Device device)
    : tree_(tree), engine_(std::make_unique<Engine<detail::PcWorkload>>(tree, device)) {}
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
