#include "runtime/engine.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "core/bits.hpp"

namespace canopy {

TraversalStats begin_call(const TraversalOptions& opt, Device held, const char* who, int height, int default_depth,
                          bool guided, bool builtin_tree) {
  if (opt.depth == kAutoDepth)
    throw Error(std::string(who) + ": depth auto is resolved before the run; this entry point takes a fixed depth");
  if (opt.schedule == ScheduleKind::Auto || opt.executor == ExecutorKind::Auto)
    throw Error(std::string(who) + ": schedule and executor auto are resolved before the run (run_call)");
  if (opt.depth < 0 || opt.depth > height)
    throw Error("depth = " + std::to_string(opt.depth) + " is deeper than the tree (it has " + std::to_string(height) +
                " levels; use 1.." + std::to_string(height) + ")");
  if (opt.device == Device::Gpu && held != Device::Gpu)
    throw Error(std::string("device gpu was requested but this ") + who + " was created for the cpu (" +
                gpu_description() + ")");
  TraversalStats st;
  st.device = opt.device == Device::Cpu ? Device::Cpu : held;
  st.schedule_kind = opt.schedule;
  st.executor_kind = opt.executor;
  if (guided) {
    st.rows = guided_rows(opt, st.device, builtin_tree);
    if (builtin_tree) default_depth = guided_default_depth(opt, st.device);
  }
  st.depth = opt.depth > 0 ? opt.depth : std::min(default_depth, height);
  return st;
}

std::vector<index_t> spread_sample(index_t n, index_t m) {
  m = std::max<index_t>(1, std::min(m, n));
  std::vector<index_t> rows(static_cast<std::size_t>(m));
  for (index_t i = 0; i < m; ++i) rows[i] = i * n / m;
  return rows;
}

std::vector<float> gather_rows(const float* data, int dims, const std::vector<index_t>& rows) {
  std::vector<float> out(rows.size() * static_cast<std::size_t>(dims));
  // On the host's cores: Auto's trial gathers 2^18 rows at the call's scheduled positions, one
  // cache miss each (7-10 ms on one core of the H200's host, as long as the call it follows).
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 1 << 12), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i)
      std::copy(data + rows[i] * dims, data + (rows[i] + 1) * dims, out.begin() + static_cast<std::ptrdiff_t>(i) * dims);
  });
  return out;
}

TraversalOptions trial_options(const TraversalOptions& opt, int depth) {
  TraversalOptions o = opt;
  o.depth = depth;
  o.keep_schedule = false;
  o.count_nodes = false;
  o.gpu_count_nodes = false;
  o.measure_overlap = false;
  return o;
}

namespace detail {

std::vector<float> host_copy_of_queries(const float* queries, index_t n, int dims, stream_t after) {
  std::vector<float> host;
  if (n > 0 && dims > 0 && is_device_pointer(queries)) {
    host.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(dims));
    copy_memory(host.data(), queries, host.size() * sizeof(float), after);
  }
  return host;
}

}  // namespace detail

double run_ms(const TraversalStats& s) { return s.pipeline.chunks ? s.pipeline.wall_ms : s.times.total_ms(); }

std::vector<index_t> chunk_boundaries(index_t n, index_t chunk, bool ramp) {
  chunk = std::max<index_t>(1, chunk);
  std::vector<index_t> b;
  index_t size = ramp && n > chunk ? std::max<index_t>(1, chunk / kPipelineRamp) : chunk;
  for (index_t i = 0; i < n; i += size, size = std::min(chunk, 2 * size)) b.push_back(i);
  b.push_back(n);
  return b;
}

std::size_t pipeline_bytes_per_query(ScheduleKind kind, bool guided, index_t row_entries) {
  // Two slots; guided rows plus their packed copy; the device schedulers' sorts.
  const std::size_t sort = 6 * sizeof(index_t) + 2 * sizeof(std::uint64_t);
  // Keys: two slots of keys, the radix sort's keys in and out, ids and its scratch (about n).
  if (kind == ScheduleKind::HybridKey) return 5 * sizeof(std::uint64_t) + 2 * sizeof(index_t) + 2;
  const std::size_t cols = static_cast<std::size_t>(row_entries);
  if (guided) return 2 * (2 * sizeof(std::int32_t) * cols + 3 * sizeof(index_t)) + sort;
  return 2 * sizeof(std::uint64_t) * static_cast<std::size_t>(words_per_row(row_entries)) + sort;
}

int key_depth(const std::vector<index_t>& leaves, index_t n, bool hinted) {
  const int height = static_cast<int>(leaves.size()) - 1;
  const index_t per = hinted ? kHintedKeyQueriesPerLeaf : kKeyQueriesPerLeaf;
  const index_t want = (n + per - 1) / per;
  for (int d = 1; d <= height; ++d)
    if (leaves[static_cast<std::size_t>(d)] >= want) return d;
  return std::max(1, height);
}

std::vector<AutoPick> auto_candidates(const TraversalOptions& opt, Device device, bool sort_key, bool guided,
                                      bool wide) {
  const bool any_schedule = opt.schedule == ScheduleKind::Auto, any_executor = opt.executor == ExecutorKind::Auto;
  if (device != Device::Gpu) {
    return {{any_schedule ? ScheduleKind::InputOrder : opt.schedule,
             any_executor ? ExecutorKind::Independent : opt.executor}};
  }
  // The prior goes first: the workload's own sort key (else the compact key), under independent
  // threads for guided rows and lockstep for unguided ones (what the H100 measurements favour).
  // Guided rows try the input order next: it is the pick that most often beats the prior there
  // (kNN over the cities and covtype files, 1.1-1.3x), so a trial its budget cuts short has
  // tried it. Unguided rows try it last: there it won one case in eleven, by 1.09x, and can
  // cost 5.7x the prior (Barnes-Hut), which a budget cannot cut short.
  std::vector<ScheduleKind> schedules{opt.schedule};
  if (any_schedule) {
    schedules.clear();
    schedules.push_back(sort_key ? ScheduleKind::LeafSort : ScheduleKind::HybridKey);
    if (guided) schedules.push_back(ScheduleKind::InputOrder);
    if (sort_key) schedules.push_back(ScheduleKind::HybridKey);
  }
  const ExecutorKind first = guided ? ExecutorKind::Independent : ExecutorKind::FsmLockstep;
  std::vector<AutoPick> out;
  for (ScheduleKind s : schedules) {
    if (!any_executor)
      out.push_back({s, opt.executor});
    else if (s != ScheduleKind::InputOrder)
      out.push_back({s, first});
    else
      out.push_back({s, ExecutorKind::Independent});
  }
  // The model: guided rows (kNN and its kin) gained from lockstep on the H100 and the H200 only
  // for wide searches (workload_wide), whose paths a warp's sorted queries mostly share; narrow
  // ones pay for the union of paths, so they are not tried under it. Unguided rows try
  // independent threads over the sorted orders last, and lockstep over the input order only
  // where the caller fixed that order (lockstep pays off over an order that groups queries).
  // Second, where it often wins: a budget that cuts the trial short has tried it.
  if (any_executor && guided && wide && schedules.front() != ScheduleKind::InputOrder)
    out.insert(out.begin() + 1, {schedules.front(), ExecutorKind::FsmLockstep});
  if (any_executor && !guided) {
    for (ScheduleKind s : schedules)
      if (s != ScheduleKind::InputOrder) out.push_back({s, ExecutorKind::Independent});
    if (!any_schedule && opt.schedule == ScheduleKind::InputOrder) out.push_back({opt.schedule, first});
  }
  if (any_schedule && !guided) out.push_back({ScheduleKind::InputOrder, any_executor ? ExecutorKind::Independent : opt.executor});
  return out;
}

void drop_twins(std::vector<AutoPick>& candidates, ScheduleKind twin, ScheduleKind of) {
  std::vector<AutoPick> kept;
  for (const AutoPick& c : candidates) {
    const bool repeat = c.schedule == twin && std::any_of(candidates.begin(), candidates.end(), [&](const AutoPick& o) {
                          return o.schedule == of && o.executor == c.executor;
                        });
    if (!repeat) kept.push_back(c);
  }
  candidates.swap(kept);
}

index_t auto_sample_size(index_t n, std::size_t candidates) {
  // Each candidate once, the close ones twice: about candidates + 2 runs of the sample, which
  // should come to about one call (the budget, twice that, then stops the trial).
  const double share = 1.0 / static_cast<double>(candidates + 2);
  const index_t m = static_cast<index_t>(share * static_cast<double>(n));
  return std::min(n, std::max(kAutoSampleMin, std::min(kAutoSample, m)));
}

SampleRuns sample_runs(index_t n, index_t m, int blocks) {
  if (m >= n || blocks < 1 || blocks > kAutoBlocks)
    throw Error("sample_runs: " + std::to_string(m) + " of " + std::to_string(n) + " queries in " +
                std::to_string(blocks) + " blocks (at most " + std::to_string(kAutoBlocks) + ")");
  SampleRuns r;
  r.each = std::max<index_t>(1, m / blocks);
  r.blocks = blocks;
  for (int b = 0; b < blocks; ++b) {
    // Block b starts at the b-th of `blocks` even divisions of the room left beside the blocks.
    const index_t start = static_cast<index_t>((n - r.each * blocks) * static_cast<double>(b) / std::max(1, blocks - 1));
    r.first[b] = std::min(start + b * r.each, n - r.each);
  }
  return r;
}

std::vector<index_t> block_sample(const index_t* order, index_t n, index_t m, int blocks) {
  std::vector<index_t> rows;
  if (m >= n || blocks < 1) {
    rows.resize(static_cast<std::size_t>(n));
    for (index_t i = 0; i < n; ++i) rows[i] = order ? order[i] : i;
    return rows;
  }
  // The blocks neither overlap nor repeat a position, and `order` is a permutation: the rows are
  // distinct as they come (sorting them cost the trial 20 ms at 2^18 rows).
  const SampleRuns r = sample_runs(n, m, std::min(blocks, kAutoBlocks));
  rows.resize(static_cast<std::size_t>(r.size()));
  tbb::parallel_for(0, r.blocks, [&](int b) {
    index_t* out = rows.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(r.each);
    for (index_t i = r.first[b]; i < r.first[b] + r.each; ++i) *out++ = order ? order[i] : i;
  });
  return rows;
}

namespace {
std::mutex auto_mutex;
struct AutoEntry {
  AutoChoice::Key key;
  AutoPick pick;
  bool settled;
};
std::vector<AutoEntry>& auto_picks() {
  static std::vector<AutoEntry> picks;
  return picks;
}
}  // namespace

bool AutoChoice::Key::operator==(const Key& o) const {
  return workload == o.workload && height == o.height && tree_scale == o.tree_scale && scale == o.scale &&
         device == o.device && schedule == o.schedule && executor == o.executor && depth == o.depth &&
         pipeline == o.pipeline && budget == o.budget && probe == o.probe && row_cap == o.row_cap;
}

AutoChoice::Key AutoChoice::key(std::size_t workload, int height, index_t tree_size, index_t n, Device device,
                                const TraversalOptions& opt) {
  Key k;
  k.workload = workload;
  k.height = height;
  k.tree_scale = size_class(static_cast<std::uint64_t>(std::max<index_t>(tree_size, 0)));
  k.scale = size_class(static_cast<std::uint64_t>(std::max<index_t>(n, 0)));
  k.device = static_cast<int>(device);
  k.schedule = static_cast<int>(opt.schedule);
  k.executor = static_cast<int>(opt.executor);
  k.depth = opt.depth;
  k.pipeline = opt.pipeline ? 1 : 0;
  k.budget = opt.memory_budget > 0 ? 1 : 0;
  k.probe = opt.probe ? static_cast<int>(*opt.probe) + 1 : 0;
  k.row_cap = opt.row_cap;
  return k;
}

bool AutoChoice::find(const Key& k, AutoPick* pick, bool* settled) {
  std::lock_guard<std::mutex> lock(auto_mutex);
  for (const AutoEntry& e : auto_picks())
    if (e.key == k) {
      *pick = e.pick;
      if (settled) *settled = e.settled;
      return true;
    }
  return false;
}

void AutoChoice::remember(const Key& k, AutoPick pick, bool settled) {
  std::lock_guard<std::mutex> lock(auto_mutex);
  for (AutoEntry& e : auto_picks())
    if (e.key == k) {
      // A settled pick is never demoted to a provisional one (two threads' first calls).
      if (settled || !e.settled) e = {k, pick, settled};
      return;
    }
  auto_picks().push_back({k, pick, settled});
}

void AutoChoice::forget_all() {
  std::lock_guard<std::mutex> lock(auto_mutex);
  auto_picks().clear();
}

namespace {
std::string mib(std::size_t b) { return std::to_string((b + (1u << 20) - 1) >> 20) + " MiB"; }
}  // namespace

index_t budget_batch(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t per_query_bytes,
                     std::size_t matrix_bytes_per_query) {
  if (opt.memory_budget == 0 || n == 0) return n;
  const std::size_t budget = opt.memory_budget;
  if (tree_bytes >= budget)
    throw OutOfMemory("the tree needs " + mib(tree_bytes) + " of GPU memory, more than the memory budget (memory_budget = " +
                mib(budget) + ")");
  // While the queries and results fit, the matrix is what gets chunked (plan_run).
  if (tree_bytes + static_cast<std::size_t>(n) * per_query_bytes <= budget) return n;
  const std::size_t each = per_query_bytes + matrix_bytes_per_query;
  const index_t batch = static_cast<index_t>((budget - tree_bytes) / each);
  if (batch < 1)
    throw OutOfMemory("one query needs " + std::to_string(each) + " bytes of GPU memory and only " +
                std::to_string(budget - tree_bytes) + " bytes of the memory budget are left after the tree");
  return batch;
}

void append_batch(TraversalStats& all, TraversalStats&& part, index_t first, bool first_batch) {
  if (first_batch) {
    all.device = part.device;
    all.depth = part.depth;
    all.schedule_kind = part.schedule_kind;
    all.executor_kind = part.executor_kind;
  }
  all.times.inspect_ms += part.times.inspect_ms;
  all.times.schedule_ms += part.times.schedule_ms;
  all.times.execute_ms += part.times.execute_ms;
  all.pipeline.chunks += part.pipeline.chunks;
  all.pipeline.chunk = std::max(all.pipeline.chunk, part.pipeline.chunk);
  all.pipeline.wall_ms += part.pipeline.wall_ms;
  all.pipeline.inspect_ms += part.pipeline.inspect_ms;
  all.pipeline.schedule_ms += part.pipeline.schedule_ms;
  all.pipeline.execute_ms += part.pipeline.execute_ms;
  all.pipeline.execute_only_ms += part.pipeline.execute_only_ms;
  all.warp_nodes.insert(all.warp_nodes.end(), part.warp_nodes.begin(), part.warp_nodes.end());
  all.gpu_warp_nodes.insert(all.gpu_warp_nodes.end(), part.gpu_warp_nodes.begin(), part.gpu_warp_nodes.end());
  const index_t base = static_cast<index_t>(all.schedule.order.size());
  for (index_t q : part.schedule.order) all.schedule.order.push_back(q + first);
  if (all.schedule.bucket_offsets.empty()) all.schedule.bucket_offsets.push_back(0);
  for (std::size_t i = 1; i < part.schedule.bucket_offsets.size(); ++i)
    all.schedule.bucket_offsets.push_back(part.schedule.bucket_offsets[i] + base);
}

RunPlan plan_run(const TraversalOptions& opt, index_t n, std::size_t tree_bytes, std::size_t fixed_bytes,
                 std::size_t per_query_bytes, std::size_t free_bytes) {
  // Without a budget the tree, queries and results are already on the device: what is free
  // is what the matrix may take.
  const bool budgeted = opt.memory_budget > 0;
  const std::size_t budget = budgeted ? opt.memory_budget : free_bytes;
  const std::string what = budgeted ? "the memory budget (memory_budget = " + mib(budget) + ")"
                                    : "the GPU's free memory (" + mib(budget) + ")";
  if (budgeted && tree_bytes > budget)
    throw OutOfMemory("the tree needs " + mib(tree_bytes) + " of GPU memory, more than " + what);
  if (budgeted && fixed_bytes > budget)
    throw OutOfMemory("the tree, queries and results need " + mib(fixed_bytes) + " of GPU memory, more than " + what +
                "; pass fewer queries per call");
  const std::size_t room = budgeted ? budget - fixed_bytes : free_bytes;
  const index_t fit = per_query_bytes ? static_cast<index_t>(room / per_query_bytes) : n;
  RunPlan p;
  // Whole (one slot's worth per query), the matrix needs n / 2 of `fit`'s two-slot queries.
  p.pipelined = opt.pipeline || 2 * fit < n;
  if (!p.pipelined) return p;
  if (fit < 1)
    throw OutOfMemory("the scheduling matrix needs " + std::to_string(per_query_bytes) + " bytes per query and only " +
                std::to_string(room) + " bytes of " + what + " are left after the tree, queries and results");
  p.chunk = opt.chunk > 0 ? opt.chunk : std::max<index_t>(65536, (n + 7) / 8);
  p.chunk = std::max<index_t>(1, std::min({p.chunk, n, fit}));
  return p;
}

}  // namespace canopy
