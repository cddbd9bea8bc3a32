// Tahoe's performance model for forest inference (Xie et al., EuroSys '21, section 6.1): the
// hardware parameters, measured once per GPU and cached on disk, and equations 1-7, which
// predict the time per row of each inference strategy so that the fastest one can be chosen
// for a batch (Algorithm 1). CUDA-free: callable from any C++ code; the measurement itself is
// in scheduler/forest_model_gpu.hpp.
//
// Units throughout: times in ns (per row where it says so), sizes in bytes, bandwidths in
// GB/s, which is bytes per ns, so bytes / bandwidth is ns.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "executor/forest_schedule.hpp"

namespace canopy {

// Table 1's hardware parameters. Measured once per GPU (measure_forest_hardware) and cached.
struct ForestHardware {
  std::string device_name;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  std::string device_uuid;  // cudaDeviceProp::uuid as 32 lower-case hex digits; identifies the GPU
  int sm_count = 0;
  // BW_RSMEM and BW_WSMEM: 4-byte shared-memory reads and writes, whole GPU, GB/s.
  double smem_read_gbs = 0, smem_write_gbs = 0;
  // BW^COA_GMEM: coalesced 16-byte global reads; BW^NCOA_GMEM: random 4-byte global reads over
  // an array larger than L2, counted as 4 bytes each. Whole GPU, GB/s.
  double gmem_coalesced_gbs = 0, gmem_uncoalesced_gbs = 0;
  // B_rate: GPU time of one block-wide sum reduction (one float per thread, every SM busy
  // reducing), divided by the threads of the block: ns per thread per reduction. So
  // B_rate * threads is what one reduction costs the GPU, i.e. per row when each row is
  // reduced once.
  double block_reduce_ns_per_thread = 0;
  // G_rate: time of one cross-block reduction of a batch (a segmented sum of P partial sums
  // per row over the measurement's batch of rows), divided by P: ns per block (partial). So
  // G_rate * blocks is one batch's global reduction.
  double global_reduce_ns_per_block = 0;
  // Canopy's additions (version 2), for its extension of the model (estimate_forest_batch):
  // random 4-byte reads within a 32 KiB window per block, i.e. attribute reads of rows already
  // in L1 (a row's attributes are read D_tree * N_trees times; only the first read misses);
  double gmem_cached_random_gbs = 0;
  // one dependent load's latency: a pointer chase through 8 MiB (L2-resident) and through
  // shared memory; and the cost of one kernel launch in a stream.
  double gmem_latency_ns = 0, smem_latency_ns = 0, launch_ns = 0;
  int version = 2;  // of this record's format; a cache of another version is measured again
};

// The forest and batch quantities of Table 1.
struct ForestCostInputs {
  double n_batch = 0;         // N_batch: rows in the batch
  double sample_bytes = 0;    // S_sample: features * 4
  double n_trees = 0;         // N_trees
  double avg_depth = 0;       // D_tree: average root-to-leaf path length actually walked (nodes visited per tree)
  double node_bytes = 0;      // S_node
  double attr_bytes = 4;      // S_att
  double nodes_per_tree = 0;  // N_nodes (average)
  double forest_bytes = 0;    // S_forest
  double smem_bytes = 0;      // shared memory one block may use
  int threads_per_block = 128;  // Num_of_threads
  // Num_of_thrd_blocks of equation 3: the blocks whose partial sums the global reduction
  // adds per row. Only splitting shared forest has a global reduction; there it is the number
  // of parts (each part's blocks write one partial per row). Shared data does not use it.
  double blocks = 0;
  double parts = 1;  // splitting shared forest: how many parts the forest is cut into
};

// The strategies the model estimates (the adaptive layout's kernels), in the model's order:
// estimate_forest_costs gives one estimate per entry in this order, and choose_forest_strategy
// breaks ties towards the earlier one. Hybrid (hierarchical layout) and Auto (a choice among
// these) are not among them.
inline constexpr ForestKernel kForestModelStrategies[] = {ForestKernel::SharedData, ForestKernel::Direct,
                                                          ForestKernel::SharedForest, ForestKernel::SplitSharedForest};

struct ForestCostEstimate {
  ForestKernel strategy = ForestKernel::Direct;
  bool feasible = false;  // whether the strategy's data fits in shared memory
  double ns_per_row = 0;  // T of equation 1: the sum of the four terms below
  double smem_ns = 0, gmem_ns = 0, block_reduce_ns = 0, global_reduce_ns = 0;  // T_SMEM, T_GMEM, T_B_REDU, T_G_REDU
};

// Equations 1-7 of the paper, one estimate per strategy, in kForestModelStrategies' order.
// The terms are computed for every strategy; `feasible` says which may run:
//   shared data           the sample fits: sample_bytes <= smem_bytes
//   direct                always
//   shared forest         the forest fits: forest_bytes <= smem_bytes
//   split shared forest   each part fits:  forest_bytes / parts <= smem_bytes
// Error if an input is negative or not finite, n_batch, threads_per_block or parts is < 1,
// or a bandwidth of `hw` is not positive.
std::vector<ForestCostEstimate> estimate_forest_costs(const ForestCostInputs& in, const ForestHardware& hw);

// The feasible strategy with the smallest estimate (ties: the first in `est`, i.e.
// kForestModelStrategies' order). Error if none is feasible.
ForestKernel choose_forest_strategy(const std::vector<ForestCostEstimate>& est);

// ---- Canopy's extension of the model --------------------------------------------------------
// Equations 1-7 as printed cannot rank the strategies on an H100 (measured, benchmarks/RESULTS.md): (1) their
// attribute reads assume DRAM-random accesses, while a row's attributes are re-read from L1 (or
// shared memory); (2) they charge the forest reads of every strategy at half the coalesced
// bandwidth, while the real ratio depends on the strategy: a warp of rows walking one tree
// mostly shares nodes, a warp of trees walked by one row does not; (3) they give a row's time
// when the batch fills the GPU, while a small batch is bound by its longest dependent chain.
// Canopy keeps the equations' structure and changes exactly these: BW^NCOA -> the cached
// random bandwidth (or shared memory when the rows are staged there), BW^COA / 2 -> BW^COA x
// the strategy's coalescing ratio measured on this forest and batch by the warp emulator (the
// COA_rate that Algorithm 1 lists among the forest's inputs), and a batch takes
//   max(N_batch x T (eq. 1), critical path + launches x launch_ns),
// the critical path being the dependent visits of the longest thread times the measured
// latencies, times the waves of blocks. When a shape carries a calibrated time per row (the
// strategy timed once on this forest with the GPU full), it replaces T.
struct ForestShape {
  ForestKernel strategy = ForestKernel::Direct;
  double coalescing = 0.5;     // forest reads in global memory: bytes asked / bytes moved (> 1: shared)
  double smem_conflict = 1;    // forest reads in shared memory: wavefronts per warp read over a
                               // conflict-free read's (0.5 .. 16; below 1: broadcasts)
  bool rows_in_smem = false;   // the attributes come from shared memory
  double chain_steps = 0;      // dependent tree steps on the longest thread's path (per launch)
  double load_steps = 0;       // dependent global loads staging shared memory (per launch)
  double waves = 1;            // times the batch's blocks fill the GPU, one after the other
  double launches = 1;
  // > 0: the strategy's time per row on this forest when the GPU is full, measured once
  // (replaces the bandwidth terms: the kernels are bound by latency and issue, which the
  // bandwidths do not see; docs/forests.md, "The performance model").
  double calibrated_row_ns = 0;
  // > 0: the strategy's time for a small calibration batch on this forest (its critical path
  // and launches, measured); the batch's estimate is then never below it.
  double calibrated_small_ns = 0;
};

struct ForestBatchEstimate {
  ForestKernel strategy = ForestKernel::Direct;
  bool feasible = false;
  double row_ns = 0;         // eq. 1 with Canopy's terms
  double throughput_ns = 0;  // N_batch x row_ns
  double path_ns = 0;        // the critical path with the launches (at least the calibrated small batch's)
  double batch_ns = 0;       // max(throughput, path)
};

// One estimate per shape (the strategies the caller can run), feasible and fastest first.
// Error if a shape's strategy is not in kForestModelStrategies.
std::vector<ForestBatchEstimate> estimate_forest_batch(const ForestCostInputs& in, const std::vector<ForestShape>& shapes,
                                                       const ForestHardware& hw);

// The on-disk cache. Default path: $CANOPY_CACHE_DIR/forest_hardware.json, else
// $XDG_CACHE_HOME/canopy/forest_hardware.json, else $HOME/.cache/canopy/forest_hardware.json
// (empty variables count as unset); "" when none of them is set.
std::string default_forest_hardware_cache();

// Reads `path`; returns false (no throw) if it is missing, unreadable, malformed (not JSON, a
// field missing or of the wrong type, a bandwidth not positive), of another version, or for
// another device (device_uuid or device_name differs from `expected_*`). *why, when given,
// says which.
bool load_forest_hardware(const std::string& path, const std::string& expected_name, const std::string& expected_uuid,
                          ForestHardware* out, std::string* why = nullptr);

// Writes `hw` as JSON to `path`, creating the directories; the file is replaced atomically
// (written beside it, then renamed), so a concurrent reader sees the old or the new record.
// Error naming the path on failure.
void save_forest_hardware(const std::string& path, const ForestHardware& hw);

// Loads the cache at `path` for the device (name, uuid), or calls measure() and saves its
// result there. *measured, when given, says which happened. measure()'s record must be for
// that device (an empty name or uuid in it is filled in; another one is an Error). An empty
// `path` means no cache: measure() is always called and nothing is written. An Error from
// saving propagates. Calls from several threads take turns (one measures, the next loads).
ForestHardware load_or_measure_forest_hardware(const std::string& path, const std::string& name, const std::string& uuid,
                                               const std::function<ForestHardware()>& measure, bool* measured = nullptr);

}  // namespace canopy
