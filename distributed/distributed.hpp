// Canopy over MPI, one process per GPU (optional: -DCANOPY_WITH_MPI=ON builds canopy_mpi).
//
// Replicated tree, sharded queries: every rank holds the whole tree or forest (built from the
// same input), runs a share of the queries or rows through the single-process API with its own
// options (device, schedule, ...), and the results are gathered on every rank in the original
// order. The share is a contiguous run of the input, or, for pc and kNN into buffers, of the
// queries' spatial order (Shard below). Each query's answer is the single-process answer, so the gathered
// results equal a one-process run bit for bit (counts, neighbours, forest predictions).
//
// Every call is collective over `comm`. A rank whose share fails (bad input, no memory) makes
// the call fail on every rank with that rank's message, before any result travels: no rank is
// left waiting in a collective.
//
// Distributed tree (PartitionedKdTree): the points are cut by a top-tree into 2^depth leaves;
// each rank owns a contiguous run of them, balanced by point count, and builds its own tree
// (on its device) over its points only. A query goes to the ranks whose top leaves it can
// reach; partial results travel back with MPI_Alltoallv and combine: counts add, and kNN
// candidates merge by (squared distance, index) after the rank that owns the query's leaf has
// answered first and its k-th distance bounds the other ranks. The inspector is the router for
// radius queries: each query's walk through the top-tree with the point-correlation visitor
// (the same box test its traversals make; inspect_row, on the host's threads) reaches the top
// leaves whose owners get the query.
//
// Forests: replicated (predict_forest), or split by trees (PartitionedForest).
//
// Barnes-Hut, replicated: every rank holds the whole octree and computes the forces on its share
// of the bodies (BarnesHut::run over a body range), bit for bit the one-process forces.
// Partitioned (PartitionedBarnesHut): each rank holds its own bodies and imports the locally
// essential part of the others'. Queries in device memory take the partitioned tree's device
// path (point_correlation_into and nearest_neighbors_into below): routed, moved and combined on
// the GPUs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/forest_predictor.hpp"
#include "layouts/octree.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"

namespace canopy {
namespace distributed {

// Where a call's results go. Every rank computes the results of its share (share_of below);
// moving them is what limits the speedup of a replicated call (RESULTS.md, "Beyond one GPU").
enum class Gather {
  All,    // every rank gets every result, in the original order (MPI_Allgatherv)
  Root,   // rank 0 gets every result; the others keep their own share, as Local
  Local,  // every rank keeps its own share's results only: nothing travels
};
const char* to_string(Gather g);
Gather parse_gather(const std::string& name);  // "all", "root" or "local"

// Which queries a rank runs in the replicated pc and kNN calls into the caller's buffers.
enum class Shard {
  Auto,     // Spatial for queries in device memory against a kd-tree, on two ranks or more; else Input
  Input,    // a contiguous run of the input order (share_of)
  Spatial,  // a contiguous run of the queries' SpatialOrder (scheduler/spatial_order.hpp): the
            // cells of the tree's top levels, so a rank's queries are a region of space at the
            // whole set's density, and the GPU touches its part of the tree
};
const char* to_string(Shard s);
Shard parse_shard(const std::string& name);  // "auto", "input" or "spatial"
// The levels of the tree's top cut that Spatial orders by over `ranks` ranks: at least 256
// cells per rank, within the tree's levels above its leaves.
int spatial_shard_depth(const KdTree& tree, int ranks);

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
  double wall_ms = 0;             // the whole call on this rank, gathering included
  std::uint64_t bytes_moved = 0;  // query and result bytes this rank sent and received
  const char* transport = "none";  // how they travelled: "host memory" (MPI), "CUDA IPC", "CUDA-aware MPI"
  // A partitioned call with device queries, step by step on this rank (ms): routing and packing
  // the queries, moving bytes between the ranks (waits for the others included), combining the
  // answers (kNN's replies and merges, pc's sums, the gather's placing); local_ms is the local
  // searches alone there.
  double route_ms = 0, move_ms = 0, combine_ms = 0;
  double imbalance = 1;           // slowest share / mean share (1: perfectly balanced)
};

// The replicated calls' results, by `gather`: with All every rank holds the results of all n
// items in the original order; with Local (and Root on ranks other than 0) the results hold
// this rank's share only, items share_of(n, rank, ranks).begin onwards (these calls shard by
// the input order).

// The radius counts of every query (row-major [n][tree dims]), as pc.run(queries, n, options).
PcResult point_correlation(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                           const PcOptions& options, DistributedStats* stats = nullptr,
                           Gather gather = Gather::All);

// The k nearest neighbours of every query, as nn.run(queries, n, options).
KnnResult nearest_neighbors(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                            const KnnOptions& options, DistributedStats* stats = nullptr,
                            Gather gather = Gather::All);

// The forces on every body of bh's octree, [bodies][3] in body order, as bh.run(options): each
// rank computes a contiguous share of the bodies.
BhResult barnes_hut(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, DistributedStats* stats = nullptr,
                    Gather gather = Gather::All);

// The same calls into the caller's buffers (named apart: a nullptr after the options would
// otherwise be either the stats or a buffer), as the single-process runs' (host or device memory):
// counts[n], indices[n][k] and distances[n][k], forces[bodies][3]. Each rank writes its share at
// its items' places; All and Root then fill the rest of the buffers that hold every result, in
// place: device buffers (on every rank) GPU to GPU, by the transport the partitioned calls use
// (CUDA-aware MPI, CUDA IPC between the ranks of one host, else host memory; stats->transport),
// host buffers by MPI. Buffers reused from call to call
// cost nothing to allocate or fault in, which is most of what gathering into new vectors costs.
// pc and kNN pick their shares by `shard`: with Spatial a rank's items are positions
// share_of(n, rank, ranks) of the queries' spatial order (every rank computes the same order,
// where the queries are), its queries are gathered, and its results go to their queries' places
// (stats->local_items of them); the results are the same bits whatever the shard.
TraversalStats point_correlation_into(MPI_Comm comm, PointCorrelation& pc, const float* queries, index_t n,
                                 const PcOptions& options, index_t* counts, DistributedStats* stats = nullptr,
                                 Gather gather = Gather::All, Shard shard = Shard::Auto);
TraversalStats nearest_neighbors_into(MPI_Comm comm, NearestNeighbors& nn, const float* queries, index_t n,
                                 const KnnOptions& options, index_t* indices, float* distances,
                                 DistributedStats* stats = nullptr, Gather gather = Gather::All,
                                 Shard shard = Shard::Auto);
TraversalStats barnes_hut_into(MPI_Comm comm, BarnesHut& bh, const BhOptions& options, float* forces,
                          DistributedStats* stats = nullptr, Gather gather = Gather::All);

// The predictions of every row (row-major [n][predictor.n_features()]) into
// out[n][predictor.output_width(options.output)], as predictor.predict() (host or device
// memory). out always has room for every row; with Local (and Root on ranks other than 0) only
// this rank's rows are written.
void predict_forest(MPI_Comm comm, ForestPredictor& predictor, const float* rows, index_t n,
                    const ForestRunOptions& options, float* out, DistributedStats* stats = nullptr,
                    Gather gather = Gather::All);

namespace detail {
struct PartitionDevice;
}

// A kd-tree whose points are split among the ranks of `comm` by its top-tree.
class PartitionedKdTree {
 public:
  // Collective. Every rank passes the same points [n][dims] (read from the same file): the
  // top-tree of `depth` levels (median splits, as KdTree's, 2^depth leaves, at least one per
  // rank) is cut on the host the same way on every rank, and each rank builds its local tree
  // (options.device) over the points of its top leaves, in their original order.
  // memory_budget (bytes, 0: none) bounds each rank's local tree: a rank whose share needs more
  // fails the construction on every rank, naming the budget and what it needed (more ranks or
  // a deeper top-tree spread the points thinner).
  PartitionedKdTree(MPI_Comm comm, const float* points, index_t n, int dims, int depth,
                    const KdTreeOptions& options = {}, std::uint64_t memory_budget = 0);
  ~PartitionedKdTree();
  PartitionedKdTree(const PartitionedKdTree&) = delete;
  PartitionedKdTree& operator=(const PartitionedKdTree&) = delete;

  const KdTree& local() const { return *local_; }
  // Bytes of this rank's tree (KdTree::bytes) and of the top-tree every rank holds.
  std::uint64_t local_bytes() const { return local_->bytes(); }
  std::uint64_t top_bytes() const { return top_->bytes(); }
  // The original index of each local point (ascending), and the points in that order (host
  // memory: the kNN merge recomputes squared distances from them).
  const std::vector<index_t>& local_ids() const { return ids_; }
  const std::vector<float>& local_points() const { return points_; }
  index_t global_size() const { return n_; }
  int dims() const { return dims_; }
  int ranks() const { return ranks_; }
  // Per top leaf: its owner rank and its box (lo[dims] then hi[dims]).
  const std::vector<int>& leaf_owner() const { return owner_; }
  const std::vector<float>& leaf_boxes() const { return boxes_; }
  // The rank whose top leaf a point descends into (the split planes of the top-tree).
  int owner_of(const float* q) const;
  // The top-tree every rank holds (its leaves are the top leaves) and its leaves' node ids,
  // left to right: what the inspector routes queries over.
  const KdTree& top() const { return *top_; }
  const std::vector<node_id>& top_leaf_nodes() const { return leaf_node_; }
  // The calls with device queries: the top-tree, this rank's points and the transport on the
  // device, made by the first such call (collective). transport(): how they move bytes
  // ("CUDA IPC", "CUDA-aware MPI", "host memory"; empty before the first).
  detail::PartitionDevice& device_side() const;
  const char* transport() const;
  std::uint64_t device_bytes() const;  // the device side's copies (0 before the first call)

 private:
  MPI_Comm comm_;
  index_t n_ = 0;
  int dims_ = 0, ranks_ = 1;
  std::unique_ptr<KdTree> top_;  // the top-tree: leaves of about n / 2^depth points
  std::unique_ptr<KdTree> local_;
  std::vector<index_t> ids_;
  std::vector<float> points_;
  std::vector<int> owner_;         // per top-tree leaf node, in left-to-right order
  std::vector<node_id> leaf_node_; // the top-tree's leaf node ids, left to right
  std::vector<float> boxes_;
  mutable std::unique_ptr<detail::PartitionDevice> device_;
};

// Barnes-Hut over bodies split among the ranks by the same cut (each rank owns the bodies of a
// contiguous run of top leaves, balanced by count). Each run builds, on every rank, an octree
// over its own bodies and the locally essential part of the others' (the classic parallel
// Barnes-Hut): a remote cell that no body of this rank would open (this rank's bounding box
// lies outside its cube, and the cell's side is below theta times the box's distance from its
// centre of mass) arrives as one body of the cell's mass at that centre; a remote leaf some body
// might open arrives as its bodies. The forces are a Barnes-Hut walk's over that tree:
// deterministic (the same bits on every run with the same ranks), not the one-process bits
// (its cells differ), and as close to the direct sum as one process's (tests/mpi).
class PartitionedBarnesHut {
 public:
  // Collective. Every rank passes the same bodies (xyz [n][3], mass [n]); `depth` as
  // PartitionedKdTree's. options: the octrees of each run (leaf size, depth, device).
  PartitionedBarnesHut(MPI_Comm comm, const float* xyz, const float* mass, index_t n, int depth,
                       const OctreeOptions& options = {});
  ~PartitionedBarnesHut();

  // Collective. Forces [n][3] in body order where this rank holds them all (Gather::All, Root
  // on rank 0); else this rank's own bodies' forces, in local_ids() order.
  BhResult run(const BhOptions& options, DistributedStats* stats = nullptr, Gather gather = Gather::All);

  const std::vector<index_t>& local_ids() const { return ids_[static_cast<std::size_t>(rank_)]; }
  index_t global_size() const { return n_; }
  // Remote cells and bodies the last run brought to this rank.
  index_t last_imported() const { return imported_; }

 private:
  MPI_Comm comm_;
  index_t n_ = 0;
  int rank_ = 0, ranks_ = 1;
  OctreeOptions options_;
  std::vector<std::vector<index_t>> ids_;  // per rank, ascending
  std::vector<float> xyz_, mass_;          // this rank's bodies, in local_ids() order
  std::vector<float> boxes_;               // per rank: the bounding box of its bodies, lo[3], hi[3]
  std::unique_ptr<Octree> own_;            // this rank's bodies alone: what the others import from
  index_t imported_ = 0;
};

// A forest whose trees are split among the ranks (a model larger than one device holds): each
// rank holds a contiguous run of the trees in the executors' order (output group by group, the
// model's order within a group), balanced by node count, and a ForestPredictor of its own over
// them. A prediction runs every rank's trees over every row at once (each rank's predictor finds
// its trees' leaves: ForestOutput::Leaf, on its device); then the leaves' values are added on
// the host in rank order, each rank continuing every row's sums where the rank before it left
// them (the running sums travel: n_groups floats or leaf_width doubles per row). The additions
// are the one-process additions in the one-process order, so the predictions are the same bits.
// Rows go in chunks, so one chunk's chain overlaps the next chunk's leaf searches.
class PartitionedForest {
 public:
  // Collective. Every rank passes the same forest. memory_budget (bytes, 0: none) bounds each
  // rank's layout (ForestPredictor::footprint_bytes): a rank over it fails the construction on
  // every rank, naming what it needed. Needs at least one tree per rank.
  PartitionedForest(MPI_Comm comm, const Forest& forest, const ForestConfig& config = {},
                    std::uint64_t memory_budget = 0);
  ~PartitionedForest();
  PartitionedForest(const PartitionedForest&) = delete;
  PartitionedForest& operator=(const PartitionedForest&) = delete;

  // Collective. Every rank passes the same rows [n][n_features()] (host memory) and a host
  // buffer out with room for every row's output_width(options.output) values; the chain ends on
  // the last rank, which sends the results by `gather`, as the replicated calls leave them (All:
  // every row in every rank's out; Local: each rank its share's rows, share_of, at their places;
  // Root: as Local, and every row in rank 0's). options.output may not be
  // Leaf (the replicated predict_forest gives leaves); the rest goes to every rank's predictor.
  void predict(const float* rows, index_t n, const ForestRunOptions& options, float* out,
               DistributedStats* stats = nullptr, Gather gather = Gather::All);
  void predict(const float* rows, index_t n, float* out) { predict(rows, n, {}, out); }

  int n_features() const { return n_features_; }
  int output_width(ForestOutput out) const;
  index_t global_trees() const { return n_trees_; }
  // This rank's trees: positions first_tree() .. first_tree() + local_trees() - 1 of the order above.
  index_t first_tree() const { return first_; }
  index_t local_trees() const { return local_trees_; }
  std::uint64_t local_bytes() const;  // this rank's layout (ForestPredictor::footprint_bytes)
  // Rows per chunk of the chain (the same on every rank; 0, the default: as many as make 64 MiB
  // of one rank's leaves, at least 256). Smaller chunks start the later ranks sooner.
  void set_chunk_rows(index_t rows);
  ForestPredictor& local() { return *predictor_; }

 private:
  struct Tables;
  MPI_Comm comm_;
  int rank_ = 0, ranks_ = 1;
  int n_features_ = 0;
  index_t n_trees_ = 0, first_ = 0, local_trees_ = 0, most_local_trees_ = 0, chunk_rows_ = 0;
  std::unique_ptr<ForestPredictor> predictor_;
  std::unique_ptr<Tables> tables_;  // leaf id -> leaf, the sums' common arrays
};

// Radius counts against a partitioned tree: every rank answers its share of the queries by
// routing them to the ranks whose top leaves the query ball reaches.
PcResult point_correlation(MPI_Comm comm, const PartitionedKdTree& tree, PointCorrelation& local,
                           const float* queries, index_t n, const PcOptions& options,
                           DistributedStats* stats = nullptr, Gather gather = Gather::All);

// k nearest neighbours against a partitioned tree (`local` searches tree.local()).
KnnResult nearest_neighbors(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                            const float* queries, index_t n, const KnnOptions& options,
                            DistributedStats* stats = nullptr, Gather gather = Gather::All);

// The same into the caller's buffers with room for every query (counts[n]; indices and
// distances [n][k]), as the replicated calls into buffers leave them: each rank's share at its
// items' places, All and Root filling the rest. With the queries and the buffers in device memory
// (on every rank) nothing passes through the host: the queries are routed on the GPU by the
// top-tree (the same box tests as the host's routing), move GPU to GPU (stats->transport says
// how), are answered by the ranks' local trees there, and the answers come back and combine
// there (counts add; kNN merges by (squared distance, index) on the GPU), gathered to rank 0's or
// every rank's buffers by the same transport. The results are the same bits as one process's.
// Host buffers take the host path above.
TraversalStats point_correlation_into(MPI_Comm comm, const PartitionedKdTree& tree, PointCorrelation& local,
                                      const float* queries, index_t n, const PcOptions& options, index_t* counts,
                                      DistributedStats* stats = nullptr, Gather gather = Gather::All);
// kNN's shards (`shard`; device queries): Input as above; Spatial (Auto's choice for device
// queries) shards by the tree itself: every rank holds every query, so each answers those in its
// own top leaves, whose first round never leaves it, and only the queries within reach of another
// rank's leaves travel. Local then leaves each result at its query's place on the rank that owns
// the query's leaf (stats->local_items of them), as the replicated calls' spatial shards do; Root
// and All gather every row. Host queries take Input (Spatial is an error there).
TraversalStats nearest_neighbors_into(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                                      const float* queries, index_t n, const KnnOptions& options, index_t* indices,
                                      float* distances, DistributedStats* stats = nullptr,
                                      Gather gather = Gather::All, Shard shard = Shard::Auto);

}  // namespace distributed
}  // namespace canopy
