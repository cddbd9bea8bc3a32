#include "runtime/point_correlation.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <random>
#include <string>

#include "core/checks.hpp"
#include "core/timing.hpp"
#include "executor/cpu_executor.hpp"
#include "runtime/detail/pc_lists.hpp"
#include "runtime/detail/pc_totals.hpp"
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

// run_radii's radii: 1..kMaxPcRadii of them, each finite and >= 0, non-decreasing.
void check_radii_list(const std::string& who, const float* radii, int n_radii) {
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
}

// Adds counts [n][m]'s column sums to out.totals and appends its flagged rows (query first + i),
// their flags and counts: run_radii_totals on the CPU.
void add_totals(const index_t* counts, index_t n, int m, const detail::RadiiComparisons& compare, index_t first,
                PcRadiiTotals& out) {
  for (index_t i = 0; i < n; ++i) {
    const index_t* row = counts + i * m;
    for (int j = 0; j < m; ++j) out.totals[j] += row[j];
    const std::uint32_t f = compare.flags(row);
    if (!f) continue;
    out.rows.push_back(first + i);
    out.flags.push_back(f);
    out.row_counts.insert(out.row_counts.end(), row, row + m);
  }
}

// The flagged rows ascending (the GPU appends them in no particular order), flags and counts along.
void sort_flagged(PcRadiiTotals& out, int m) {
  if (std::is_sorted(out.rows.begin(), out.rows.end())) return;
  std::vector<std::size_t> order(out.rows.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return out.rows[a] < out.rows[b]; });
  PcRadiiTotals sorted;
  sorted.rows.reserve(order.size());
  sorted.flags.reserve(order.size());
  sorted.row_counts.reserve(out.row_counts.size());
  for (std::size_t i : order) {
    sorted.rows.push_back(out.rows[i]);
    sorted.flags.push_back(out.flags[i]);
    sorted.row_counts.insert(sorted.row_counts.end(), out.row_counts.begin() + i * m,
                             out.row_counts.begin() + (i + 1) * m);
  }
  out.rows = std::move(sorted.rows);
  out.flags = std::move(sorted.flags);
  out.row_counts = std::move(sorted.row_counts);
}

}  // namespace

PointCorrelation::PointCorrelation(const KdTree& tree, Device device)
    : tree_(tree),
      engine_(std::make_unique<Engine<detail::PcWorkload>>(tree, device)),
      lists_(std::make_unique<detail::PcLists>()) {}
PointCorrelation::~PointCorrelation() = default;

Device PointCorrelation::device() const { return engine_->device(); }

PcResult PointCorrelation::run(const float* queries, index_t n, const PcOptions& opt) {
  PcResult r;
  r.counts.assign(static_cast<std::size_t>(std::max<index_t>(n, 0)), 0);
  static_cast<TraversalStats&>(r) = run(queries, n, opt, r.counts.data());
  return r;
}

TraversalStats PointCorrelation::run(const float* queries, index_t n, const PcOptions& opt, index_t* counts) {
  const detail::PcWorkload w = workload(tree_, opt);
  if (!counts && n > 0) throw Error("PointCorrelation::run: the counts buffer is null");
  return count(w, queries, n, opt, counts);
}

TraversalStats PointCorrelation::count(const detail::PcWorkload& w, const float* queries, index_t n,
                                       const PcOptions& opt, index_t* counts) {
  CallData call;
  call.queries = queries;
  call.n = n;
  call.outputs[0] = counts;
  return engine_->run(w, call, opt);
}

TraversalStats PointCorrelation::run_radii(const float* queries, index_t n, const float* radii, int n_radii,
                                          const PcOptions& opt, index_t* counts) {
  const std::string who = "PointCorrelation::run_radii: ";
  check_radii_list(who, radii, n_radii);
  if (!counts && n > 0) throw Error(who + "the counts buffer is null");
  detail::PcWorkload w = workload(tree_, PcOptions{});  // its radii (checked above) come next
  w.set_radii(radii, n_radii);
  return count(w, queries, n, opt, counts);
}

PcRadiiTotals PointCorrelation::run_radii_totals(const float* queries, index_t n, const float* radii, int n_radii,
                                                const PcOptions& opt, const std::vector<std::pair<int, int>>& compare) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string who = "PointCorrelation::run_radii_totals: ";
  check_radii_list(who, radii, n_radii);
  const detail::RadiiComparisons rule(compare, who);  // (refuses more than it holds)
  for (std::size_t c = 0; c < compare.size(); ++c) {
    const auto [a, b] = compare[c];
    if (a < 0 || a >= n_radii || b < -1 || b >= n_radii)
      throw Error(who + "compare[" + std::to_string(c) + "] = (" + std::to_string(a) + ", " + std::to_string(b) +
                  ") names a radius outside 0.." + std::to_string(n_radii - 1) + " (-1 as the second: 0)");
  }
  PcRadiiTotals out;
  out.totals.assign(static_cast<std::size_t>(n_radii), 0);
  if (n <= 0) {
    static_cast<TraversalStats&>(out) = run_radii(queries, n, radii, n_radii, opt, nullptr);
    return out;
  }
  const index_t batch = std::max<index_t>(1, (index_t{1} << 25) / n_radii);
  const std::size_t dims = static_cast<std::size_t>(tree_.dims());
  if (opt.device != Device::Cpu && device() == Device::Gpu) {
    detail::radii_totals_gpu(n, n_radii, rule, batch, opt.stream,
                             [&](index_t first, index_t count, index_t* counts, stream_t stream) {
                               PcOptions o = opt;
                               o.stream = stream;
                               return run_radii(queries + first * dims, count, radii, n_radii, o, counts);
                             },
                             out);
  } else {
    std::vector<index_t> counts;
    for (index_t first = 0; first < n; first += batch) {
      const index_t count = std::min(batch, n - first);
      counts.assign(static_cast<std::size_t>(count) * n_radii, 0);
      static_cast<TraversalStats&>(out) = run_radii(queries + first * dims, count, radii, n_radii, opt, counts.data());
      add_totals(counts.data(), count, n_radii, rule, first, out);
    }
  }
  sort_flagged(out, n_radii);
  out.wall_ms = ms_since(t0);
  return out;
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
  if (opt.upper_from < -1)
    throw Error(std::string(who) + ": upper_from = " + std::to_string(opt.upper_from) + " (-1: every point; else >= 0)");
  RaggedOptions ro;
  static_cast<TraversalOptions&>(ro) = opt;
  ro.sort = opt.sorted;
  if (opt.device != Device::Cpu && device() == Device::Gpu) {
    const std::lock_guard<std::mutex> lock(lists_->mutex);
    if (!lists_->gpu) lists_->gpu = detail::make_pc_lists_gpu(tree_);
    return lists_->gpu->run(queries, opt.radii, n, radius2, opt.upper_from, ro, offsets, indices);
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
    v.upper_from = opt.upper_from;
    // (a radius test emits the same points on every run: the default call takes one pass)
    if (detail::one_pass_fits(ro)) return detail::ragged_cpu_one_pass(view, v, n, ro, who, offsets, indices);
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
