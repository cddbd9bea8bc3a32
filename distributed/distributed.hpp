// Canopy over MPI, one process per GPU (optional: -DCANOPY_WITH_MPI=ON builds canopy_mpi).
//
// Replicated tree, sharded queries: every rank holds the whole tree or forest (built from the
// same input), runs a contiguous share of the queries or rows through the single-process API
// with its own options (device, schedule, ...), and the results are gathered on every rank in
// the original order. Each query's answer is the single-process answer, so the gathered
// results equal a one-process run bit for bit (counts, neighbours, forest predictions).
//
// Every call is collective over `comm`. A rank whose share fails (bad input, no memory) makes
// the call fail on every rank with that rank's message, before any result travels: no rank is
// left waiting in a collective.
//
// Distributed tree (PartitionedKdTree): the points are cut by a top-tree into 2^depth leaves;
// each rank owns a contiguous run of them, balanced by point count, and builds its own tree
// (on its device) over its points only. A query goes to the ranks whose top leaves it can
// reach, which the top-tree's boxes decide; partial results travel back with MPI_Alltoallv
// and combine: counts add, and kNN candidates merge by (distance, index) after the rank that
// owns the query's leaf has answered first and its k-th distance bounds the other ranks.
//
// Barnes-Hut is replicated only: every rank holds the whole octree and computes the forces on
// its share of the bodies (BarnesHut::run over a body range), gathered in body order, bit for
// bit the one-process forces. Not yet here (issue 21): Barnes-Hut over a partitioned octree,
// and the routing done by the GPU inspector (the boxes are tested on the host).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/types.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/forest_predictor.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"

namespace canopy {
namespace distributed {

// Rank `rank`'s share of n items among `ranks`: contiguous, in rank order, sizes differing by
// at most one (the first n % ranks ranks take one more). Every item belongs to one rank.
struct Share {
  index_t begin = 0;
  index_t count = 0;
};
Share share_of(index_t n, int rank, int ranks);

// What one collective call did, as this rank saw it.
struct DistributedStats {
  int ranks = 1;
  index_t local_items = 0;        // queries or rows this rank ran
  double local_ms = 0;            // its share, wall clock
  double slowest_local_ms = 0;    // the slowest rank's share
  double total_ms = 0;            // the whole call on this rank, gathering included
  std::uint64_t bytes_moved = 0;  // result bytes this rank sent and received
  double imbalance = 1;           // slowest share / mean share (1: perfectly balanced)
};

// The radius counts of every query (row-major [n][tree dims]), as pc.run(queries, n, options).
PcResult point_correlation(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                           const PcOptions& options, DistributedStats* stats = nullptr);

// The k nearest neighbours of every query, as nn.run(queries, n, options).
KnnResult nearest_neighbors(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                            const KnnOptions& options, DistributedStats* stats = nullptr);

// The forces on every body of bh's octree, [bodies][3] in body order on every rank, as
// bh.run(options): each rank computes a contiguous share of the bodies.
BhResult barnes_hut(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, DistributedStats* stats = nullptr);

// The predictions of every row (row-major [n][predictor.n_features()]) into
// out[n][predictor.output_width(options.output)] on every rank, as predictor.predict().
void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n, float* out,
                    const ForestRunOptions& options, DistributedStats* stats = nullptr);

// A kd-tree whose points are split among the ranks of `comm` by its top-tree.
class PartitionedKdTree {
 public:
  // Collective. Every rank passes the same points [n][dims] (read from the same file): the
  // top-tree of `depth` levels (median splits, as KdTree's, 2^depth leaves, at least one per
  // rank) is cut on the host the same way on every rank, and each rank builds its local tree
  // (options.device) over the points of its top leaves, in their original order.
  PartitionedKdTree(MPI_Comm comm, const float* points, index_t n, int dims, int depth,
                    const KdTreeOptions& options = {});

  const KdTree& local() const { return *local_; }
  // The original index of each local point (ascending).
  const std::vector<index_t>& local_ids() const { return ids_; }
  index_t global_size() const { return n_; }
  int dims() const { return dims_; }
  int ranks() const { return ranks_; }
  // Per top leaf: its owner rank and its box (lo[dims] then hi[dims]).
  const std::vector<int>& leaf_owner() const { return owner_; }
  const std::vector<float>& leaf_boxes() const { return boxes_; }
  // The rank whose top leaf a point descends into (the split planes of the top-tree).
  int owner_of(const float* q) const;

 private:
  MPI_Comm comm_;
  index_t n_ = 0;
  int dims_ = 0, ranks_ = 1;
  std::unique_ptr<KdTree> top_;  // the top-tree: leaves of about n / 2^depth points
  std::unique_ptr<KdTree> local_;
  std::vector<index_t> ids_;
  std::vector<int> owner_;         // per top-tree leaf node, in left-to-right order
  std::vector<node_id> leaf_node_; // the top-tree's leaf node ids, left to right
  std::vector<float> boxes_;
};

// Radius counts against a partitioned tree: every rank answers its share of the queries by
// routing them to the ranks whose top leaves the query ball reaches.
PcResult point_correlation(MPI_Comm comm, const PartitionedKdTree& tree, PointCorrelation& local,
                           const float* queries, index_t n, const PcOptions& options,
                           DistributedStats* stats = nullptr);

// k nearest neighbours against a partitioned tree (`local` searches tree.local()).
KnnResult nearest_neighbors(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                            const float* queries, index_t n, const KnnOptions& options,
                            DistributedStats* stats = nullptr);

}  // namespace distributed
}  // namespace canopy
