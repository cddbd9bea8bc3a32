// The GPU steps (runtime/engine.cuh: inspect, schedule, execute) driven by hand with the
// tracing visitor, behind a CUDA-free interface, so the soundness tests can compare visit
// sequences across devices.
#pragma once

#include <vector>

#include "executor/executor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace test {

struct Traced {
  std::vector<node_id> trace;        // [queries][capacity]
  std::vector<std::int32_t> lengths; // visits per query
  std::vector<index_t> counts;       // point-correlation results
  std::vector<index_t> warp_nodes;   // lockstep kernels: nodes per warp (instrumented)
};

// Asks the device for `bytes` of memory through DeviceBuffer (and frees it).
void allocate_device_bytes(std::size_t bytes, const char* what);

// The device sandpile's order for a host matrix (uploaded first).
std::vector<index_t> device_sandpile_order(const std::vector<std::uint64_t>& words, index_t rows, index_t cols);

// Step 1 alone on the GPU: the point-correlation scheduling matrix of `queries` at top-tree
// depth `depth`, as it reaches the host (words_per_row(top-leaves) words per query).
std::vector<std::uint64_t> pc_matrix_gpu(const KdTree& tree, const std::vector<float>& queries, float radius,
                                         int depth);

// Runs point correlation on the GPU with the given executor over `order` (empty: input order).
Traced run_traced_gpu(const KdTree& tree, const std::vector<float>& queries, float radius,
                      const std::vector<index_t>& order, ExecutorKind kind, int capacity);

// Nearest neighbours on the GPU with the tracing visitor (dims 2 or 7 only, to keep the test
// build small).
struct KnnTraced {
  std::vector<node_id> trace;
  std::vector<std::int32_t> lengths;
  std::vector<index_t> indices;
  std::vector<float> distances;
  std::vector<index_t> warp_nodes;
};
KnnTraced run_traced_knn_gpu(const KdTree& tree, const std::vector<float>& queries, int k,
                             const std::vector<index_t>& order, ExecutorKind kind, int capacity);
KnnTraced run_traced_knn_gpu(const BallTree& tree, const std::vector<float>& queries, int k,
                             const std::vector<index_t>& order, ExecutorKind kind, int capacity);
KnnTraced run_traced_knn_gpu(const VpTree& tree, const std::vector<float>& queries, int k,
                             const std::vector<index_t>& order, ExecutorKind kind, int capacity);

// The GPU guided inspector's matrix as it reaches the host (packed rows and their offsets).
struct PackedRows {
  std::vector<std::int32_t> entries;
  std::vector<index_t> offsets;
  index_t rows = 0, cols = 0, width = 0;
  GuidedMatrixView view() const { return {entries.data(), rows, cols, width, offsets.data()}; }
};
PackedRows guided_matrix_gpu(const KdTree& tree, const std::vector<float>& queries, int k, int depth,
                             GuidedRows rows = {});
PackedRows guided_matrix_gpu(const BallTree& tree, const std::vector<float>& queries, int k, int depth,
                             GuidedRows rows = {});
PackedRows guided_matrix_gpu(const VpTree& tree, const std::vector<float>& queries, int k, int depth,
                             GuidedRows rows = {});

// The device guided scheduler over a host matrix of rows x width entries (uploaded first).
Schedule device_guided_schedule(const std::vector<std::int32_t>& entries, index_t rows, index_t cols, index_t width,
                                const std::vector<node_id>& parents, index_t max_bucket);

// Barnes-Hut on the GPU with the tracing visitor; xyz and mass in the bodies' original order.
struct BhTraced {
  std::vector<node_id> trace;
  std::vector<std::int32_t> lengths;
  std::vector<float> forces;
  std::vector<index_t> warp_nodes;
};
BhTraced run_traced_bh_gpu(const Octree& tree, const std::vector<float>& xyz, const std::vector<float>& mass,
                           float theta, float softening, const std::vector<index_t>& order, ExecutorKind kind,
                           int capacity);

}  // namespace test
}  // namespace canopy
