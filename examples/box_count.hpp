// The "any tree, given as a graph" example's workload: a program's own quadtree over cities, each
// node carrying its cell (QuadCell), and a visitor that counts the cities inside an axis-aligned
// query box. Compiled by g++ (the CPU path, the test) and by nvcc (the GPU path), so it
// includes no Boost and no CUDA header.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "executor/visitor.hpp"
#include "core/types.hpp"

namespace box_count {

using canopy::index_t;
using canopy::node_id;

// One quadtree node's payload: its cell (closed bounds: every city of the subtree lies in
// [x0, x1] x [y0, y1]) and, for a leaf, its cities: positions [first, first + count) of the
// program's leaf-ordered city array. Inner nodes have count 0. Trivially copyable.
struct QuadCell {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  index_t first = 0;
  index_t count = 0;
};

// Counts, per query box, the cities inside it (bounds included). Queries are boxes of four
// floats: x0, y0, x1, y1. All pointers are host pointers on the CPU, device pointers on the
// GPU. finish() overwrites the count (the GPU's instrumented rerun calls it a second time).
struct BoxCountVisitor {
  const QuadCell* cells = nullptr;  // [nodes]: the flattened tree's payload, by node id
  const float* cities = nullptr;    // [cities][2]: x, y in leaf order
  const float* boxes = nullptr;     // [queries][4]
  index_t* counts = nullptr;        // [queries]

  struct State {
    float x0, y0, x1, y1;
    index_t count;
  };

  CANOPY_HD State init(index_t q) const {
    const float* b = boxes + 4 * q;
    return State{b[0], b[1], b[2], b[3], 0};
  }
  // Go on into the node when its cell and the box intersect.
  CANOPY_HD bool descend(State& s, node_id n) const {
    const QuadCell& c = cells[n];
    return c.x0 <= s.x1 && s.x0 <= c.x1 && c.y0 <= s.y1 && s.y0 <= c.y1;
  }
  CANOPY_HD void leaf(State& s, node_id n) const {
    const QuadCell& c = cells[n];
    for (index_t i = c.first; i < c.first + c.count; ++i) {
      const float x = cities[2 * i], y = cities[2 * i + 1];
      if (x >= s.x0 && x <= s.x1 && y >= s.y0 && y <= s.y1) ++s.count;
    }
  }
  CANOPY_HD void finish(State& s, index_t q) const { counts[q] = s.count; }
};

// The reference: for each box, the cities inside it (bounds included), found without any tree
// by a scan of the cities sorted by x. xy: [n][2], boxes: [m][4].
inline std::vector<index_t> brute_force_box_counts(const std::vector<float>& xy, const std::vector<float>& boxes) {
  const std::size_t n = xy.size() / 2, m = boxes.size() / 4;
  std::vector<std::size_t> by_x(n);
  std::iota(by_x.begin(), by_x.end(), std::size_t{0});
  std::sort(by_x.begin(), by_x.end(), [&](std::size_t a, std::size_t b) { return xy[2 * a] < xy[2 * b]; });
  std::vector<float> xs(n), ys(n);
  for (std::size_t i = 0; i < n; ++i) {
    xs[i] = xy[2 * by_x[i]];
    ys[i] = xy[2 * by_x[i] + 1];
  }
  std::vector<index_t> counts(m, 0);
  for (std::size_t q = 0; q < m; ++q) {
    const float x0 = boxes[4 * q], y0 = boxes[4 * q + 1], x1 = boxes[4 * q + 2], y1 = boxes[4 * q + 3];
    index_t c = 0;
    for (std::size_t i = std::lower_bound(xs.begin(), xs.end(), x0) - xs.begin(); i < n && xs[i] <= x1; ++i)
      c += ys[i] >= y0 && ys[i] <= y1;
    counts[q] = c;
  }
  return counts;
}

}  // namespace box_count
