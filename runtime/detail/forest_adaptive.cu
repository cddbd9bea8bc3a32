// The adaptive layout's own steps (schedule defaults, forest parts, the four strategies, row
// scheduling: the inspector and a sort), and its engine as ForestPredictor sees it: the engine
// and the tuner (runtime/detail/forest_tuner.hpp), which resolves the Auto strategy.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <string>

#include "inspector/forest_rows.hpp"
#include "runtime/detail/forest_engine.cuh"
#include "runtime/detail/forest_tuner.hpp"
#include "scheduler/forest_model_gpu.hpp"
#include "scheduler/forest_rows.hpp"

namespace canopy {
namespace detail {

namespace {

void check_block(int threads, const char* strategy) {
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    throw Error(std::string(strategy) + ": block_threads = " + std::to_string(threads) +
                " must be a multiple of 32 from 32 to 1024");
}

// Halves the block (down to one warp) until there are two blocks per SM.
void shrink_for_small_batches(ForestSchedule& s, index_t n_rows, int sm_count) {
  const index_t rows_per_thread = s.rows_per_thread;
  while (s.block_threads > 32 &&
         (n_rows + static_cast<index_t>(s.block_threads) * rows_per_thread - 1) /
                 (static_cast<index_t>(s.block_threads) * rows_per_thread) <
             2 * static_cast<index_t>(sm_count))
    s.block_threads /= 2;
}

// The direct strategy's defaults; `walks` rows and trees a thread takes together.
void resolve_direct(ForestSchedule& s, const AdaptiveForestView& v, int walks, index_t n_rows, int sm_count) {
  if (s.rows_per_thread == 0) s.rows_per_thread = walks;  // two rows where two trees also fit
  if (s.tree_interleave == 0) s.tree_interleave = walks;
  if (s.block_threads == 0) {
    // 256 threads while their staged rows take at most 32 KiB, else 128: the tuner's picks
    // at a million rows (benchmarks/RESULTS.md).
    ForestSchedule wide = s;
    wide.block_threads = 256;
    wide.cache_rows = 1;
    s.block_threads = gpu::direct_tile_bytes(v, wide) <= 32 * 1024 ? 256 : 128;
    shrink_for_small_batches(s, n_rows, sm_count);
  }
  if (s.tree_sync < 0) s.tree_sync = 0;
  if (s.tree_sync % s.tree_interleave != 0)
    throw Error("direct strategy: tree_sync = " + std::to_string(s.tree_sync) + " must be a multiple of tree_interleave " +
                std::to_string(s.tree_interleave));
  if (s.cache_rows < 0) {
    // Staged rows cost one conflict-free shared-memory read per feature instead of a
    // scattered global one; stage them when the tile leaves room for several blocks per SM.
    ForestSchedule staged = s;
    staged.cache_rows = 1;
    s.cache_rows = gpu::direct_tile_bytes(v, staged) <= 48 * 1024 ? 1 : 0;
  }
  check_block(s.block_threads, "direct strategy");
}

// The (splitting) shared-forest strategies' defaults; forest_bytes: all the nodes.
void resolve_shared_forest(ForestSchedule& s, ForestKernel k, const AdaptiveForestView& v, int walks, index_t n_rows,
                           const GpuLimits& gpu, std::size_t forest_bytes) {
  if (s.rows_per_thread == 0) s.rows_per_thread = 1;
  if (s.tree_interleave == 0) s.tree_interleave = walks;
  if (s.block_threads == 0) {
    // At least 128 threads: each block stages its part in shared memory, too slow for fewer.
    s.block_threads = 256;
    shrink_for_small_batches(s, n_rows, gpu.sm_count);
    s.block_threads = std::max(s.block_threads, 128);
  }
  // Half the shared memory: two blocks per SM hide more latency than one with a larger part.
  if (s.part_kib == 0) s.part_kib = static_cast<int>(gpu.smem_optin / 2048);
  if (static_cast<std::size_t>(s.part_kib) * 1024 > gpu.smem_optin)
    throw Error("part_kib = " + std::to_string(s.part_kib) + " exceeds the " + std::to_string(gpu.smem_optin / 1024) +
                " KiB of shared memory a block may use on this GPU");
  check_block(s.block_threads, "shared-forest strategy");
  if (k == ForestKernel::SharedForest && forest_bytes + gpu::forest_tile_bytes(v, s) > gpu.smem_optin)
    throw Error("shared-forest strategy: the forest takes " + std::to_string(forest_bytes) + " bytes, and with the rows " +
                "more than the " + std::to_string(gpu.smem_optin) +
                " bytes of shared memory a block may use (use split-shared-forest)");
}

void resolve_shared_data(ForestSchedule& s, const AdaptiveForestView& v, index_t n_rows, const GpuLimits& gpu) {
  const index_t T = v.common.n_trees;
  const index_t sm_count = gpu.sm_count;
  if (s.tree_interleave == 0) s.tree_interleave = 2;
  if (s.tree_interleave != 1 && s.tree_interleave != 2 && s.tree_interleave != 4)
    throw Error("shared-data strategy: tree_interleave = " + std::to_string(s.tree_interleave) + " must be 1, 2 or 4");
  const std::size_t leaf_row = static_cast<std::size_t>(T) * gpu::shared_data_leaf_words(v, gpu.smem_optin) * 4;
  if (s.tree_group == 0) {
    // Rows per pass: enough blocks for four per SM before passes grow, and the pass's leaves
    // in at most 32 KiB, so that several blocks share an SM.
    index_t rows = (n_rows + 4 * sm_count - 1) / (4 * sm_count);
    rows = std::min<index_t>(rows, gpu::kAdaptiveMaxGroup);
    rows = std::min<index_t>(rows, static_cast<index_t>(32 * 1024 / leaf_row));
    s.tree_group = static_cast<int>(std::max<index_t>(rows, 1));
  }
  if (s.tree_group < 1 || s.tree_group > gpu::kAdaptiveMaxGroup)
    throw Error("shared-data strategy: tree_group = " + std::to_string(s.tree_group) + " must be 1 to " +
                std::to_string(gpu::kAdaptiveMaxGroup));
  // One pass per block: more blocks, and one block's in-order sums overlap another's walks.
  if (s.rows_per_block == 0) s.rows_per_block = s.tree_group;
  if (s.rows_per_block < 1) throw Error("shared-data strategy: rows_per_block must be >= 1");
  // One row per pass: a warp's threads walk neighbouring slots, whose roots are neighbours in
  // the interleaved copy (and its top rows, staged, save the first levels' latency). More rows:
  // a warp walks few trees for many rows, and the tree-major nodes put siblings in one sector.
  if (s.interleaved < 0) s.interleaved = s.tree_group == 1 ? 1 : 0;
  if (s.interleaved != 0 && s.interleaved != 1)
    throw Error("shared-data strategy: interleaved = " + std::to_string(s.interleaved) + " must be 0 or 1");
  if (s.block_threads == 0) {
    // About one round of walks per thread, from two warps to sixteen; eight for sums of more
    // than 8 outputs, whose registers leave no room for more (H100: 176 per thread, 256 threads).
    const index_t walks = static_cast<index_t>(s.tree_group) * T;
    const index_t threads = (walks + s.tree_interleave - 1) / s.tree_interleave;
    const index_t most = wide_sums(v.common) ? 256 : 512;
    s.block_threads = static_cast<int>(std::min<index_t>(most, std::max<index_t>(64, (threads + 31) / 32 * 32)));
  }
  check_block(s.block_threads, "shared-data strategy");
  if (s.top_rows < 0) {
    s.top_rows = 0;
    // The most complete top levels (2^L - 1 rows) in 32 KiB that the block stages with at most
    // eight 16-byte loads per thread: more would cost more than the levels it saves.
    const std::size_t budget = std::min<std::size_t>(32 * 1024, static_cast<std::size_t>(s.block_threads) * 8 * 16);
    if (s.interleaved)
      while ((2 * static_cast<index_t>(s.top_rows) + 1) <= v.max_nodes &&
             (2 * static_cast<std::size_t>(s.top_rows) + 1) * T * sizeof(ForestNode) <= budget)
        s.top_rows = 2 * s.top_rows + 1;
  }
  if (s.top_rows > 0 && !s.interleaved) throw Error("shared-data strategy: top_rows needs the interleaved copy (interleaved = 1)");
  if (s.top_rows > v.max_nodes)
    throw Error("shared-data strategy: top_rows = " + std::to_string(s.top_rows) + " exceeds the " +
                std::to_string(v.max_nodes) + " node rows of the interleaved copy");
}

}  // namespace

AdaptiveSteps::AdaptiveSteps(const AdaptiveForest& host, const AdaptiveForestView& device, const GpuLimits& gpu,
                             cudaStream_t stream)
    : host_(&host), view_(device), gpu_(gpu), stream_(stream) {
  double visits = 0;
  for (double e : host.expected_visits) visits += e;
  mean_visits_ = host.expected_visits.empty() ? 0 : visits / static_cast<double>(host.expected_visits.size());
  for (int d : host.depth) max_depth_ = std::max(max_depth_, d);
}

ForestSchedule AdaptiveSteps::resolve(ForestKernel k, const ForestSchedule& in, index_t n_rows) const {
  ForestSchedule s = in;
  // Trees walked together take as many steps as the deepest of them: interleave only when the
  // walks are nearly as long as the trees are deep (and the sums leave the registers).
  const int walks = wide_sums(view_.common) || mean_visits_ < 0.85 * (max_depth_ + 1) ? 1 : 2;
  switch (k) {
    case ForestKernel::Direct: resolve_direct(s, view_, walks, n_rows, gpu_.sm_count); break;
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest:
      resolve_shared_forest(s, k, view_, walks, n_rows, gpu_,
                            static_cast<std::size_t>(host_->tree_begin.back()) * sizeof(ForestNode));
      break;
    case ForestKernel::SharedData: resolve_shared_data(s, view_, n_rows, gpu_); break;
    case ForestKernel::Hybrid:
    case ForestKernel::Auto: throw Error(std::string("the ") + to_string(k) + " kernel does not run on the adaptive layout");
  }
  return s;
}

std::size_t AdaptiveSteps::part_budget(ForestKernel k, const ForestSchedule& s) const {
  const std::size_t total = k == ForestKernel::SharedForest ? gpu_.smem_optin : static_cast<std::size_t>(s.part_kib) * 1024;
  const std::size_t tile = gpu::forest_tile_bytes(view_, s);
  if (tile >= total)
    throw Error("shared-forest strategy: a tile of " + std::to_string(s.block_threads * s.rows_per_thread) + " rows x " +
                std::to_string(view_.common.n_features) + " features leaves no room for the forest in " +
                std::to_string(total / 1024) + " KiB");
  return total - tile;
}

std::vector<std::pair<index_t, index_t>> AdaptiveSteps::parts(std::size_t part_bytes) const {
  const index_t per_part = static_cast<index_t>(part_bytes / sizeof(ForestNode));
  const std::vector<index_t>& tree_begin = host_->tree_begin;
  std::vector<std::pair<index_t, index_t>> out;
  const index_t T = static_cast<index_t>(tree_begin.size()) - 1;
  index_t first = 0;
  for (index_t t = 0; t < T; ++t) {
    if (tree_begin[t + 1] - tree_begin[t] > per_part)
      throw Error("split-shared-forest strategy: tree " + std::to_string(t) + " has " +
                  std::to_string(tree_begin[t + 1] - tree_begin[t]) + " nodes, more than a part of " +
                  std::to_string(part_bytes / 1024) + " KiB holds");
    if (tree_begin[t + 1] - tree_begin[first] > per_part) {
      out.emplace_back(first, t);
      first = t;
    }
  }
  out.emplace_back(first, T);
  return out;
}

void AdaptiveSteps::run(const gpu::AdaptiveBatch& b, ForestKernel k, const ForestSchedule& s) {
  const gpu::AdaptiveDevice d{gpu_, stream_};
  switch (k) {
    case ForestKernel::Direct: gpu::launch_adaptive_direct(view_, b, s, d); return;
    case ForestKernel::SharedData: gpu::launch_adaptive_shared_data(view_, b, s, d); return;
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest: {
      const std::vector<std::pair<index_t, index_t>> ranges = parts(part_budget(k, s));
      const std::vector<index_t>& tree_begin = host_->tree_begin;
      gpu::AdaptivePart part;
      part.outputs = sums_outputs(view_.common);
      if (ranges.size() > 1) {
        carry_.reserve(static_cast<std::size_t>(b.n_rows) * part.outputs * carry_size(view_.common),
                       "the sums carried between forest parts", stream_);
        part.carry = carry_.get();
      }
      for (std::size_t p = 0; p < ranges.size(); ++p) {
        part.first_tree = ranges[p].first;
        part.end_tree = ranges[p].second;
        part.first = p == 0;
        part.last = p + 1 == ranges.size();
        const std::size_t bytes =
            static_cast<std::size_t>(tree_begin[part.end_tree] - tree_begin[part.first_tree]) * sizeof(ForestNode);
        gpu::launch_adaptive_shared_forest(view_, b, s, part, bytes, d);
      }
      return;
    }
    case ForestKernel::Hybrid:
    case ForestKernel::Auto: throw Error(std::string("the ") + to_string(k) + " kernel does not run on the adaptive layout");
  }
}

void AdaptiveSteps::schedule_rows(int depth, gpu::AdaptiveBatch* b) {
  check_row_schedule_depth(depth, max_depth_);
  const index_t n_rows = b->n_rows;
  const int features = view_.common.n_features;
  const std::size_t n = static_cast<std::size_t>(n_rows);
  keys_.reserve(n, "the row-schedule keys", stream_);
  keys_sorted_.reserve(n, "the row-schedule keys", stream_);
  index_.reserve(n, "the row-schedule index", stream_);
  order_.reserve(n, "the row order", stream_);
  ForestRowKeys k;
  k.rows = b->rows;
  k.n_rows = n_rows;
  k.depth = depth;
  k.key_trees = adaptive_key_trees(view_.common.n_trees, depth);
  k.keys = keys_.get();
  k.index = index_.get();
  launch_forest_row_keys(view_, k, stream_);
  const int end_bit = k.key_trees * depth;
  run_cub("cub::DeviceRadixSort::SortPairs (the row schedule)", sort_temp_, "the row-schedule sort", stream_,
          [&](void* t, std::size_t& bytes) {
            return cub::DeviceRadixSort::SortPairs(t, bytes, keys_.get(), keys_sorted_.get(), index_.get(),
                                                   order_.get(), n_rows, 0, end_bit, stream_);
          });
  const std::size_t values = n * static_cast<std::size_t>(features);
  rows_sorted_.reserve(values, "the rows in execution order", stream_);
  launch_gather_rows(b->rows, order_.get(), n_rows, features, rows_sorted_.get(), stream_);
  b->rows = rows_sorted_.get();
  b->order = order_.get();
}

namespace {

// The adaptive layout's engine as ForestPredictor sees it: the engine predicts, the tuner
// plans Auto's calls (and its trials), estimates and tunes.
class AdaptiveForestGpu final : public ForestGpu {
 public:
  AdaptiveForestGpu(const AdaptiveForest& layout, ForestChoiceFile file) : engine_(layout), tuner_(engine_, std::move(file)) {
    warm_up();
  }

  void predict(const float* rows, index_t n_rows, float* out, int width, bool f64, const ForestRunOptions& opt,
               ForestTimes* times) override {
    if (opt.kernel == ForestKernel::Hybrid) throw Error("the hybrid kernel needs the hierarchical layout");
    // The leaf output has one kernel: nothing to choose.
    if (opt.kernel == ForestKernel::Auto && opt.output != ForestOutput::Leaf) {
      const ForestTuner::Plan plan = tuner_.plan(n_rows, opt);
      ForestRunOptions run = opt;
      run.schedule = plan.knobs;
      run.graph = opt.graph && plan.graph;
      ForestTrialRuns preview = plan.preview;
      ForestTrialRuns* trials = preview.runs.empty() ? nullptr : &preview;
      try {
        engine_.predict(rows, n_rows, out, width, f64, plan.kernel, run, times, trials);
      } catch (const CudaError&) {
        throw;
      } catch (const Error&) {
        if (!plan.candidate_call) throw;
        // A candidate this batch cannot take after all: dropped, and the call runs the choice.
        tuner_.record(plan, n_rows, INFINITY, {});
        run.schedule = plan.choice.knobs;
        engine_.predict(rows, n_rows, out, width, f64, plan.choice.kernel, run, times);
        times->tuning = ForestTuning::Refining;
        return;
      }
      times->tuning = plan.tuning;
      // The call's own kernel was the trial when it ran a candidate.
      times->tuning_ms = plan.candidate_call ? times->kernel_ms : 0;
      for (double ms : preview.ms)
        if (std::isfinite(ms)) times->tuning_ms += ms;
      tuner_.record(plan, n_rows, times->kernel_ms, preview.ms);
      return;
    }
    engine_.predict(rows, n_rows, out, width, f64, opt.kernel, opt, times);
  }

  std::vector<ForestTuned> optimize(const float* rows, index_t n_rows, const std::vector<index_t>& batch_sizes, int width,
                                    const ForestRunOptions& opt) override {
    std::vector<ForestTuned> out;
    if (opt.kernel != ForestKernel::Auto || opt.output == ForestOutput::Leaf) return out;
    ForestRunOptions run = opt;
    run.online_tuning = true;
    run.graph = false;
    const std::size_t F = static_cast<std::size_t>(engine_.view().common.n_features);
    DeviceBuffer<float> d_rows, d_out;
    for (index_t size : batch_sizes) {
      if (size < 1) throw Error("optimize: batch size " + std::to_string(size) + " must be >= 1");
      // The batch on the device: the rows (host or device memory), repeated from the top when
      // it is larger, after the work queued on the caller's stream.
      d_rows.reserve(static_cast<std::size_t>(size) * F, "optimize's rows", engine_.stream());
      d_out.reserve(static_cast<std::size_t>(size) * width, "optimize's predictions", engine_.stream());
      {
        const CallerStream caller = engine_.on_caller_stream(opt.stream);
        for (index_t at = 0; at < size; at += n_rows)
          copy_async(d_rows.get() + static_cast<std::size_t>(at) * F, rows,
                     static_cast<std::size_t>(std::min(n_rows, size - at)) * F * sizeof(float), engine_.stream());
        engine_.sync();
      }
      ForestTuned t;
      t.batch_size = size;
      std::vector<double> ms;
      // Trial calls until the class settles (a few hundred at most: the steps are finite).
      for (int call = 0; call < 5000 && !tuner_.settled(size, run); ++call) {
        ForestTimes times;
        predict(d_rows.get(), size, d_out.get(), width, false, run, &times);
        if (times.tuning == ForestTuning::Refining) ++t.trials;
      }
      for (int r = 0; r < 5; ++r) {
        ForestTimes times;
        predict(d_rows.get(), size, d_out.get(), width, false, run, &times);
        ms.push_back(times.kernel_ms);
        t.kernel = times.kernel;
        t.schedule = times.schedule;
      }
      std::sort(ms.begin(), ms.end());
      t.kernel_ms = ms[ms.size() / 2];
      out.push_back(t);
    }
    return out;
  }

  std::vector<ForestTrial> estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt) override {
    return tuner_.estimates(rows, n_rows, opt);
  }

  std::vector<index_t> row_order(const float* rows, index_t n_rows, int depth, stream_t stream) override {
    std::vector<index_t> out(static_cast<std::size_t>(n_rows));
    if (n_rows == 0) return out;
    const CallerStream caller = engine_.on_caller_stream(stream);
    gpu::AdaptiveBatch b;
    b.rows = engine_.device_rows(rows, n_rows);
    b.n_rows = n_rows;
    engine_.steps().schedule_rows(depth, &b);
    copy_async(out.data(), b.order, out.size() * sizeof(index_t), engine_.stream());
    engine_.sync();
    return out;
  }

  std::vector<ForestTrial> tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt,
                                int repeat) override {
    return tuner_.tune(rows, n_rows, width, opt, repeat);
  }

 private:
  // Every strategy's kernels run once on one row here, each instance Auto may try (walks per
  // thread, rows per thread, row staging), so that no call pays for loading one: CUDA loads a
  // kernel on its first launch (7-9 ms for the first forest call of a process on an H100, a
  // fraction of a millisecond for each later instance).
  void warm_up() {
    const std::vector<float> row(static_cast<std::size_t>(engine_.view().common.n_features), 0.0f);
    std::vector<float> out(static_cast<std::size_t>(std::max(sums_outputs(engine_.view().common), 1)));
    ForestRunOptions opt;
    opt.output = ForestOutput::Margin;
    opt.graph = false;
    auto run = [&](ForestKernel k, const ForestSchedule& knobs) {
      opt.schedule = knobs;
      ForestTimes times;
      try {
        engine_.predict(row.data(), 1, out.data(), static_cast<int>(out.size()), false, k, opt, &times);
      } catch (const CudaError&) {
        throw;
      } catch (const Error&) {
        // a strategy or schedule this forest cannot take: nothing to load
      }
    };
    for (int walks : {1, 2, 4}) {
      ForestSchedule s;
      s.tree_interleave = walks;
      run(ForestKernel::SharedData, s);
    }
    for (ForestKernel k : {ForestKernel::Direct, ForestKernel::SharedForest, ForestKernel::SplitSharedForest})
      for (int rows : {1, 2, 4})
        for (int trees : {1, 2})
          for (int cache : {0, 1}) {
            if (cache == 1 && k != ForestKernel::Direct) continue;
            ForestSchedule s;
            s.rows_per_thread = rows;
            s.tree_interleave = trees;
            if (k == ForestKernel::Direct) s.cache_rows = cache;
            run(k, s);
          }
  }

  ForestEngine<AdaptiveForest> engine_;
  ForestTuner tuner_;
};

}  // namespace

std::unique_ptr<ForestGpu> make_forest_gpu(const AdaptiveForest& layout, const ForestConfig& config,
                                           std::uint64_t fingerprint) {
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  const auto [name, uuid] = device_identity(dev);
  ForestChoiceFile file(config.cache_dir, fingerprint, uuid, name);
  return std::make_unique<AdaptiveForestGpu>(layout, std::move(file));
}

}  // namespace detail
}  // namespace canopy
