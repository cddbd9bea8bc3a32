// One canopy::Traverser shared by several host threads (tests/test_threads.cpp): the interval
// visitors of tests/interval_tree.hpp over one device copy of the tree, each call with its own
// stream (opt.stream) and device buffers, as threads sharing a Traverser would hold them.
// tests/shared_traverser.cu holds the CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/options.hpp"
#include "tests/interval_tree.hpp"

namespace canopy {
namespace test {

struct IntervalResults {
  std::vector<std::int32_t> counts;
  std::vector<std::int64_t> sums;
  bool operator==(const IntervalResults& o) const { return counts == o.counts && sums == o.sums; }
};

class SharedTraverser {
 public:
  explicit SharedTraverser(const GraphTree<Interval>& tree);  // the tree must outlive it
  ~SharedTraverser();
  // Any thread, any time: the queries xs through the one Traverser; opt.stream is the call's own.
  IntervalResults run(const std::vector<float>& xs, bool guided, TraversalOptions opt);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace test
}  // namespace canopy
