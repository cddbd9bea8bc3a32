// The guided scheduler (the paper's §4.2.2, Figures 8-9): a recursive bucket partition of the
// queries by the top-tree leaves they visit, in visit order.
//
// Input: a GuidedMatrixView (row r: the top-leaf columns query r reached, in visit order,
// ending at the first kRowEnd or after `width` entries) and column_parent[0 .. cols), the
// parent node of each column's top-leaf (TopTree::parents()); columns with one parent are
// siblings.
//
// The algorithm, exactly (the TBB-parallel implementation returns what this sequential
// definition returns, whatever the thread count):
//   - Start with one bucket holding the queries 0 .. rows-1 in input order, cursor p = 0. All
//     queries of a bucket share a row prefix of length p, hence the cursor.
//   - A bucket of at most max_bucket queries is emitted as it is, as one final bucket.
//   - A larger bucket is split by each query's key at p:
//       p == 0: the first entry, row[0], alone; the new cursor is 1.
//       p > 0:  the step at p: the longest run row[p], ..., row[p+s-1] (s >= 1) of entries
//               before `width`, not kRowEnd, whose columns all have row[p]'s parent (a visit
//               to a group of siblings, in its order, is one step); the new cursor is p + s.
//     Queries whose row has ended at p (p == width or row[p] == kRowEnd) keep their order and
//     go to the bottom of the bucket's range, as one final bucket. The others form one
//     sub-bucket per key, in ascending key order (steps compare lexicographically as column
//     sequences; a proper prefix comes first), each keeping the queries' order; every
//     sub-bucket is then handled in the same way with its new cursor.
//   - bucket_offsets: 0, the start of every final bucket in schedule order, and rows (strictly
//     increasing; {0, 0} for no rows).
// A final bucket with more than max_bucket queries therefore holds queries with identical
// rows (all ended at once).
//
// Every entry before a row's end must be a column in [0, cols). An entry that the algorithm
// reads and that is not throws canopy::Error (the implementation reads each row's first
// entries whenever rows > max_bucket); so do max_bucket < 1 and a null column_parent with
// cols > 0.
//
// Scratch memory (about 26 bytes per row) is kept per calling thread and reused by its later
// calls: on the host, between two GPU kernels, page faults on fresh buffers cost about as much
// as the scheduling itself.
#pragma once

#include <vector>

#include "inspector/scheduling_matrix.hpp"
#include "core/types.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

// A warp: divergence among this many queries is tolerable (the paper's Figure 9, line 17).
constexpr index_t kGuidedBucketLimit = 32;

// The guided schedule (order + bucket_offsets as in struct Schedule).
Schedule guided_schedule(const GuidedMatrixView& m, const node_id* column_parent,
                         index_t max_bucket = kGuidedBucketLimit);

// The same, writing the order into order[0 .. rows) (caller-owned, e.g. pinned memory) and, if
// bucket_offsets is non-null, the buckets.
void guided_schedule(const GuidedMatrixView& m, const node_id* column_parent, index_t* order,
                     std::vector<index_t>* bucket_offsets, index_t max_bucket = kGuidedBucketLimit);

}  // namespace canopy
