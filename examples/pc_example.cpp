// Point correlation: build a kd-tree once, then count, for a batch of queries, the points within
// a radius, and list them, on the GPU when there is one (the CPU otherwise). Checked against
// brute force.
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/point_correlation.hpp"

int main() {
  const int dims = 3;
  const canopy::index_t n = 20000;
  std::vector<float> points(n * dims);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : points) x = u(rng);

  const canopy::KdTree tree = canopy::KdTree::build(points.data(), n, dims);
  canopy::PointCorrelation pc(tree);  // Device::Auto: the GPU if present; uploads the tree once
  canopy::PcOptions opt;              // the default schedule and executor
  opt.radius = 0.05f;
  const canopy::PcResult r = pc.run(points.data(), n, opt);  // the points are their own queries

  // The neighbours themselves, each list ascending: a count pass, its offsets, a fill.
  const canopy::PcListResult l = pc.run_lists(points.data(), n, canopy::PcListOptions{opt});

  for (canopy::index_t q = 0; q < 100; ++q) {  // brute force for the first queries
    std::vector<canopy::index_t> within;
    for (canopy::index_t p = 0; p < n; ++p) {
      float d2 = 0;
      for (int d = 0; d < dims; ++d) {
        const float e = points[q * dims + d] - points[p * dims + d];
        d2 += e * e;
      }
      if (d2 <= opt.radius * opt.radius) within.push_back(p);
    }
    const std::vector<canopy::index_t> list(l.indices.begin() + l.offsets[q], l.indices.begin() + l.offsets[q + 1]);
    if (static_cast<canopy::index_t>(within.size()) != r.counts[q] || list != within) {
      std::printf("query %lld: %lld neighbours, a list of %zu, brute force %zu\n", static_cast<long long>(q),
                  static_cast<long long>(r.counts[q]), list.size(), within.size());
      return 1;
    }
  }
  std::printf("pc on the %s: query 0 has %lld neighbours; inspect %.2f, schedule %.2f, execute %.2f ms; ok\n",
              canopy::to_string(r.device), static_cast<long long>(r.counts[0]), r.times.inspect_ms, r.times.schedule_ms,
              r.times.execute_ms);
  return 0;
}
