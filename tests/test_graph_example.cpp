// The "any tree, given as a graph" example (examples/quadtree_cities.cpp): a program's own
// quadtree over real cities, built as a Boost.Graph (examples/quadtree.hpp) and handed to Canopy
// by canopy::flatten_tree, is a sound n-ary tree, and its box counts (examples/box_count.hpp)
// through traverse_cpu equal brute force under every schedule, top-tree depth and executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "examples/box_count.hpp"
#include "examples/quadtree.hpp"
#include "layouts/graph_tree_boost.hpp"
#include "runtime/custom.hpp"
#include "test_errors.hpp"

namespace box_count {
namespace {

using canopy::ExecutorKind;
using canopy::ScheduleKind;

std::string data_path(const std::string& name) { return std::string(CANOPY_TEST_DATA) + "/" + name; }

// Built once: the cities, the program's quadtree, Canopy's tree, 5000 boxes and their counts.
struct Example {
  Example()
      : cities(read_cities(data_path("cities_4k.csv"))),
        qt(build_quadtree(cities.xy)),
        tree(canopy::flatten_tree(qt.graph)),
        boxes(make_query_boxes(qt, 5000, 2016)),
        expect(brute_force_box_counts(cities.xy, boxes)) {}
  Cities cities;
  CityQuadtree qt;
  canopy::GraphTree<QuadCell> tree;
  std::vector<float> boxes;
  std::vector<index_t> expect;
};

const Example& example() {
  static const Example e;
  return e;
}

const ExecutorKind kExecutors[] = {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep};

struct BoxRun {
  std::vector<index_t> counts;
  canopy::TraversalStats stats;
};

BoxRun count_cpu(ScheduleKind schedule, int depth, ExecutorKind executor) {
  const Example& e = example();
  BoxRun r;
  r.counts.assign(e.boxes.size() / 4, -1);
  const BoxCountVisitor v{e.tree.payload().data(), e.qt.cities.data(), e.boxes.data(), r.counts.data()};
  canopy::TraversalOptions opt;
  opt.device = canopy::Device::Cpu;
  opt.schedule = schedule;
  opt.depth = depth;
  opt.executor = executor;
  opt.count_nodes = true;
  opt.keep_schedule = true;
  r.stats = canopy::traverse_cpu(e.tree.view(), v, static_cast<index_t>(r.counts.size()), opt);
  return r;
}

TEST(GraphTreeExample, ReadsTheRealCities) {
  const Example& e = example();
  EXPECT_EQ(e.cities.size(), 4000);
  EXPECT_EQ(e.cities.x_name, "lon");
  EXPECT_EQ(e.cities.y_name, "lat");
  EXPECT_FLOAT_EQ(e.cities.xy[0], 1.56654f);  // the first row: 42.53176,1.56654
  EXPECT_FLOAT_EQ(e.cities.xy[1], 42.53176f);
}

TEST(GraphTreeExample, QuadtreeIsAnNaryTreeOfNestedClosedCells) {
  const Example& e = example();
  const canopy::GraphTreeView t = e.tree.view();
  const index_t n = e.cities.size();
  ASSERT_EQ(t.n_nodes, static_cast<canopy::node_id>(num_vertices(e.qt.graph)));
  EXPECT_LE(e.tree.max_children(), 4);
  EXPECT_LE(e.tree.height(), 17);  // splits stop at depth 16
  EXPECT_GT(e.tree.height(), 2);

  // The leaf-ordered cities are the input's rows, permuted.
  std::vector<index_t> rows = e.qt.row_of;
  std::sort(rows.begin(), rows.end());
  for (index_t i = 0; i < n; ++i) ASSERT_EQ(rows[i], i);
  for (index_t i = 0; i < n; ++i) {
    ASSERT_EQ(e.qt.cities[2 * i], e.cities.xy[2 * e.qt.row_of[i]]);
    ASSERT_EQ(e.qt.cities[2 * i + 1], e.cities.xy[2 * e.qt.row_of[i] + 1]);
  }

  int with_children[5] = {0, 0, 0, 0, 0};
  index_t next_city = 0;  // leaves in depth-first order hold consecutive ranges of the cities
  for (canopy::node_id node = 0; node < t.n_nodes; ++node) {
    const QuadCell& c = e.tree.payload()[node];
    ASSERT_LE(c.x0, c.x1);
    ASSERT_LE(c.y0, c.y1);
    // The payload is the graph's bundle of the vertex the node came from.
    const QuadCell& b = e.qt.graph[e.tree.vertex_of(node)];
    ASSERT_EQ(c.first, b.first);
    ASSERT_EQ(c.count, b.count);
    if (t.is_leaf(node)) {
      ASSERT_GT(c.count, 0) << "leaf " << node << " is an empty quadrant";
      ASSERT_EQ(c.first, next_city) << "leaf " << node;
      next_city += c.count;
      for (index_t i = c.first; i < c.first + c.count; ++i) {
        const float x = e.qt.cities[2 * i], y = e.qt.cities[2 * i + 1];
        ASSERT_TRUE(x >= c.x0 && x <= c.x1 && y >= c.y0 && y <= c.y1) << "city " << i << " outside leaf " << node;
      }
      continue;
    }
    ASSERT_EQ(c.count, 0) << "inner node " << node;
    ++with_children[t.child_count(node)];
    for (int k = 0; k < t.child_count(node); ++k) {
      const QuadCell& d = e.tree.payload()[t.child(node, k)];
      ASSERT_GT(t.child(node, k), node);
      ASSERT_TRUE(d.x0 >= c.x0 && d.x1 <= c.x1 && d.y0 >= c.y0 && d.y1 <= c.y1)
          << "child " << t.child(node, k) << " is not inside node " << node;
    }
  }
  EXPECT_EQ(next_city, n);
  // Only non-empty quadrants are kept, so the real data gives every arity from 1 to 4.
  for (int k = 1; k <= 4; ++k) EXPECT_GT(with_children[k], 0) << "no inner node with " << k << " children";
}

TEST(GraphTreeExample, BoxesHoldTensOfCities) {
  std::vector<index_t> c = example().expect;
  std::sort(c.begin(), c.end());
  EXPECT_GE(c[c.size() / 2], 10);
  EXPECT_LE(c[c.size() / 2], 99);
  EXPECT_GE(c.front(), 1);  // each box is centred on a city
}

TEST(GraphTreeExampleCpu, InputOrderCountsEqualBruteForceWithEveryExecutor) {
  for (ExecutorKind x : kExecutors) {
    SCOPED_TRACE(canopy::to_string(x));
    const BoxRun r = count_cpu(ScheduleKind::InputOrder, 0, x);
    EXPECT_EQ(r.counts, example().expect);
    std::vector<index_t> identity(r.counts.size());
    std::iota(identity.begin(), identity.end(), index_t{0});
    EXPECT_EQ(r.stats.schedule.order, identity);
  }
}

TEST(GraphTreeExampleCpu, HybridCountsEqualBruteForceAtTwoDepthsWithEveryExecutor) {
  const index_t m = static_cast<index_t>(example().expect.size());
  for (int depth : {3, 7}) {
    for (ExecutorKind x : kExecutors) {
      SCOPED_TRACE(std::string(canopy::to_string(x)) + ", depth " + std::to_string(depth));
      const BoxRun r = count_cpu(ScheduleKind::Hybrid, depth, x);
      EXPECT_EQ(r.stats.depth, depth);
      EXPECT_EQ(r.counts, example().expect);
      // The schedule only reorders: a permutation of the queries, cut into buckets.
      const canopy::Schedule& s = r.stats.schedule;
      ASSERT_EQ(s.size(), m);
      std::vector<index_t> order = s.order;
      std::sort(order.begin(), order.end());
      for (index_t i = 0; i < m; ++i) ASSERT_EQ(order[i], i) << "not a permutation";
      ASSERT_GE(s.buckets(), 1);
      EXPECT_EQ(s.bucket_offsets.front(), 0);
      EXPECT_EQ(s.bucket_offsets.back(), m);
      EXPECT_TRUE(std::is_sorted(s.bucket_offsets.begin(), s.bucket_offsets.end()));
    }
  }
}

TEST(GraphTreeExampleCpu, HybridScheduleVisitsFewerNodesPerWarp) {
  const BoxRun plain = count_cpu(ScheduleKind::InputOrder, 0, ExecutorKind::FsmLockstep);
  const BoxRun hybrid = count_cpu(ScheduleKind::Hybrid, 0, ExecutorKind::FsmLockstep);
  ASSERT_FALSE(plain.stats.warp_nodes.empty());
  ASSERT_FALSE(hybrid.stats.warp_nodes.empty());
  // The boxes are centred on random cities, so input-order warps spread over the whole tree.
  EXPECT_LT(2 * hybrid.stats.nodes_per_warp(), plain.stats.nodes_per_warp());
}

TEST(GraphTreeExampleCpu, CitiesOnABoxEdgeCount) {
  // Boxes spanned by two nearby cities (so cities lie on their edges) and single-city boxes
  // (a point: only the bounds-included comparisons find it).
  const Example& e = example();
  const index_t n = e.cities.size();
  std::vector<float> boxes;
  for (index_t i = 0; i + 7 < n; i += 7) {
    const float* a = &e.qt.cities[2 * i];
    const float* b = &e.qt.cities[2 * (i + 1 + i % 6)];
    boxes.insert(boxes.end(), {std::min(a[0], b[0]), std::min(a[1], b[1]), std::max(a[0], b[0]), std::max(a[1], b[1])});
    boxes.insert(boxes.end(), {a[0], a[1], a[0], a[1]});
  }
  const std::vector<index_t> expect = brute_force_box_counts(e.cities.xy, boxes);
  for (index_t q = 0; q < static_cast<index_t>(expect.size()); ++q) ASSERT_GE(expect[q], q % 2 ? 1 : 2);
  const index_t m = static_cast<index_t>(expect.size());
  for (ScheduleKind schedule : {ScheduleKind::InputOrder, ScheduleKind::Hybrid}) {
    for (ExecutorKind x : kExecutors) {
      SCOPED_TRACE(std::string(canopy::to_string(schedule)) + ", " + canopy::to_string(x));
      std::vector<index_t> counts(static_cast<std::size_t>(m), -1);
      const BoxCountVisitor v{e.tree.payload().data(), e.qt.cities.data(), boxes.data(), counts.data()};
      canopy::TraversalOptions opt;
      opt.device = canopy::Device::Cpu;
      opt.schedule = schedule;
      opt.executor = x;
      canopy::traverse_cpu(e.tree.view(), v, m, opt);
      EXPECT_EQ(counts, expect);
    }
  }
}

using canopy::test::error_of;

TEST(GraphTreeExample, BadCityFilesAreErrorsNamingTheFileAndLine) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::string bad_number = write("graph_example_bad_number.csv", "lat,lon\n1.5,2.5\n3.5,east\n");
  EXPECT_NE(error_of([&] { read_cities(bad_number); }).find(bad_number + ":3:"), std::string::npos)
      << error_of([&] { read_cities(bad_number); });
  const std::string short_row = write("graph_example_short_row.csv", "x,y\n1,2\n3\n");
  EXPECT_NE(error_of([&] { read_cities(short_row); }).find(short_row + ":3:"), std::string::npos);
  const std::string one_column = write("graph_example_one_column.csv", "lat\n1\n");
  EXPECT_NE(error_of([&] { read_cities(one_column); }).find("two numeric columns"), std::string::npos);
  const std::string empty = write("graph_example_no_rows.csv", "lat,lon\n");
  EXPECT_NE(error_of([&] { read_cities(empty); }).find("no data rows"), std::string::npos);
  EXPECT_NE(error_of([] { read_cities("/nonexistent/cities.csv"); }).find("/nonexistent/cities.csv: cannot open"),
            std::string::npos);
}

TEST(GraphTreeExample, SmallAndDegenerateCitySets) {
  // Fewer cities than a leaf holds: the root is the only node. All cities at one spot: the
  // splits stop at depth 16, a chain of one-child cells.
  for (const std::vector<float>& xy :
       {std::vector<float>{0.5f, 0.5f, 1.0f, 2.0f}, std::vector<float>(2 * 40, 3.25f)}) {
    const CityQuadtree qt = build_quadtree(xy);
    const canopy::GraphTree<QuadCell> tree = canopy::flatten_tree(qt.graph);
    const std::vector<float> boxes = make_query_boxes(qt, 100, 1);
    std::vector<index_t> counts(100, -1);
    const BoxCountVisitor v{tree.payload().data(), qt.cities.data(), boxes.data(), counts.data()};
    canopy::TraversalOptions opt;
    opt.device = canopy::Device::Cpu;
    opt.schedule = ScheduleKind::Hybrid;
    canopy::traverse_cpu(tree.view(), v, 100, opt);
    EXPECT_EQ(counts, brute_force_box_counts(xy, boxes));
    if (xy.size() == 4) {
      EXPECT_EQ(tree.size(), 1);
    } else {
      EXPECT_EQ(tree.height(), 17);
      EXPECT_EQ(tree.max_children(), 1);
      EXPECT_EQ(counts[0], 40);
    }
  }
}

}  // namespace
}  // namespace box_count
