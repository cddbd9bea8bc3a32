// The GPU half of examples/quadtree_cities.cpp, declared CUDA-free (defined in
// quadtree_cities_gpu.cu, compiled by nvcc).
#pragma once

#include <vector>

#include "examples/box_count.hpp"
#include "layouts/graph_tree.hpp"
#include "runtime/options.hpp"

namespace box_count {

struct BoxCountRun {
  canopy::TraversalStats stats;
  std::vector<index_t> counts;  // [boxes]
};

// Copies the flattened quadtree, the leaf-ordered cities ([n][2]) and the boxes ([m][4]) to the
// GPU once, then counts the cities in every box once per entry of `runs` (their options: the
// schedule, executor, gpu_count_nodes...) on one canopy::Traverser. Each run is done twice and
// the second is reported, so the first pays for the Traverser's buffers; the counts are reset
// to -1 before every run, so a query a run skipped cannot keep an earlier run's count.
std::vector<BoxCountRun> count_boxes_gpu(const canopy::GraphTree<QuadCell>& tree, const std::vector<float>& cities,
                                         const std::vector<float>& boxes,
                                         const std::vector<canopy::TraversalOptions>& runs);

}  // namespace box_count
