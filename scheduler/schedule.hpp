// Schedules: a permutation of the queries (the order the executor runs them in) plus bucket
// boundaries. Scheduling only reorders; every executor writes each result at the query's
// original index.
#pragma once

#include <cstdint>
#include <vector>

#include "inspector/scheduling_matrix.hpp"
#include "runtime/common.hpp"

namespace canopy {

struct Schedule {
  std::vector<index_t> order;           // order[i] = the query run at position i
  std::vector<index_t> bucket_offsets;  // bucket b is order[offsets[b] .. offsets[b + 1])

  index_t size() const { return static_cast<index_t>(order.size()); }
  index_t buckets() const { return bucket_offsets.empty() ? 0 : static_cast<index_t>(bucket_offsets.size()) - 1; }
};

// The input order, one bucket.
Schedule input_order(index_t n);

// The paper's sandpile partition-join (§4.2.1): for each column c = 0..L-1 in turn,
// stable-partition the current order into the queries whose row has bit c followed by the
// rest. Computed, TBB-parallel, as the equivalent stable sort of the rows in descending order
// of their value as binary numbers whose last column is the most significant bit (an MSD
// radix sort on the rows' set bits, highest first). Buckets: runs of queries whose highest set
// bit (the last top-leaf they reached) is the same; rows with no bit set come last.
Schedule sandpile(const SchedulingMatrixView& matrix);

// Stable sort of the queries by ascending key (e.g. the leaf a query falls in); buckets are
// runs of equal keys. TBB-parallel.
Schedule sort_by_key(const std::int64_t* keys, index_t n);

}  // namespace canopy
