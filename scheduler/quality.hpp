// Schedule quality in the paper's terms (Liu, Hegde, Kulkarni ICS'16, §3.1): t(p) is the set of
// tree nodes query p's traversal visits, δ(p, q) their symmetric difference, and a schedule s
// costs Δ(s) = Σ_i |δ(s_i, s_{i+1})| over consecutive queries. Finding the order of least Δ
// (Sched) is NP-hard, but |δ| is a metric, so for any set of queries
//     MST weight <= optimal Δ <= Δ(depth-first preorder of the MST) <= 2 * MST weight
// (a Hamiltonian path is a spanning tree; the preorder shortcuts the doubled tree walk). The MST
// of a sample of queries therefore brackets how far any schedule of them is from the best.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.hpp"

namespace canopy {

// Visit sets in CSR form: set i is nodes[offsets[i] .. offsets[i + 1]), sorted ascending without
// duplicates, node ids >= 0.
struct VisitSets {
  std::vector<std::int64_t> offsets{0};
  std::vector<node_id> nodes;

  index_t size() const { return static_cast<index_t>(offsets.size()) - 1; }
  const node_id* data(index_t i) const { return nodes.data() + offsets[i]; }
  std::int64_t count(index_t i) const { return offsets[i + 1] - offsets[i]; }
  // Appends one set; throws canopy::Error unless it is strictly ascending and >= 0.
  void add(const node_id* sorted_unique, std::size_t n);
};

// |a Δ b| of two sorted, duplicate-free arrays.
std::int64_t symmetric_difference_size(const node_id* a, std::size_t na, const node_id* b, std::size_t nb);

// Δ over n positions of `order` (order[i] indexes sets; a null order is the identity, and then
// n <= sets.size()). TBB-parallel.
std::int64_t schedule_delta(const VisitSets& sets, const index_t* order, index_t n);

// Σ over consecutive groups of `group` positions of `order` (the last may be short) of
// |union of the group's sets|: the nodes lockstep warps of `group` queries visit. A null order is
// the identity. TBB-parallel.
std::int64_t group_union_sum(const VisitSets& sets, const index_t* order, index_t n, int group = 32);

// The difference graph is a dense Boost adjacency matrix of n(n+1)/2 entries of 24 bytes: 3 GiB
// at 16384 sets, and 4x that for every doubling.
constexpr index_t kMaxMstSets = 16384;

struct MstBound {
  std::int64_t weight = 0;          // MST weight: lower bound on the optimal Δ of these sets
  std::vector<index_t> parent;      // the MST: parent[v] of each set, parent[0] = 0 (the root)
  std::vector<index_t> preorder;    // depth-first preorder of the MST from set 0, children ascending
  std::int64_t preorder_delta = 0;  // Δ of that order (<= 2 * weight)
  double graph_ms = 0, mst_ms = 0;  // time to fill the edge weights / to run Prim
};

// Builds the complete difference graph on the sets (boost::adjacency_matrix, undirected, weights
// |δ| filled TBB-parallel) and runs boost::prim_minimum_spanning_tree from set 0. 0 or 1 sets:
// weight 0. More than kMaxMstSets sets throws canopy::Error before allocating anything.
MstBound mst_bound(const VisitSets& sets);

// A uniform random sample of `size` distinct indices from 0..n-1, ascending; the same for the
// same (n, size, seed) on every platform. All of 0..n-1 when size >= n.
std::vector<index_t> sample_indices(index_t n, index_t size, std::uint64_t seed);

// The sample in the order a schedule runs it: sample holds ascending query indices, order is a
// permutation of 0..n-1. Returns the positions 0..sample.size()-1 of `sample` sorted by their
// query's position in order.
std::vector<index_t> restrict_order(const index_t* order, index_t n, const std::vector<index_t>& sample);

}  // namespace canopy
