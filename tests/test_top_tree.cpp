// The top-tree (layouts/top_tree.hpp): its leaves are the cut at depth d, numbered left to
// right, and a depth outside the tree is a clear error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "layouts/kdtree.hpp"
#include "layouts/top_tree.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

TEST(TopTree, LeavesAreTheCutAtDepthLeftToRight) {
  const std::vector<float> pts = test::random_points(4096, 2, 3);
  const KdTree tree = KdTree::build(pts.data(), 4096, 2);  // 512 leaves, 10 levels
  ASSERT_EQ(tree.height(), 10);
  const KdTreeView v = tree.view();
  for (int d = 1; d <= tree.height(); ++d) {
    const TopTree top = TopTree::build(v, d);
    EXPECT_EQ(top.size(), index_t{1} << (d - 1)) << "depth " << d;
    for (index_t i = 0; i < top.size(); ++i) {
      const node_id nd = top.leaves()[i];
      EXPECT_TRUE(v.nodes[nd].depth == d - 1 || v.is_leaf(nd));
      if (i > 0) {
        EXPECT_LT(top.leaves()[i - 1], nd);
      }
      EXPECT_EQ(top.view().column(nd), i);
    }
    // Every node at depth < d - 1 is an inner node of the top-tree, not a column.
    for (node_id nd = 0; nd < v.n_nodes; ++nd)
      if (v.nodes[nd].depth < d - 1 && !v.is_leaf(nd)) {
        EXPECT_EQ(top.view().column(nd), -1);
      }
  }
}

TEST(TopTree, DepthOutsideTheTreeIsAnError) {
  const std::vector<float> pts = test::random_points(100, 2, 3);
  const KdTree tree = KdTree::build(pts.data(), 100, 2);
  EXPECT_THROW(TopTree::build(tree.view(), 0), Error);
  EXPECT_THROW(TopTree::build(tree.view(), tree.height() + 1), Error);
  try {
    TopTree::build(tree.view(), 40);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("40"), std::string::npos);
  }
}

}  // namespace
}  // namespace canopy
