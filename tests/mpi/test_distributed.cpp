// canopy_mpi_tests: run under mpirun (ctest: -np 2, and -np 3 oversubscribed). Every rank builds
// the same tree or forest, computes the one-process answer itself, and checks the distributed
// call against it bit for bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "distributed/distributed.hpp"
#include "io/forest_data.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "runtime/bh_visitor.hpp"
#include "tests/spatial_reference.hpp"

namespace canopy {
namespace {

int this_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int rank_count() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// The same points on every rank: a fixed seed, clustered so that counts vary.
std::vector<float> points(index_t n, int dims, unsigned seed) { return test::blob_points(n, dims, seed, 0.05f, 64); }

TEST(Distributed, SharesCoverEveryItemOnceInOrder) {
  for (index_t n : {0, 1, 2, 5, 100, 101, 1000003})
    for (int ranks : {1, 2, 3, 7, 64}) {
      index_t next = 0, least = n, most = 0;
      for (int r = 0; r < ranks; ++r) {
        const distributed::Share s = distributed::share_of(n, r, ranks);
        EXPECT_EQ(s.begin, next) << n << " items, rank " << r << " of " << ranks;
        next += s.count;
        least = std::min(least, s.count);
        most = std::max(most, s.count);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(most - least, 1);
    }
  EXPECT_THROW(distributed::share_of(10, 3, 3), Error);
  EXPECT_THROW(distributed::share_of(-1, 0, 3), Error);
}

TEST(Distributed, RadiusCountsEqualOneProcess) {
  const std::vector<float> p = points(6000, 3, 7);
  const KdTree tree = KdTree::build(p.data(), 6000, 3);
  PointCorrelation pc(tree, Device::Cpu);
  PcOptions opt;
  opt.radius = 0.04f;
  // Queries: the points, and sizes that leave some ranks with nothing.
  for (index_t n : {index_t{6000}, index_t{1}, index_t{0}, index_t{rank_count() + 1}}) {
    const PcResult one = pc.run(p.data(), n, opt);
    distributed::DistributedStats st;
    const PcResult all = distributed::point_correlation(MPI_COMM_WORLD, pc, p.data(), n, opt, &st);
    EXPECT_EQ(all.counts, one.counts) << n << " queries";
    EXPECT_EQ(st.ranks, rank_count());
    EXPECT_GE(st.imbalance, 1.0);
    if (n == 6000) {
      index_t positive = 0;
      for (index_t c : one.counts) positive += c > 1;
      EXPECT_GT(positive, 1000);  // the radius finds neighbours: a real test
      if (rank_count() > 1) {
        EXPECT_GT(st.bytes_moved, 0u);
      }
    }
  }
}

TEST(Distributed, NeighboursEqualOneProcess) {
  const std::vector<float> p = points(5000, 4, 11);
  const std::vector<float> q = points(1537, 4, 12);
  const KdTree kd = KdTree::build(p.data(), 5000, 4);
  const BallTree ball = BallTree::build(p.data(), 5000, 4);
  NearestNeighbors by_kd(kd, Device::Cpu), by_ball(ball, Device::Cpu);
  for (NearestNeighbors* nn : {&by_kd, &by_ball}) {
    KnnOptions opt;
    opt.k = 7;
    const KnnResult one = nn->run(q.data(), 1537, opt);
    const KnnResult all = distributed::nearest_neighbors(MPI_COMM_WORLD, *nn, q.data(), 1537, opt);
    EXPECT_EQ(all.k, 7);
    EXPECT_EQ(all.indices, one.indices) << to_string(nn->tree_kind());
    EXPECT_EQ(all.distances, one.distances) << to_string(nn->tree_kind());
  }
}

TEST(Distributed, ForestPredictionsEqualOneProcess) {
  const std::string dir = std::string(CANOPY_TEST_DATA) + "/forest/";
  for (const char* name : {"xgb_higgs", "xgb_cat_multi"}) {
    const Forest f = Forest::load(dir + name + ".json");
    const ForestData d = read_forest_csv(dir + (std::string(name) == "xgb_higgs" ? "higgs_rows" : "cat_rows") + ".csv", "label");
    ForestConfig cfg;
    cfg.device = Device::Cpu;
    ForestPredictor p(f, cfg);
    for (ForestOutput o : {ForestOutput::Margin, ForestOutput::Prob, ForestOutput::Leaf}) {
      ForestRunOptions run;
      run.output = o;
      const int w = p.output_width(o);
      std::vector<float> one(static_cast<std::size_t>(d.n_rows) * w), all(one.size(), -1.0f);
      p.predict(d.values.data(), d.n_rows, run, one.data());
      distributed::predict_forest(MPI_COMM_WORLD, p, d.values.data(), d.n_rows, run, all.data());
      EXPECT_EQ(std::memcmp(all.data(), one.data(), one.size() * sizeof(float)), 0) << name << " " << to_string(o);
    }
  }
}

// A forest split by trees: each rank adds its trees' leaves to the sums the rank before it
// left, so the predictions are one process's bit for bit, for scalar-leaf models with one and
// several output groups (categorical splits and missing values among them) and for random
// forests' vector leaves; every gather mode; a chunked chain (more rows than one chunk).
TEST(Distributed, PartitionedForestPredictionsEqualOneProcess) {
  const std::string dir = std::string(CANOPY_TEST_DATA) + "/forest/";
  const struct {
    const char* model;
    const char* rows;
  } cases[] = {{"xgb_higgs", "higgs_rows"}, {"xgb_cat_multi", "cat_rows"}, {"rf_letter", "letter_rows"},
               {"rf_higgs_reg", "higgs_rows"}};
  for (const auto& k : cases) {
    const Forest f = Forest::load(dir + k.model + ".json");
    ForestData d = read_forest_csv(dir + k.rows + ".csv", "label");
    ForestConfig cfg;
    cfg.device = Device::Cpu;
    ForestPredictor whole(f, cfg);
    distributed::PartitionedForest part(MPI_COMM_WORLD, f, cfg);
    // Every tree on exactly one rank, in one run each.
    index_t trees = part.local_trees(), first = 0;
    MPI_Allreduce(MPI_IN_PLACE, &trees, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(trees, f.n_trees()) << k.model;
    EXPECT_GE(part.local_trees(), 1);
    const index_t mine = part.local_trees();
    MPI_Exscan(&mine, &first, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (this_rank() > 0) {
      EXPECT_EQ(part.first_tree(), first) << k.model;
    }
    std::vector<ForestOutput> outs = {ForestOutput::Margin, ForestOutput::Prob};
    if (f.is_classifier()) outs.push_back(ForestOutput::Class);
    for (ForestOutput o : outs)
      for (distributed::Gather g : {distributed::Gather::All, distributed::Gather::Root, distributed::Gather::Local}) {
        ForestRunOptions run;
        run.output = o;
        const int w = whole.output_width(o);
        ASSERT_EQ(part.output_width(o), w);
        std::vector<float> one(static_cast<std::size_t>(d.n_rows) * w), got(one.size(), -7.0f);
        whole.predict(d.values.data(), d.n_rows, run, one.data());
        distributed::DistributedStats st;
        part.predict(d.values.data(), d.n_rows, run, got.data(), &st, g);
        const distributed::Share s = distributed::share_of(d.n_rows, this_rank(), rank_count());
        const bool all = g == distributed::Gather::All || (g == distributed::Gather::Root && this_rank() == 0);
        const std::size_t from = all ? 0 : static_cast<std::size_t>(s.begin) * w;
        const std::size_t values = all ? one.size() : static_cast<std::size_t>(s.count) * w;
        EXPECT_EQ(std::memcmp(got.data() + from, one.data() + from, values * sizeof(float)), 0)
            << k.model << " " << to_string(o) << " gather " << distributed::to_string(g);
        if (rank_count() > 1) {
          EXPECT_GT(st.bytes_moved, 0u);
        }
      }
  }
  // The chain in chunks: of one row, of 97 rows (the last one shorter), and the default.
  const Forest rf = Forest::load(dir + "rf_letter.json");
  const ForestData d = read_forest_csv(dir + "letter_rows.csv", "label");
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  ForestPredictor whole(rf, cfg);
  std::vector<float> one(static_cast<std::size_t>(d.n_rows) * whole.output_width(ForestOutput::Prob));
  whole.predict(d.values.data(), d.n_rows, one.data());
  distributed::PartitionedForest part(MPI_COMM_WORLD, rf, cfg);
  for (index_t chunk : {1, 97, 0}) {
    part.set_chunk_rows(chunk);
    std::vector<float> got(one.size());
    part.predict(d.values.data(), d.n_rows, got.data());
    EXPECT_EQ(std::memcmp(got.data(), one.data(), one.size() * sizeof(float)), 0) << "chunks of " << chunk << " rows";
  }
  EXPECT_THROW(part.set_chunk_rows(-1), Error);
}

// Bad calls fail on every rank with one message: a budget below a rank's layout, leaves asked
// of a partitioned forest, more ranks than trees.
TEST(Distributed, PartitionedForestRefusesBadCalls) {
  const std::string dir = std::string(CANOPY_TEST_DATA) + "/forest/";
  const Forest f = Forest::load(dir + "xgb_higgs.json");
  const ForestData d = read_forest_csv(dir + "higgs_rows.csv", "label");
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  try {
    distributed::PartitionedForest tight(MPI_COMM_WORLD, f, cfg, 1024);
    ADD_FAILURE() << "a 1 KiB budget was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory budget"), std::string::npos) << e.what();
  }
  distributed::PartitionedForest part(MPI_COMM_WORLD, f, cfg);
  std::vector<float> out(static_cast<std::size_t>(d.n_rows) * f.n_trees());
  ForestRunOptions run;
  run.output = ForestOutput::Leaf;
  try {
    part.predict(d.values.data(), d.n_rows, run, out.data());
    ADD_FAILURE() << "leaves of a partitioned forest";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Leaf"), std::string::npos) << e.what();
  }
  if (rank_count() > 1) {
    EXPECT_THROW(distributed::PartitionedForest(MPI_COMM_WORLD, f.subset({0}), cfg), Error);
  }
}

// Barnes-Hut, replicated octree: every rank computes its share of the bodies; the gathered
// forces are the one-process forces bit for bit, whatever the schedule. Bad options fail on
// every rank.
TEST(Distributed, BarnesHutForcesEqualOneProcess) {
  const index_t n = 3001;
  const std::vector<float> xyz = points(n, 3, 21);
  std::vector<float> mass(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) mass[static_cast<std::size_t>(i)] = 1.0f + static_cast<float>(i % 7) / 7.0f;
  const Octree tree = Octree::build(xyz.data(), mass.data(), n);
  BarnesHut bh(tree, Device::Cpu);
  for (ScheduleKind s : {ScheduleKind::InputOrder, ScheduleKind::LeafSort, ScheduleKind::HybridKey}) {
    BhOptions opt;
    opt.schedule = s;
    const BhResult one = bh.run(opt);
    distributed::DistributedStats st;
    const BhResult all = distributed::barnes_hut(MPI_COMM_WORLD, bh, opt, &st);
    ASSERT_EQ(all.forces.size(), one.forces.size());
    EXPECT_EQ(std::memcmp(all.forces.data(), one.forces.data(), one.forces.size() * sizeof(float)), 0) << to_string(s);
    EXPECT_EQ(st.ranks, rank_count());
    EXPECT_EQ(st.local_items, distributed::share_of(n, [] { int r = 0; MPI_Comm_rank(MPI_COMM_WORLD, &r); return r; }(),
                                                    rank_count()).count);
  }
  BhOptions bad;
  bad.theta = -1.0f;
  EXPECT_THROW(distributed::barnes_hut(MPI_COMM_WORLD, bh, bad), Error);
}

// The distributed tree: each rank holds part of the points; counts and neighbours equal one
// process over the whole tree, ties included (a grid of integer points: many equal distances).
TEST(Distributed, PartitionedTreeEqualsOneProcess) {
  struct Case {
    std::vector<float> p, q;
    int dims, depth, k;
    float radius;
  };
  std::vector<Case> cases;
  cases.push_back({points(6000, 3, 21), points(1500, 3, 22), 3, 4, 7, 0.04f});
  cases.push_back({points(6000, 3, 21), points(300, 3, 23), 3, 5, 40, 0.3f});  // balls over many ranks
  {
    Case g{{}, {}, 2, 3, 9, 1.0f};
    for (int x = 0; x < 40; ++x)
      for (int y = 0; y < 30; ++y) {
        g.p.push_back(static_cast<float>(x));
        g.p.push_back(static_cast<float>(y % 7));  // duplicates
      }
    g.q = g.p;
    cases.push_back(g);
  }
  {
    // Fewer points per rank than k: the first round finds no bound, every rank is asked.
    Case tiny{points(10, 2, 5), points(25, 2, 6), 2, 2, 8, 0.1f};
    cases.push_back(tiny);
  }
  for (const Case& c : cases) {
    const index_t n = static_cast<index_t>(c.p.size()) / c.dims, m = static_cast<index_t>(c.q.size()) / c.dims;
    SCOPED_TRACE(std::to_string(n) + " points, depth " + std::to_string(c.depth));
    const KdTree whole = KdTree::build(c.p.data(), n, c.dims);
    KdTreeOptions local_opt;
    local_opt.device = Device::Cpu;
    const distributed::PartitionedKdTree part(MPI_COMM_WORLD, c.p.data(), n, c.dims, c.depth, local_opt);
    // Every point on exactly one rank.
    index_t mine = part.local().size(), total = 0;
    MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(total, n);
    if (rank_count() > 1) {
      EXPECT_LT(part.local().size(), n);
    }
    for (std::size_t i = 1; i < part.local_ids().size(); ++i) EXPECT_LT(part.local_ids()[i - 1], part.local_ids()[i]);

    PointCorrelation one_pc(whole, Device::Cpu), local_pc(part.local(), Device::Cpu);
    PcOptions po;
    po.radius = c.radius;
    distributed::DistributedStats st;
    EXPECT_EQ(distributed::point_correlation(MPI_COMM_WORLD, part, local_pc, c.q.data(), m, po, &st).counts,
              one_pc.run(c.q.data(), m, po).counts);
    if (rank_count() > 1) {
      EXPECT_GT(st.bytes_moved, 0u);
    }

    NearestNeighbors one_nn(whole, Device::Cpu), local_nn(part.local(), Device::Cpu);
    KnnOptions ko;
    ko.k = c.k;
    const KnnResult one = one_nn.run(c.q.data(), m, ko);
    const KnnResult all = distributed::nearest_neighbors(MPI_COMM_WORLD, part, local_nn, c.q.data(), m, ko);
    EXPECT_EQ(all.indices, one.indices);
    EXPECT_EQ(all.distances, one.distances);
  }
  // Bad input, named, on every rank.
  const std::vector<float> p = points(100, 2, 9);
  EXPECT_THROW(distributed::PartitionedKdTree(MPI_COMM_WORLD, p.data(), 100, 2, 0), Error);
  if (rank_count() > 2) {
    EXPECT_THROW(distributed::PartitionedKdTree(MPI_COMM_WORLD, p.data(), 100, 2, 1), Error);  // 2 leaves, 3 ranks
  }
  const distributed::PartitionedKdTree part(MPI_COMM_WORLD, p.data(), 100, 2, 3);
  NearestNeighbors nn(part.local(), Device::Cpu);
  KnnOptions ko;
  ko.k = 101;
  EXPECT_THROW(distributed::nearest_neighbors(MPI_COMM_WORLD, part, nn, p.data(), 100, ko), Error);
}

// The slice of a one-process result that `rank` holds after a gather: every item where it
// holds all of them (All; Root on rank 0), else its own share.
template <class T>
std::vector<T> expected_after(distributed::Gather g, const std::vector<T>& one, index_t n, index_t width) {
  const int rank = this_rank();
  if (g == distributed::Gather::All || (g == distributed::Gather::Root && rank == 0)) return one;
  const distributed::Share s = distributed::share_of(n, rank, rank_count());
  return std::vector<T>(one.begin() + s.begin * width, one.begin() + (s.begin + s.count) * width);
}

// A kd-tree over the first n points of p, the point-correlation and k-NN calls on it, and their
// results in one process for m queries: what each rank's share is checked against.
struct OneProcess {
  OneProcess(const std::vector<float>& p, index_t n, const float* q, index_t m, float radius, int k)
      : tree(KdTree::build(p.data(), n, 3)), pc(tree, Device::Cpu), nn(tree, Device::Cpu) {
    po.radius = radius;
    ko.k = k;
    one_pc = pc.run(q, m, po);
    one_nn = nn.run(q, m, ko);
  }
  const KdTree tree;
  PointCorrelation pc;
  NearestNeighbors nn;
  PcOptions po;
  KnnOptions ko;
  PcResult one_pc;
  KnnResult one_nn;
};

// The caller's buffers after the calls into them (-5 where nothing was written): query i's
// one-process counts, k neighbours and distances where held(i), else untouched.
template <class Held>
void expect_held_results(const std::vector<index_t>& counts, const std::vector<index_t>& idx,
                         const std::vector<float>& dist, const OneProcess& one, index_t m, int k, Held held) {
  for (index_t i = 0; i < m; ++i) {
    const bool h = held(i);
    ASSERT_EQ(counts[static_cast<std::size_t>(i)], h ? one.one_pc.counts[static_cast<std::size_t>(i)] : -5) << i;
    for (index_t j = i * k; j < i * k + k; ++j) {
      ASSERT_EQ(idx[static_cast<std::size_t>(j)], h ? one.one_nn.indices[static_cast<std::size_t>(j)] : -5) << i;
      ASSERT_EQ(dist[static_cast<std::size_t>(j)], h ? one.one_nn.distances[static_cast<std::size_t>(j)] : -5.0f) << i;
    }
  }
}

// Every gather mode of every call: rank 0 or every rank holds everything, or each its share,
// equal to the one-process slice; the bytes moved follow (nothing for Local).
TEST(Distributed, GatherModesLeaveEachRankItsResults) {
  using distributed::Gather;
  const std::vector<float> p = points(4000, 3, 31);
  const std::vector<float> q = points(1001, 3, 32);
  OneProcess one(p, 4000, q.data(), 1001, 0.05f, 5);
  auto& [tree, pc, nn, po, ko, one_pc, one_nn] = one;
  std::vector<float> mass(4000, 1.0f);
  const Octree oct = Octree::build(p.data(), mass.data(), 4000);
  BarnesHut bh(oct, Device::Cpu);
  const BhResult one_bh = bh.run(BhOptions{});
  const std::string dir = std::string(CANOPY_TEST_DATA) + "/forest/";
  const Forest f = Forest::load(dir + "xgb_higgs.json");
  const ForestData d = read_forest_csv(dir + "higgs_rows.csv", "label");
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  ForestPredictor fp(f, cfg);
  ASSERT_EQ(fp.output_width(ForestRunOptions{}.output), 1);
  std::vector<float> one_f(static_cast<std::size_t>(d.n_rows));
  fp.predict(d.values.data(), d.n_rows, ForestRunOptions{}, one_f.data());
  const distributed::Share mine = distributed::share_of(d.n_rows, this_rank(), rank_count());

  for (Gather g : {Gather::All, Gather::Root, Gather::Local}) {
    SCOPED_TRACE(distributed::to_string(g));
    distributed::DistributedStats st;
    EXPECT_EQ(distributed::point_correlation(MPI_COMM_WORLD, pc, q.data(), 1001, po, &st, g).counts,
              expected_after(g, one_pc.counts, 1001, 1));
    if (g == Gather::Local) {
      EXPECT_EQ(st.bytes_moved, 0u);
    } else if (rank_count() > 1) {
      EXPECT_GT(st.bytes_moved, 0u);
    }
    const KnnResult nn_all = distributed::nearest_neighbors(MPI_COMM_WORLD, nn, q.data(), 1001, ko, nullptr, g);
    EXPECT_EQ(nn_all.indices, expected_after(g, one_nn.indices, 1001, 5));
    EXPECT_EQ(nn_all.distances, expected_after(g, one_nn.distances, 1001, 5));
    const BhResult bh_all = distributed::barnes_hut(MPI_COMM_WORLD, bh, BhOptions{}, nullptr, g);
    EXPECT_EQ(bh_all.forces, expected_after(g, one_bh.forces, 4000, 3));
    // The forest writes into the caller's buffer at the rows' places: rows outside what this
    // rank holds stay as they were.
    std::vector<float> out(one_f.size(), -7.0f);
    distributed::predict_forest(MPI_COMM_WORLD, fp, d.values.data(), d.n_rows, ForestRunOptions{}, out.data(), nullptr, g);
    for (index_t i = 0; i < d.n_rows; ++i) {
      const bool held = g == Gather::All || (g == Gather::Root && this_rank() == 0) ||
                        (i >= mine.begin && i < mine.begin + mine.count);
      const float want = held ? one_f[static_cast<std::size_t>(i)] : -7.0f;
      ASSERT_EQ(std::memcmp(&out[static_cast<std::size_t>(i)], &want, sizeof(float)), 0) << "row " << i;
    }
  }
  EXPECT_EQ(distributed::parse_gather("root"), Gather::Root);
  EXPECT_THROW(distributed::parse_gather("everyone"), Error);
}

// The calls into the caller's buffers: this rank's share at its items' places, every item after
// All (Root: on rank 0); what the rank does not hold stays as it was.
TEST(Distributed, CallsIntoBuffersFillWhatEachRankHolds) {
  using distributed::Gather;
  const std::vector<float> p = points(3000, 3, 51);
  const index_t m = 777;
  OneProcess one(p, 3000, p.data(), m, 0.05f, 4);
  auto& [tree, pc, nn, po, ko, one_pc, one_nn] = one;
  const distributed::Share mine = distributed::share_of(m, this_rank(), rank_count());
  for (Gather g : {Gather::All, Gather::Root, Gather::Local}) {
    SCOPED_TRACE(distributed::to_string(g));
    const bool all = g == Gather::All || (g == Gather::Root && this_rank() == 0);
    std::vector<index_t> counts(static_cast<std::size_t>(m), -5), idx(static_cast<std::size_t>(m * 4), -5);
    std::vector<float> dist(idx.size(), -5.0f);
    for (int call = 0; call < 2; ++call) {  // the same buffers twice, as a caller reuses them
      distributed::point_correlation_into(MPI_COMM_WORLD, pc, p.data(), m, po, counts.data(), nullptr, g);
      distributed::nearest_neighbors_into(MPI_COMM_WORLD, nn, p.data(), m, ko, idx.data(), dist.data(), nullptr, g);
    }
    ASSERT_NO_FATAL_FAILURE(expect_held_results(
        counts, idx, dist, one, m, 4, [&](index_t i) { return all || (i >= mine.begin && i < mine.begin + mine.count); }));
  }
}

// Spatial shards: rank r runs positions share_of(m, r) of the queries' stable order by the cell
// of the tree's top spatial_shard_depth levels (the cells found here by walking the tree), writes
// exactly those queries' results under Local, and every gather gives one process's bits.
TEST(Distributed, SpatialShardsRunRunsOfTheCellOrderAndEqualOneProcess) {
  using distributed::Gather;
  using distributed::Shard;
  std::vector<float> p = points(4000, 3, 61);
  // The queries in a random order, as a program that does not sort its particles sends them.
  const index_t m = 2500;
  std::vector<index_t> perm(4000);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
  std::vector<float> q;
  for (index_t i = 0; i < m; ++i)
    q.insert(q.end(), p.begin() + perm[static_cast<std::size_t>(i)] * 3, p.begin() + perm[static_cast<std::size_t>(i)] * 3 + 3);
  OneProcess one(p, 4000, q.data(), m, 0.04f, 3);
  auto& [tree, pc, nn, po, ko, one_pc, one_nn] = one;
  // The reference cut: each query's cell by its descent, a stable sort, this rank's run.
  const int depth = distributed::spatial_shard_depth(tree, rank_count());
  ASSERT_GE(depth, 1);
  const KdTreeView v = tree.view();
  std::vector<std::uint32_t> cell(static_cast<std::size_t>(m));
  for (index_t i = 0; i < m; ++i) cell[static_cast<std::size_t>(i)] = test::cell_by_walk(v, q.data() + i * 3, depth);
  const std::vector<index_t> order = test::stable_by_cell(tree, q.data(), m, depth);
  const distributed::Share mine = distributed::share_of(m, this_rank(), rank_count());
  std::vector<char> own(static_cast<std::size_t>(m), 0);
  for (index_t j = mine.begin; j < mine.begin + mine.count; ++j) own[static_cast<std::size_t>(order[static_cast<std::size_t>(j)])] = 1;
  for (Gather g : {Gather::All, Gather::Root, Gather::Local}) {
    SCOPED_TRACE(distributed::to_string(g));
    const bool all = g == Gather::All || (g == Gather::Root && this_rank() == 0);
    std::vector<index_t> counts(static_cast<std::size_t>(m), -5), idx(static_cast<std::size_t>(m * 3), -5);
    std::vector<float> dist(idx.size(), -5.0f);
    distributed::DistributedStats st;
    for (int call = 0; call < 2; ++call) {  // the same buffers twice, as a caller reuses them
      distributed::point_correlation_into(MPI_COMM_WORLD, pc, q.data(), m, po, counts.data(), &st, g, Shard::Spatial);
      EXPECT_EQ(st.local_items, mine.count);
      distributed::nearest_neighbors_into(MPI_COMM_WORLD, nn, q.data(), m, ko, idx.data(), dist.data(), &st, g,
                                     Shard::Spatial);
    }
    ASSERT_NO_FATAL_FAILURE(expect_held_results(counts, idx, dist, one, m, 3,
                                                [&](index_t i) { return all || own[static_cast<std::size_t>(i)]; }));
  }
  // A rank's run is a region: with two ranks or more, rank 0's queries lie in lower cells than
  // the last rank's (one cell at most is shared at a boundary).
  if (rank_count() > 1) {
    const std::uint32_t last_of_first = cell[static_cast<std::size_t>(order[static_cast<std::size_t>(
        distributed::share_of(m, 0, rank_count()).count - 1)])];
    const std::uint32_t first_of_last = cell[static_cast<std::size_t>(order[static_cast<std::size_t>(
        distributed::share_of(m, rank_count() - 1, rank_count()).begin)])];
    EXPECT_LE(last_of_first, first_of_last);
  }
  EXPECT_EQ(distributed::parse_shard("spatial"), Shard::Spatial);
  EXPECT_THROW(distributed::parse_shard("random"), Error);
  // Spatial needs a kd-tree's cells: a ball tree's kNN refuses it on every rank.
  const BallTree ball = BallTree::build(p.data(), 4000, 3);
  NearestNeighbors bn(ball, Device::Cpu);
  std::vector<index_t> bi(static_cast<std::size_t>(m * 3));
  std::vector<float> bd(bi.size());
  EXPECT_THROW(distributed::nearest_neighbors_into(MPI_COMM_WORLD, bn, q.data(), m, ko, bi.data(), bd.data(), nullptr,
                                              Gather::All, Shard::Spatial),
               Error);
  // Auto with host queries keeps input shares (and a ball tree's kNN runs).
  distributed::nearest_neighbors_into(MPI_COMM_WORLD, bn, q.data(), m, ko, bi.data(), bd.data(), nullptr, Gather::All);
  EXPECT_EQ(bi, one_nn.indices);
}

// kNN over a partitioned tree orders candidates as one process does, by squared distance then
// index, also where two squared distances round to one distance: (1, y) lies farther than
// (1, 0) from the origin (1 + 2^-23 against 1) at the same float distance 1, and comes second
// although its index is lower.
TEST(Distributed, PartitionedNeighboursOrderBySquaredDistance) {
  const test::TieCase tie = test::squared_distance_tie();
  KdTreeOptions o;
  o.device = Device::Cpu;
  const KdTree whole = KdTree::build(tie.points.data(), tie.n, 2, o);
  NearestNeighbors one_nn(whole, Device::Cpu);
  KnnOptions ko;
  ko.k = 2;
  const KnnResult one = one_nn.run(tie.queries.data(), 3, ko);
  ASSERT_EQ(one.indices[0], 1);  // the case is what it says
  ASSERT_EQ(one.indices[1], 0);
  ASSERT_EQ(one.distances[0], one.distances[1]);
  for (int depth : {2, 3}) {
    const distributed::PartitionedKdTree part(MPI_COMM_WORLD, tie.points.data(), tie.n, 2, depth, o);
    NearestNeighbors local(part.local(), Device::Cpu);
    const KnnResult all = distributed::nearest_neighbors(MPI_COMM_WORLD, part, local, tie.queries.data(), 3, ko);
    EXPECT_EQ(all.indices, one.indices) << "depth " << depth;
    EXPECT_EQ(all.distances, one.distances) << "depth " << depth;
  }
}

// A per-rank memory budget: the points split among the ranks fit a budget the whole tree does
// not; a budget below a rank's share fails on every rank, naming the budget.
TEST(Distributed, PartitionedTreeKeepsToItsMemoryBudget) {
  const index_t n = 20000;
  const std::vector<float> p = points(n, 3, 41);
  KdTreeOptions o;
  o.device = Device::Cpu;
  const KdTree whole = KdTree::build(p.data(), n, 3, o);
  const distributed::PartitionedKdTree free_part(MPI_COMM_WORLD, p.data(), n, 3, 4, o);
  std::uint64_t most = free_part.local_bytes(), biggest = 0;
  MPI_Allreduce(&most, &biggest, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (rank_count() > 1) {
    EXPECT_LT(biggest, whole.bytes());
    // A budget between the largest rank's tree and the whole tree: the partition fits it.
    const std::uint64_t budget = (biggest + whole.bytes()) / 2;
    const distributed::PartitionedKdTree fits(MPI_COMM_WORLD, p.data(), n, 3, 4, o, budget);
    EXPECT_LE(fits.local_bytes(), budget);
    PointCorrelation one(whole, Device::Cpu), local(fits.local(), Device::Cpu);
    PcOptions po;
    po.radius = 0.05f;
    EXPECT_EQ(distributed::point_correlation(MPI_COMM_WORLD, fits, local, p.data(), n, po).counts,
              one.run(p.data(), n, po).counts);
  }
  // Too small a budget: every rank throws, with the message of a rank over it.
  try {
    distributed::PartitionedKdTree(MPI_COMM_WORLD, p.data(), n, 3, 4, o, biggest / 4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("over the memory budget of " + std::to_string(biggest / 4) + " bytes"),
              std::string::npos)
        << e.what();
  }
}

// Relative error of each body's force against a reference: |f - ref| / |ref|.
std::vector<double> relative_errors(const std::vector<float>& f, const std::vector<float>& ref) {
  std::vector<double> e(ref.size() / 3);
  for (std::size_t i = 0; i < e.size(); ++i) {
    double diff = 0, norm = 0;
    for (int d = 0; d < 3; ++d) {
      diff += std::pow(static_cast<double>(f[i * 3 + d]) - ref[i * 3 + d], 2);
      norm += std::pow(static_cast<double>(ref[i * 3 + d]), 2);
    }
    e[i] = std::sqrt(diff / std::max(norm, 1e-300));
  }
  return e;
}
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

// Barnes-Hut over bodies split among the ranks: each rank imports the others' essential cells.
// The forces are not one process's bits (the cells differ) but as close to the direct sum: the
// median and 99th-percentile relative errors at most 1.5x one process's, the largest at most
// 2x; the same bits on every run and in every gather mode.
TEST(Distributed, PartitionedBarnesHutIsAsAccurateAsOneProcess) {
  const index_t n = 6000;
  const std::vector<float> xyz = points(n, 3, 61);
  std::vector<float> mass(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) mass[static_cast<std::size_t>(i)] = 0.5f + static_cast<float>(i % 11) / 11.0f;
  OctreeOptions oo;
  oo.device = Device::Cpu;
  const Octree whole = Octree::build(xyz.data(), mass.data(), n, oo);
  BarnesHut one(whole, Device::Cpu);
  for (float theta : {0.3f, 0.5f, 0.8f}) {
    SCOPED_TRACE("theta " + std::to_string(theta));
    BhOptions opt;
    opt.theta = theta;
    opt.device = Device::Cpu;
    const std::vector<float> direct = direct_forces(xyz.data(), mass.data(), n, opt.softening * opt.softening);
    const std::vector<double> e1 = relative_errors(one.run(opt).forces, direct);
    distributed::PartitionedBarnesHut part(MPI_COMM_WORLD, xyz.data(), mass.data(), n, 4, oo);
    distributed::DistributedStats st;
    const BhResult all = part.run(opt, &st);
    ASSERT_EQ(all.forces.size(), static_cast<std::size_t>(n) * 3);
    const std::vector<double> ep = relative_errors(all.forces, direct);
    if (this_rank() == 0)
      std::printf("theta %.1f: one process median %.3g p99 %.3g max %.3g; partitioned median %.3g p99 %.3g max %.3g; "
                  "%lld imported\n",
                  theta, quantile(e1, 0.5), quantile(e1, 0.99), quantile(e1, 1.0), quantile(ep, 0.5), quantile(ep, 0.99),
                  quantile(ep, 1.0), static_cast<long long>(part.last_imported()));
    EXPECT_LE(quantile(ep, 0.5), 1.5 * quantile(e1, 0.5));
    EXPECT_LE(quantile(ep, 0.99), 1.5 * quantile(e1, 0.99));
    EXPECT_LE(quantile(ep, 1.0), 2.0 * quantile(e1, 1.0));
    if (rank_count() > 1) {
      EXPECT_GT(part.last_imported(), 0);
      EXPECT_LT(part.last_imported(), n);  // far cells arrive whole, not body by body
      EXPECT_GT(st.bytes_moved, 0u);
    }
    // Deterministic, and the same bits in every gather mode.
    EXPECT_EQ(part.run(opt).forces, all.forces);
    const BhResult local = part.run(opt, nullptr, distributed::Gather::Local);
    ASSERT_EQ(local.forces.size(), part.local_ids().size() * 3);
    for (std::size_t i = 0; i < part.local_ids().size(); ++i)
      for (int d = 0; d < 3; ++d)
        ASSERT_EQ(local.forces[i * 3 + d], all.forces[static_cast<std::size_t>(part.local_ids()[i]) * 3 + d]);
    const BhResult root = part.run(opt, nullptr, distributed::Gather::Root);
    EXPECT_EQ(root.forces, this_rank() == 0 ? all.forces : local.forces);
  }
  // Bad options fail on every rank.
  distributed::PartitionedBarnesHut part(MPI_COMM_WORLD, xyz.data(), mass.data(), n, 3, oo);
  BhOptions bad;
  bad.theta = -1.0f;
  EXPECT_THROW(part.run(bad), Error);
}

// Bad input in one rank's share only (a NaN in the last query): every rank gets the error,
// with that rank's message, and none hangs in the gather.
TEST(Distributed, OneRanksErrorIsEveryRanksError) {
  std::vector<float> p = points(500, 2, 3);
  const KdTree tree = KdTree::build(p.data(), 500, 2);
  PointCorrelation pc(tree, Device::Cpu);
  p[499 * 2 + 1] = std::numeric_limits<float>::quiet_NaN();
  PcOptions opt;
  opt.radius = 0.1f;
  const int last = rank_count() - 1;
  try {
    distributed::point_correlation(MPI_COMM_WORLD, pc, p.data(), 500, opt, nullptr);  // (a nullptr: the stats)
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(last) + " of " + std::to_string(rank_count())), std::string::npos) << what;
    EXPECT_NE(what.find("non-finite coordinate"), std::string::npos) << what;
  }
  // k larger than the tree: refused on every rank, also those without queries.
  NearestNeighbors nn(tree, Device::Cpu);
  KnnOptions k;
  k.k = 501;
  EXPECT_THROW(distributed::nearest_neighbors(MPI_COMM_WORLD, nn, p.data(), 1, k), Error);
}

}  // namespace
}  // namespace canopy
