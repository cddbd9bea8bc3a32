// Ragged visitors of the tests (runtime/ragged.hpp): the leaves of an interval tree
// (tests/interval_tree.hpp) that hold each query point, as lists. Compiled by g++ (CPU tests)
// and nvcc (the GPU entry point, tests/ragged_gpu.cu).
#pragma once

#include <vector>

#include "runtime/ragged_result.hpp"
#include "tests/interval_tree.hpp"

namespace canopy {
namespace test {

// The interval visitor's walk (guided or not), emitting each leaf it reaches.
template <bool Guided>
struct IntervalLeaves : IntervalVisitor<Guided> {
  using Item = node_id;
  using State = typename IntervalVisitor<Guided>::State;
  template <class Emit>
  CANOPY_HD void leaf(State&, node_id n, Emit& emit) const {
    emit(n);
  }
};

// The same on the GPU through a canopy::RaggedTraverser (tests/ragged_gpu.cu); with
// device_outputs the offsets and leaves go to device memory, then back for the result.
RaggedResult<node_id> interval_leaves_gpu(const GraphTree<Interval>& tree, const std::vector<float>& xs, bool guided,
                                          const RaggedOptions& opt, bool device_outputs);

}  // namespace test
}  // namespace canopy
