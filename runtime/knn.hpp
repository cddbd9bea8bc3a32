// Canopy's public API for exact k-nearest-neighbour search (k = 1 is nearest neighbour) over
// a kd-tree, a ball tree or a vantage-point tree, on the GPU (guided inspector -> recursive
// bucket scheduler -> lockstep executor with the warp's vote) or on the CPU. Compiles with a
// plain C++ compiler.
//
//   canopy::KdTree tree = canopy::KdTree::build(points, n, dims);   // or BallTree / VpTree
//   canopy::NearestNeighbors nn(tree);                              // uploads the tree once
//   canopy::KnnOptions opt;
//   opt.k = 8;
//   canopy::KnnResult r = nn.run(queries, m, opt);
//   // r.indices[i * k + j], r.distances[i * k + j]: query i's j-th nearest point
#pragma once

#include <memory>
#include <vector>

#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/options.hpp"

namespace canopy {

enum class SearchTree { Kd, Ball, Vp };
const char* to_string(SearchTree t);

struct KnnOptions : TraversalOptions {
  // Neighbours per query: 1..the number of tree points (a larger k is an error naming both).
  int k = 8;
};

// The answer does not depend on the schedule, executor or device: per query, the k tree
// points with the smallest (distance, original index), ascending; a tie in distance goes to
// the lower index. Distances are Euclidean, computed in float with correctly rounded
// operations, the same on the CPU and the GPU.
struct KnnResult : TraversalStats {
  int k = 0;
  std::vector<index_t> indices;  // [queries][k]: original indices of the points
  std::vector<float> distances;  // [queries][k]
};

namespace detail {
template <class Tree>
struct KnnWorkload;
}

// Holds a tree (which must outlive it) and, on the GPU, its device copy and reusable buffers.
// Several host threads may call run() at once: the calls take turns on the engine's lock.
class NearestNeighbors {
 public:
  explicit NearestNeighbors(const KdTree& tree, Device device = Device::Auto);
  explicit NearestNeighbors(const BallTree& tree, Device device = Device::Auto);
  explicit NearestNeighbors(const VpTree& tree, Device device = Device::Auto);
  ~NearestNeighbors();

  Device device() const;
  SearchTree tree_kind() const { return kind_; }
  int dims() const { return dims_; }
  index_t size() const { return size_; }  // tree points
  int height() const { return height_; }
  // The kd-tree searched, or null for a ball or vp tree.
  const KdTree* kd_tree() const { return kd_tree_; }

  // queries: row-major [n_queries][dims()]. Errors (canopy::Error): k outside 1..size(), a
  // NaN/infinite query coordinate, a depth outside 1..height, device gpu on a machine without
  // one. Zero queries give an empty result.
  KnnResult run(const float* queries, index_t n_queries, const KnnOptions& options);
  // The same into the caller's buffers indices[n_queries][k] and distances[n_queries][k]; the
  // queries and both outputs may each be host or device memory (the GPU reads and writes device
  // memory in place, after the work queued on options.stream).
  TraversalStats run(const float* queries, index_t n_queries, const KnnOptions& options, index_t* indices,
                     float* distances);

 private:
  template <class F>
  decltype(auto) with_engine(F&& f) const;

  void keep_sizes();  // dims_, size_, height_ from the engine's view (fixed: never wait on a call)

  SearchTree kind_;
  const KdTree* kd_tree_ = nullptr;
  int dims_ = 0, height_ = 0;
  index_t size_ = 0;
  std::unique_ptr<Engine<detail::KnnWorkload<KdTree>>> kd_;
  std::unique_ptr<Engine<detail::KnnWorkload<BallTree>>> ball_;
  std::unique_ptr<Engine<detail::KnnWorkload<VpTree>>> vp_;
};

}  // namespace canopy
