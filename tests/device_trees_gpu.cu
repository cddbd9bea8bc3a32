#include "layouts/device_copy.hpp"
#include "runtime/custom.cuh"
#include "runtime/pc_visitor.hpp"
#include "tests/device_trees_gpu.hpp"

namespace canopy {
namespace test {

std::vector<index_t> traverser_point_correlation(const KdTree& tree, const std::vector<float>& queries, float radius,
                                                 const TraversalOptions& opt) {
  Traverser t;  // first: its stream frees what follows
  const cudaStream_t s = t.stream();
  DeviceCopy<KdTree> dtree(tree, s);
  const std::size_t n = queries.size() / 3;
  DeviceBuffer<float> q;
  DeviceBuffer<index_t> counts;
  q.reserve(queries.size(), "the queries", s);
  counts.reserve(n, "the counts", s);
  copy_to_device(q.get(), queries.data(), queries.size(), s);
  PointCorrelationVisitor<4> v;
  v.tree = dtree.view();
  v.queries = q.get();
  v.counts = counts.get();
  v.radius2 = radius * radius;
  t.run(tree.topology_view(), dtree.view(), v, static_cast<index_t>(n), opt);
  std::vector<index_t> out(n);
  copy_to_host(out.data(), counts.get(), n, s);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
  return out;
}

}  // namespace test
}  // namespace canopy
