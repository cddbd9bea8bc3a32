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
// Not yet here (issue 21): the distributed tree (points partitioned by top-tree leaves, the
// inspector routing queries with MPI_Alltoallv) and Barnes-Hut, whose API takes no body range.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "core/types.hpp"
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

// The predictions of every row (row-major [n][predictor.n_features()]) into
// out[n][predictor.output_width(options.output)] on every rank, as predictor.predict().
void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n, float* out,
                    const ForestRunOptions& options, DistributedStats* stats = nullptr);

}  // namespace distributed
}  // namespace canopy
