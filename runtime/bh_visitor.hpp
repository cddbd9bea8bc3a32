// Barnes-Hut gravity (G = 1) on an octree: each body walks the tree, opening cells that are
// too close for their monopole and summing the monopoles of the rest and, at the leaves, the
// bodies themselves. It is an unguided visitor: children are visited in index order.
//
// Every float operation goes through add_rn / sub_rn / mul_rn / div_rn / sqrt_rn, in a fixed
// order, so the host and device give bit-identical forces; a body's sum depends only on the
// order in which its traversal meets the nodes, which is the same under every schedule and
// executor.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "layouts/octree.hpp"
#include "core/rounding.hpp"

namespace canopy {

namespace bh_detail {

// One 16-byte record (x, y, z, w); a single float4 load on the device.
CANOPY_HD inline void load4(const float* p, float& x, float& y, float& z, float& w) {
#if defined(__CUDA_ARCH__)
  const float4 v = __ldg(reinterpret_cast<const float4*>(p));
  x = v.x;
  y = v.y;
  z = v.z;
  w = v.w;
#else
  x = p[0];
  y = p[1];
  z = p[2];
  w = p[3];
#endif
}

// Spreads the low 21 bits of v so that bit i moves to bit 3 i.
CANOPY_HD inline std::uint64_t spread_bits_3(std::uint32_t v) {
  std::uint64_t x = v & 0x1fffffu;
  x = (x | (x << 32)) & 0x1f00000000ffffull;
  x = (x | (x << 16)) & 0x1f0000ff0000ffull;
  x = (x | (x << 8)) & 0x100f00f00f00f00full;
  x = (x | (x << 4)) & 0x10c30c30c30c30c3ull;
  x = (x | (x << 2)) & 0x1249249249249249ull;
  return x;
}

// Coordinate on the 2^21 grid over [lo, lo + 2 half]; clamped, and 0 for NaN.
CANOPY_HD inline std::uint32_t grid_coord(float v, float lo, float scale) {
  const float t = mul_rn(sub_rn(v, lo), scale);
  if (!(t > 0.0f)) return 0u;
  if (t >= 2097151.0f) return 2097151u;
  return static_cast<std::uint32_t>(t);
}

}  // namespace bh_detail

// Morton (Z-order) key of a point in a cube (centre x, y, z and half side), 21 bits per axis
// interleaved with z the most significant bit of each triple: the same octant order as the
// octree (x = 1, y = 2, z = 4), so sorting bodies by key approximates the octree's leaf order.
// This is the hand-tuned "sort the bodies" baseline's key.
CANOPY_HD inline std::uint64_t morton_key(float x, float y, float z, const float* cube) {
  const float half = cube[3];
  const float scale = div_rn(2097152.0f, add_rn(half, half));
  const std::uint32_t gx = bh_detail::grid_coord(x, sub_rn(cube[0], half), scale);
  const std::uint32_t gy = bh_detail::grid_coord(y, sub_rn(cube[1], half), scale);
  const std::uint32_t gz = bh_detail::grid_coord(z, sub_rn(cube[2], half), scale);
  return bh_detail::spread_bits_3(gx) | (bh_detail::spread_bits_3(gy) << 1) | (bh_detail::spread_bits_3(gz) << 2);
}

struct BarnesHutVisitor {
  OctreeView tree;
  const float* bodies_xyz = nullptr;  // queries: original order, row-major [n][3]
  float* forces = nullptr;            // [n][3], written at the original index
  const float* masses = nullptr;      // original order
  float theta2 = 0.25f;               // opening angle squared
  float eps2 = 0.0f;                  // softening length squared
  index_t first = 0;                  // query q is body first + q; forces[q] is its force

  struct State {
    float x, y, z, ax, ay, az;
    index_t body;
  };

  CANOPY_HD State init(index_t q) const {
    const float* p = bodies_xyz + (first + q) * 3;
    return State{p[0], p[1], p[2], 0.0f, 0.0f, 0.0f, first + q};
  }

  // Adds m (dx, dy, dz) / (d2 + eps2)^(3/2). A zero denominator (coincident bodies without
  // softening) has no direction; it is skipped so forces stay finite.
  CANOPY_HD void accumulate(State& s, float dx, float dy, float dz, float d2, float m) const {
    const float r2 = add_rn(d2, eps2);
    if (!(r2 > 0.0f)) return;
    const float f = div_rn(m, mul_rn(r2, sqrt_rn(r2)));
    s.ax = add_rn(s.ax, mul_rn(f, dx));
    s.ay = add_rn(s.ay, mul_rn(f, dy));
    s.az = add_rn(s.az, mul_rn(f, dz));
  }

  CANOPY_HD bool descend(State& s, node_id n) const {
    float cx, cy, cz, half;
    bh_detail::load4(tree.cube(n), cx, cy, cz, half);
    // A cell holding the body must never act as a monopole (that would include the body's own
    // mass); the stored cube is rounded outwards, so this test is conservative.
    const float ox = sub_rn(s.x, cx), oy = sub_rn(s.y, cy), oz = sub_rn(s.z, cz);
    if (ox <= half && -ox <= half && oy <= half && -oy <= half && oz <= half && -oz <= half) return true;
    float mx, my, mz, m;
    bh_detail::load4(tree.node_com(n), mx, my, mz, m);
    const float dx = sub_rn(mx, s.x), dy = sub_rn(my, s.y), dz = sub_rn(mz, s.z);
    const float d2 = add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
    const float side = add_rn(half, half);
    if (mul_rn(side, side) >= mul_rn(theta2, d2)) return true;
    accumulate(s, dx, dy, dz, d2, m);
    return false;
  }

  // The child cell the body lies in (the key inspector's hint; it changes no visit): opening
  // criteria accept far cells that are large, so without it the first cell a walk reaches says
  // little about where the body is.
  CANOPY_HD int home_child(const State& s, node_id n) const {
    const int count = tree.child_count(n);
    for (int i = 0; i < count; ++i) {
      float cx, cy, cz, half;
      bh_detail::load4(tree.cube(tree.child(n, i)), cx, cy, cz, half);
      const float ox = sub_rn(s.x, cx), oy = sub_rn(s.y, cy), oz = sub_rn(s.z, cz);
      if (ox <= half && -ox <= half && oy <= half && -oy <= half && oz <= half && -oz <= half) return i;
    }
    return 0;
  }

  CANOPY_HD void leaf(State& s, node_id n) const {
    const OctNode node = tree.nodes[n];
    for (index_t j = node.first; j < node.first + node.count; ++j) {
      if (tree.body_ids[j] == s.body) continue;
      float bx, by, bz, m;
      bh_detail::load4(tree.body(j), bx, by, bz, m);
      const float dx = sub_rn(bx, s.x), dy = sub_rn(by, s.y), dz = sub_rn(bz, s.z);
      const float d2 = add_rn(add_rn(mul_rn(dx, dx), mul_rn(dy, dy)), mul_rn(dz, dz));
      accumulate(s, dx, dy, dz, d2, m);
    }
  }

  CANOPY_HD void finish(State& s, index_t q) const {
    const float m = masses[s.body];
    forces[q * 3] = mul_rn(m, s.ax);
    forces[q * 3 + 1] = mul_rn(m, s.ay);
    forces[q * 3 + 2] = mul_rn(m, s.az);
  }
};

// The O(N^2) reference in double (G = 1, same softening and the same skip of coincident
// unsoftened pairs): forces [n][3] in original order, rounded to float.
inline std::vector<float> direct_forces(const float* xyz, const float* mass, index_t n, float eps2) {
  std::vector<float> out(static_cast<std::size_t>(n) * 3, 0.0f);
  for (index_t i = 0; i < n; ++i) {
    double a[3] = {0, 0, 0};
    for (index_t j = 0; j < n; ++j) {
      if (j == i) continue;
      double d[3], d2 = 0;
      for (int k = 0; k < 3; ++k) {
        d[k] = static_cast<double>(xyz[j * 3 + k]) - xyz[i * 3 + k];
        d2 += d[k] * d[k];
      }
      const double r2 = d2 + eps2;
      if (!(r2 > 0)) continue;
      const double f = mass[j] / (r2 * std::sqrt(r2));
      for (int k = 0; k < 3; ++k) a[k] += f * d[k];
    }
    for (int k = 0; k < 3; ++k) out[i * 3 + k] = static_cast<float>(mass[i] * a[k]);
  }
  return out;
}

}  // namespace canopy
