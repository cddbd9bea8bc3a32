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

#include "inspector/forest_rows.hpp"
#include "core/types.hpp"

namespace canopy {

// Error unless 1 <= depth <= min(16, max_depth) (a top-tree cannot be deeper than the trees).
void check_row_schedule_depth(int depth, int max_depth);

// The execution order: rows stably sorted by adaptive_row_key. `v` must point at host memory.
std::vector<index_t> forest_row_order(const AdaptiveForestView& v, const float* rows, index_t n_rows, int depth);

// dst[i] = rows[order[i]] (rows of `features` floats, device memory), on `stream`: the rows in
// execution order, so that the strategies read them as if unscheduled
// (scheduler/forest_rows_gpu.cu).
void launch_gather_rows(const float* rows, const index_t* order, index_t n_rows, int features, float* dst,
                        stream_t stream);

struct ForestWarpVisits {
  double nodes_per_warp = 0;  // mean over the sampled warps of the distinct nodes its rows visit, summed over trees
  double rows_path_nodes = 0; // the same if no two rows of a warp shared a node: the nodes visited per row x 32
  index_t warps = 0;          // warps sampled
};

// The warp emulator: rows in execution order (order[i] = the row at position i; null: as given)
// form warps of 32; `max_warps` warps spread over the batch are measured.
ForestWarpVisits forest_nodes_per_warp(const AdaptiveForestView& v, const float* rows, index_t n_rows,
                                       const index_t* order, index_t max_warps = 1024);

// How the strategies' forest reads coalesce on this forest and these rows (the warp emulator
// again), for the performance model's COA_rate (scheduler/forest_model.hpp):
//   coalescing_direct        a warp of 32 consecutive rows walking one tree (tree-major copy):
//                            bytes asked (8 per active lane) / bytes moved (32-byte sectors)
//   coalescing_shared_data   a warp of 32 neighbouring trees of the interleaved copy walked for
//                            one row, lanes whose tree has ended idle
//   smem_conflict            the first pattern read from shared memory: a warp read's
//                            wavefronts (8-byte words on 16 bank pairs, equal words broadcast)
//                            over the 2 of a conflict-free read
struct ForestAccessProfile {
  double coalescing_direct = 0.5, coalescing_shared_data = 0.5, smem_conflict = 1;
};
ForestAccessProfile forest_access_profile(const AdaptiveForestView& v, const float* rows, index_t n_rows,
                                          index_t max_warps = 16);

}  // namespace canopy
