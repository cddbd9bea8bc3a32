#include <gtest/gtest.h>

#include <vector>

#include "inspector/inspector.hpp"
#include "layouts/top_tree.hpp"
#include "runtime/pc_visitor.hpp"
#include "tests/gpu_trace.hpp"
#include "tests/require_gpu.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

// Reference: query q reaches top-leaf t iff every node on the path from the root to t
// (t included) passes the radius test; computed by recursion over the top-tree.
void reached(const KdTreeView& t, const TopTree& top, const float* q, float r2, node_id n, int depth,
             std::vector<index_t>& cols) {
  if (test::ref_box_distance2(q, t.lo(n), t.hi(n), t.dims) > r2) return;
  if (depth == top.depth() - 1 || t.is_leaf(n)) {
    cols.push_back(top.view().column(n));
    return;
  }
  reached(t, top, q, r2, n + 1, depth + 1, cols);
  reached(t, top, q, r2, static_cast<node_id>(t.nodes[n].first), depth + 1, cols);
}

template <int MaxDim>
SchedulingMatrix cpu_matrix(const KdTree& tree, const TopTree& top, const std::vector<float>& queries, float radius) {
  PointCorrelationVisitor<MaxDim> v;
  v.tree = tree.view();
  v.queries = queries.data();
  v.radius2 = radius * radius;
  return inspect_cpu(tree.view(), top.view(), v, static_cast<index_t>(queries.size()) / tree.dims());
}

void expect_rows_match_reference(const KdTree& tree, const TopTree& top, const std::vector<float>& queries,
                                 float radius, const SchedulingMatrixView& m) {
  const KdTreeView v = tree.view();
  const index_t n = static_cast<index_t>(queries.size()) / tree.dims();
  ASSERT_EQ(m.rows, n);
  ASSERT_EQ(m.cols, top.size());
  ASSERT_EQ(m.words_per_row, (top.size() + 63) / 64);
  for (index_t q = 0; q < n; ++q) {
    std::vector<index_t> cols;
    reached(v, top, &queries[q * tree.dims()], radius * radius, 0, 0, cols);
    std::vector<std::uint64_t> expect(static_cast<std::size_t>(m.words_per_row), 0);
    for (index_t c : cols) expect[c / 64] |= std::uint64_t{1} << (c % 64);
    for (index_t w = 0; w < m.words_per_row; ++w)
      ASSERT_EQ(m.row(q)[w], expect[w]) << "query " << q << " word " << w << " depth " << top.depth();
  }
}

TEST(Inspector, CpuRowsAreTheTopLeavesReached) {
  const std::vector<float> pts = test::clustered_points(5000, 3, 8);
  const KdTree tree = KdTree::build(pts.data(), 5000, 3);
  const float radius = test::radius_for(tree, pts, 40);
  for (int depth = 1; depth <= tree.height(); ++depth) {
    const TopTree top = TopTree::build(tree.view(), depth);
    const SchedulingMatrix m = cpu_matrix<4>(tree, top, pts, radius);
    expect_rows_match_reference(tree, top, pts, radius, m.view());
  }
}

TEST(Inspector, CpuRowsOnRealData) {
  const PointSet ps = test::real_points("covtype_4k.csv", "0-6");
  const KdTree tree = KdTree::build(ps.data(), ps.size(), ps.dims);
  const float radius = test::radius_for(tree, ps.coords, 32);
  for (int depth : {4, 8, tree.height()}) {
    const TopTree top = TopTree::build(tree.view(), depth);
    expect_rows_match_reference(tree, top, ps.coords, radius, cpu_matrix<8>(tree, top, ps.coords, radius).view());
  }
}

TEST(Inspector, GpuMatrixEqualsCpuTwin) {
  CANOPY_REQUIRE_GPU();
  for (int dims : {2, 7, 16}) {
    const std::vector<float> pts = test::clustered_points(6000, dims, 30 + dims);
    const KdTree tree = KdTree::build(pts.data(), 6000, dims);
    const float radius = test::radius_for(tree, pts, 25);
    for (int depth : {1, 5, 8, tree.height()}) {
      const TopTree top = TopTree::build(tree.view(), depth);
      const std::vector<std::uint64_t> g = test::pc_matrix_gpu(tree, pts, radius, depth);
      const SchedulingMatrix c = dispatch_dims(dims, [&](auto md) {
        return cpu_matrix<decltype(md)::value>(tree, top, pts, radius);
      });
      const index_t words = c.rows() * words_per_row(c.cols());
      ASSERT_EQ(static_cast<index_t>(g.size()), words);
      for (index_t i = 0; i < words; ++i) ASSERT_EQ(g[i], c.view().words[i]) << "word " << i << " depth " << depth;
    }
  }
}

}  // namespace
}  // namespace canopy
