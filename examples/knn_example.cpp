// k nearest neighbours: the 8 nearest points of a batch of queries over a kd-tree (a BallTree
// or VpTree works the same way), on the GPU when there is one (the CPU otherwise). Checked
// against brute force.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/knn.hpp"

int main() {
  const int dims = 7, k = 8;
  const canopy::index_t n = 20000, m = 2000;
  std::vector<float> points(n * dims), queries(m * dims);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : points) x = u(rng);
  for (float& x : queries) x = u(rng);

  const canopy::KdTree tree = canopy::KdTree::build(points.data(), n, dims);
  canopy::NearestNeighbors nn(tree);  // Device::Auto: the GPU if present; uploads the tree once
  canopy::KnnOptions opt;
  opt.k = k;
  const canopy::KnnResult r = nn.run(queries.data(), m, opt);
  // r.indices[q * k + j], r.distances[q * k + j]: query q's j-th nearest point, nearest first

  for (canopy::index_t q = 0; q < 20; ++q) {  // brute force for the first queries
    std::vector<double> d2(n, 0.0);
    for (canopy::index_t p = 0; p < n; ++p)
      for (int d = 0; d < dims; ++d) {
        const double e = double(queries[q * dims + d]) - points[p * dims + d];
        d2[p] += e * e;
      }
    std::partial_sort(d2.begin(), d2.begin() + k, d2.end());
    for (int j = 0; j < k; ++j)
      if (std::fabs(r.distances[q * k + j] - std::sqrt(d2[j])) > 1e-5 * std::sqrt(d2[j])) {
        std::printf("query %lld: neighbour %d at %.7f, brute force %.7f\n", static_cast<long long>(q), j,
                    r.distances[q * k + j], std::sqrt(d2[j]));
        return 1;
      }
  }
  std::printf("knn on the %s: query 0's nearest points %lld (%.4f), %lld (%.4f), ...; execute %.2f ms; ok\n",
              canopy::to_string(r.device), static_cast<long long>(r.indices[0]), r.distances[0],
              static_cast<long long>(r.indices[1]), r.distances[1], r.times.execute_ms);
  return 0;
}
