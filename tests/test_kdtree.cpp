#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <tbb/task_arena.h>

#include "layouts/kdtree.hpp"
#include "tests/test_errors.hpp"
#include "tests/test_util.hpp"
#include "tests/tree_walk.hpp"

namespace canopy {
namespace {

// Checks the structural invariants of a built tree against the input points.
void check_invariants(const KdTree& tree, const std::vector<float>& pts, index_t n, int dims, int leaf_size) {
  const KdTreeView v = tree.view();
  ASSERT_EQ(v.n_points, n);
  // Every input point appears exactly once, with its own coordinates.
  ASSERT_NO_FATAL_FAILURE(test::expect_each_input_once(v.point_ids, n, "point", [&](index_t i, index_t id) {
    for (int d = 0; d < dims; ++d) ASSERT_EQ(v.point(i)[d], pts[id * dims + d]);
  }));

  // Walk the tree recursively: ranges of leaves tile [0, n) left to right, boxes hold their
  // points and are tight, depths are consistent, children follow the depth-first layout.
  index_t next_point = 0;
  int max_depth = 0;
  std::vector<int> visited(static_cast<std::size_t>(v.n_nodes), 0);
  struct Range {
    index_t begin, end;
  };
  std::function<Range(node_id, int)> walk = [&](node_id nd, int depth) -> Range {
    EXPECT_GE(nd, 0);
    EXPECT_LT(nd, v.n_nodes);
    ++visited[nd];
    EXPECT_EQ(v.nodes[nd].depth, depth);
    max_depth = std::max(max_depth, depth);
    Range r;
    if (v.is_leaf(nd)) {
      r = test::expect_next_leaf<Range>(v, nd, leaf_size, next_point);
    } else {
      EXPECT_EQ(v.child(nd, 0), nd + 1);
      EXPECT_GT(v.child(nd, 1), nd + 1);
      const Range a = walk(v.child(nd, 0), depth + 1);
      const Range b = walk(v.child(nd, 1), depth + 1);
      EXPECT_EQ(a.end, b.begin);
      // Median split: the halves differ by at most one point.
      EXPECT_LE(std::abs((a.end - a.begin) - (b.end - b.begin)), 1);
      r = {a.begin, b.end};
    }
    for (int d = 0; d < dims; ++d) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (index_t i = r.begin; i < r.end; ++i) {
        lo = std::min(lo, v.point(i)[d]);
        hi = std::max(hi, v.point(i)[d]);
      }
      EXPECT_EQ(v.lo(nd)[d], lo) << "node " << nd << " dim " << d;
      EXPECT_EQ(v.hi(nd)[d], hi) << "node " << nd << " dim " << d;
    }
    return r;
  };
  const Range all = walk(0, 0);
  EXPECT_EQ(all.begin, 0);
  EXPECT_EQ(all.end, n);
  for (node_id nd = 0; nd < v.n_nodes; ++nd) EXPECT_EQ(visited[nd], 1) << "node " << nd;
  // Depth bound of median splits: ceil(log2(n / leaf_size)) + 1 levels.
  const int bound = n <= leaf_size ? 1 : static_cast<int>(std::ceil(std::log2(static_cast<double>(n) / leaf_size))) + 1;
  EXPECT_EQ(tree.height(), max_depth + 1);
  EXPECT_LE(tree.height(), bound);
}

struct Shape {
  index_t n;
  int dims;
  int leaf_size;
};

class KdTreeInvariants : public ::testing::TestWithParam<Shape> {};

TEST_P(KdTreeInvariants, HoldOnRandomAndClusteredPoints) {
  const Shape s = GetParam();
  for (int kind = 0; kind < 2; ++kind) {
    const std::vector<float> pts =
        kind == 0 ? test::random_points(s.n, s.dims, 11) : test::clustered_points(s.n, s.dims, 12);
    KdTreeOptions o;
    o.leaf_size = s.leaf_size;
    const KdTree tree = KdTree::build(pts.data(), s.n, s.dims, o);
    check_invariants(tree, pts, s.n, s.dims, s.leaf_size);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KdTreeInvariants,
                         ::testing::Values(Shape{1, 1, 8}, Shape{7, 2, 8}, Shape{9, 2, 8}, Shape{1000, 1, 8},
                                           Shape{1000, 2, 1}, Shape{2048, 3, 8}, Shape{3001, 7, 8},
                                           Shape{1500, 16, 5}, Shape{5000, 4, 33}));

TEST(KdTree, RealSubsets) {
  for (auto [file, cols] : {std::pair<const char*, const char*>{"covtype_4k.csv", "0-6"}, {"cities_4k.csv", ""}}) {
    const PointSet ps = test::real_points(file, cols);
    const KdTree tree = KdTree::build(ps.data(), ps.size(), ps.dims);
    check_invariants(tree, ps.coords, ps.size(), ps.dims, 8);
  }
}

TEST(KdTree, IdenticalPoints) {
  const std::vector<float> pts(300 * 3, 0.25f);
  const KdTree tree = KdTree::build(pts.data(), 300, 3);
  check_invariants(tree, pts, 300, 3, 8);
}

TEST(KdTree, BuildDoesNotDependOnThreadCount) {
  const std::vector<float> pts = test::clustered_points(20000, 3, 5);
  const KdTree a = KdTree::build(pts.data(), 20000, 3);
  tbb::task_arena one(1);
  KdTree b;
  one.execute([&] { b = KdTree::build(pts.data(), 20000, 3); });
  EXPECT_EQ(a.point_ids(), b.point_ids());
  EXPECT_EQ(a.boxes(), b.boxes());
}

TEST(KdTree, BadInputIsAClearError) {
  const std::vector<float> pts = test::random_points(10, 2, 1);
  EXPECT_NE(test::error_of([&] { KdTree::build(pts.data(), 0, 2); }).find("empty"), std::string::npos);
  EXPECT_NE(test::error_of([&] { KdTree::build(pts.data(), 5, 0); }).find("dims = 0"), std::string::npos);
  EXPECT_NE(test::error_of([&] { KdTree::build(pts.data(), 1, 17); }).find("dims = 17"), std::string::npos);
  KdTreeOptions o;
  o.leaf_size = 0;
  EXPECT_NE(test::error_of([&] { KdTree::build(pts.data(), 10, 2, o); }).find("leaf_size"), std::string::npos);
  std::vector<float> bad = pts;
  bad[7] = std::nanf("");
  EXPECT_NE(test::error_of([&] { KdTree::build(bad.data(), 10, 2); }).find("point 3"), std::string::npos);
  bad[7] = std::numeric_limits<float>::infinity();
  EXPECT_NE(test::error_of([&] { KdTree::build(bad.data(), 10, 2); }).find("dimension 1"), std::string::npos);
}

}  // namespace
}  // namespace canopy
