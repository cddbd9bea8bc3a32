// Auto's plan for each call over the adaptive engine (ForestTuner::plan / record): the prior of
// a never-seen size class, online tuning on the calls' own batches, the choices kept on disk.
#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <utility>

#include "core/bits.hpp"
#include "core/warnings.hpp"
#include "runtime/detail/forest_engine.cuh"
#include "runtime/detail/forest_tuner.hpp"

namespace canopy {
namespace detail {

namespace {

// The knobs auto refines, per strategy, and the values it tries for each (in this order:
// the ones that moved the tuner's picks most first). The walks knob sets rows_per_thread and
// tree_interleave together.
using Knob = std::vector<std::function<void(ForestSchedule&)>>;
std::vector<Knob> refine_knobs(ForestKernel k) {
  auto values = [](int ForestSchedule::*field, std::initializer_list<int> vs) {
    Knob knob;
    for (int v : vs) knob.push_back([field, v](ForestSchedule& s) { s.*field = v; });
    return knob;
  };
  Knob walks;
  for (auto [r, t] : std::initializer_list<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 1}})
    walks.push_back([r = r, t = t](ForestSchedule& s) {
      s.rows_per_thread = r;
      s.tree_interleave = t;
    });
  switch (k) {
    case ForestKernel::Direct:
      return {values(&ForestSchedule::block_threads, {64, 128, 256, 512}), values(&ForestSchedule::tree_sync, {0, 8, 32}),
              walks, values(&ForestSchedule::cache_rows, {0, 1})};
    case ForestKernel::SharedData: {
      // Block size and walks per thread together: each sets the registers and occupancy the
      // other pays for, and one at a time stopped short (the 20-level random forest at 10,000
      // rows: 256 threads x 2 walks, 19% slower than 512 x 1).
      Knob block_walks;
      for (int threads : {64, 128, 256, 512})
        for (int w : {1, 2, 4})
          block_walks.push_back([threads, w](ForestSchedule& s) {
            s.block_threads = threads;
            s.tree_interleave = w;
          });
      return {values(&ForestSchedule::interleaved, {0, 1}), values(&ForestSchedule::tree_group, {1, 2, 4, 8, 16, 32, 64}),
              block_walks, values(&ForestSchedule::top_rows, {0, 1, 3, 7, 15})};
    }
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest:
      return {values(&ForestSchedule::block_threads, {64, 128, 256}), walks};
    case ForestKernel::Hybrid:
    case ForestKernel::Auto: break;  // not adaptive strategies: nothing to refine
  }
  return {};
}

// Auto's online tuning. A candidate is previewed after a choice call's kernel on the class's
// preview size, a sixteenth of its smallest batch (the predictor's warm-up has loaded every
// kernel instance); the choice's time at that size is measured once per choice. More than
// kPreviewReject times the choice there drops the candidate, and so does more than kRejectRatio
// times the choice's time at the call's own size: a larger batch cannot take less time. A preview
// is itself on the call's path (a thread-per-row strategy walks every tree, a fraction of a
// millisecond, whatever the rows), so what it showed is reused: a schedule slower on m rows than
// kRejectRatio times the choice at n >= m is dropped there without running (floor_above). At
// batches over kPreviewWholeAbove rows the preview runs it and the choice on all the call's rows
// instead (a strategy may win only at full size), its first sample. Then the candidate runs in
// place of the choice on calls that alternate with choice calls; each of its times over the
// choice's estimate at that batch size (from the choice's recent calls) is one sample,
// kTrialSamples in all; the step's best median replaces the choice when below kMoveRatio. A
// candidate stops early once it cannot win: a sample over kRejectRatio, two over kUnlikelyRatio
// (the other three would all have to be below kMoveRatio), or a majority at or over kMoveRatio
// (its median cannot get below it). A losing candidate's calls are the tail a serving process
// sees while a class is tuned.
constexpr int kTrialSamples = 5;
constexpr double kRejectRatio = 1.3;
constexpr double kUnlikelyRatio = 1.12;
constexpr double kPreviewReject = 2.0;
constexpr index_t kPreviewShare = 16;
constexpr index_t kPreviewWholeAbove = index_t{1} << 16;
// A strategy more than kHopeless times slower than the choice is hopeless on the far side of
// this class too (hopeless()).
constexpr double kHopeless = 3.0;
// The choice's recent calls kept per class, and how many a comparison needs.
constexpr std::size_t kBaseCalls = 16;
constexpr std::size_t kBaseMin = 3;
constexpr double kMoveRatio = 0.98;
constexpr int kSweeps = 3;
// A never-seen class with no tuned neighbour: shared data below this batch size, direct above
// (every model measured moved from the one to the other between 10^4 and 10^6 rows).
constexpr index_t kPriorDirectRows = index_t{1} << 18;

int size_class(index_t n_rows) { return canopy::size_class(static_cast<std::uint64_t>(std::max<index_t>(n_rows, 0))); }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The choice's kernel time at `rows`, from its recent calls (rows, ms): their median when they
// were all about this size, else a line through them (Theil-Sen: the median of the pairwise
// slopes, robust to the odd slow call), kept above a quarter of the median.
double estimate_at(const std::vector<std::pair<double, double>>& calls, double rows) {
  std::vector<double> ms, slopes;
  double lo = INFINITY, hi = 0;
  for (const auto& [n, t] : calls) {
    ms.push_back(t);
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  const double median = median_of(ms);
  if (hi <= lo * 1.05) return median;
  for (std::size_t i = 0; i < calls.size(); ++i)
    for (std::size_t j = i + 1; j < calls.size(); ++j)
      if (calls[i].first != calls[j].first)
        slopes.push_back((calls[j].second - calls[i].second) / (calls[j].first - calls[i].first));
  const double slope = median_of(slopes);
  std::vector<double> at;
  for (const auto& [n, t] : calls) at.push_back(t - slope * n);
  return std::max(median_of(at) + slope * rows, 0.25 * median);
}

}  // namespace

ForestTuner::ForestTuner(ForestEngine<AdaptiveForest>& engine, ForestChoiceFile file)
    : engine_(engine), file_(std::move(file)) {}

double ForestTuner::floor_above(const ForestChoice& c, int depth, index_t n_rows) const {
  double most = 0;
  for (const Previewed& p : previews_)
    if (p.depth == depth && p.rows <= n_rows && p.schedule.kernel == c.kernel && p.schedule.knobs == c.knobs)
      most = std::max(most, p.ms);
  return most;
}

bool ForestTuner::hopeless(ForestKernel k, int size_class, int depth) const {
  const auto it = lost_at_.find({depth, k});
  if (it == lost_at_.end()) return false;
  return k == ForestKernel::SharedData ? size_class >= it->second : size_class <= it->second;
}

ForestChoice ForestTuner::prior(const std::tuple<int, int, bool>& key, index_t n_rows, const ForestRunOptions& opt) const {
  const bool auto_knobs = std::get<2>(key);
  const int cls = std::get<0>(key), depth = std::get<1>(key);
  // The nearest tuned class of the same row depth (the larger on a tie): neighbours rank
  // schedules alike.
  const ForestChoice* best = nullptr;
  int best_gap = 0;
  auto consider = [&](int c, const ForestChoice& choice) {
    const int gap = 2 * std::abs(c - cls) - (c > cls ? 1 : 0);
    if (!best || gap < best_gap) {
      best = &choice;
      best_gap = gap;
    }
  };
  for (const auto& [k, st] : classes_)
    if (std::get<1>(k) == depth && std::get<2>(k) == auto_knobs && st.tuning == ForestTuning::Tuned)
      consider(std::get<0>(k), st.choice);
  if (auto_knobs)
    for (const auto& [k, choice] : stored_)
      if (k.second == depth) consider(k.first, choice);
  std::vector<ForestChoice> options;
  if (best) options.push_back(*best);
  const ForestKernel rule = n_rows < kPriorDirectRows ? ForestKernel::SharedData : ForestKernel::Direct;
  options.push_back({rule, ForestSchedule{}});
  options.push_back({ForestKernel::Direct, ForestSchedule{}});
  for (ForestChoice c : options) {
    if (!auto_knobs) c.knobs = opt.schedule;
    try {
      engine_.steps().resolve(c.kernel, c.knobs, std::max<index_t>(n_rows, 1));
      return c;
    } catch (const Error&) {
      // a strategy this forest or batch cannot take
    }
  }
  return {ForestKernel::Direct, auto_knobs ? ForestSchedule{} : opt.schedule};
}

ForestTuner::ClassState& ForestTuner::state(const std::tuple<int, int, bool>& key, index_t n_rows,
                                             const ForestRunOptions& opt) {
  if (!loaded_) {
    stored_ = file_.load();
    loaded_ = true;
  }
  const auto it = classes_.find(key);
  if (it != classes_.end()) return it->second;
  ClassState s;
  const auto stored = stored_.find({std::get<0>(key), std::get<1>(key)});
  bool from_file = false;
  if (std::get<2>(key) && stored != stored_.end()) {
    try {
      engine_.steps().resolve(stored->second.kernel, stored->second.knobs, std::max<index_t>(n_rows, 1));
      from_file = true;
    } catch (const Error&) {
      warn(file_.path() + ": the choice for batches of " + std::to_string(index_t{1} << std::get<0>(key)) +
           " rows does not fit this forest; tuning it again");
    }
  }
  if (from_file) {
    s.choice = stored->second;
    s.tuning = ForestTuning::Tuned;
    s.done = true;
  } else {
    s.choice = prior(key, n_rows, opt);
  }
  return classes_.emplace(key, std::move(s)).first->second;
}

bool ForestTuner::next_step(ClassState& s, index_t n_rows, const ForestRunOptions& opt) {
  const AdaptiveSteps& steps = engine_.steps();
  const bool auto_knobs = opt.schedule.is_default();
  const ForestSchedule current = steps.resolve(s.choice.kernel, s.choice.knobs, n_rows);
  for (;;) {
    s.candidates.clear();
    if (s.step == 0) {
      s.step = 1;
      const int cls = size_class(n_rows);
      // A prior from a neighbour class brings that class's knobs, which may suit this batch size
      // far worse than the strategy's defaults do (a 100-row class's rows per pass at 10,000
      // rows: 28% slower, and no single knob's move out of it was faster): the defaults first.
      if (auto_knobs && !s.choice.knobs.is_default()) s.candidates.push_back({s.choice.kernel, ForestSchedule{}});
      for (ForestKernel k : kForestModelStrategies)
        if (k != s.choice.kernel && !hopeless(k, cls, opt.row_schedule_depth))
          s.candidates.push_back({k, auto_knobs ? ForestSchedule{} : opt.schedule});
    } else {
      if (!auto_knobs) return false;  // the caller's knobs: only the strategy is Auto's
      const std::vector<Knob> axes = refine_knobs(s.choice.kernel);
      std::size_t axis = static_cast<std::size_t>(s.step - 1);  // step 1 was the strategies: axis 0 next
      if (axis >= axes.size()) {
        if (!s.moved || ++s.sweep >= kSweeps) return false;
        s.moved = false;
        axis = 0;
      }
      s.step = static_cast<int>(axis) + 2;
      for (const auto& set : axes[axis]) {
        ForestChoice c = s.choice;
        set(c.knobs);
        s.candidates.push_back(c);
      }
    }
    // Only candidates that run here and differ from the choice.
    std::vector<ForestChoice> kept;
    for (const ForestChoice& c : s.candidates) {
      try {
        const ForestSchedule r = steps.resolve(c.kernel, c.knobs, n_rows);
        if (c.kernel == ForestKernel::Direct && gpu::direct_tile_bytes(steps.view(), r) > steps.gpu().smem_optin) continue;
        if (c.kernel == s.choice.kernel && r == current) continue;
        kept.push_back(c);
      } catch (const Error&) {
        // a value this forest or batch cannot take
      }
    }
    s.candidates = std::move(kept);
    s.previewed.assign(s.candidates.size(), 0);
    s.ratios.assign(s.candidates.size(), {});
    s.seen.assign(s.candidates.size(), {});
    s.next = 0;
    if (!s.candidates.empty()) return true;
  }
}

void ForestTuner::finish(const std::tuple<int, int, bool>& key, ClassState& s) {
  s.done = true;
  s.tuning = ForestTuning::Tuned;
  s.candidates.clear();
  if (std::get<2>(key)) {
    stored_[{std::get<0>(key), std::get<1>(key)}] = s.choice;
    file_.save(stored_);
  }
}

ForestTuner::Plan ForestTuner::plan(index_t n_rows, const ForestRunOptions& opt) {
  Plan p;
  p.key = {size_class(n_rows), opt.row_schedule_depth, opt.schedule.is_default()};
  ClassState& s = state(p.key, n_rows, opt);
  auto run_choice = [&] {  // (again wherever a step just decided may have moved the choice)
    p.kernel = s.choice.kernel;
    p.knobs = s.choice.knobs;
    p.choice = s.choice;
  };
  run_choice();
  p.tuning = s.tuning;
  if (s.done || !opt.online_tuning || n_rows < 1) return p;
  p.graph = false;
  if (s.fresh) {  // a class's first call costs what its prior costs, nothing more
    s.fresh = false;
    return p;
  }
  // The next candidate still to time in this step, round robin; a new step when none is left.
  auto pending = [&](std::size_t i) { return static_cast<int>(s.ratios[i].size()) < kTrialSamples; };
  auto drop = [&](std::size_t i) { s.ratios[i].assign(kTrialSamples, INFINITY); };
  for (;;) {
    if (s.candidates.empty()) {
      bool more = false;
      try {
        more = next_step(s, n_rows, opt);
      } catch (const Error&) {
        more = false;  // the choice itself does not resolve for this batch: keep it untuned
      }
      if (!more) {
        finish(p.key, s);
        run_choice();
        p.tuning = ForestTuning::Tuned;
        p.graph = true;
        return p;
      }
    }
    std::size_t i = s.next;
    std::size_t tried = 0;
    while (tried < s.candidates.size() && !pending(i)) {
      i = (i + 1) % s.candidates.size();
      ++tried;
    }
    if (tried < s.candidates.size()) {
      const ForestChoice& c = s.candidates[i];
      std::pair<ForestKernel, ForestSchedule> cand;
      try {
        cand = {c.kernel, engine_.steps().resolve(c.kernel, c.knobs, n_rows)};
      } catch (const Error&) {
        drop(i);  // does not resolve for this batch
        continue;
      }
      p.candidate = i;
      p.step = s.step * 16 + s.sweep;
      run_choice();
      p.tuning = s.tuning;
      s.next = i;
      if (!s.previewed[i] && s.base.size() < kBaseMin) {  // the choice's times first: previews compare with them
        p.choice_sample = true;
        return p;
      }
      if (!s.previewed[i]) {  // the choice runs, the preview after it
        const double at_n = estimate_at(s.base, static_cast<double>(n_rows));
        if (floor_above(c, opt.row_schedule_depth, n_rows) > kRejectRatio * at_n) {
          drop(i);  // slower on fewer rows elsewhere than the choice here
          continue;
        }
        const bool whole = n_rows > kPreviewWholeAbove;
        const index_t m = whole ? n_rows : std::max<index_t>(1, (index_t{1} << std::get<0>(p.key)) / kPreviewShare);
        p.preview.runs = {cand};
        p.preview.rows = {m};
        if (whole || !(s.choice_preview_ms > 0)) {  // the choice on the same rows (it resolved when its step began)
          p.preview.runs.emplace_back(s.choice.kernel, engine_.steps().resolve(s.choice.kernel, s.choice.knobs, n_rows));
          p.preview.rows.push_back(m);
        }
        p.choice_sample = true;
        p.tuning = ForestTuning::Refining;
      } else if (s.base.size() < kBaseMin || !s.candidate_turn) {
        p.choice_sample = true;
        s.candidate_turn = true;
      } else {  // the candidate runs in the choice's place
        p.kernel = c.kernel;
        p.knobs = c.knobs;
        p.candidate_call = true;
        p.tuning = ForestTuning::Refining;
        s.candidate_turn = false;
        s.next = (i + 1) % s.candidates.size();
      }
      return p;
    }
    // Every candidate of the step is timed: the best median moves the choice, whose calls so
    // far become the choice's recent calls.
    std::size_t best = s.candidates.size();
    double best_ratio = kMoveRatio;
    for (std::size_t j = 0; j < s.candidates.size(); ++j) {
      if (s.ratios[j].empty()) continue;
      const double m = median_of(s.ratios[j]);
      if (m < best_ratio) {
        best_ratio = m;
        best = j;
      }
    }
    if (best < s.candidates.size()) {
      const bool strategy = s.step == 1;
      s.choice = s.candidates[best];
      s.base = s.seen[best];
      s.choice_preview_ms = 0;
      if (!strategy) s.moved = true;
    }
    s.candidates.clear();
  }
}

void ForestTuner::record(const Plan& p, index_t n_rows, double call_ms, const std::vector<double>& preview_ms) {
  const auto it = classes_.find(p.key);
  if (it == classes_.end()) return;
  ClassState& s = it->second;
  if (s.done || p.step != s.step * 16 + s.sweep || p.candidate >= s.candidates.size()) return;
  if (s.choice.kernel != p.choice.kernel || !(s.choice.knobs == p.choice.knobs)) return;
  const std::size_t i = p.candidate;
  const double rows = static_cast<double>(n_rows);
  auto drop = [&] { s.ratios[i].assign(kTrialSamples, INFINITY); };
  if (p.choice_sample && std::isfinite(call_ms) && call_ms > 0) {
    s.base.emplace_back(rows, call_ms);
    if (s.base.size() > kBaseCalls) s.base.erase(s.base.begin());
  }
  auto lost = [&](double ratio) {  // a strategy hopeless here is hopeless on the far side too
    const ForestKernel k = s.candidates[i].kernel;
    if (s.step != 1 || !(ratio > kHopeless)) return;
    const int cls = std::get<0>(p.key), depth = std::get<1>(p.key);
    const auto at = lost_at_.find({depth, k});
    if (at == lost_at_.end())
      lost_at_[{depth, k}] = cls;
    else
      at->second = k == ForestKernel::SharedData ? std::min(at->second, cls) : std::max(at->second, cls);
  };
  auto sample = [&](double ratio, double ms) {
    std::vector<double>& r = s.ratios[i];
    r.push_back(ratio);
    s.seen[i].emplace_back(rows, ms);
    if (ratio > kHopeless) lost(ratio);
    const auto over = [&](double x) { return std::count_if(r.begin(), r.end(), [x](double v) { return !(v < x); }); };
    if (ratio > kRejectRatio || over(kUnlikelyRatio) >= 2 || over(kMoveRatio) > kTrialSamples / 2) drop();
  };
  if (!p.preview.runs.empty()) {
    if (preview_ms.empty() || !std::isfinite(preview_ms[0])) return drop();  // it cannot run here
    s.previewed[i] = 1;
    previews_.push_back({s.candidates[i], std::get<1>(p.key), p.preview.rows[0], preview_ms[0]});
    const bool whole = p.preview.rows[0] >= n_rows;
    if (!whole && preview_ms.size() > 1 && std::isfinite(preview_ms[1]) && preview_ms[1] > 0)
      s.choice_preview_ms = preview_ms[1];
    const double mine = whole ? (preview_ms.size() > 1 ? preview_ms[1] : 0) : s.choice_preview_ms;
    if (!(std::isfinite(mine) && mine > 0)) return;
    const double ratio = preview_ms[0] / mine;
    if (!whole) {
      // More rows never take less time: slower on m rows than the choice on the call's n
      // (its estimate, else this call's kernel) is slower at n too, the hopeless rule's
      // evidence as well. Else the heuristic: far slower than the choice on the same m rows.
      const double at_n = s.base.size() >= kBaseMin ? estimate_at(s.base, rows) : call_ms;
      if (std::isfinite(at_n) && at_n > 0 && preview_ms[0] > kRejectRatio * at_n) {
        lost(preview_ms[0] / at_n);
        return drop();
      }
      if (ratio > kPreviewReject) drop();
      return;
    }
    return sample(ratio, preview_ms[0]);
  }
  if (!p.candidate_call) return;
  if (!std::isfinite(call_ms)) return drop();
  if (s.base.size() < kBaseMin || !(call_ms > 0)) return;
  sample(call_ms / estimate_at(s.base, rows), call_ms);
}

bool ForestTuner::settled(index_t n_rows, const ForestRunOptions& opt) const {
  const auto it = classes_.find({size_class(n_rows), opt.row_schedule_depth, opt.schedule.is_default()});
  return it != classes_.end() && it->second.done;
}

}  // namespace detail
}  // namespace canopy
