// Canopy's public API for point correlation: build a kd-tree once, then count, for batches of
// queries, the tree points within a radius, on the GPU (inspector -> sandpile scheduler ->
// lockstep executor) or on the CPU. Compiles with a plain C++ compiler.
//
//   canopy::KdTree tree = canopy::KdTree::build(points, n, dims);
//   canopy::PointCorrelation pc(tree);             // uploads the tree when a GPU is used
//   canopy::PcOptions opt;
//   opt.radius = 0.05f;
//   canopy::PcResult r = pc.run(queries, m, opt);  // r.counts[i] belongs to query i
#pragma once

#include <memory>
#include <vector>

#include "layouts/kdtree.hpp"
#include "runtime/options.hpp"

namespace canopy {

struct PcOptions : TraversalOptions {
  float radius = 0.0f;  // finite and >= 0; a point at exactly this distance counts
};

struct PcResult : TraversalStats {
  std::vector<index_t> counts;  // counts[i]: tree points within the radius of query i
};

namespace detail {
struct PcWorkload;
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

 private:
  const KdTree& tree_;
  std::unique_ptr<Engine<detail::PcWorkload>> engine_;
};

// Picks r so that the mean count over a seeded sample of the queries is about target_mean
// (counting the query itself when it is a tree point): exponential search, then bisection.
float estimate_radius(const KdTree& tree, const float* queries, index_t n_queries, double target_mean,
                      std::uint64_t seed = 1, index_t sample = 2048);

}  // namespace canopy
