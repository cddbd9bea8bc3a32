// Test-only GPU entry points that the public API does not offer: the executors run with the
// tracing visitor, so the soundness tests can compare visit sequences across devices.
#pragma once

#include <vector>

#include "executor/executor.hpp"
#include "layouts/kdtree.hpp"

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

// Runs point correlation on the GPU with the given executor over `order` (empty: input order).
Traced run_traced_gpu(const KdTree& tree, const std::vector<float>& queries, float radius,
                      const std::vector<index_t>& order, ExecutorKind kind, int capacity);

}  // namespace test
}  // namespace canopy
