// The README's library example: build a kd-tree once, count neighbours within a radius for a
// batch of queries on the GPU when there is one (the CPU otherwise), with the automatic
// hybrid schedule. Prints a few counts and where and how fast it ran.
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/point_correlation.hpp"

int main() {
  const int dims = 3;
  const canopy::index_t n = 100000;
  std::vector<float> points(n * dims);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : points) x = u(rng);

  canopy::KdTree tree = canopy::KdTree::build(points.data(), n, dims);  // leaf size 8
  canopy::PointCorrelation pc(tree);  // Device::Auto: the GPU if present

  canopy::PcOptions opt;
  opt.radius = 0.02f;
  opt.schedule = canopy::ScheduleKind::Hybrid;       // inspector + sandpile scheduler
  opt.executor = canopy::ExecutorKind::FsmLockstep;  // lockstep warps
  opt.count_nodes = true;                            // divergence metric from the warp emulator
  canopy::PcResult r = pc.run(points.data(), n, opt);  // the points are their own queries

  std::printf("ran on the %s; counts of the first queries: %lld %lld %lld\n", canopy::to_string(r.device),
              static_cast<long long>(r.counts[0]), static_cast<long long>(r.counts[1]),
              static_cast<long long>(r.counts[2]));
  std::printf("inspect %.2f ms, schedule %.2f ms, execute %.2f ms; %.0f nodes per warp\n", r.times.inspect_ms,
              r.times.schedule_ms, r.times.execute_ms, r.nodes_per_warp());
  return 0;
}
