// The layout checks the kd-tree and metric-tree tests share (no GPU-side sources needed).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/vp_tree.hpp"

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

// Two arrays equal as bits; the first difference named (`at`: the builds, `name`: the array).
template <class T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& at, const char* name) {
  ASSERT_EQ(a.size(), b.size()) << at << ": " << name;
  for (std::size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(T)), 0) << at << ": " << name << " entry " << i;
}

// Two builds of one median-split tree (GPU and CPU, one thread and four) give the same tree:
// every array as bits, signed zeros and padding included (a box, radius, shell or mu one ulp off
// would still prune right and hide a different summation or distance).
template <class Tree>
void expect_same_point_tree(const Tree& a, const Tree& b, const std::string& at) {
  ASSERT_EQ(a.height(), b.height()) << at;
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.nodes(), b.nodes(), at, "nodes"));
  ASSERT_EQ(a.point_ids(), b.point_ids()) << at;
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.points(), b.points(), at, "points"));
}
inline void expect_same_tree(const KdTree& a, const KdTree& b, const std::string& at) {
  ASSERT_NO_FATAL_FAILURE(expect_same_point_tree(a, b, at));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.boxes(), b.boxes(), at, "boxes"));
}
inline void expect_same_tree(const BallTree& a, const BallTree& b, const std::string& at) {
  ASSERT_NO_FATAL_FAILURE(expect_same_point_tree(a, b, at));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.centres(), b.centres(), at, "centres"));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.radii(), b.radii(), at, "radii"));
}
inline void expect_same_tree(const VpTree& a, const VpTree& b, const std::string& at) {
  ASSERT_NO_FATAL_FAILURE(expect_same_point_tree(a, b, at));
  ASSERT_EQ(a.parent(), b.parent()) << at;
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.vantages(), b.vantages(), at, "vantage points"));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.mu(), b.mu(), at, "mu"));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.shell_lo(), b.shell_lo(), at, "shell_lo"));
  ASSERT_NO_FATAL_FAILURE(expect_same_bits(a.shell_hi(), b.shell_hi(), at, "shell_hi"));
}

}  // namespace test
}  // namespace canopy
