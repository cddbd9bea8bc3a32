// What the octree's CPU builder (layouts/octree.cpp) and GPU builder (layouts/octree_gpu.cu)
// share, so that they give the same tree bit for bit: the input checks and their messages, the
// root cell, the cell arithmetic (midpoint, octant, child bounds) and how a node's cube and
// centre of mass are written. Every double operation whose result the tree depends on is an
// explicitly rounded one (core/rounding.hpp): nvcc would otherwise contract a product feeding a
// sum into an FMA, which rounds once instead of twice. Internal: included by those two files.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rounding.hpp"
#include "core/types.hpp"
#include "layouts/octree.hpp"

namespace canopy {
namespace detail {

// The errors for bodies the octree cannot take, in the order the builders check them; defined
// in layouts/octree.cpp.
// Zero bodies, a null array, leaf_size < 1, max_depth outside 1..kMaxDepth: needs no data.
void check_octree_arguments(const float* xyz, const float* mass, index_t n, const OctreeOptions& options);
// Where each array of bodies lives: the value checks run where the values are.
struct BodyMemory {
  bool xyz_on_device = false;
  bool mass_on_device = false;
};
// The arguments, then a non-finite coordinate or mass, then a negative mass (naming the body).
void check_bodies(const float* xyz, const float* mass, index_t n, const OctreeOptions& options,
                  BodyMemory where = {});
// The limits of the flattened tree.
Error too_many_nodes(index_t nodes);
Error too_many_coincident_bodies(index_t count);
// The first i with mass[i] < 0, or n, for masses in device memory (layouts/octree_gpu.cu).
index_t first_negative_on_device(const float* mass, index_t n);

// The bodies' bounding box in float (min and max are exact: any reduction order gives it).
struct BodyBox {
  float lo[3], hi[3];
};
CANOPY_HD inline BodyBox empty_box() {
  BodyBox b;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = std::numeric_limits<float>::infinity();
    b.hi[a] = -std::numeric_limits<float>::infinity();
  }
  return b;
}
CANOPY_HD inline void extend(BodyBox& b, const float* p) {
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = std::min(b.lo[a], p[a]);
    b.hi[a] = std::max(b.hi[a], p[a]);
  }
}
CANOPY_HD inline void merge(BodyBox& b, const BodyBox& o) {
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = std::min(b.lo[a], o.lo[a]);
    b.hi[a] = std::max(b.hi[a], o.hi[a]);
  }
}

// A cell's bounds, tracked in double.
struct CellBounds {
  double lo[3], hi[3];
};

// The root cell of the bodies in `box`: side = the largest extent, enlarged by 2^-12 so that
// bodies on the far faces stay inside after the centre and half are rounded; the floors give
// coincident bodies (zero extent) a cell of sane size, relative to their coordinates. (The
// sign of a zero in box does not change the result.)
CANOPY_HD inline CellBounds root_bounds(const BodyBox& box) {
  double centre[3], extent = 0, largest = 0;
  for (int a = 0; a < 3; ++a) {
    const double lo = box.lo[a], hi = box.hi[a];
    centre[a] = mul_rn(0.5, add_rn(lo, hi));
    extent = std::max(extent, sub_rn(hi, lo));
    largest = std::max(largest, std::max(std::fabs(lo), std::fabs(hi)));
  }
  const double half =
      std::max(mul_rn(mul_rn(0.5, extent), 1.0 + 0x1p-12), std::max(mul_rn(largest, 0x1p-20), 0x1p-60));
  CellBounds root;
  for (int a = 0; a < 3; ++a) {
    root.lo[a] = std::min(sub_rn(centre[a], half), static_cast<double>(box.lo[a]));
    root.hi[a] = std::max(add_rn(centre[a], half), static_cast<double>(box.hi[a]));
  }
  return root;
}

// The split point of a cell, per axis.
CANOPY_HD inline void cell_mid(const double* lo, const double* hi, double* mid) {
  for (int a = 0; a < 3; ++a) mid[a] = mul_rn(0.5, add_rn(lo[a], hi[a]));
}

// The octant of a body: bit a set when coordinate a lies above the split (<= goes low).
CANOPY_HD inline int octant_of(float x, float y, float z, const double* mid) {
  return (x > mid[0] ? 1 : 0) | (y > mid[1] ? 2 : 0) | (z > mid[2] ? 4 : 0);
}

// The bounds of octant o of a cell split at mid. The children's bounds share the split value
// exactly, so nesting holds in double whatever rounding the midpoint had.
CANOPY_HD inline void child_bounds(const double* lo, const double* hi, const double* mid, int o, double* child_lo,
                                   double* child_hi) {
  for (int a = 0; a < 3; ++a) {
    const bool high = (o >> a) & 1;
    child_lo[a] = high ? mid[a] : lo[a];
    child_hi[a] = high ? hi[a] : mid[a];
  }
}

// The smallest float >= v (v >= 0), with a margin for the double rounding that produced v.
CANOPY_HD inline float round_up_float(double v) {
  v = mul_rn(v, 1.0 + 0x1p-40);
  float f = static_cast<float>(v);
  if (static_cast<double>(f) < v)
    f = CANOPY_DEVICE_OR_HOST(nextafterf(f, INFINITY), std::nextafter(f, std::numeric_limits<float>::infinity()));
  return f;
}

// A node's cube: the cell centre in float and a half side rounded outwards, so that the cube
// contains the double cell.
CANOPY_HD inline void write_cube(const double* lo, const double* hi, float* cube) {
  double half = 0;
  for (int a = 0; a < 3; ++a) {
    cube[a] = static_cast<float>(mul_rn(0.5, add_rn(lo[a], hi[a])));
    const double c = cube[a];
    half = std::max(half, std::max(sub_rn(hi[a], c), sub_rn(c, lo[a])));
  }
  cube[3] = round_up_float(half);
}

// A node's mass sums (m x, m y, m z, m) in double: a leaf adds its bodies in tree order, an
// inner node its children's sums in octant order, both starting from zero.
CANOPY_HD inline void add_body(double* sum, float x, float y, float z, float mass) {
  const double m = mass;
  sum[0] = add_rn(sum[0], mul_rn(m, static_cast<double>(x)));
  sum[1] = add_rn(sum[1], mul_rn(m, static_cast<double>(y)));
  sum[2] = add_rn(sum[2], mul_rn(m, static_cast<double>(z)));
  sum[3] = add_rn(sum[3], m);
}
CANOPY_HD inline void add_sums(double* sum, const double* child) {
  for (int c = 0; c < 4; ++c) sum[c] = add_rn(sum[c], child[c]);
}

// A node's centre of mass and mass in float; a massless node's centre is its cube's.
CANOPY_HD inline void write_com(const double* sum, const float* cube, float* com) {
  const double m = sum[3];
  for (int a = 0; a < 3; ++a) com[a] = m > 0 ? static_cast<float>(div_rn(sum[a], m)) : cube[a];
  com[3] = static_cast<float>(m);
}

}  // namespace detail
}  // namespace canopy
