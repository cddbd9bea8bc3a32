// Tahoe's performance model over the adaptive engine (its inputs: the hardware parameters, the
// access profile, the calibration, each strategy's shape) and the tuner.
#include "runtime/detail/forest_tuner.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "core/warnings.hpp"
#include "runtime/detail/forest_engine.cuh"
#include "scheduler/forest_model_gpu.hpp"

namespace canopy {
namespace detail {

namespace {

// Calibration batches: one full wave of the direct strategy's blocks, and a small batch whose
// time is its critical path and launches.
constexpr index_t kCalibrationRows = 262144;
constexpr index_t kCalibrationSmallRows = 1024;

// One schedule to time: its strategy and parameters (resolved).
using Candidate = std::pair<ForestKernel, ForestSchedule>;

// The median kernel milliseconds of each candidate over `rounds` runs on batch b (CUDA events),
// after one warm-up run each. The runs are interleaved round by round, so a clock or a
// neighbour that drifts during the measurement touches every candidate alike, and the median
// drops the odd slow run: one noisy run no longer decides a choice. A candidate this forest
// cannot take (an Error on its warm-up) gets +inf.
std::vector<double> median_ms_interleaved(ForestEngine<AdaptiveForest>& e, const gpu::AdaptiveBatch& b,
                                          const std::vector<Candidate>& candidates, int rounds) {
  const std::size_t n = candidates.size();
  std::vector<double> out(n, INFINITY);
  std::vector<bool> runs(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    try {
      e.steps().run(b, candidates[i].first, candidates[i].second);
      runs[i] = true;
    } catch (const Error&) {
      // a schedule this forest cannot take (shared memory, block size)
    }
  }
  Event start, stop;
  std::vector<std::vector<float>> ms(n);
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      if (!runs[i]) continue;
      start.record(e.stream());
      e.steps().run(b, candidates[i].first, candidates[i].second);
      stop.record(e.stream());
      ms[i].push_back(stop.since(start));
    }
  for (std::size_t i = 0; i < n; ++i) {
    if (ms[i].empty()) continue;
    std::sort(ms[i].begin(), ms[i].end());
    out[i] = ms[i][ms[i].size() / 2];
  }
  return out;
}

// Calibration runs per strategy and batch.
constexpr int kCalibrationRounds = 5;

// The tuner's grid: the schedules around the defaults of the model's two best strategies, and
// every other feasible strategy at its defaults (so the tuned best is never worse than auto's
// pick).
std::vector<std::pair<ForestKernel, ForestSchedule>> tuning_grid(const std::vector<ForestTrial>& model, bool wide,
                                                                 std::size_t smem_optin) {
  std::vector<std::pair<ForestKernel, ForestSchedule>> grid;
  std::vector<ForestKernel> chosen;  // the model's two best feasible strategies
  for (const ForestTrial& t : model)
    if (std::isfinite(t.model_ns_per_row) && chosen.size() < 2) chosen.push_back(t.kernel);
  const std::vector<std::pair<int, int>> walks =
      wide ? std::vector<std::pair<int, int>>{{1, 1}}
           : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 1}};
  for (const ForestTrial& t : model) {
    if (!std::isfinite(t.model_ns_per_row)) continue;
    if (std::find(chosen.begin(), chosen.end(), t.kernel) == chosen.end()) {
      grid.emplace_back(t.kernel, ForestSchedule{});
      continue;
    }
    if (t.kernel == ForestKernel::SharedData) {
      // Rows per pass and threads per block (0: the defaults), then fewer walks at once.
      for (int block : {0, 128, 512})
        for (int g : {0, 1, 4, 16}) {
          ForestSchedule s;
          s.block_threads = block;
          s.tree_group = g;
          grid.emplace_back(t.kernel, s);
        }
      for (int walk : {1, 4}) {
        ForestSchedule s;
        s.tree_interleave = walk;
        grid.emplace_back(t.kernel, s);
      }
      // The other node order, and the interleaved copy with nothing staged.
      for (int inter : {0, 1}) {
        ForestSchedule s;
        s.interleaved = inter;
        grid.emplace_back(t.kernel, s);
        s.top_rows = 0;
        if (inter) grid.emplace_back(t.kernel, s);
      }
      continue;
    }
    for (int block : {64, 128, 256}) {
      ForestSchedule s;
      s.block_threads = block;
      for (const auto& w : walks) {
        s.rows_per_thread = w.first;
        s.tree_interleave = w.second;
        if (t.kernel == ForestKernel::Direct) {
          for (int cache : {0, 1})
            for (int sync : {0, 8, 32}) {
              s.cache_rows = cache;
              s.tree_sync = sync;
              grid.emplace_back(t.kernel, s);
            }
        } else if (t.kernel == ForestKernel::SplitSharedForest) {
          for (int part : {static_cast<int>(smem_optin / 1024), static_cast<int>(smem_optin / 2048),
                           static_cast<int>(smem_optin / 4096)}) {
            s.part_kib = part;
            grid.emplace_back(t.kernel, s);
          }
        } else {
          grid.emplace_back(t.kernel, s);
        }
      }
    }
  }
  return grid;
}

}  // namespace

const ForestHardware& ForestTuner::hardware(const std::string& cache) {
  const std::string path = cache.empty() ? default_forest_hardware_cache() : cache;
  if (hardware_ && path == hardware_path_) return *hardware_;
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  hardware_ = std::make_unique<ForestHardware>(cached_forest_hardware(dev, path));
  hardware_path_ = path;
  return *hardware_;
}

void ForestTuner::learn_from_first_batch(const float* rows, index_t n_rows, stream_t caller) {
  const CallerStream bracket = engine_.on_caller_stream(caller);
  // The warp emulator and the calibration batches read the rows on the host: device rows are
  // copied here, once.
  std::vector<float> host_rows;
  if (is_device_pointer(rows)) {
    host_rows.resize(static_cast<std::size_t>(n_rows) * engine_.view().common.n_features);
    copy_async(host_rows.data(), rows, host_rows.size() * sizeof(float), engine_.stream());
    engine_.sync();
    rows = host_rows.data();
  }
  if (!profile_)
    profile_ = std::make_unique<ForestAccessProfile>(forest_access_profile(engine_.steps().host().view(), rows, n_rows));
  if (calibrated_.empty()) calibrate(rows, n_rows);
}

void ForestTuner::calibrate(const float* rows, index_t n_rows) {
  AdaptiveSteps& steps = engine_.steps();
  const int F = steps.view().common.n_features;
  std::vector<float> batch(static_cast<std::size_t>(kCalibrationRows) * F);
  for (index_t i = 0; i < kCalibrationRows; ++i)
    std::copy(rows + (i % n_rows) * F, rows + (i % n_rows + 1) * F, batch.begin() + i * F);
  const cudaStream_t stream = engine_.stream();
  DeviceBuffer<float> d_rows, d_out;  // once per tuner: not in predict's steady state
  d_rows.reserve(batch.size(), "the calibration rows", stream);
  const int width = std::max(sums_outputs(steps.view().common), 1);
  d_out.reserve(static_cast<std::size_t>(kCalibrationRows) * width, "the calibration predictions", stream);
  copy_async(d_rows.get(), batch.data(), batch.size() * sizeof(float), stream);
  gpu::AdaptiveBatch b;
  b.rows = d_rows.get();
  b.out = d_out.get();
  b.width = width;
  b.output = ForestOutput::Margin;
  // Both batch sizes, every strategy at its defaults, interleaved (median_ms_interleaved).
  auto time_all = [&](index_t n) {
    b.n_rows = n;
    std::vector<Candidate> c;
    std::vector<std::size_t> at;  // c[j] is strategy at[j]
    for (std::size_t i = 0; i < std::size(kForestModelStrategies); ++i) {
      try {
        c.emplace_back(kForestModelStrategies[i], steps.resolve(kForestModelStrategies[i], ForestSchedule{}, n));
        at.push_back(i);
      } catch (const Error&) {
        // a strategy this forest cannot take
      }
    }
    const std::vector<double> ms = median_ms_interleaved(engine_, b, c, kCalibrationRounds);
    std::vector<double> out(std::size(kForestModelStrategies), INFINITY);
    for (std::size_t j = 0; j < c.size(); ++j) out[at[j]] = ms[j];
    return out;
  };
  const std::vector<double> full = time_all(kCalibrationRows), small = time_all(kCalibrationSmallRows);
  calibrated_.clear();
  for (std::size_t i = 0; i < std::size(kForestModelStrategies); ++i) {
    Calibration c{kForestModelStrategies[i], 0, 0};
    if (std::isfinite(full[i]) && std::isfinite(small[i])) {  // else a strategy this forest cannot take
      c.row_ns = full[i] * 1e6 / static_cast<double>(kCalibrationRows);
      c.small_ns = small[i] * 1e6;
    }
    calibrated_.push_back(c);
  }
  engine_.sync();
}

ForestShape ForestTuner::shape(ForestKernel k, index_t n_rows) const {
  const AdaptiveSteps& steps = engine_.steps();
  const ForestSchedule s = steps.resolve(k, ForestSchedule{}, n_rows);
  const AdaptiveForestView& v = steps.view();
  const ForestCommonView& c = v.common;
  const index_t T = c.n_trees;
  const std::vector<std::int32_t>& depth = steps.host().depth;
  const std::vector<index_t>& tree_begin = steps.host().tree_begin;
  auto chain = [&](index_t t0, index_t t1, int walk) {  // the fixed-trip steps of trees [t0, t1), walk at a time
    double total = 0;
    for (index_t t = t0; t < t1; t += walk) {
      int most = 0;
      for (index_t q = t; q < std::min<index_t>(t + walk, t1); ++q) most = std::max(most, depth[static_cast<std::size_t>(q)]);
      total += most;
    }
    return total;
  };
  const double sms = steps.gpu().sm_count;
  ForestShape sh;
  sh.strategy = k;
  switch (k) {
    case ForestKernel::Direct: {
      sh.coalescing = profile_->coalescing_direct;
      sh.rows_in_smem = s.cache_rows == 1;
      const double blocks = std::ceil(static_cast<double>(n_rows) / (s.block_threads * s.rows_per_thread));
      double per_sm = std::min(32.0, 2048.0 / s.block_threads);
      const std::size_t tile = gpu::direct_tile_bytes(v, s);
      if (tile > 0) per_sm = std::min(per_sm, std::floor(228.0 * 1024 / static_cast<double>(tile + 1024)));
      sh.waves = std::ceil(blocks / (sms * per_sm));
      sh.chain_steps = chain(0, T, s.tree_interleave);
      break;
    }
    case ForestKernel::SharedData: {
      sh.coalescing = profile_->coalescing_shared_data;
      sh.rows_in_smem = true;
      const double blocks = std::ceil(static_cast<double>(n_rows) / s.rows_per_block);
      const std::size_t smem = gpu::shared_data_bytes(v, s, sums_outputs(c), carry_size(c),
                                                      gpu::shared_data_leaf_words(v, steps.gpu().smem_optin));
      const double per_sm = std::max(1.0, std::min(2048.0 / s.block_threads, std::floor(228.0 * 1024 / static_cast<double>(smem + 1024))));
      sh.waves = std::ceil(blocks / (sms * per_sm));
      const double passes = std::ceil(static_cast<double>(s.rows_per_block) / s.tree_group);
      int most = 0;
      for (int d : depth) most = std::max(most, d);
      // A pass: rounds of tree_interleave walks per thread, each as long as the deepest tree.
      const double rounds = std::ceil(static_cast<double>(s.tree_group) * T / (static_cast<double>(s.block_threads) * s.tree_interleave));
      sh.chain_steps = passes * rounds * most;
      break;
    }
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest: {
      sh.smem_conflict = profile_->smem_conflict;
      sh.rows_in_smem = true;
      const std::vector<std::pair<index_t, index_t>> ranges = steps.parts(steps.part_budget(k, s));
      sh.launches = static_cast<double>(ranges.size());
      const double tiles = std::ceil(static_cast<double>(n_rows) / (s.block_threads * s.rows_per_thread));
      for (const auto& r : ranges) {
        const double bytes = static_cast<double>(tree_begin[r.second] - tree_begin[r.first]) * sizeof(ForestNode) +
                             static_cast<double>(gpu::forest_tile_bytes(v, s));
        const double per_sm = std::max(1.0, std::min(2048.0 / s.block_threads, std::floor(228.0 * 1024 / (bytes + 1024))));
        const double blocks = std::min(tiles, sms * per_sm);
        sh.chain_steps += std::ceil(tiles / blocks) * chain(r.first, r.second, s.tree_interleave);
        sh.load_steps += bytes / (8.0 * s.block_threads);
      }
      break;
    }
    case ForestKernel::Hybrid:
    case ForestKernel::Auto:  // (resolve() above has refused them already)
      throw Error(std::string("the performance model has no shape for the ") + to_string(k) + " kernel");
  }
  return sh;
}

std::vector<ForestTrial> ForestTuner::estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt) {
  const ForestHardware& hw = hardware(opt.hardware_cache);
  if (!profile_ || calibrated_.empty()) learn_from_first_batch(rows, n_rows, opt.stream);
  const AdaptiveSteps& steps = engine_.steps();
  const ForestCommonView& c = steps.view().common;
  const std::size_t smem_optin = steps.gpu().smem_optin;
  const index_t nodes = steps.host().tree_begin.back();
  ForestCostInputs in;
  in.n_batch = static_cast<double>(std::max<index_t>(n_rows, 1));
  in.sample_bytes = 4.0 * c.n_features;
  in.n_trees = static_cast<double>(c.n_trees);
  in.avg_depth = steps.mean_visits();
  in.node_bytes = sizeof(ForestNode);
  in.attr_bytes = 4;
  in.nodes_per_tree = static_cast<double>(nodes) / static_cast<double>(c.n_trees);
  in.forest_bytes = static_cast<double>(nodes) * sizeof(ForestNode);
  in.smem_bytes = static_cast<double>(smem_optin);
  const ForestSchedule data = steps.resolve(ForestKernel::SharedData, ForestSchedule{}, std::max<index_t>(n_rows, 1));
  in.threads_per_block = data.block_threads;
  in.parts = std::ceil(in.forest_bytes / static_cast<double>(smem_optin));
  in.blocks = in.parts;  // equation 3: the partial sums per row the cross-part reduction adds
  std::vector<ForestShape> shapes;
  for (ForestKernel k : kForestModelStrategies) {
    try {
      shapes.push_back(shape(k, std::max<index_t>(n_rows, 1)));
      for (const Calibration& cal : calibrated_)
        if (cal.kernel == k) {
          shapes.back().calibrated_row_ns = cal.row_ns;
          shapes.back().calibrated_small_ns = cal.small_ns;
        }
    } catch (const Error&) {
      // a strategy this forest cannot take (the forest too large for shared memory)
    }
  }
  const std::vector<ForestBatchEstimate> est = estimate_forest_batch(in, shapes, hw);
  const std::vector<ForestCostEstimate> paper = estimate_forest_costs(in, hw);
  std::vector<ForestTrial> out;
  for (const ForestBatchEstimate& e : est) {
    ForestTrial t;
    t.kernel = e.strategy;
    t.model_ns_per_row = e.feasible ? e.batch_ns / in.n_batch : INFINITY;
    for (const ForestCostEstimate& p : paper)
      if (p.strategy == e.strategy) t.paper_ns_per_row = p.feasible ? p.ns_per_row : INFINITY;
    out.push_back(t);
  }
  for (const ForestCostEstimate& p : paper) {  // strategies with no shape: infeasible here
    bool listed = false;
    for (const ForestTrial& t : out) listed |= t.kernel == p.strategy;
    if (listed) continue;
    ForestTrial t;
    t.kernel = p.strategy;
    t.model_ns_per_row = INFINITY;
    t.paper_ns_per_row = p.feasible ? p.ns_per_row : INFINITY;
    out.push_back(t);
  }
  return out;
}

gpu::AdaptiveBatch ForestTuner::device_batch(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt) {
  gpu::AdaptiveBatch b;
  b.rows = engine_.device_rows(rows, n_rows);
  b.n_rows = n_rows;
  b.out = engine_.out_buffer(static_cast<std::size_t>(n_rows) * width);
  b.width = width;
  b.output = opt.output;
  if (opt.row_schedule_depth > 0) engine_.steps().schedule_rows(opt.row_schedule_depth, &b);
  return b;
}

std::vector<ForestTrial> ForestTuner::tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt,
                                           int repeat) {
  if (n_rows < 1) throw Error("tune: the batch has no rows");
  if (repeat < 1) throw Error("tune: repeat = " + std::to_string(repeat) + " must be >= 1");
  const std::vector<ForestTrial> model = estimates(rows, n_rows, opt);
  AdaptiveSteps& steps = engine_.steps();
  const CallerStream caller = engine_.on_caller_stream(opt.stream);
  const gpu::AdaptiveBatch b = device_batch(rows, n_rows, width, opt);
  std::vector<ForestTrial> out;
  std::vector<Candidate> candidates;
  for (const auto& g : tuning_grid(model, wide_sums(steps.view().common), steps.gpu().smem_optin)) {
    ForestTrial trial;
    trial.kernel = g.first;
    for (const ForestTrial& t : model)
      if (t.kernel == g.first) trial.model_ns_per_row = t.model_ns_per_row;
    try {
      trial.schedule = steps.resolve(g.first, g.second, n_rows);
    } catch (const Error&) {
      continue;  // a schedule this forest cannot take (shared memory, block size)
    }
    if (trial.kernel == ForestKernel::Direct && gpu::direct_tile_bytes(steps.view(), trial.schedule) > steps.gpu().smem_optin)
      continue;
    out.push_back(trial);
    candidates.emplace_back(trial.kernel, trial.schedule);
  }
  const std::vector<double> ms = median_ms_interleaved(engine_, b, candidates, repeat);
  engine_.sync();
  for (std::size_t i = 0; i < out.size(); ++i) out[i].kernel_ms = ms[i];
  out.erase(std::remove_if(out.begin(), out.end(), [](const ForestTrial& t) { return !std::isfinite(t.kernel_ms); }),
            out.end());
  std::stable_sort(out.begin(), out.end(), [](const ForestTrial& a, const ForestTrial& b) { return a.kernel_ms < b.kernel_ms; });
  return out;
}

}  // namespace detail
}  // namespace canopy
