// The guided inspector's rows against the paper's sequential probe, and the guided scheduler on
// the GPU against the CPU's (kd-tree, ball tree and vp-tree k-NN workloads).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <vector>
#include "executor/cpu_executor.hpp"
#include "gpu_trace.hpp"
#include "inspector/inspector.hpp"
#include "runtime/engine.hpp"
#include "runtime/knn.hpp"
#include "runtime/knn_visitor.hpp"
#include "scheduler/guided.hpp"
#include "knn_workload.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

using namespace knn_test;

// --- The guided inspector --------------------------------------------------------------------

// The probe below a reached top-leaf n (accepted): with fewer than k candidates, the subtree
// walked recursively in the query's order until k are known (returns true then); with k,
// the preferred path down to the first rejected node or a leaf.
template <class View, class V>
bool reference_probe(const View& tree, const V& v, typename V::State& s, node_id n) {
  if (s.found == v.k) {
    while (!tree.is_leaf(n)) {
      n = tree.child(n, v.first_child(s, n));
      if (!v.descend(s, n)) return true;
    }
    v.leaf(s, n);
    return true;
  }
  if (tree.is_leaf(n)) {
    v.leaf(s, n);
    return s.found == v.k;
  }
  const int first = v.first_child(s, n);
  for (int i = 0; i < tree.child_count(n); ++i) {
    const node_id c = tree.child(n, visit_rank_child(first, i));
    if (v.descend(s, c) && reference_probe(tree, v, s, c)) return true;
  }
  return false;
}

// The paper's Figure 5 written recursively: the top-leaves in the query's own visit order,
// and at each one the probe of its subtree (Full), the probe only while fewer than k
// candidates are known (Lean), or none; at most `cap` top-leaves (0: no cap).
template <class View, class V>
void reference_row(const View& tree, const TopTreeView& top, const V& v, typename V::State& s, node_id n, int depth,
                   GuidedRows rows, std::vector<std::int32_t>& row) {
  if (rows.cap > 0 && static_cast<index_t>(row.size()) == rows.cap) return;
  if (!v.descend(s, n)) return;
  if (depth == top.depth - 1 || tree.is_leaf(n)) {
    row.push_back(static_cast<std::int32_t>(top.column(n)));
    if (rows.probe == GuidedProbe::Full || (rows.probe == GuidedProbe::Lean && s.found < v.k))
      reference_probe(tree, v, s, n);
    return;
  }
  const int first = v.first_child(s, n);
  for (int i = 0; i < tree.child_count(n); ++i)
    reference_row(tree, top, v, s, tree.child(n, visit_rank_child(first, i)), depth + 1, rows, row);
}

template <class Tree>
void guided_inspector_rows(int dims, int k) {
  const index_t m = 400;
  on_knn_workload<Tree>(dims, 3000, m, k, 40 + dims, [&](const std::vector<float>&, const std::vector<float>& queries,
                                                          const Tree& tree, const auto& view, const auto& v) {
    for (int depth : {1, 4, 7}) {
     for (GuidedProbe probe : {GuidedProbe::Full, GuidedProbe::Lean, GuidedProbe::None}) {
      for (index_t cap : {0, 1, 3}) {
      const GuidedRows rows{probe, cap};
      const TopTree top = TopTree::build(view, depth);
      const GuidedMatrix gm = inspect_cpu_guided(view, top.view(), v, m, rows);
      index_t longest = 0;
      for (index_t q = 0; q < m; ++q) {
        std::vector<std::int32_t> row;
        auto s = v.init(q);
        reference_row(view, top.view(), v, s, 0, 0, rows, row);
        ASSERT_EQ(gm.view().length(q), static_cast<index_t>(row.size()))
            << "query " << q << " depth " << depth << " probe " << to_string(probe) << " cap " << cap;
        ASSERT_TRUE(std::equal(row.begin(), row.end(), gm.view().row(q)));
        std::vector<std::int32_t> sorted = row;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "a top-leaf twice";
        ASSERT_LE(static_cast<index_t>(row.size()), rows.width(top.size()));
        longest = std::max<index_t>(longest, row.size());
      }
      ASSERT_EQ(gm.width(), longest + 1) << "packed rows: the longest row and its end marker";
      if (gpu_available()) {
        const test::PackedRows g = test::guided_matrix_gpu(tree, queries, k, depth, rows);
        ASSERT_EQ(g.width, longest + 1) << "packed rows: the longest row and its end marker";
        for (index_t q = 0; q < m; ++q) {
          const index_t len = gm.view().length(q);
          ASSERT_EQ(g.view().length(q), len) << "query " << q;
          ASSERT_EQ(g.offsets[q + 1] - g.offsets[q], len + 1) << "rows are packed back to back";
          for (index_t c = 0; c < len; ++c)
            ASSERT_EQ(g.view().row(q)[c], gm.view().row(q)[c]) << "query " << q << " entry " << c;
        }
        // The scheduler gives the same schedule from the packed rows as from the full matrix.
        const Schedule a = guided_schedule(g.view(), top.parents().data());
        const Schedule b = guided_schedule(gm.view(), top.parents().data());
        EXPECT_EQ(a.order, b.order);
        EXPECT_EQ(a.bucket_offsets, b.bucket_offsets);
      }
      }
     }
    }
  });
}

// Skipping the probes that only tighten a formed bound leaves a looser bound at every step of
// the same traversal: a lean row starts like the full one and contains it, in order. With no
// probe at all a nearest-neighbour query never has a bound in the top-tree: its row is every
// top-leaf, in its preferred order, and contains the lean row.
TEST(GuidedInspector, LooserProbesGiveRowsThatContainTheTighterOnes) {
  const int dims = 7, k = 8;
  const std::vector<float> points = test::clustered_points(3000, dims, 90);
  const std::vector<float> queries = make_queries(points, dims, 400, 91);
  const index_t m = 400;
  const KdTree tree = build_tree<KdTree>(points, dims);
  const auto view = tree.view();
  std::vector<float> dist(m * k);
  std::vector<index_t> index(m * k);
  const auto v = make_knn_visitor<7>(view, queries.data(), k, dist.data(), index.data());
  // Whether row a is a subsequence of row b.
  auto contained = [](const GuidedMatrixView& a, const GuidedMatrixView& b, index_t q) {
    const index_t la = a.length(q), lb = b.length(q);
    index_t j = 0;
    for (index_t i = 0; i < lb && j < la; ++i) j += b.row(q)[i] == a.row(q)[j];
    return j == la;
  };
  index_t longer = 0;
  for (int depth : {4, 7}) {
    const TopTree top = TopTree::build(view, depth);
    const GuidedMatrix full = inspect_cpu_guided(view, top.view(), v, m);
    const GuidedMatrix thin = inspect_cpu_guided(view, top.view(), v, m, {GuidedProbe::Lean, 0});
    const GuidedMatrix none = inspect_cpu_guided(view, top.view(), v, m, {GuidedProbe::None, 0});
    for (index_t q = 0; q < m; ++q) {
      const index_t a = full.view().length(q), b = thin.view().length(q);
      ASSERT_GE(b, a) << "query " << q;
      ASSERT_GT(a, 0);
      EXPECT_EQ(full.view().row(q)[0], thin.view().row(q)[0]);
      EXPECT_TRUE(contained(full.view(), thin.view(), q)) << "query " << q << " depth " << depth;
      ASSERT_EQ(none.view().length(q), top.size()) << "query " << q;
      EXPECT_EQ(none.view().row(q)[0], full.view().row(q)[0]);
      EXPECT_TRUE(contained(thin.view(), none.view(), q)) << "query " << q << " depth " << depth;
      longer += b > a;
    }
  }
  EXPECT_GT(longer, 0) << "the lean probe never loosened a bound: the test shows nothing";
}

TEST(GuidedInspector, RowsAreTheVisitOrderOfTopLeaves) {
  for (int k : {4, 32}) {  // k = 32 needs several leaves before the probe has a bound
    guided_inspector_rows<KdTree>(2, k);
    guided_inspector_rows<KdTree>(7, k);
    guided_inspector_rows<BallTree>(7, k);
    guided_inspector_rows<VpTree>(2, k);
  }
}

// The device guided scheduler returns the CPU scheduler's order and buckets, bit for bit.
TEST(GuidedSchedulerGpu, EqualsTheCpuScheduler) {
  CANOPY_REQUIRE_GPU();
  std::mt19937_64 rng(77);
  for (int cols : {1, 2, 16, 128, 1024}) {
    // Binary sibling structure: columns 2i and 2i + 1 share a parent (an odd last one alone).
    std::vector<node_id> parents(cols);
    for (int c = 0; c < cols; ++c) parents[c] = c / 2;
    for (index_t rows : {0, 1, 31, 32, 33, 1000, 60000}) {
      // Full-width rows, and capped rows (a full capped row has no end marker).
      for (int width : {cols, std::min(cols, 3)}) {
        for (int maxlen : {0, 1, 3, 12}) {
          // Past a row's end marker the inspector writes nothing: random columns here, which a
          // scheduler that read them would sort by.
          std::vector<std::int32_t> entries(static_cast<std::size_t>(rows) * width);
          for (auto& e : entries) e = static_cast<std::int32_t>(rng() % cols);
          for (index_t r = 0; r < rows; ++r) {
            // Rows of a few clustered columns, often a sibling pair, each column once.
            const int len = maxlen == 0 ? 0 : static_cast<int>(rng() % (maxlen + 1));
            std::vector<char> used(cols, 0);
            int c = static_cast<int>(rng() % 4) * (cols / 4 + 1) % cols;
            int j = 0;
            for (; j < len && j < width; ++j) {
              c = (c + static_cast<int>(rng() % 3)) % cols;
              int tries = 0;
              while (used[c] && tries++ < cols) c = (c + 1) % cols;
              if (used[c]) break;
              used[c] = 1;
              entries[r * width + j] = c;
            }
            if (j < width) entries[r * width + j] = kRowEnd;
          }
          const GuidedMatrixView view{entries.data(), rows, cols, width};
          for (index_t max_bucket : {1, 4, 32}) {
            const Schedule cpu = guided_schedule(view, parents.data(), max_bucket);
            const Schedule gpu = test::device_guided_schedule(entries, rows, cols, width, parents, max_bucket);
            ASSERT_EQ(gpu.order, cpu.order) << cols << " cols, width " << width << ", " << rows
                                            << " rows, max length " << maxlen << ", max bucket " << max_bucket;
            ASSERT_EQ(gpu.bucket_offsets, cpu.bucket_offsets);
          }
        }
      }
    }
  }
}

// Through the API, on real inspector rows: HybridDevice's schedule is Hybrid's.
TEST(GuidedSchedulerGpu, ApiDeviceScheduleEqualsHybrid) {
  CANOPY_REQUIRE_GPU();
  const PointSet ps = test::real_points("covtype_4k.csv", "0-6");
  std::vector<float> build, query;
  split_halves(ps, build, query);
  const KdTree kd = build_tree<KdTree>(build, 7);
  const VpTree vp = build_tree<VpTree>(build, 7);
  for (int k : {1, 8}) {
    for (int which = 0; which < 2; ++which) {
      NearestNeighbors nn = which == 0 ? NearestNeighbors(kd, Device::Gpu) : NearestNeighbors(vp, Device::Gpu);
      KnnOptions opt;
      opt.k = k;
      opt.keep_schedule = true;
      for (int depth : {2, 5, 8}) {
        opt.depth = depth;
        opt.schedule = ScheduleKind::Hybrid;
        const KnnResult a = nn.run(query.data(), static_cast<index_t>(query.size() / 7), opt);
        opt.schedule = ScheduleKind::HybridDevice;
        const KnnResult b = nn.run(query.data(), static_cast<index_t>(query.size() / 7), opt);
        EXPECT_EQ(a.schedule.order, b.schedule.order) << "k " << k << " depth " << depth;
        EXPECT_EQ(a.schedule.bucket_offsets, b.schedule.bucket_offsets);
        EXPECT_EQ(a.indices, b.indices);
      }
    }
  }
}

// The guided schedule groups queries that walk alike: fewer nodes per lockstep warp than a
// random order, on every tree.
TEST(KnnSchedule, GuidedScheduleBeatsRandomOrder) {
  const std::vector<float> points = test::random_points(20000, 3, 50);
  std::vector<float> queries = test::random_points(8000, 3, 51);
  auto check = [&](const auto& tree) {
    NearestNeighbors nn(tree, Device::Cpu);
    KnnOptions opt;
    opt.k = 8;
    opt.device = Device::Cpu;
    opt.count_nodes = true;
    opt.schedule = ScheduleKind::InputOrder;
    const double input = nn.run(queries.data(), 8000, opt).nodes_per_warp();
    opt.schedule = ScheduleKind::Hybrid;
    const double hybrid = nn.run(queries.data(), 8000, opt).nodes_per_warp();
    EXPECT_LT(hybrid * 2, input) << to_string(nn.tree_kind()) << ": " << hybrid << " vs " << input;
  };
  check(build_tree<KdTree>(points, 3));
  check(build_tree<BallTree>(points, 3));
  check(build_tree<VpTree>(points, 3));
}

}  // namespace
}  // namespace canopy
