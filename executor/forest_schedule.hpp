// How a forest runs on the GPU: the strategy (kernel) and its schedule parameters. The
// executor's launchers read them; the runtime's predictor and the performance model choose them.
// CUDA-free.
#pragma once

#include <string>

namespace canopy {

// The GPU kernels (the CPU has one executor, TBB tasks over rows, and ignores the choice).
enum class ForestKernel {
  Direct,        // one thread per row over every tree (Tahoe's "direct", the paper's independent)
  Hybrid,        // Shah et al.: root subtrees in shared memory, the rest from global memory;
                 // hierarchical layout only
  SharedData,    // FIL / Tahoe "shared data": rows cached in shared memory, the trees split across
                 // the threads of a block, each chunk's leaves added in tree order
  SharedForest,  // Tahoe: the whole forest in shared memory, a thread per row; adaptive layout,
                 // forests that fit
  SplitSharedForest,  // Tahoe: the forest in parts that fit shared memory, one pass of
                      // persistent blocks per part, sums carried between parts; adaptive layout
  Auto,          // adaptive layout: the strategy Tahoe's performance model predicts fastest
};
const char* to_string(ForestKernel k);
// "direct", "shared-data", "shared-forest", "split-shared-forest", "hybrid", "auto".
ForestKernel parse_forest_kernel(const std::string& name);

// How an adaptive-layout strategy runs: SilvanForge's schedule parameters. 0 (or -1 for
// cache_rows) takes the strategy's default.
struct ForestSchedule {
  int block_threads = 0;    // threads per block: 32 .. 1024, a multiple of 32
  int rows_per_thread = 0;  // direct, shared forest: rows one thread walks together (1, 2, 4)
  int tree_interleave = 0;  // direct, shared forest: trees one thread walks at once (1, 2);
                            // shared data: (row, tree) walks one thread takes at once (1, 2, 4)
  int cache_rows = -1;      // direct: stage the block's rows in shared memory (1) or read them
                            // from global memory (0)
  int tree_sync = -1;       // direct: a block barrier every tree_sync trees (0: none), so the
                            // block's warps read the same trees while they are in L1
  int rows_per_block = 0;   // shared data: rows a block caches (default: one pass)
  int tree_group = 0;       // shared data: rows per pass, 1 .. 64; the threads split the pass's
                            // (row, tree) walks, then add each row's leaves in canonical order
  int interleaved = -1;     // shared data: walk the slot-interleaved copy (1) or the tree-major
                            // nodes (0), whose sectors hold a node's two children
  int top_rows = -1;        // shared data, interleaved: the copy's first node rows (the trees'
                            // top levels, breadth-first) staged in shared memory (0: none)
  int part_kib = 0;         // splitting shared forest: shared memory per part, KiB
  std::string describe() const;  // "block 128, rows/thread 2, ..." (defaults resolved by the engine)
  bool operator==(const ForestSchedule& o) const;
  bool is_default() const { return *this == ForestSchedule{}; }  // every knob left to the engine
};

}  // namespace canopy
