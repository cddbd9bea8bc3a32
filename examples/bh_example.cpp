// Barnes-Hut: the gravitational force on every body of a Plummer cluster (G = 1), on the GPU
// when there is one (the CPU otherwise), checked against the direct O(N^2) sum on a few bodies.
#include <cmath>
#include <cstdio>
#include <vector>

#include "io/dataset.hpp"
#include "runtime/barnes_hut.hpp"

int main() {
  const canopy::PointSet bodies = canopy::generate("plummer:20000", 1);  // xyz, row-major [n][3]
  const canopy::index_t n = bodies.size();
  const std::vector<float> mass(n, 1.0f / static_cast<float>(n));

  const canopy::Octree tree = canopy::Octree::build(bodies.data(), mass.data(), n);
  canopy::BarnesHut bh(tree);  // Device::Auto: the GPU if present; uploads the octree once
  canopy::BhOptions opt;       // theta 0.5, softening 0.01
  opt.theta = 0.3f;
  const canopy::BhResult r = bh.run(opt);  // r.forces[3 i .. 3 i + 2]: body i

  const float* xyz = bodies.data();
  for (canopy::index_t i = 0; i < 10; ++i) {  // the direct sum for a few bodies
    double a[3] = {0, 0, 0};
    for (canopy::index_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double d[3], r2 = opt.softening * opt.softening;
      for (int c = 0; c < 3; ++c) {
        d[c] = double(xyz[j * 3 + c]) - xyz[i * 3 + c];
        r2 += d[c] * d[c];
      }
      for (int c = 0; c < 3; ++c) a[c] += mass[j] * d[c] / (r2 * std::sqrt(r2));
    }
    const double norm = std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]) * mass[i];
    for (int c = 0; c < 3; ++c)
      if (std::fabs(r.forces[i * 3 + c] - mass[i] * a[c]) > 0.02 * norm) {
        std::printf("body %lld: force %g, direct sum %g\n", static_cast<long long>(i), r.forces[i * 3 + c],
                    mass[i] * a[c]);
        return 1;
      }
  }
  std::printf("barnes-hut on the %s: force on body 0 = (%.4g, %.4g, %.4g); execute %.2f ms; ok\n",
              canopy::to_string(r.device), r.forces[0], r.forces[1], r.forces[2], r.times.execute_ms);
  return 0;
}
