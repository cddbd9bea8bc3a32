// Canopy's public API for point correlation: build a kd-tree once, then count, for batches of
// queries, the tree points within a radius, on the GPU (inspector -> sandpile scheduler ->
// lockstep executor) or on the CPU. Compiles with a plain C++ compiler.
//
//   canopy::KdTree tree = canopy::KdTree::build(points, n, dims);
//   canopy::PointCorrelation pc(tree);             // uploads the tree when a GPU is used
//   canopy::PcOptions opt;
//   opt.radius = 0.05f;
//   canopy::PcResult r = pc.run(queries, m, opt);  // r.counts[i] belongs to query i
//   canopy::PcListResult l = pc.run_lists(queries, m, canopy::PcListOptions{opt});
//   // query i's neighbours: l.indices[l.offsets[i] .. l.offsets[i + 1]), ascending point ids
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "layouts/kdtree.hpp"
#include "runtime/options.hpp"
#include "runtime/ragged_result.hpp"

namespace canopy {

struct PcOptions : TraversalOptions {
  float radius = 0.0f;  // finite and >= 0; a point at exactly this distance counts
};

struct PcResult : TraversalStats {
  std::vector<index_t> counts;  // counts[i]: tree points within the radius of query i
};

// run_lists: the neighbour lists themselves (runtime/ragged.hpp: a count pass, a scan into
// offsets, a fill pass over the count pass's schedule).
struct PcListOptions : PcOptions {
  PcListOptions() = default;
  explicit PcListOptions(const PcOptions& o) : PcOptions(o) {}
  // Each list ascending by point index (scipy's order); false: the kd-tree's leaf order, the
  // same on every schedule, executor and device.
  bool sorted = true;
  // Per-query radii [n_queries] (host or device memory; each finite and >= 0), or null: `radius`
  // for every query.
  const float* radii = nullptr;
  // >= 0: query q lists only the points of original index > upper_from + q (a self-join whose
  // queries are the tree's points upper_from, upper_from + 1, ...: each pair once, from its
  // smaller index, as scipy's query_pairs). -1: every point within the radius.
  index_t upper_from = -1;
};

// run_radii_totals: run_radii's counts summed over the queries, and the queries with a tree point
// between two of the radii, without the per-query counts leaving the device. The statistics are
// the last batch of queries' (a call of more than 2^25 counts runs in batches), wall_ms the call's.
struct PcRadiiTotals : TraversalStats {
  std::vector<std::int64_t> totals;  // [n_radii]: the pairs (query, tree point) within radii[j]
  std::vector<index_t> rows;         // the queries some comparison flags, ascending
  std::vector<std::uint32_t> flags;  // bit c of flags[i]: comparison c flags query rows[i]
  std::vector<index_t> row_counts;   // [rows.size()][n_radii]: those queries' counts
};

struct PcListResult : RaggedStats {
  std::vector<index_t> offsets;  // [n_queries + 1]; offsets[i + 1] - offsets[i] = run()'s counts[i]
  std::vector<index_t> indices;  // query i's neighbours (original point indices) at offsets[i] ..
};

namespace detail {
struct PcWorkload;
struct PcLists;
}

// Holds a tree (which must outlive it) and, on the GPU, the tree's device copy and reusable
// buffers. Several host threads may call run() at once: the calls take turns on the engine's
// lock (objects of their own, which may share the tree, run side by side).
class PointCorrelation {
 public:
  explicit PointCorrelation(const KdTree& tree, Device device = Device::Auto);
  ~PointCorrelation();

  // The device runs use unless options.device says cpu.
  Device device() const;
  const KdTree& tree() const { return tree_; }

  // queries: row-major [n_queries][tree.dims()]. Errors (canopy::Error): negative or
  // non-finite radius, a NaN/infinite query coordinate, a depth outside 1..height, device gpu
  // on a machine without one. Zero queries give an empty result.
  PcResult run(const float* queries, index_t n_queries, const PcOptions& options);
  // The same, with the counts written to the caller's buffer counts[n_queries]; queries and
  // counts may each be host or device memory (the GPU reads and writes device memory in place,
  // after the work queued on options.stream).
  TraversalStats run(const float* queries, index_t n_queries, const PcOptions& options, index_t* counts);

  // Counts at several radii in one walk (the two-point correlation's bins): counts[i * n_radii +
  // j] is run()'s count for query i at radii[j], for the cost of one run() at the largest. radii:
  // host memory, 1..kMaxPcRadii (32) of them, non-decreasing, each finite and >= 0 (an error
  // names the first that is not); options.radius is not read. Queries and counts as for run().
  TraversalStats run_radii(const float* queries, index_t n_queries, const float* radii, int n_radii,
                           const PcOptions& options, index_t* counts);
  // run_radii summed: totals[j] = the sum over the queries of their counts at radii[j] (a
  // two-point correlation's cumulative histogram), the counts kept where the walk ran (on the GPU
  // a buffer of at most 2^25 counts; only the totals and the flagged rows come to the host).
  // compare: at most 32 pairs (a, b) of positions in radii; comparison c flags the queries whose
  // counts at radii[a] and radii[b] differ (b = -1: whose count at radii[a] is not 0), i.e. those
  // with a tree point between the two radii. Errors: run_radii's, a position outside 0..n_radii - 1.
  PcRadiiTotals run_radii_totals(const float* queries, index_t n_queries, const float* radii, int n_radii,
                                 const PcOptions& options, const std::vector<std::pair<int, int>>& compare = {});
  // The tree points within the radius of each query, as lists: a count pass, its offsets, and a
  // fill over the count pass's schedule (RaggedStats: the count pass's phases, the scan, fill,
  // sort and copies). Every schedule, executor, depth, the pipeline and the memory budget as
  // for run(); the lists do not depend on them. On the GPU the tree's device copy is its own
  // (made on the first call; shared with a tree built on the GPU), lists that do not fit the
  // device beside the tree and queries are filled in batches of queries, and count_nodes is an
  // error (gpu_count_nodes counts the count pass). Errors: run()'s, a NaN or negative radii[i]
  // (naming i), a null offsets buffer; OutOfMemory when one query's list alone, or the queries,
  // do not fit (naming the sizes).
  PcListResult run_lists(const float* queries, index_t n_queries, const PcListOptions& options);
  // The same into the caller's memory: offsets[n_queries + 1], and the indices in
  // `indices(total)`, called once the total is known; each host or device memory.
  RaggedStats run_lists(const float* queries, index_t n_queries, const PcListOptions& options, index_t* offsets,
                        const ItemBuffer<index_t>& indices);

 private:
  // A counting workload's run into counts (run, run_radii).
  TraversalStats count(const detail::PcWorkload& w, const float* queries, index_t n_queries, const PcOptions& options,
                       index_t* counts);

  const KdTree& tree_;
  std::unique_ptr<Engine<detail::PcWorkload>> engine_;
  std::unique_ptr<detail::PcLists> lists_;
};

// Picks r so that the mean count over a seeded sample of the queries is about target_mean
// (counting the query itself when it is a tree point): exponential search, then bisection.
float estimate_radius(const KdTree& tree, const float* queries, index_t n_queries, double target_mean,
                      std::uint64_t seed = 1, index_t sample = 2048);

}  // namespace canopy
