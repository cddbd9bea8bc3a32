// Schedules: a permutation of the queries (the order the executor runs them in) plus bucket
// boundaries. Scheduling only reorders; every executor writes each result at the query's
// original index.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "inspector/scheduling_matrix.hpp"
#include "core/types.hpp"

namespace canopy {

// How the queries are ordered before the executor runs them.
enum class ScheduleKind {
  InputOrder,    // run the queries as given
  Hybrid,        // inspector over the top-tree + the CPU scheduler (the paper's design: the
                 // matrix crosses to the host): the sandpile for unguided traversals, the
                 // recursive buckets for guided ones
  HybridDevice,  // the same schedule, bit for bit, computed on the GPU next to the matrix
                 // (the sandpile, or the recursive buckets for binary top-trees; otherwise the
                 // CPU's); on the CPU device the same as Hybrid
  LeafSort,      // the hand-tuned baseline: sort by the leaf each query falls in (kd, ball and
                 // vp trees) or by Morton code (Barnes-Hut)
  HybridKey,     // inspector -> one compact key per query (inspect_key, inspector/inspector.hpp)
                 // -> a stable radix sort (CUB on the GPU, its CPU twin gives the same order);
                 // the top-tree depth follows the query count (key_depth, runtime/engine.hpp)
  Auto,          // the runtime chooses, by a trial, per tree and batch-size class (AutoChoice)
};
inline const char* to_string(ScheduleKind k) {
  static constexpr const char* kNames[] = {"input-order", "hybrid", "hybrid-device", "leaf-sort", "hybrid-key",
                                           "auto"};
  return enum_name(k, kNames);
}
// Whether a schedule inspects the top-tree (and so has a depth).
inline bool uses_top_tree(ScheduleKind k) {
  return k == ScheduleKind::Hybrid || k == ScheduleKind::HybridDevice || k == ScheduleKind::HybridKey;
}

struct Schedule {
  std::vector<index_t> order;           // order[i] = the query run at position i
  std::vector<index_t> bucket_offsets;  // bucket b is order[offsets[b] .. offsets[b + 1])

  index_t size() const { return static_cast<index_t>(order.size()); }
  index_t buckets() const { return bucket_offsets.empty() ? 0 : static_cast<index_t>(bucket_offsets.size()) - 1; }
};

// Bucket boundaries of a schedule: 0, every position whose key differs from the previous
// position's, and n. key(i) is the key of the query at position i.
template <class KeyAt>
std::vector<index_t> bucket_boundaries(index_t n, KeyAt&& key) {
  std::vector<index_t> offsets{0};
  if (n == 0) return {0, 0};
  auto prev = key(0);
  for (index_t i = 1; i < n; ++i) {
    auto k = key(i);
    if (k != prev) offsets.push_back(i);
    prev = k;
  }
  offsets.push_back(n);
  return offsets;
}

// The highest set column of row r (-1 when it has none): the sandpile's bucket key.
index_t highest_column(const SchedulingMatrixView& m, index_t r);

// The input order, one bucket.
Schedule input_order(index_t n);

// The paper's sandpile partition-join (§4.2.1): for each column c = 0..L-1 in turn,
// stable-partition the current order into the queries whose row has bit c followed by the
// rest. Computed, TBB-parallel, as the equivalent stable sort of the rows in descending order
// of their value as binary numbers whose last column is the most significant bit (an MSD
// radix sort on the rows' set bits, highest first). Buckets: runs of queries whose highest set
// bit (the last top-leaf they reached) is the same; rows with no bit set come last.
Schedule sandpile(const SchedulingMatrixView& matrix);

// The same sandpile, keeping its scratch memory from call to call: on a fast GPU's timescale
// the page faults of freshly allocated buffers cost more than the sort itself. Writes the
// order into order[0 .. rows) and, if bucket_offsets is given, the buckets.
class SandpileScheduler {
 public:
  SandpileScheduler();
  ~SandpileScheduler();
  void run(const SchedulingMatrixView& matrix, index_t* order, std::vector<index_t>* bucket_offsets = nullptr);

 private:
  struct Workspace;
  std::unique_ptr<Workspace> ws_;
};

// Stable sort of the queries by ascending key (e.g. the leaf a query falls in); buckets are
// runs of equal keys. TBB-parallel.
Schedule sort_by_key(const std::int64_t* keys, index_t n);
// The same for unsigned keys (HybridKey's CPU twin): the order a stable radix sort gives.
Schedule sort_by_key(const std::uint64_t* keys, index_t n);
// The same for keys in 0..max_key with max_key small beside n (a leaf id per query): a counting
// sort, O(n + max_key) on one core, where the comparison sort cost 72 ms at 400,000 queries.
Schedule sort_by_small_key(const std::uint32_t* keys, index_t n, std::uint32_t max_key);

}  // namespace canopy
