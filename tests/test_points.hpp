// The suite's generated point sets, seeded. No GPU-side sources: the layout tests include it
// without test_util.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/types.hpp"

namespace canopy {
namespace test {

inline std::vector<float> random_points(index_t n, int dims, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> p(static_cast<std::size_t>(n) * dims);
  for (float& x : p) x = u(rng);
  return p;
}

// Gaussian blobs: how many, how wide, and every how many points an exact duplicate.
struct Blobs {
  int centres = 8;
  float sigma = 0.05f;
  index_t duplicate_every = 17;
};

// Clustered points (Gaussian blobs) with exact duplicates mixed in: the shapes real data has.
inline std::vector<float> clustered_points(index_t n, int dims, std::uint64_t seed, Blobs blobs = {}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, blobs.sigma);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> centres(static_cast<std::size_t>(blobs.centres) * dims);
  for (float& c : centres) c = u(rng);
  std::vector<float> p(static_cast<std::size_t>(n) * dims);
  for (index_t i = 0; i < n; ++i) {
    if (i > 0 && i % blobs.duplicate_every == 0) {  // a duplicate of an earlier point
      const index_t j = static_cast<index_t>(u(rng) * static_cast<float>(i)) % i;
      std::copy(p.begin() + j * dims, p.begin() + (j + 1) * dims, p.begin() + i * dims);
      continue;
    }
    const int c = static_cast<int>(u(rng) * blobs.centres) % blobs.centres;
    for (int d = 0; d < dims; ++d) p[i * dims + d] = centres[c * dims + d] + g(rng);
  }
  return p;
}

}  // namespace test
}  // namespace canopy
