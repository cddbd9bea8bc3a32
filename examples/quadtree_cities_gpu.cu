// The GPU runs of examples/quadtree_cities.cpp: the same BoxCountVisitor, with device pointers,
// through canopy::Traverser (GPU inspector, schedulers and executors).
#include "examples/quadtree_cities_gpu.hpp"

#include <algorithm>

#include "core/cuda.cuh"
#include "runtime/custom.cuh"

namespace box_count {

std::vector<BoxCountRun> count_boxes_gpu(const canopy::GraphTree<QuadCell>& tree, const std::vector<float>& cities,
                                         const std::vector<float>& boxes,
                                         const std::vector<canopy::TraversalOptions>& runs) {
  canopy::Traverser traverser;
  const cudaStream_t s = traverser.stream();
  const canopy::DeviceGraphTree<QuadCell> dtree(tree, s);
  const std::size_t m = boxes.size() / 4;
  canopy::DeviceBuffer<float> d_cities, d_boxes;
  canopy::DeviceBuffer<index_t> d_counts;
  d_cities.reserve(std::max<std::size_t>(cities.size(), 1), "the cities", s);
  d_boxes.reserve(std::max<std::size_t>(boxes.size(), 1), "the query boxes", s);
  d_counts.reserve(std::max<std::size_t>(m, 1), "the counts", s);
  canopy::copy_to_device(d_cities.get(), cities.data(), cities.size(), s);
  canopy::copy_to_device(d_boxes.get(), boxes.data(), boxes.size(), s);

  const BoxCountVisitor v{dtree.payload(), d_cities.get(), d_boxes.get(), d_counts.get()};
  std::vector<BoxCountRun> out;
  for (int pass = 0; pass < 2; ++pass) {
    for (const canopy::TraversalOptions& opt : runs) {
      CANOPY_CUDA_CHECK(cudaMemsetAsync(d_counts.get(), 0xff, m * sizeof(index_t), s));  // every count -1
      canopy::TraversalStats st = traverser.run(tree.view(), dtree.view(), v, static_cast<index_t>(m), opt);
      if (pass == 0) continue;
      BoxCountRun r;
      r.counts.resize(m);
      canopy::copy_to_host(r.counts.data(), d_counts.get(), m, s);
      CANOPY_CUDA_CHECK(cudaStreamSynchronize(s));
      r.stats = std::move(st);
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace box_count
