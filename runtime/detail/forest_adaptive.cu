// The adaptive layout's side of ForestGpuEngine: schedule defaults, forest parts, the four
// strategies, row scheduling (inspector + sort), Tahoe's performance model and the tuner.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>

#include "runtime/detail/forest_engine.cuh"
#include "scheduler/forest_model_gpu.hpp"
#include "inspector/forest_rows.hpp"
#include "scheduler/forest_rows.hpp"

namespace canopy {
namespace gpu {

// Row scheduling: rows in execution order, so the strategies read them as if unscheduled.
__global__ void adaptive_gather_rows_kernel(const float* rows, const index_t* order, index_t n_rows, int features,
                                            float* dst) {
  const index_t k = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (k >= n_rows * features) return;
  const index_t i = k / features;
  dst[k] = rows[order[i] * features + (k - i * features)];
}

}  // namespace gpu

namespace detail {

namespace {

int sums_outputs(const ForestCommonView& c) { return c.leaf_width > 0 ? c.leaf_width : c.n_groups; }
std::size_t carry_size(const ForestCommonView& c) { return c.leaf_width > 0 ? sizeof(double) : sizeof(float); }
bool wide_sums(const ForestCommonView& c) { return sums_outputs(c) > 8; }

void check_block(int threads, const char* strategy) {
  if (threads < 32 || threads > 1024 || threads % 32 != 0)
    throw Error(std::string(strategy) + ": block_threads = " + std::to_string(threads) +
                " must be a multiple of 32 from 32 to 1024");
}

ForestKernel kernel_of(ForestStrategy s) {
  switch (s) {
    case ForestStrategy::SharedData: return ForestKernel::SharedData;
    case ForestStrategy::SharedForest: return ForestKernel::SharedForest;
    case ForestStrategy::SplitSharedForest: return ForestKernel::SplitSharedForest;
    default: return ForestKernel::Direct;
  }
}

}  // namespace

ForestSchedule ForestGpuEngine::Impl::resolve(ForestKernel k, const ForestSchedule& in, index_t n_rows) const {
  ForestSchedule s = in;
  const ForestCommonView& c = adaptive.common;
  // Trees walked together take as many steps as the deepest of them: interleave only when the
  // walks are nearly as long as the trees are deep (and the sums leave the registers).
  const int walks = wide_sums(c) || mean_visits < 0.85 * (max_depth + 1) ? 1 : 2;
  auto shrink_for_small_batches = [&](int rows_per_block_per_thread) {
    // Halve the block (down to one warp) until there are two blocks per SM.
    while (s.block_threads > 32 &&
           (n_rows + static_cast<index_t>(s.block_threads) * rows_per_block_per_thread - 1) /
                   (static_cast<index_t>(s.block_threads) * rows_per_block_per_thread) <
               2 * static_cast<index_t>(sm_count))
      s.block_threads /= 2;
  };
  switch (k) {
    case ForestKernel::Direct: {
      if (s.rows_per_thread == 0) s.rows_per_thread = walks;  // two rows where two trees also fit
      if (s.tree_interleave == 0) s.tree_interleave = walks;
      if (s.block_threads == 0) {
        // 256 threads while their staged rows take at most 32 KiB, else 128: the tuner's picks
        // at a million rows (README).
        ForestSchedule wide = s;
        wide.block_threads = 256;
        wide.cache_rows = 1;
        s.block_threads = gpu::direct_tile_bytes(adaptive, wide) <= 32 * 1024 ? 256 : 128;
        shrink_for_small_batches(s.rows_per_thread);
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
        s.cache_rows = gpu::direct_tile_bytes(adaptive, staged) <= 48 * 1024 ? 1 : 0;
      }
      check_block(s.block_threads, "direct strategy");
      break;
    }
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest: {
      if (s.rows_per_thread == 0) s.rows_per_thread = 1;
      if (s.tree_interleave == 0) s.tree_interleave = walks;
      if (s.block_threads == 0) {
        // At least 128 threads: each block stages its part in shared memory, too slow for fewer.
        s.block_threads = 256;
        shrink_for_small_batches(s.rows_per_thread);
        s.block_threads = std::max(s.block_threads, 128);
      }
      // Half the shared memory: two blocks per SM hide more latency than one with a larger part.
      if (s.part_kib == 0) s.part_kib = static_cast<int>(smem_optin / 2048);
      if (static_cast<std::size_t>(s.part_kib) * 1024 > smem_optin)
        throw Error("part_kib = " + std::to_string(s.part_kib) + " exceeds the " + std::to_string(smem_optin / 1024) +
                    " KiB of shared memory a block may use on this GPU");
      check_block(s.block_threads, "shared-forest strategy");
      const std::size_t forest = static_cast<std::size_t>(tree_begin.back()) * sizeof(ForestNode);
      if (k == ForestKernel::SharedForest && forest + gpu::forest_tile_bytes(adaptive, s) > smem_optin)
        throw Error("shared-forest strategy: the forest takes " + std::to_string(forest) + " bytes, and with the rows " +
                    "more than the " + std::to_string(smem_optin) +
                    " bytes of shared memory a block may use (use split-shared-forest)");
      break;
    }
    case ForestKernel::SharedData: {
      if (s.block_threads == 0) s.block_threads = 256;
      check_block(s.block_threads, "shared-data strategy");
      const std::size_t leaf_row = static_cast<std::size_t>(c.n_trees) * 4;
      if (s.tree_group == 0) {
        // Small batches: fewer rows per pass, so that every SM gets a block.
        s.tree_group = 1;
        while (s.tree_group < gpu::kAdaptiveMaxGroup && s.tree_group * 2 * static_cast<index_t>(sm_count) < n_rows)
          s.tree_group *= 2;
        // The pass's leaves in at most 16 KiB, so that several blocks share an SM.
        while (s.tree_group > 1 && leaf_row * s.tree_group > 16 * 1024) s.tree_group /= 2;
      }
      if (s.tree_group < 1 || s.tree_group > gpu::kAdaptiveMaxGroup)
        throw Error("shared-data strategy: tree_group = " + std::to_string(s.tree_group) + " must be 1 to " +
                    std::to_string(gpu::kAdaptiveMaxGroup));
      if (s.rows_per_block == 0) {
        ForestSchedule probe = s;
        probe.rows_per_block = 0;
        const std::size_t fixed = gpu::shared_data_bytes(adaptive, probe, sums_outputs(c), carry_size(c));
        const std::size_t row_bytes = static_cast<std::size_t>(c.n_features) * sizeof(float);
        const index_t max_rows = fixed < smem_optin ? static_cast<index_t>((smem_optin - fixed) / row_bytes) : 0;
        // Enough blocks to fill the GPU (four per SM) before making tiles large.
        index_t rows = (n_rows + 4 * sm_count - 1) / (4 * static_cast<index_t>(sm_count));
        rows = (rows + s.tree_group - 1) / s.tree_group * s.tree_group;
        rows = std::min<index_t>(rows, std::min<index_t>(max_rows, 4096));
        s.rows_per_block = static_cast<int>(std::max<index_t>(rows, s.tree_group));
      }
      if (s.rows_per_block < 1) throw Error("shared-data strategy: rows_per_block must be >= 1");
      break;
    }
    default: throw Error(std::string("the ") + to_string(k) + " kernel does not run on the adaptive layout");
  }
  return s;
}

std::size_t ForestGpuEngine::Impl::part_budget(ForestKernel k, const ForestSchedule& s) const {
  const std::size_t total = k == ForestKernel::SharedForest ? smem_optin : static_cast<std::size_t>(s.part_kib) * 1024;
  const std::size_t tile = gpu::forest_tile_bytes(adaptive, s);
  if (tile >= total)
    throw Error("shared-forest strategy: a tile of " + std::to_string(s.block_threads * s.rows_per_thread) + " rows x " +
                std::to_string(adaptive.common.n_features) + " features leaves no room for the forest in " +
                std::to_string(total / 1024) + " KiB");
  return total - tile;
}

std::vector<std::pair<index_t, index_t>> ForestGpuEngine::Impl::parts(std::size_t part_bytes) const {
  const index_t per_part = static_cast<index_t>(part_bytes / sizeof(ForestNode));
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

void ForestGpuEngine::Impl::run_adaptive(const gpu::AdaptiveBatch& b, ForestKernel k, const ForestSchedule& s) {
  const gpu::AdaptiveDevice d = device();
  switch (k) {
    case ForestKernel::Direct: gpu::launch_adaptive_direct(adaptive, b, s, d); return;
    case ForestKernel::SharedData: gpu::launch_adaptive_shared_data(adaptive, b, s, d); return;
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest: {
      const std::vector<std::pair<index_t, index_t>> ranges =
          parts(part_budget(k, s));
      gpu::AdaptivePart part;
      part.outputs = sums_outputs(adaptive.common);
      if (ranges.size() > 1) {
        carry.reserve(static_cast<std::size_t>(b.n_rows) * part.outputs * carry_size(adaptive.common),
                      "the sums carried between forest parts", stream.get());
        part.carry = carry.get();
      }
      for (std::size_t p = 0; p < ranges.size(); ++p) {
        part.first_tree = ranges[p].first;
        part.end_tree = ranges[p].second;
        part.first = p == 0;
        part.last = p + 1 == ranges.size();
        const std::size_t bytes =
            static_cast<std::size_t>(tree_begin[part.end_tree] - tree_begin[part.first_tree]) * sizeof(ForestNode);
        gpu::launch_adaptive_shared_forest(adaptive, b, s, part, bytes, d);
      }
      return;
    }
    default: throw Error(std::string("the ") + to_string(k) + " kernel does not run on the adaptive layout");
  }
}

const index_t* ForestGpuEngine::Impl::schedule_rows(index_t n_rows, int depth) {
  check_row_schedule_depth(depth, max_depth);
  const int key_trees = adaptive_key_trees(adaptive.common.n_trees, depth);
  const std::size_t n = static_cast<std::size_t>(n_rows);
  keys.reserve(n, "the row-schedule keys", stream.get());
  keys_sorted.reserve(n, "the row-schedule keys", stream.get());
  index.reserve(n, "the row-schedule index", stream.get());
  order.reserve(n, "the row order", stream.get());
  launch_forest_row_keys(adaptive, rows.get(), n_rows, depth, key_trees, keys.get(), index.get(), stream.get());
  std::size_t temp = 0;
  const int end_bit = key_trees * depth;
  CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, keys.get(), keys_sorted.get(), index.get(), order.get(),
                                                    n_rows, 0, end_bit, stream.get()));
  sort_temp.reserve(temp, "the row-schedule sort", stream.get());
  CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp.get(), temp, keys.get(), keys_sorted.get(), index.get(),
                                                    order.get(), n_rows, 0, end_bit, stream.get()));
  const std::size_t values = n * static_cast<std::size_t>(n_features);
  rows_sorted.reserve(values, "the rows in execution order", stream.get());
  gpu::adaptive_gather_rows_kernel<<<gpu::adaptive_grid(static_cast<index_t>(values), 256), 256, 0, stream.get()>>>(
      rows.get(), order.get(), n_rows, n_features, rows_sorted.get());
  CANOPY_CUDA_CHECK_LAUNCH("adaptive_gather_rows_kernel");
  return order.get();
}

const ForestHardware& ForestGpuEngine::Impl::hardware_params(const std::string& cache) {
  const std::string path = cache.empty() ? default_forest_hardware_cache() : cache;
  if (hardware && path == hardware_path) return *hardware;
  int dev = 0;
  CANOPY_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CANOPY_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  static const char* hex = "0123456789abcdef";
  std::string uuid;
  for (int i = 0; i < 16; ++i) {
    const unsigned char byte = static_cast<unsigned char>(prop.uuid.bytes[i]);
    uuid += hex[byte >> 4];
    uuid += hex[byte & 15];
  }
  hardware = std::make_unique<ForestHardware>(
      load_or_measure_forest_hardware(path, prop.name, uuid, [dev] { return measure_forest_hardware(dev); }));
  hardware_path = path;
  return *hardware;
}

ForestShape ForestGpuEngine::Impl::shape(ForestKernel k, index_t n_rows) const {
  const ForestSchedule s = resolve(k, ForestSchedule{}, n_rows);
  const ForestCommonView& c = adaptive.common;
  const index_t T = c.n_trees;
  const std::vector<std::int32_t>& depth = host->depth;
  auto steps = [&](index_t t0, index_t t1, int walk) {  // the fixed-trip steps of trees [t0, t1), walk at a time
    double total = 0;
    for (index_t t = t0; t < t1; t += walk) {
      int most = 0;
      for (index_t q = t; q < std::min<index_t>(t + walk, t1); ++q) most = std::max(most, depth[static_cast<std::size_t>(q)]);
      total += most;
    }
    return total;
  };
  const double sms = sm_count;
  ForestShape sh;
  switch (k) {
    case ForestKernel::Direct: {
      sh.strategy = ForestStrategy::Direct;
      sh.coalescing = profile->coalescing_direct;
      sh.rows_in_smem = s.cache_rows == 1;
      const double blocks = std::ceil(static_cast<double>(n_rows) / (s.block_threads * s.rows_per_thread));
      double per_sm = std::min(32.0, 2048.0 / s.block_threads);
      const std::size_t tile = gpu::direct_tile_bytes(adaptive, s);
      if (tile > 0) per_sm = std::min(per_sm, std::floor(228.0 * 1024 / static_cast<double>(tile + 1024)));
      sh.waves = std::ceil(blocks / (sms * per_sm));
      sh.chain_steps = steps(0, T, s.tree_interleave);
      break;
    }
    case ForestKernel::SharedData: {
      sh.strategy = ForestStrategy::SharedData;
      sh.coalescing = profile->coalescing_shared_data;
      sh.rows_in_smem = true;
      const double blocks = std::ceil(static_cast<double>(n_rows) / s.rows_per_block);
      const std::size_t smem = gpu::shared_data_bytes(adaptive, s, sums_outputs(c), carry_size(c));
      const double per_sm = std::max(1.0, std::min(2048.0 / s.block_threads, std::floor(228.0 * 1024 / static_cast<double>(smem + 1024))));
      sh.waves = std::ceil(blocks / (sms * per_sm));
      const double passes = std::ceil(static_cast<double>(s.rows_per_block) / s.tree_group);
      int most = 0;
      for (int d : depth) most = std::max(most, d);
      sh.chain_steps = passes * std::ceil(static_cast<double>(T) / s.block_threads) * most;
      break;
    }
    default: {
      sh.strategy = k == ForestKernel::SharedForest ? ForestStrategy::SharedForest : ForestStrategy::SplitSharedForest;
      sh.smem_conflict = profile->smem_conflict;
      sh.rows_in_smem = true;
      const std::vector<std::pair<index_t, index_t>> ranges =
          parts(part_budget(k, s));
      sh.launches = static_cast<double>(ranges.size());
      const double tiles = std::ceil(static_cast<double>(n_rows) / (s.block_threads * s.rows_per_thread));
      for (const auto& r : ranges) {
        const double bytes = static_cast<double>(tree_begin[r.second] - tree_begin[r.first]) * sizeof(ForestNode) +
                             static_cast<double>(gpu::forest_tile_bytes(adaptive, s));
        const double per_sm = std::max(1.0, std::min(2048.0 / s.block_threads, std::floor(228.0 * 1024 / (bytes + 1024))));
        const double blocks = std::min(tiles, sms * per_sm);
        sh.chain_steps += std::ceil(tiles / blocks) * steps(r.first, r.second, s.tree_interleave);
        sh.load_steps += bytes / (8.0 * s.block_threads);
      }
      break;
    }
  }
  return sh;
}

std::vector<float> ForestGpuEngine::Impl::time_runs(const gpu::AdaptiveBatch& b, ForestKernel k, const ForestSchedule& s,
                                                   int runs) {
  std::vector<float> ms;
  for (int r = 0; r <= runs; ++r) {
    scheduled.record(stream.get());
    run_adaptive(b, k, s);
    computed.record(stream.get());
    const float t = computed.since(scheduled);
    if (r > 0) ms.push_back(t);  // the first run warms up
  }
  std::sort(ms.begin(), ms.end());
  return ms;
}

// Calibration batches: one full wave of the direct strategy's blocks, and a small batch whose
// time is its critical path and launches.
constexpr index_t kCalibrationRows = 262144;
constexpr index_t kCalibrationSmallRows = 1024;

void ForestGpuEngine::Impl::calibrate(const float* rows, index_t n_rows) {
  const int F = n_features;
  std::vector<float> batch(static_cast<std::size_t>(kCalibrationRows) * F);
  for (index_t i = 0; i < kCalibrationRows; ++i)
    std::copy(rows + (i % n_rows) * F, rows + (i % n_rows + 1) * F, batch.begin() + i * F);
  DeviceBuffer<float> d_rows, d_out;
  d_rows.reserve(batch.size(), "the calibration rows", stream.get());
  const int width = std::max(sums_outputs(adaptive.common), 1);
  d_out.reserve(static_cast<std::size_t>(kCalibrationRows) * width, "the calibration predictions", stream.get());
  copy_to_device(d_rows.get(), batch.data(), batch.size(), stream.get());
  gpu::AdaptiveBatch b;
  b.rows = d_rows.get();
  b.out = d_out.get();
  b.width = width;
  b.output = ForestOutput::Margin;
  auto time_ms = [&](ForestKernel k, index_t n) {
    b.n_rows = n;
    return static_cast<double>(time_runs(b, k, resolve(k, ForestSchedule{}, n), 2).front());
  };
  calibrated.clear();
  for (ForestKernel k : {ForestKernel::SharedData, ForestKernel::Direct, ForestKernel::SharedForest,
                         ForestKernel::SplitSharedForest}) {
    Calibration c{k, 0, 0};
    try {
      c.row_ns = time_ms(k, kCalibrationRows) * 1e6 / static_cast<double>(kCalibrationRows);
      c.small_ns = time_ms(k, kCalibrationSmallRows) * 1e6;
    } catch (const Error&) {
      c = Calibration{k, 0, 0};  // a strategy this forest cannot take
    }
    calibrated.push_back(c);
  }
  stream.sync();
}

std::vector<ForestTrial> ForestGpuEngine::Impl::estimates(const float* rows, index_t n_rows, const ForestRunOptions& opt) {
  const ForestHardware& hw = hardware_params(opt.hardware_cache);
  if (!profile) profile = std::make_unique<ForestAccessProfile>(forest_access_profile(host->view(), rows, n_rows));
  if (calibrated.empty()) calibrate(rows, n_rows);
  const ForestCommonView& c = adaptive.common;
  const index_t nodes = tree_begin.back();
  ForestCostInputs in;
  in.n_batch = static_cast<double>(std::max<index_t>(n_rows, 1));
  in.sample_bytes = 4.0 * c.n_features;
  in.n_trees = static_cast<double>(c.n_trees);
  in.avg_depth = mean_visits;
  in.node_bytes = sizeof(ForestNode);
  in.attr_bytes = 4;
  in.nodes_per_tree = static_cast<double>(nodes) / static_cast<double>(c.n_trees);
  in.forest_bytes = static_cast<double>(nodes) * sizeof(ForestNode);
  in.smem_bytes = static_cast<double>(smem_optin);
  const ForestSchedule data = resolve(ForestKernel::SharedData, ForestSchedule{}, std::max<index_t>(n_rows, 1));
  in.threads_per_block = data.block_threads;
  in.parts = std::ceil(in.forest_bytes / static_cast<double>(smem_optin));
  in.blocks = in.parts;  // equation 3: the partial sums per row the cross-part reduction adds
  std::vector<ForestShape> shapes;
  for (ForestKernel k : {ForestKernel::SharedData, ForestKernel::Direct, ForestKernel::SharedForest,
                         ForestKernel::SplitSharedForest}) {
    try {
      shapes.push_back(shape(k, std::max<index_t>(n_rows, 1)));
      for (const Calibration& cal : calibrated)
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
    t.kernel = kernel_of(e.strategy);
    t.model_ns_per_row = e.feasible ? e.batch_ns / in.n_batch : INFINITY;
    for (const ForestCostEstimate& p : paper)
      if (p.strategy == e.strategy) t.paper_ns_per_row = p.feasible ? p.ns_per_row : INFINITY;
    out.push_back(t);
  }
  for (const ForestCostEstimate& p : paper) {  // strategies with no shape: infeasible here
    bool listed = false;
    for (const ForestTrial& t : out) listed |= t.kernel == kernel_of(p.strategy);
    if (listed) continue;
    ForestTrial t;
    t.kernel = kernel_of(p.strategy);
    t.model_ns_per_row = INFINITY;
    t.paper_ns_per_row = p.feasible ? p.ns_per_row : INFINITY;
    out.push_back(t);
  }
  return out;
}

std::vector<index_t> ForestGpuEngine::row_order(const float* rows, index_t n_rows, int depth) {
  Impl& m = *impl_;
  if (m.layout != ForestLayout::Adaptive) throw Error("row scheduling needs the adaptive layout");
  std::vector<index_t> out(static_cast<std::size_t>(n_rows));
  if (n_rows == 0) return out;
  const std::size_t n_in = static_cast<std::size_t>(n_rows) * m.n_features;
  m.rows.reserve(n_in, "the rows", m.stream.get());
  copy_to_device(m.rows.get(), rows, n_in, m.stream.get());
  const index_t* order = m.schedule_rows(n_rows, depth);
  copy_to_host(out.data(), order, out.size(), m.stream.get());
  m.stream.sync();
  return out;
}

std::vector<ForestTrial> ForestGpuEngine::tune(const float* rows, index_t n_rows, int width, const ForestRunOptions& opt,
                                               int repeat) {
  Impl& m = *impl_;
  if (m.layout != ForestLayout::Adaptive) throw Error("the tuner needs the adaptive layout");
  if (n_rows < 1) throw Error("tune: the batch has no rows");
  if (repeat < 1) throw Error("tune: repeat = " + std::to_string(repeat) + " must be >= 1");
  const std::vector<ForestTrial> model = m.estimates(rows, n_rows, opt);
  const ForestCommonView& c = m.adaptive.common;
  const std::size_t n_in = static_cast<std::size_t>(n_rows) * m.n_features;
  m.rows.reserve(n_in, "the rows", m.stream.get());
  m.out.reserve(static_cast<std::size_t>(n_rows) * width, "the predictions", m.stream.get());
  copy_to_device(m.rows.get(), rows, n_in, m.stream.get());
  gpu::AdaptiveBatch b;
  b.rows = m.rows.get();
  b.n_rows = n_rows;
  b.out = m.out.get();
  b.width = width;
  b.output = opt.output;
  if (opt.row_schedule_depth > 0) {
    b.order = m.schedule_rows(n_rows, opt.row_schedule_depth);
    b.rows = m.rows_sorted.get();
  }

  // The grid: the schedules around the defaults of the model's two best strategies, and every
  // other feasible strategy at its defaults (so the tuned best is never worse than auto's pick).
  std::vector<std::pair<ForestKernel, ForestSchedule>> grid;
  std::vector<ForestKernel> chosen;  // the model's two best feasible strategies
  for (const ForestTrial& t : model)
    if (std::isfinite(t.model_ns_per_row) && chosen.size() < 2) chosen.push_back(t.kernel);
  const std::vector<std::pair<int, int>> walks =
      wide_sums(c) ? std::vector<std::pair<int, int>>{{1, 1}}
                   : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 1}};
  for (const ForestTrial& t : model) {
    if (!std::isfinite(t.model_ns_per_row)) continue;
    if (std::find(chosen.begin(), chosen.end(), t.kernel) == chosen.end()) {
      grid.emplace_back(t.kernel, ForestSchedule{});
      continue;
    }
    for (int block : {64, 128, 256}) {
      ForestSchedule s;
      s.block_threads = block;
      if (t.kernel == ForestKernel::SharedData) {
        for (int g : {1, 2, 4, 8}) {
          s.tree_group = g;
          grid.emplace_back(t.kernel, s);
        }
        continue;
      }
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
          for (int part : {static_cast<int>(m.smem_optin / 1024), static_cast<int>(m.smem_optin / 2048),
                           static_cast<int>(m.smem_optin / 4096)}) {
            s.part_kib = part;
            grid.emplace_back(t.kernel, s);
          }
        } else {
          grid.emplace_back(t.kernel, s);
        }
      }
    }
  }
  std::vector<ForestTrial> out;
  for (const auto& g : grid) {
    ForestTrial trial;
    trial.kernel = g.first;
    for (const ForestTrial& t : model)
      if (t.kernel == g.first) trial.model_ns_per_row = t.model_ns_per_row;
    try {
      trial.schedule = m.resolve(g.first, g.second, n_rows);
      if (trial.kernel == ForestKernel::Direct && gpu::direct_tile_bytes(m.adaptive, trial.schedule) > m.smem_optin)
        continue;
      const std::vector<float> ms = m.time_runs(b, trial.kernel, trial.schedule, repeat);
      trial.kernel_ms = ms[ms.size() / 2];
    } catch (const Error&) {
      continue;  // a schedule this forest cannot take (shared memory, block size)
    }
    out.push_back(trial);
  }
  m.stream.sync();
  std::stable_sort(out.begin(), out.end(), [](const ForestTrial& a, const ForestTrial& b) { return a.kernel_ms < b.kernel_ms; });
  return out;
}

}  // namespace detail
}  // namespace canopy
