// The device side the GPU entry points of the interval-tree tests share (tests/interval_gpu.cu,
// custom_auto_gpu.cu, shared_traverser.cu): the host tree, a Traverser and its device copy.
#pragma once
#include "runtime/custom.cuh"
#include "tests/interval_tree.hpp"

namespace canopy {
namespace test {

// A base of each file's Impl: a derived Impl's buffers go before the Traverser whose stream
// frees them, since members of the base outlive those of the derived class.
struct IntervalDevice {
  const GraphTree<Interval>& tree;
  Traverser t;  // first: its stream frees the device tree
  DeviceGraphTree<Interval> dtree;
  explicit IntervalDevice(const GraphTree<Interval>& g) : tree(g), dtree(g, t.stream()) {}
};

}  // namespace test
}  // namespace canopy
