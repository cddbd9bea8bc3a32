#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <tbb/task_arena.h>

#include "layouts/ball_tree.hpp"
#include "layouts/vp_tree.hpp"
#include "io/dataset.hpp"
#include "runtime/pc_visitor.hpp"
#include "tests/test_errors.hpp"
#include "tests/test_points.hpp"
#include "tests/tree_walk.hpp"

namespace canopy {
namespace {

// ---- inputs (tests/test_points.hpp and local: no GPU-side sources) ---------------------------

// Tighter blobs and more duplicates than the suite's default: more ties for the splits.
std::vector<float> clustered_points(index_t n, int dims, std::uint64_t seed) {
  return test::clustered_points(n, dims, seed, {6, 0.03f, 7});
}

// Points a + t u on one line, t on a coarse grid so many coincide.
std::vector<float> line_points(index_t n, int dims, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(dims), dir(dims);
  for (int d = 0; d < dims; ++d) {
    a[d] = u(rng);
    dir[d] = u(rng);
  }
  std::vector<float> p(static_cast<std::size_t>(n) * dims);
  for (index_t i = 0; i < n; ++i) {
    const float t = static_cast<float>(rng() % 200) / 64.0f;
    for (int d = 0; d < dims; ++d) p[i * dims + d] = a[d] + t * dir[d];
  }
  return p;
}

PointSet real_points(const std::string& file, const std::string& columns) {
  PointSet ps = read_csv(std::string(CANOPY_TEST_DATA) + "/" + file, columns);
  normalize_unit_cube(ps);
  return ps;
}

enum class Kind { kUniform, kClustered, kIdentical, kLine, kOne };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kUniform: return "uniform";
    case Kind::kClustered: return "clustered";
    case Kind::kIdentical: return "identical";
    case Kind::kLine: return "line";
    case Kind::kOne: return "one";
  }
  return "?";
}
std::vector<float> make_points(Kind k, int dims, index_t& n) {
  switch (k) {
    case Kind::kUniform: n = 3001; return test::random_points(n, dims, 11 + dims);
    case Kind::kClustered: n = 2500; return clustered_points(n, dims, 12 + dims);
    case Kind::kIdentical: n = 300; return std::vector<float>(static_cast<std::size_t>(n) * dims, 0.375f);
    case Kind::kLine: n = 1000; return line_points(n, dims, 13 + dims);
    case Kind::kOne: n = 1; return test::random_points(n, dims, 14 + dims);
  }
  return {};
}

// ---- the distance a visitor computes -------------------------------------------------------

// D(a, b) on padded rows, the way the builders and the query visitors compute it.
float metric_distance(const float* a, const float* b, int dims) {
  return dispatch_dims(dims, [&](auto width) {
    constexpr int M = decltype(width)::value;
    float q[M];
    load_padded(a, q);
    return sqrt_rn(point_distance2<M>(q, b));
  });
}

// ---- shared structural checks --------------------------------------------------------------

struct Range {
  index_t begin = 0, end = 0;
};

// Checks what every tree of the kd-tree family must satisfy and returns each node's point
// range (tree order).
template <class View>
std::vector<Range> check_layout(const View& v, int tree_height, const std::vector<float>& pts, index_t n, int dims,
                                int leaf_size) {
  std::vector<Range> ranges(static_cast<std::size_t>(v.n_nodes));
  EXPECT_EQ(v.n_points, n);
  EXPECT_EQ(v.dims, dims);
  EXPECT_EQ(v.stride, padded_dims(dims));
  // point_ids is a permutation and points[] holds the input rows, zero-padded.
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (index_t i = 0; i < n; ++i) {
    const index_t id = v.point_ids[i];
    EXPECT_GE(id, 0);
    EXPECT_LT(id, n);
    if (id < 0 || id >= n) return ranges;
    ++seen[id];
    for (int d = 0; d < v.stride; ++d)
      EXPECT_EQ(v.point(i)[d], d < dims ? pts[id * dims + d] : 0.0f) << "point " << i << " dim " << d;
  }
  for (index_t id = 0; id < n; ++id) EXPECT_EQ(seen[id], 1) << "point " << id;

  // Depth-first walk: leaves tile [0, n) left to right, every node is reached once, child 0
  // is n + 1, halves are balanced.
  index_t next_point = 0;
  int max_depth = 0;
  std::vector<int> visited(static_cast<std::size_t>(v.n_nodes), 0);
  std::function<Range(node_id, int)> walk = [&](node_id nd, int depth) -> Range {
    EXPECT_GE(nd, 0);
    EXPECT_LT(nd, v.n_nodes);
    if (nd < 0 || nd >= v.n_nodes || depth >= View::kMaxStack) return {};
    ++visited[nd];
    EXPECT_EQ(v.nodes[nd].depth, depth);
    max_depth = std::max(max_depth, depth);
    Range r;
    if (v.is_leaf(nd)) {
      EXPECT_EQ(v.child_count(nd), 0);
      EXPECT_EQ(v.nodes[nd].split_dim, -1);
      r = test::expect_next_leaf<Range>(v, nd, leaf_size, next_point);
    } else {
      EXPECT_EQ(v.child_count(nd), 2);
      EXPECT_EQ(v.nodes[nd].count, 0);
      EXPECT_GE(v.nodes[nd].split_dim, 0);
      EXPECT_EQ(v.child(nd, 0), nd + 1);
      EXPECT_GT(v.child(nd, 1), nd + 1);
      const Range a = walk(v.child(nd, 0), depth + 1);
      const Range b = walk(v.child(nd, 1), depth + 1);
      EXPECT_EQ(a.end, b.begin);
      EXPECT_GT(a.end - a.begin + b.end - b.begin, leaf_size) << "an inner node must hold more than a leaf";
      EXPECT_LE(std::abs((a.end - a.begin) - (b.end - b.begin)), 1) << "node " << nd;
      r = {a.begin, b.end};
    }
    ranges[nd] = r;
    return r;
  };
  const Range all = walk(0, 0);
  EXPECT_EQ(all.begin, 0);
  EXPECT_EQ(all.end, n);
  for (node_id nd = 0; nd < v.n_nodes; ++nd) EXPECT_EQ(visited[nd], 1) << "node " << nd;
  const int bound =
      n <= leaf_size ? 1 : static_cast<int>(std::ceil(std::log2(static_cast<double>(n) / leaf_size))) + 1;
  EXPECT_EQ(v.height, tree_height);
  EXPECT_EQ(tree_height, max_depth + 1);
  EXPECT_LE(tree_height, bound);
  EXPECT_LE(tree_height, 60);
  return ranges;
}

// ---- ball tree -----------------------------------------------------------------------------

void check_ball_tree(const BallTree& tree, const std::vector<float>& pts, index_t n, int dims, int leaf_size) {
  const BallTreeView v = tree.view();
  const std::vector<Range> ranges = check_layout(v, tree.height(), pts, n, dims, leaf_size);
  if (::testing::Test::HasFailure()) return;
  for (node_id nd = 0; nd < v.n_nodes; ++nd) {
    const Range r = ranges[nd];
    // The centre is the centroid; its padding stays zero.
    for (int d = 0; d < v.stride; ++d) {
      double s = 0.0;
      for (index_t i = r.begin; i < r.end; ++i) s += v.point(i)[d];
      const double centroid = s / static_cast<double>(r.end - r.begin);
      if (d >= dims) {
        ASSERT_EQ(v.centre(nd)[d], 0.0f);
      } else {
        ASSERT_NEAR(v.centre(nd)[d], centroid, 1e-6 * (1.0 + std::abs(centroid))) << "node " << nd << " dim " << d;
      }
    }
    // The radius bounds every computed distance, and is the largest of them.
    float largest = 0.0f;
    for (index_t i = r.begin; i < r.end; ++i) {
      const float dist = metric_distance(v.centre(nd), v.point(i), dims);
      ASSERT_LE(dist, v.radius(nd)) << "node " << nd << " point " << i;
      largest = std::max(largest, dist);
    }
    ASSERT_EQ(v.radius(nd), largest) << "node " << nd;
    if (!v.is_leaf(nd)) {
      // Median split along split_dim, ties by original index.
      const int dim = v.nodes[nd].split_dim;
      ASSERT_LT(dim, dims);
      const Range a = ranges[v.child(nd, 0)], b = ranges[v.child(nd, 1)];
      std::pair<float, index_t> left_max{-std::numeric_limits<float>::infinity(), -1};
      std::pair<float, index_t> right_min{std::numeric_limits<float>::infinity(), n};
      for (index_t i = a.begin; i < a.end; ++i) left_max = std::max(left_max, {v.point(i)[dim], v.point_ids[i]});
      for (index_t i = b.begin; i < b.end; ++i) right_min = std::min(right_min, {v.point(i)[dim], v.point_ids[i]});
      ASSERT_LT(left_max, right_min) << "node " << nd;
    }
  }
}

// ---- vp-tree -------------------------------------------------------------------------------

void check_vp_tree(const VpTree& tree, const std::vector<float>& pts, index_t n, int dims, int leaf_size) {
  const VpTreeView v = tree.view();
  const std::vector<Range> ranges = check_layout(v, tree.height(), pts, n, dims, leaf_size);
  if (::testing::Test::HasFailure()) return;
  EXPECT_EQ(v.parent[0], kNoNode);
  EXPECT_EQ(v.shell_lo[0], 0.0f);
  EXPECT_EQ(v.shell_hi[0], std::numeric_limits<float>::infinity());
  for (node_id nd = 0; nd < v.n_nodes; ++nd) {
    if (v.is_leaf(nd)) {
      for (int d = 0; d < v.stride; ++d) ASSERT_EQ(v.vantage(nd)[d], 0.0f);
      ASSERT_EQ(v.mu[nd], 0.0f);
      continue;
    }
    for (int d = dims; d < v.stride; ++d) ASSERT_EQ(v.vantage(nd)[d], 0.0f);
    const node_id in = v.child(nd, 0), out = v.child(nd, 1);
    ASSERT_EQ(v.parent[in], nd);
    ASSERT_EQ(v.parent[out], nd);
    // The vantage point is one of the node's own points, kept in the inside child.
    bool found = false;
    for (index_t i = ranges[in].begin; i < ranges[in].end && !found; ++i)
      found = std::equal(v.point(i), v.point(i) + v.stride, v.vantage(nd));
    ASSERT_TRUE(found) << "node " << nd << ": the vantage point is not in the inside child";
    // Shells: exact min and max over the subtree of D(vantage(parent), p); the split respects mu.
    for (node_id c : {in, out}) {
      float lo = std::numeric_limits<float>::infinity(), hi = 0.0f;
      for (index_t i = ranges[c].begin; i < ranges[c].end; ++i) {
        const float dist = metric_distance(v.vantage(nd), v.point(i), dims);
        ASSERT_LE(v.shell_lo[c], dist) << "node " << c << " point " << i;
        ASSERT_LE(dist, v.shell_hi[c]) << "node " << c << " point " << i;
        if (c == in) {
          ASSERT_LE(dist, v.mu[nd]) << "node " << nd << " point " << i;
        } else {
          ASSERT_GE(dist, v.mu[nd]) << "node " << nd << " point " << i;
        }
        lo = std::min(lo, dist);
        hi = std::max(hi, dist);
      }
      ASSERT_EQ(v.shell_lo[c], lo) << "node " << c;
      ASSERT_EQ(v.shell_hi[c], hi) << "node " << c;
    }
    ASSERT_EQ(v.mu[nd], v.shell_hi[in]);
    // The deeper shells hold too: every point under a node lies in the shells of all its
    // ancestors (follow parent[] up from each leaf).
  }
  for (node_id nd = 0; nd < v.n_nodes; ++nd) {
    if (!v.is_leaf(nd)) continue;
    for (node_id c = nd; v.parent[c] != kNoNode; c = v.parent[c])
      for (index_t i = ranges[nd].begin; i < ranges[nd].end; ++i) {
        const float dist = metric_distance(v.vantage(v.parent[c]), v.point(i), dims);
        ASSERT_LE(v.shell_lo[c], dist);
        ASSERT_LE(dist, v.shell_hi[c]);
      }
  }
}

// ---- parameterised invariants --------------------------------------------------------------

using Shape = std::tuple<int, Kind, int>;  // dims, kind, leaf size

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return std::string(kind_name(std::get<1>(info.param))) + "_d" + std::to_string(std::get<0>(info.param)) +
         "_leaf" + std::to_string(std::get<2>(info.param));
}

class MetricTreeInvariants : public ::testing::TestWithParam<Shape> {};

// Builds a Tree over the shape's points and hands it to check(tree, points, n, dims, leaf).
template <class Tree, class Options, class Check>
void build_and_check(const Shape& shape, Check check) {
  const auto [dims, kind, leaf] = shape;
  index_t n = 0;
  const std::vector<float> pts = make_points(kind, dims, n);
  Options o;
  o.leaf_size = leaf;
  const Tree tree = Tree::build(pts.data(), n, dims, o);
  EXPECT_EQ(tree.size(), n);
  EXPECT_EQ(tree.leaf_size(), leaf);
  check(tree, pts, n, dims, leaf);
}

TEST_P(MetricTreeInvariants, BallTree) {
  build_and_check<BallTree, BallTreeOptions>(GetParam(), [](auto&&... a) { check_ball_tree(a...); });
}

TEST_P(MetricTreeInvariants, VpTree) {
  build_and_check<VpTree, VpTreeOptions>(GetParam(), [](auto&&... a) { check_vp_tree(a...); });
}

INSTANTIATE_TEST_SUITE_P(Shapes, MetricTreeInvariants,
                         ::testing::Combine(::testing::Values(1, 2, 3, 7, 8, 16),
                                            ::testing::Values(Kind::kUniform, Kind::kClustered, Kind::kIdentical,
                                                              Kind::kLine, Kind::kOne),
                                            ::testing::Values(1, 8, 13)),
                         shape_name);

TEST(MetricTrees, RealSubsets) {
  for (auto [file, cols] : {std::pair<const char*, const char*>{"covtype_4k.csv", "0-6"}, {"cities_4k.csv", ""}}) {
    SCOPED_TRACE(file);
    const PointSet ps = real_points(file, cols);
    for (int leaf : {1, 8}) {
      BallTreeOptions bo;
      bo.leaf_size = leaf;
      check_ball_tree(BallTree::build(ps.data(), ps.size(), ps.dims, bo), ps.coords, ps.size(), ps.dims, leaf);
      VpTreeOptions vo;
      vo.leaf_size = leaf;
      check_vp_tree(VpTree::build(ps.data(), ps.size(), ps.dims, vo), ps.coords, ps.size(), ps.dims, leaf);
    }
  }
}

// Large enough that the top levels build in parallel and reduce over several blocks.
TEST(MetricTrees, LargeClusteredSetsKeepTheInvariants) {
  const index_t n = 40000;
  const std::vector<float> pts = clustered_points(n, 3, 21);
  check_ball_tree(BallTree::build(pts.data(), n, 3), pts, n, 3, 8);
  check_vp_tree(VpTree::build(pts.data(), n, 3), pts, n, 3, 8);
}

TEST(MetricTrees, IdenticalPointsStillGiveALogarithmicHeight) {
  const index_t n = 10000;
  const std::vector<float> pts(static_cast<std::size_t>(n) * 16, -2.5f);
  BallTreeOptions bo;
  bo.leaf_size = 1;
  VpTreeOptions vo;
  vo.leaf_size = 1;
  const BallTree ball = BallTree::build(pts.data(), n, 16, bo);
  const VpTree vp = VpTree::build(pts.data(), n, 16, vo);
  EXPECT_EQ(ball.height(), 15);  // ceil(log2(10000)) + 1
  EXPECT_EQ(vp.height(), 15);
  EXPECT_EQ(ball.node_count(), 2 * n - 1);
  EXPECT_EQ(vp.node_count(), 2 * n - 1);
  for (float r : ball.radii()) EXPECT_EQ(r, 0.0f);
  for (node_id nd = 1; nd < vp.node_count(); ++nd) {
    EXPECT_EQ(vp.shell_lo()[nd], 0.0f);
    EXPECT_EQ(vp.shell_hi()[nd], 0.0f);
  }
}

// The documented vantage rule at the root (one block of points, so the centroid sum runs in
// input order here too): the point farthest from the point farthest from the centroid.
TEST(VpTree, RootVantageIsTwoHopsFromTheCentroid) {
  for (int dims : {2, 7}) {
    const index_t n = 1000;
    const std::vector<float> pts = test::random_points(n, dims, 31);
    const VpTree tree = VpTree::build(pts.data(), n, dims);
    const int stride = padded_dims(dims);
    std::vector<double> sum(stride, 0.0);
    for (index_t i = 0; i < n; ++i)
      for (int d = 0; d < dims; ++d) sum[d] += pts[i * dims + d];
    std::vector<float> x(stride, 0.0f), p(stride, 0.0f);
    for (int d = 0; d < dims; ++d) x[d] = static_cast<float>(sum[d] / n);
    auto farthest_from_x = [&] {
      index_t best = -1;
      float best_d = -1.0f;
      for (index_t i = 0; i < n; ++i) {
        std::copy(pts.begin() + i * dims, pts.begin() + (i + 1) * dims, p.begin());
        const float dist = metric_distance(x.data(), p.data(), dims);
        if (dist > best_d) {  // strict: ties keep the smaller index
          best_d = dist;
          best = i;
        }
      }
      return best;
    };
    const index_t a = farthest_from_x();
    std::copy(pts.begin() + a * dims, pts.begin() + (a + 1) * dims, x.begin());
    const index_t v = farthest_from_x();
    for (int d = 0; d < dims; ++d) EXPECT_EQ(tree.vantages()[d], pts[v * dims + d]) << "dims " << dims;
  }
}

// ---- the bounds prune a nearest-neighbour search without losing the answer -----------------

constexpr float kSlack = 1e-5f;  // relative slack for the triangle inequality on rounded values

struct Nearest {
  float dist = std::numeric_limits<float>::infinity();
  long visited = 0;
};

void nearest_ball(const BallTreeView& v, const float* q, node_id nd, Nearest& best) {
  ++best.visited;
  const float dc = metric_distance(q, v.centre(nd), v.dims);
  if ((dc - v.radius(nd)) * (1.0f - kSlack) > best.dist) return;
  if (v.is_leaf(nd)) {
    for (index_t i = v.nodes[nd].first; i < v.nodes[nd].first + v.nodes[nd].count; ++i)
      best.dist = std::min(best.dist, metric_distance(q, v.point(i), v.dims));
    return;
  }
  const node_id a = v.child(nd, 0), b = v.child(nd, 1);
  const bool a_first = metric_distance(q, v.centre(a), v.dims) <= metric_distance(q, v.centre(b), v.dims);
  nearest_ball(v, q, a_first ? a : b, best);
  nearest_ball(v, q, a_first ? b : a, best);
}

void nearest_vp(const VpTreeView& v, const float* q, node_id nd, float dq_parent, Nearest& best) {
  ++best.visited;
  if (v.parent[nd] != kNoNode) {
    const float gap = std::max(v.shell_lo[nd] - dq_parent, dq_parent - v.shell_hi[nd]);
    if (gap * (1.0f - kSlack) > best.dist) return;
  }
  if (v.is_leaf(nd)) {
    for (index_t i = v.nodes[nd].first; i < v.nodes[nd].first + v.nodes[nd].count; ++i)
      best.dist = std::min(best.dist, metric_distance(q, v.point(i), v.dims));
    return;
  }
  const float dv = metric_distance(q, v.vantage(nd), v.dims);
  const bool inside_first = dv <= v.mu[nd];
  nearest_vp(v, q, inside_first ? v.child(nd, 0) : v.child(nd, 1), dv, best);
  nearest_vp(v, q, inside_first ? v.child(nd, 1) : v.child(nd, 0), dv, best);
}

TEST(MetricTrees, NearestNeighbourSearchWithTheBoundsIsExact) {
  for (int dims : {2, 7}) {
    for (Kind kind : {Kind::kUniform, Kind::kClustered}) {
      const index_t n = 5000;
      const bool uniform = kind == Kind::kUniform;
      const std::vector<float> pts = uniform ? test::random_points(n, dims, 41) : clustered_points(n, dims, 42);
      const std::vector<float> queries = uniform ? test::random_points(200, dims, 43) : clustered_points(200, dims, 44);
      const BallTree ball = BallTree::build(pts.data(), n, dims);
      const VpTree vp = VpTree::build(pts.data(), n, dims);
      const int stride = padded_dims(dims);
      std::vector<float> q(stride, 0.0f), p(stride, 0.0f);
      long ball_visits = 0, vp_visits = 0;
      for (index_t k = 0; k < 200; ++k) {
        std::copy(queries.begin() + k * dims, queries.begin() + (k + 1) * dims, q.begin());
        float brute = std::numeric_limits<float>::infinity();
        for (index_t i = 0; i < n; ++i) {
          std::copy(pts.begin() + i * dims, pts.begin() + (i + 1) * dims, p.begin());
          brute = std::min(brute, metric_distance(q.data(), p.data(), dims));
        }
        Nearest a, b;
        nearest_ball(ball.view(), q.data(), 0, a);
        nearest_vp(vp.view(), q.data(), 0, 0.0f, b);
        ASSERT_EQ(a.dist, brute) << "ball tree, query " << k;
        ASSERT_EQ(b.dist, brute) << "vp-tree, query " << k;
        ball_visits += a.visited;
        vp_visits += b.visited;
      }
      // The bounds do prune (7-d uniform with 5,000 points is near the worst case).
      EXPECT_LT(ball_visits / 200, ball.node_count() / 2) << "dims " << dims << " " << kind_name(kind);
      EXPECT_LT(vp_visits / 200, vp.node_count() / 2) << "dims " << dims << " " << kind_name(kind);
    }
  }
}

// ---- determinism and errors ----------------------------------------------------------------

TEST(MetricTrees, BuildDoesNotDependOnThreadCount) {
  const index_t n = 50000;
  for (int dims : {3, 7}) {
    const std::vector<float> pts = clustered_points(n, dims, 5 + dims);
    BallTree b1, b4;
    VpTree v1, v4;
    tbb::task_arena one(1), four(4);
    one.execute([&] {
      b1 = BallTree::build(pts.data(), n, dims);
      v1 = VpTree::build(pts.data(), n, dims);
    });
    four.execute([&] {
      b4 = BallTree::build(pts.data(), n, dims);
      v4 = VpTree::build(pts.data(), n, dims);
    });
    const std::string at = "dims " + std::to_string(dims) + ", one thread and four";
    test::expect_same_tree(b1, b4, at);
    test::expect_same_tree(v1, v4, at);
  }
}

template <class Build>
void expect_clear_errors(Build build) {
  const std::vector<float> pts = test::random_points(10, 2, 1);
  EXPECT_NE(test::error_of([&] { build(pts.data(), 0, 2, 8); }).find("n = 0"), std::string::npos);
  EXPECT_NE(test::error_of([&] { build(pts.data(), 5, 0, 8); }).find("dims = 0"), std::string::npos);
  EXPECT_NE(test::error_of([&] { build(pts.data(), 1, 17, 8); }).find("dims = 17"), std::string::npos);
  EXPECT_NE(test::error_of([&] { build(pts.data(), 10, 2, 0); }).find("leaf_size = 0"), std::string::npos);
  EXPECT_NE(test::error_of([&] { build(nullptr, 10, 2, 8); }).find("points"), std::string::npos);
  std::vector<float> bad = pts;
  bad[7] = std::nanf("");
  const std::string nan_message = test::error_of([&] { build(bad.data(), 10, 2, 8); });
  EXPECT_NE(nan_message.find("point 3"), std::string::npos) << nan_message;
  EXPECT_NE(nan_message.find("dimension 1"), std::string::npos) << nan_message;
  bad[7] = std::numeric_limits<float>::infinity();
  const std::string inf_message = test::error_of([&] { build(bad.data(), 10, 2, 8); });
  EXPECT_NE(inf_message.find("point 3"), std::string::npos) << inf_message;
  EXPECT_NE(inf_message.find("dimension 1"), std::string::npos) << inf_message;
}

TEST(BallTree, BadInputIsAClearError) {
  expect_clear_errors([](const float* p, index_t n, int dims, int leaf) {
    BallTreeOptions o;
    o.leaf_size = leaf;
    return BallTree::build(p, n, dims, o);
  });
}

TEST(VpTree, BadInputIsAClearError) {
  expect_clear_errors([](const float* p, index_t n, int dims, int leaf) {
    VpTreeOptions o;
    o.leaf_size = leaf;
    return VpTree::build(p, n, dims, o);
  });
}

}  // namespace
}  // namespace canopy
