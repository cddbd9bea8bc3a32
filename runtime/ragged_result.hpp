// What a ragged call (runtime/ragged.hpp: outputs of varying size per query) takes and gives:
// its options, its statistics, the caller's item buffer and host-vector results. CUDA-free and
// light: the workloads' public headers include it.
#pragma once

#include <functional>
#include <vector>

#include "runtime/options.hpp"

namespace canopy {

// The options of a ragged call: the traversal's, and whether each query's items are sorted
// ascending (Item must then be arithmetic; otherwise they come in the order the visitor emits them).
struct RaggedOptions : TraversalOptions {
  bool sort = false;
};

// A ragged call's statistics. The TraversalStats part is the count pass's (phase times,
// schedule and executor, depth, trials; `schedule` with keep_schedule: the order both passes
// ran) except wall_ms, which is the whole call's.
struct RaggedStats : TraversalStats {
  index_t total = 0;         // items in all: offsets[n]
  double scan_ms = 0;        // the exclusive scan of the counts (GPU: CUB's, device time)
  double fill_ms = 0;        // the fill pass's executor (all batches)
  double sort_ms = 0;        // sorting each query's items (opt.sort)
  double copy_ms = 0;        // GPU: the items and offsets copied to host memory
  index_t fill_batches = 0;  // the fill in batches of queries whose items fit the memory (GPU)
  // The two passes and what lies between them: count + scan + fill + sort + copies.
  double lists_ms() const { return times.total_ms() + scan_ms + fill_ms + sort_ms + copy_ms; }
};

// Where a call puts its items: called once, when the count pass has given their number, it
// returns room for `total` items (host or device memory; null allowed when total is 0).
template <class Item>
using ItemBuffer = std::function<Item*(index_t total)>;

// A ragged call's results in host vectors.
template <class Item>
struct RaggedResult : RaggedStats {
  std::vector<index_t> offsets;  // [n + 1]
  std::vector<Item> items;       // [offsets[n]]
};

}  // namespace canopy
