// Auto's plan for each call over the adaptive engine (ForestTuner::plan / record): the prior of
// a never-seen size class, online tuning on the calls' own batches, the choices kept on disk.
#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <utility>

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
    default:
      return {values(&ForestSchedule::block_threads, {64, 128, 256}), walks};
  }
}

// Auto's online tuning. A candidate's first trial call warms it up (its kernel may load
// lazily), the next kTrialSamples are paired with the choice: both run after the call's kernel
// on its rows, in alternating order, and the candidate's time over the choice's is one sample.
// A candidate whose samples all exceed kRejectRatio is dropped early; the step's best median
// replaces the choice when below kMoveRatio.
constexpr int kTrialSamples = 3;
constexpr double kRejectRatio = 1.5;
// A strategy whose warm-up alone took more than kHopeless times the call's kernel (plus what
// loading a kernel may cost the first time) is dropped at once: at a batch size where it
// cannot win, one run of it can cost ten times the call.
constexpr double kHopeless = 3.0;
constexpr double kLoadAllowanceMs = 0.25;
constexpr double kMoveRatio = 0.98;
constexpr int kSweeps = 3;
// A never-seen class with no tuned neighbour: shared data below this batch size, direct above
// (every model measured moved from the one to the other between 10^4 and 10^6 rows).
constexpr index_t kPriorDirectRows = index_t{1} << 18;

int size_class(index_t n_rows) {
  int c = 0;
  while ((index_t{2} << c) <= n_rows) ++c;
  return c;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

ForestTuner::ForestTuner(ForestEngine<AdaptiveForest>& engine, ForestChoiceFile file)
    : engine_(engine), file_(std::move(file)) {}

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
      for (ForestKernel k : kAdaptiveStrategies)
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
    s.runs.assign(s.candidates.size(), 0);
    s.ratios.assign(s.candidates.size(), {});
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
  p.kernel = s.choice.kernel;
  p.knobs = s.choice.knobs;
  p.tuning = s.tuning;
  if (s.done || !opt.online_tuning || n_rows < 1) return p;
  if (s.fresh) {  // a class's first call costs what its prior costs, nothing more
    s.fresh = false;
    return p;
  }
  // The next candidate still to time in this step, round robin; a new step when none is left.
  auto pending = [&](std::size_t i) {
    const std::vector<double>& r = s.ratios[i];
    return s.runs[i] <= kTrialSamples && (r.empty() || *std::min_element(r.begin(), r.end()) <= kRejectRatio);
  };
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
        p.kernel = s.choice.kernel;  // (the step just decided may have moved it)
        p.knobs = s.choice.knobs;
        p.tuning = ForestTuning::Tuned;
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
      s.next = (i + 1) % s.candidates.size();
      const AdaptiveSteps& steps = engine_.steps();
      const ForestChoice& c = s.candidates[i];
      try {
        const std::pair<ForestKernel, ForestSchedule> cand{c.kernel, steps.resolve(c.kernel, c.knobs, n_rows)};
        const std::pair<ForestKernel, ForestSchedule> mine{s.choice.kernel,
                                                            steps.resolve(s.choice.kernel, s.choice.knobs, n_rows)};
        if (s.runs[i] == 0) {
          p.trials = {cand};  // the warm-up: the candidate alone
          p.candidate_at = 0;
        } else if (s.runs[i] % 2) {
          p.trials = {cand, mine};
          p.candidate_at = 0;
        } else {
          p.trials = {mine, cand};
          p.candidate_at = 1;
        }
      } catch (const Error&) {
        s.runs[i] = kTrialSamples + 1;  // does not resolve for this batch: dropped
        s.ratios[i].assign(1, INFINITY);
        continue;
      }
      p.kernel = s.choice.kernel;
      p.knobs = s.choice.knobs;
      p.candidate = i;
      p.step = s.step * 16 + s.sweep;
      p.tuning = ForestTuning::Refining;
      return p;
    }
    // Every candidate of the step is timed: the best median moves the choice.
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
      if (!strategy) s.moved = true;
    }
    s.candidates.clear();
  }
}

void ForestTuner::record(const Plan& p, double call_ms, const std::vector<double>& trial_ms) {
  if (p.candidate_at < 0) return;
  const auto it = classes_.find(p.key);
  if (it == classes_.end()) return;
  ClassState& s = it->second;
  if (s.done || p.step != s.step * 16 + s.sweep || p.candidate >= s.candidates.size()) return;
  const std::size_t i = p.candidate;
  const double cand = trial_ms.at(static_cast<std::size_t>(p.candidate_at));
  ++s.runs[i];
  auto drop = [&] {
    s.runs[i] = kTrialSamples + 1;
    s.ratios[i].assign(1, INFINITY);
  };
  if (!std::isfinite(cand)) return drop();  // it cannot run here
  const bool strategy = s.step == 1;
  const ForestKernel k = s.candidates[i].kernel;
  const int cls = std::get<0>(p.key), depth = std::get<1>(p.key);
  auto lost = [&] {  // a strategy hopeless here is hopeless on the far side too
    if (!strategy) return;
    const auto at = lost_at_.find({depth, k});
    if (at == lost_at_.end())
      lost_at_[{depth, k}] = cls;
    else
      at->second = k == ForestKernel::SharedData ? std::min(at->second, cls) : std::max(at->second, cls);
  };
  if (p.trials.size() < 2) {  // the warm-up
    if (strategy && call_ms > 0 && cand > kHopeless * call_ms + kLoadAllowanceMs) {
      lost();
      drop();
    }
    return;
  }
  const double mine = trial_ms.at(static_cast<std::size_t>(1 - p.candidate_at));
  if (!(std::isfinite(mine) && mine > 0)) return;
  s.ratios[i].push_back(cand / mine);
  if (cand / mine > kHopeless) lost();
}

bool ForestTuner::settled(index_t n_rows, const ForestRunOptions& opt) const {
  const auto it = classes_.find({size_class(n_rows), opt.row_schedule_depth, opt.schedule.is_default()});
  return it != classes_.end() && it->second.done;
}

}  // namespace detail
}  // namespace canopy
