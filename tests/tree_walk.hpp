// The layout checks the kd-tree and metric-tree tests share (no GPU-side sources needed).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/types.hpp"

namespace canopy {
namespace test {

// A tree's order of its n inputs: ids[i] is a permutation of 0 .. n-1 (each `what` once), and
// row(i, id) checks that place i holds input id's data.
template <class Id, class Row>
void expect_each_input_once(const Id* ids, index_t n, const std::string& what, Row row) {
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (index_t i = 0; i < n; ++i) {
    const index_t id = ids[i];
    ASSERT_GE(id, 0);
    ASSERT_LT(id, n);
    ++seen[id];
    ASSERT_NO_FATAL_FAILURE(row(i, id));
  }
  for (index_t id = 0; id < n; ++id) ASSERT_EQ(seen[id], 1) << what << " " << id;
}

// Leaf nd of a median-split tree met in a depth-first walk: its points start where the previous
// leaf's ended (next_point, moved past them) and number 1 .. leaf_size. Returns its range.
template <class Range, class View>
Range expect_next_leaf(const View& v, node_id nd, int leaf_size, index_t& next_point) {
  EXPECT_EQ(v.nodes[nd].first, next_point) << "leaves must tile the points left to right";
  EXPECT_GE(v.nodes[nd].count, 1);
  EXPECT_LE(v.nodes[nd].count, leaf_size);
  next_point = v.nodes[nd].first + v.nodes[nd].count;
  return {v.nodes[nd].first, next_point};
}

}  // namespace test
}  // namespace canopy
