// The README's nearest-neighbour and Barnes-Hut example: the 8 nearest neighbours of a batch of
// queries over a ball tree (a kd-tree or vp-tree works the same way), then the gravitational
// forces on a Plummer cluster, both with the automatic hybrid schedule on the GPU when there is
// one (the CPU otherwise).
#include <cstdio>
#include <random>
#include <vector>

#include "io/dataset.hpp"
#include "runtime/knn.hpp"
#include "runtime/barnes_hut.hpp"

int main() {
  const int dims = 7;
  const canopy::index_t n = 100000, m = 50000;
  std::vector<float> points(n * dims), queries(m * dims);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : points) x = u(rng);
  for (float& x : queries) x = u(rng);

  canopy::BallTree tree = canopy::BallTree::build(points.data(), n, dims);
  canopy::NearestNeighbors nn(tree);  // Device::Auto: the GPU if present; uploads the tree once
  canopy::KnnOptions opt;
  opt.k = 8;
  opt.schedule = canopy::ScheduleKind::Hybrid;  // guided inspector + recursive bucket scheduler
  canopy::KnnResult r = nn.run(queries.data(), m, opt);
  std::printf("knn on the %s: query 0's nearest points %lld (%.4f), %lld (%.4f), ...\n", canopy::to_string(r.device),
              static_cast<long long>(r.indices[0]), r.distances[0], static_cast<long long>(r.indices[1]),
              r.distances[1]);
  std::printf("  inspect %.2f ms, schedule %.2f ms, execute %.2f ms\n", r.times.inspect_ms, r.times.schedule_ms,
              r.times.execute_ms);

  const canopy::PointSet bodies = canopy::generate("plummer:200000", 1);
  const std::vector<float> mass(bodies.size(), 1.0f / static_cast<float>(bodies.size()));
  canopy::Octree octree = canopy::Octree::build(bodies.data(), mass.data(), bodies.size());
  canopy::BarnesHut bh(octree);
  canopy::BhOptions bopt;  // theta 0.5, softening 0.01; the sandpile on the GPU by default
  canopy::BhResult f = bh.run(bopt);
  std::printf("barnes-hut on the %s: force on body 0 = (%.4g, %.4g, %.4g); execute %.2f ms\n",
              canopy::to_string(f.device), f.forces[0], f.forces[1], f.forces[2], f.times.execute_ms);
  return 0;
}
