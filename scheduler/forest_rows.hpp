// Inspector-scheduled rows for forests, the CPU side: the scheduler's reference (keys and a
// stable sort, the order the GPU's inspector + radix sort produce too) and the warp emulator
// that measures what an order buys. CUDA-free.
//
// Why a sort key and not the sandpile: every row reaches exactly one top-leaf per tree, so a
// row of the scheduling matrix has n_trees entries (500 to 3,500 here) and the sandpile's
// partition-join would cost O(rows x n_trees) per round. The key instead packs the top-leaves of
// the leading trees (as many as fit 64 bits: 16 trees at depth 4); the leading trees of a
// boosted model carry the largest splits, so rows that agree on them sit in the same region of
// feature space and mostly agree on the later trees too. When n_trees x depth <= 64 the key is
// the whole signature and equal signatures are exactly grouped.
#pragma once

#include <vector>

#include "layouts/forest_adaptive.hpp"
#include "runtime/common.hpp"

namespace canopy {

// Error unless 1 <= depth <= min(16, max_depth) (a top-tree cannot be deeper than the trees).
void check_row_schedule_depth(int depth, int max_depth);

// The execution order: rows stably sorted by adaptive_row_key. `v` must point at host memory.
std::vector<index_t> forest_row_order(const AdaptiveForestView& v, const float* rows, index_t n_rows, int depth);

struct ForestWarpVisits {
  double nodes_per_warp = 0;  // mean over the sampled warps of the distinct nodes its rows visit, summed over trees
  double rows_path_nodes = 0; // the same if no two rows of a warp shared a node: the nodes visited per row x 32
  index_t warps = 0;          // warps sampled
};

// The warp emulator: rows in execution order (order[i] = the row at position i; null: as given)
// form warps of 32; `max_warps` warps spread over the batch are measured.
ForestWarpVisits forest_nodes_per_warp(const AdaptiveForestView& v, const float* rows, index_t n_rows,
                                       const index_t* order, index_t max_warps = 1024);

}  // namespace canopy
