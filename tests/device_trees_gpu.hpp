// A custom traversal (canopy::Traverser, runtime/custom.cuh) over a built-in tree: the kd-tree's
// host topology and its device copy, which for a tree left on the device by its GPU build are
// its nodes and its device arrays (no host copy). tests/device_trees_gpu.cu holds the CUDA.
#pragma once

#include <vector>

#include "layouts/kdtree.hpp"
#include "runtime/options.hpp"

namespace canopy {
namespace test {

// The point-correlation counts of queries [n][3] within `radius`, through a Traverser running
// PointCorrelationVisitor under `opt` (count_nodes is the CPU's: not here).
std::vector<index_t> traverser_point_correlation(const KdTree& tree, const std::vector<float>& queries, float radius,
                                                 const TraversalOptions& opt);

}  // namespace test
}  // namespace canopy
