// Internals the partitioned kd-tree (partitioned_kd.cpp) and the partitioned Barnes-Hut
// (partitioned_bh.cpp) share: the top-tree cut and the byte exchange between ranks.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "distributed/distributed.hpp"
#include "layouts/kdtree.hpp"

namespace canopy {
namespace distributed {
namespace detail {

// The cut both partitioned kinds share: KdTree's own median splits of the points, stopped at
// leaves of about n / 2^depth points (its top-tree), and contiguous runs of those leaves
// balanced by points, one run per rank; every rank computes the same cut.
struct TopCut {
  std::unique_ptr<KdTree> top;
  std::vector<node_id> leaf_node;           // the top-tree's leaves, left to right
  std::vector<int> owner;                   // per leaf
  std::vector<float> boxes;                 // per leaf: lo[dims], hi[dims]
  std::vector<std::vector<index_t>> ids;    // per rank: its points' original indices, ascending
};
TopCut cut_top_tree(const float* points, index_t n, int dims, int depth, int ranks, const char* what);

// MPI_Alltoallv of byte messages: out[d] goes to rank d; returns what every rank sent here, in
// rank order.
std::vector<std::vector<char>> exchange(MPI_Comm comm, const std::vector<std::vector<char>>& out, DistributedStats* st);

}  // namespace detail
}  // namespace distributed
}  // namespace canopy
