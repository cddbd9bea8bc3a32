#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "inspector/scheduling_matrix.hpp"
#include "scheduler/guided.hpp"
#include "scheduler/schedule.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

// ---- The reference: the definition in scheduler/guided.hpp, written as plainly as possible.

// The key of query q at cursor p: {row[0]} at p = 0, else the run of siblings starting at p;
// empty when the row has ended.
std::vector<std::int32_t> reference_key(const GuidedMatrixView& m, const node_id* parent, index_t q, index_t p) {
  const std::int32_t* e = m.row(q);
  std::vector<std::int32_t> key;
  if (p >= m.width || e[p] == kRowEnd) return key;
  key.push_back(e[p]);
  if (p == 0) return key;
  for (index_t i = p + 1; i < m.width && e[i] != kRowEnd && parent[e[i]] == parent[e[p]]; ++i) key.push_back(e[i]);
  return key;
}

void emit(const std::vector<index_t>& bucket, Schedule& out) {
  out.bucket_offsets.push_back(out.size());
  out.order.insert(out.order.end(), bucket.begin(), bucket.end());
}

void reference_bucket(const GuidedMatrixView& m, const node_id* parent, index_t max_bucket,
                      const std::vector<index_t>& bucket, index_t p, Schedule& out) {
  if (static_cast<index_t>(bucket.size()) <= max_bucket) {
    emit(bucket, out);
    return;
  }
  std::map<std::vector<std::int32_t>, std::vector<index_t>> groups;  // ordered lexicographically
  std::vector<index_t> ended;
  for (index_t q : bucket) {
    std::vector<std::int32_t> key = reference_key(m, parent, q, p);
    if (key.empty()) ended.push_back(q);
    else groups[key].push_back(q);
  }
  for (const auto& [key, queries] : groups)
    reference_bucket(m, parent, max_bucket, queries, p + static_cast<index_t>(key.size()), out);
  if (!ended.empty()) emit(ended, out);
}

Schedule reference_schedule(const GuidedMatrixView& m, const node_id* parent, index_t max_bucket) {
  std::vector<index_t> all(static_cast<std::size_t>(m.rows));
  std::iota(all.begin(), all.end(), index_t{0});
  Schedule out;
  reference_bucket(m, parent, max_bucket, all, 0, out);
  out.bucket_offsets.push_back(m.rows);
  return out;
}

// ---- Inputs.

struct Input {
  GuidedMatrix matrix;
  std::vector<node_id> parent;
  GuidedMatrixView view() const { return matrix.view(); }
};

// Column c of a complete top-tree level whose groups of `arity` siblings share a parent.
std::vector<node_id> group_parents(index_t cols, index_t arity) {
  std::vector<node_id> parent(static_cast<std::size_t>(cols));
  for (index_t c = 0; c < cols; ++c) parent[c] = static_cast<node_id>(1000 + c / arity);
  return parent;
}

Input with_rows(index_t cols, index_t width, const std::vector<std::vector<std::int32_t>>& rows, index_t arity = 2) {
  Input in{GuidedMatrix(static_cast<index_t>(rows.size()), cols, width), group_parents(cols, arity)};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    EXPECT_LE(static_cast<index_t>(rows[r].size()), width);
    std::copy(rows[r].begin(), rows[r].end(), in.matrix.row(static_cast<index_t>(r)));
  }
  return in;
}

// One traversal-like row: a start leaf, then mostly its unvisited siblings (in a random
// order) or a leaf nearby, without repeats, up to `len` entries.
std::vector<std::int32_t> traversal_row(index_t cols, index_t arity, index_t len, std::mt19937_64& rng) {
  std::vector<std::int32_t> row;
  std::vector<char> seen(static_cast<std::size_t>(cols), 0);
  std::uniform_real_distribution<double> coin(0, 1);
  std::int32_t c = static_cast<std::int32_t>(std::uniform_int_distribution<index_t>(0, cols - 1)(rng));
  while (static_cast<index_t>(row.size()) < len) {
    row.push_back(c);
    seen[c] = 1;
    std::vector<std::int32_t> options;
    const index_t group = c / arity * arity;
    for (index_t s = group; s < std::min(cols, group + arity); ++s)
      if (!seen[s]) options.push_back(static_cast<std::int32_t>(s));
    if (options.empty() || coin(rng) < 0.3) {
      options.clear();
      for (index_t s = std::max<index_t>(0, c - 8); s < std::min<index_t>(cols, c + 9); ++s)
        if (!seen[s]) options.push_back(static_cast<std::int32_t>(s));
    }
    if (options.empty()) break;
    c = options[std::uniform_int_distribution<std::size_t>(0, options.size() - 1)(rng)];
  }
  return row;
}

Input traversal_rows(index_t rows, index_t cols, index_t width, index_t max_len, index_t arity, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<index_t> len(0, std::min(max_len, width));
  std::vector<std::vector<std::int32_t>> all(static_cast<std::size_t>(rows));
  for (auto& row : all) row = traversal_row(cols, arity, len(rng), rng);
  return with_rows(cols, width, all, arity);
}

// Rows drawn from a few prototypes, cut at random points and sometimes given a new tail: long
// shared prefixes, hence big buckets deep down.
Input clustered_rows(index_t rows, index_t cols, index_t width, index_t prototypes, index_t arity, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::int32_t>> protos(static_cast<std::size_t>(prototypes));
  for (auto& p : protos) p = traversal_row(cols, arity, width, rng);
  std::vector<std::vector<std::int32_t>> all(static_cast<std::size_t>(rows));
  std::uniform_int_distribution<std::size_t> pick(0, protos.size() - 1);
  for (auto& row : all) {
    row = protos[pick(rng)];
    row.resize(std::uniform_int_distribution<std::size_t>(row.size() / 2, row.size())(rng));
    if (rng() % 4 == 0 && !row.empty()) {
      // A different tail: a sibling of the last entry, if it has one not yet used.
      const std::int32_t last = row.back();
      const std::int32_t sib = static_cast<std::int32_t>(last / arity * arity + (last + 1) % arity);
      if (sib < cols && std::find(row.begin(), row.end(), sib) == row.end() &&
          static_cast<index_t>(row.size()) < width)
        row.push_back(sib);
    }
  }
  return with_rows(cols, width, all, arity);
}

// Any columns, repeats allowed: steps of any shape.
Input noisy_rows(index_t rows, index_t cols, index_t width, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<index_t> len(0, width);
  std::uniform_int_distribution<std::int32_t> col(0, static_cast<std::int32_t>(cols - 1));
  std::vector<std::vector<std::int32_t>> all(static_cast<std::size_t>(rows));
  for (auto& row : all) {
    row.resize(static_cast<std::size_t>(len(rng)));
    for (auto& c : row) c = col(rng);
  }
  return with_rows(cols, width, all);
}

// ---- Checks.

std::vector<std::int32_t> effective_row(const GuidedMatrixView& m, index_t q) {
  return std::vector<std::int32_t>(m.row(q), m.row(q) + m.length(q));
}

void expect_valid(const Schedule& s, const GuidedMatrixView& m, index_t max_bucket) {
  test::expect_permutation_with_buckets(s, m.rows);
  if (::testing::Test::HasFatalFailure()) return;
  if (m.rows == 0) {
    EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 0}));
    return;
  }
  for (std::size_t b = 1; b < s.bucket_offsets.size(); ++b) ASSERT_LT(s.bucket_offsets[b - 1], s.bucket_offsets[b]);
  for (std::size_t b = 0; b + 1 < s.bucket_offsets.size(); ++b) {
    const index_t begin = s.bucket_offsets[b], end = s.bucket_offsets[b + 1];
    if (end - begin <= max_bucket) continue;
    const std::vector<std::int32_t> first = effective_row(m, s.order[begin]);
    for (index_t i = begin + 1; i < end; ++i)
      ASSERT_EQ(effective_row(m, s.order[i]), first) << "an oversized bucket of unequal rows at " << begin;
  }
}

void expect_equals_reference(const Input& in, index_t max_bucket = kGuidedBucketLimit, bool check_arenas = true) {
  const GuidedMatrixView m = in.view();
  const Schedule ref = reference_schedule(m, in.parent.data(), max_bucket);
  const Schedule s = guided_schedule(m, in.parent.data(), max_bucket);
  expect_valid(s, m, max_bucket);
  EXPECT_EQ(s.order, ref.order) << m.rows << " rows, " << m.cols << " columns, width " << m.width << ", max "
                                << max_bucket;
  EXPECT_EQ(s.bucket_offsets, ref.bucket_offsets);

  // The caller-owned overload, without buckets.
  std::vector<index_t> order(static_cast<std::size_t>(m.rows), -7);
  guided_schedule(m, in.parent.data(), order.data(), nullptr, max_bucket);
  EXPECT_EQ(order, ref.order);
  if (!check_arenas) return;

  // The result may not depend on the thread count (nor on the chunking that follows it).
  for (int threads : {1, 4}) {
    tbb::task_arena arena(threads);
    Schedule t;
    arena.execute([&] { t = guided_schedule(m, in.parent.data(), max_bucket); });
    EXPECT_EQ(t.order, ref.order) << threads << " threads";
    EXPECT_EQ(t.bucket_offsets, ref.bucket_offsets) << threads << " threads";
  }
}

// ---- Tests.

TEST(GuidedScheduler, PaperFigure8Example) {
  // Top-leaves 8..15 are columns 0..7; siblings (8, 9), (10, 11), (12, 13), (14, 15).
  //   A: 8 11 10       E: 10
  //   B: 8 10 11       F: 8 11 10 14
  //   C: 10 11         G: 15 14
  //   D: 12 13         H: 8 10 11
  // max_bucket 2. Level 0 by first leaf: {A B F H} (8), {C E} (10), {D} (12), {G} (15).
  // {A B F H} is too big; at p = 1 the steps are A (11 10), B (10 11), F (11 10), H (10 11);
  // (10 11) < (11 10), so {B H} then {A F}, both small enough. {C E}, {D}, {G} are final.
  // Order B H A F C E D G; buckets BH | AF | CE | D | G.
  const Input in = with_rows(8, 8, {{0, 3, 2}, {0, 2, 3}, {2, 3}, {4, 5}, {2}, {0, 3, 2, 6}, {7, 6}, {0, 2, 3}});
  const Schedule s = guided_schedule(in.view(), in.parent.data(), 2);
  EXPECT_EQ(s.order, (std::vector<index_t>{1, 7, 0, 5, 2, 4, 3, 6}));
  EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 2, 4, 6, 7, 8}));
  expect_equals_reference(in, 2);

  // max_bucket 1 goes on: {B H} at p = 3 have both ended, one final bucket of equal rows;
  // {A F} at p = 3: F steps to 14, A has ended and goes below it; {C E} at p = 1: C steps to
  // 11, E has ended. Order B H F A C E D G; buckets BH | F | A | C | E | D | G.
  const Schedule one = guided_schedule(in.view(), in.parent.data(), 1);
  EXPECT_EQ(one.order, (std::vector<index_t>{1, 7, 5, 0, 2, 4, 3, 6}));
  EXPECT_EQ(one.bucket_offsets, (std::vector<index_t>{0, 2, 3, 4, 5, 6, 7, 8}));
  expect_equals_reference(in, 1);
}

TEST(GuidedScheduler, FirstLeafAloneThenSiblingSteps) {
  // Level 0 keys on row[0] alone even when row[1] is its sibling; level 1 then starts a step
  // at row[1]. Rows 0..3 all start at 0; steps at p = 1: (1), (1), (2 3), (2). Ascending:
  // (1) < (2) < (2 3), so rows 0 1 | 3 | 2.
  const Input in = with_rows(4, 4, {{0, 1, 2}, {0, 1}, {0, 2, 3}, {0, 2}});
  const Schedule s = guided_schedule(in.view(), in.parent.data(), 1);
  EXPECT_EQ(s.order, (std::vector<index_t>{0, 1, 3, 2}));
  // {0 1} at p = 2: row 0 steps to (2), row 1 has ended.
  EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 1, 2, 3, 4}));
  expect_equals_reference(in, 1);
}

TEST(GuidedScheduler, EqualsReferenceOnRandomRows) {
  std::uint64_t seed = 1;
  for (index_t cols : {2, 8, 64, 128, 1024})
    for (index_t rows : {1, 2, 31, 32, 33, 100, 1000, 6000})
      for (index_t max_len : {2, 5, 12}) {
        const index_t width = std::min(cols, max_len + 3);
        expect_equals_reference(traversal_rows(rows, cols, width, max_len, 2, seed++), kGuidedBucketLimit,
                                rows <= 1000);
      }
  for (index_t rows : {500, 5000})
    for (index_t max_bucket : {1, 4, 32}) {
      expect_equals_reference(clustered_rows(rows, 64, 16, 5, 2, seed++), max_bucket);
      expect_equals_reference(noisy_rows(rows, 16, 10, seed++), max_bucket);
      expect_equals_reference(noisy_rows(rows, 3, 6, seed++), max_bucket);
    }
}

TEST(GuidedScheduler, EqualsReferenceOnTruncatedRows) {
  // The same rows kept to their first w entries: full rows carry no kRowEnd.
  const Input full = clustered_rows(4000, 128, 16, 12, 2, 77);
  const Input loose = traversal_rows(4000, 128, 16, 16, 2, 78);
  for (const Input* src : {&full, &loose})
    for (index_t w : {0, 1, 2, 3, 5, 9}) {
      Input cut{GuidedMatrix(src->matrix.rows(), src->matrix.cols(), w), src->parent};
      for (index_t r = 0; r < cut.matrix.rows(); ++r) std::copy_n(src->view().row(r), w, cut.matrix.row(r));
      for (index_t max_bucket : {1, 32}) expect_equals_reference(cut, max_bucket);
    }
}

TEST(GuidedScheduler, EmptyAndTinyInputs) {
  // Zero queries.
  const Input none = with_rows(8, 8, {});
  const Schedule s0 = guided_schedule(none.view(), none.parent.data());
  EXPECT_TRUE(s0.order.empty());
  EXPECT_EQ(s0.bucket_offsets, (std::vector<index_t>{0, 0}));
  expect_equals_reference(none);
  // One query, with and without entries.
  for (const auto& row : {std::vector<std::int32_t>{3, 2, 5}, std::vector<std::int32_t>{}}) {
    const Input one = with_rows(8, 8, {row});
    const Schedule s1 = guided_schedule(one.view(), one.parent.data(), 1);
    EXPECT_EQ(s1.order, (std::vector<index_t>{0}));
    EXPECT_EQ(s1.bucket_offsets, (std::vector<index_t>{0, 1}));
    expect_equals_reference(one, 1);
  }
}

TEST(GuidedScheduler, AllEmptyRows) {
  for (index_t width : {0, 1, 8}) {
    const Input in{GuidedMatrix(5000, 8, width), group_parents(8, 2)};
    const Schedule s = guided_schedule(in.view(), in.parent.data());
    std::vector<index_t> identity(5000);
    std::iota(identity.begin(), identity.end(), index_t{0});
    EXPECT_EQ(s.order, identity);
    EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 5000}));
    expect_equals_reference(in);
  }
}

TEST(GuidedScheduler, IdenticalRowsStayInOrderInOneBucket) {
  for (index_t rows : {33, 1000, 120000}) {
    const std::vector<std::vector<std::int32_t>> all(static_cast<std::size_t>(rows), {5, 4, 6, 7, 9, 8, 1});
    const Input in = with_rows(16, 10, all);
    const Schedule s = guided_schedule(in.view(), in.parent.data());
    std::vector<index_t> identity(static_cast<std::size_t>(rows));
    std::iota(identity.begin(), identity.end(), index_t{0});
    EXPECT_EQ(s.order, identity);
    EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, rows}));
    expect_equals_reference(in, kGuidedBucketLimit, rows < 100000);
  }
}

TEST(GuidedScheduler, RowsEndingAtDifferentPoints) {
  // Prefixes of one row, 200 of each length 0..10; siblings are (2k, 2k+1). The steps after
  // the first leaf 10 are (11) (3 2) (4 5) (7 6) (0 1). A prefix that cuts a step has a
  // shorter step, which sorts first; a prefix that ends between steps ends, and goes below.
  // So the lengths come out as 3 5 7 9 10 | 8 6 4 2 1 0, one final bucket each.
  const std::vector<std::int32_t> proto{10, 11, 3, 2, 4, 5, 7, 6, 0, 1};
  std::vector<std::vector<std::int32_t>> all;
  for (index_t r = 0; r < 2200; ++r) all.emplace_back(proto.begin(), proto.begin() + (r * 7) % 11);
  const Input in = with_rows(12, 10, all);
  const Schedule s = guided_schedule(in.view(), in.parent.data());
  expect_valid(s, in.view(), kGuidedBucketLimit);
  std::vector<index_t> lengths;
  for (std::size_t b = 0; b + 1 < s.bucket_offsets.size(); ++b) {
    const index_t len = in.view().length(s.order[s.bucket_offsets[b]]);
    lengths.push_back(len);
    for (index_t i = s.bucket_offsets[b]; i < s.bucket_offsets[b + 1]; ++i)
      EXPECT_EQ(in.view().length(s.order[i]), len);
  }
  EXPECT_EQ(lengths, (std::vector<index_t>{3, 5, 7, 9, 10, 8, 6, 4, 2, 1, 0}));
  expect_equals_reference(in);
  expect_equals_reference(in, 1);
}

TEST(GuidedScheduler, SingleColumn) {
  const Input in{GuidedMatrix(300, 1, 1), std::vector<node_id>{kNoNode}};
  Input m = in;
  for (index_t r = 0; r < 300; ++r)
    if (r % 3) m.matrix.row(r)[0] = 0;
  const Schedule s = guided_schedule(m.view(), m.parent.data());
  // The 200 rows that reached column 0, then the 100 empty ones.
  EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 200, 300}));
  expect_equals_reference(m);
  expect_equals_reference(m, 1);
}

TEST(GuidedScheduler, BucketsOfExactlyTheLimit) {
  // k queries start at column 5 and then step to columns in descending order: 32 of them are
  // one final bucket in input order, 33 are split by their second step.
  for (index_t k : {32, 33}) {
    std::vector<std::vector<std::int32_t>> all;
    for (index_t r = 0; r < k; ++r) all.push_back({5, static_cast<std::int32_t>(63 - r)});
    for (index_t r = 0; r < 40; ++r) all.push_back({static_cast<std::int32_t>(r % 4), 60});
    const Input in = with_rows(64, 4, all);
    const Schedule s = guided_schedule(in.view(), in.parent.data());
    expect_equals_reference(in);
    // The column-5 group follows the four groups of columns 0..3 (10 queries each).
    const index_t begin = 40;
    ASSERT_EQ(s.bucket_offsets.size(), k == 32 ? 6u : 5u + static_cast<std::size_t>(k));
    EXPECT_EQ(s.bucket_offsets[4], begin);
    for (index_t i = 0; i < k; ++i) EXPECT_EQ(s.order[begin + i], k == 32 ? i : k - 1 - i);
  }
}

TEST(GuidedScheduler, ManyRowsFewFirstLeaves) {
  // Big buckets: the parallel split, and sub-buckets run as tasks.
  for (index_t firsts : {1, 3}) {
    std::mt19937_64 rng(firsts);
    std::vector<std::vector<std::int32_t>> all(150000);
    for (auto& row : all) {
      row = traversal_row(128, 2, 1 + static_cast<index_t>(rng() % 8), rng);
      row[0] = static_cast<std::int32_t>(40 + rng() % firsts);
    }
    const Input in = with_rows(128, 12, all);
    expect_equals_reference(in);
  }
  // Few distinct steps in big buckets: the parallel counting sort.
  expect_equals_reference(clustered_rows(150000, 128, 12, 3, 2, 41));
  expect_equals_reference(clustered_rows(110000, 128, 12, 2, 2, 42), 1);
  // More than 256 distinct steps in one bucket, small and large: the comparison sort.
  for (index_t rows : {5000, 40000}) {
    std::mt19937_64 rng(rows);
    std::vector<std::vector<std::int32_t>> all(static_cast<std::size_t>(rows));
    for (auto& row : all)
      row = {0, static_cast<std::int32_t>(2 + rng() % 4000), static_cast<std::int32_t>(rng() % 4096)};
    expect_equals_reference(with_rows(4096, 3, all));
  }
}

TEST(GuidedScheduler, ManyDistinctStepsThenLongOnes) {
  // A bucket with more distinct steps than the counting sort takes, whose long steps (8
  // siblings; 4096 columns leave room for 4 in a key) come only after the others.
  std::vector<std::vector<std::int32_t>> all;
  for (std::int32_t i = 0; i < 3000; ++i) all.push_back({0, 16 + 8 * (i % 500)});
  for (std::int32_t i = 0; i < 300; ++i) {
    std::vector<std::int32_t> row{0, 8, 9, 10, 11, 12, 13, 14, 15};
    if (i % 2) std::swap(row[7], row[8]);
    if (i % 3 == 0) row.pop_back();
    all.push_back(row);
  }
  for (index_t max_bucket : {1, 32}) expect_equals_reference(with_rows(4096, 10, all, 8), max_bucket);
}

TEST(GuidedScheduler, OctreeLikeSiblingGroups) {
  // Groups of 8 siblings: with 64 columns a whole step fits one key; with 512 and 4096 columns
  // a long step is truncated and ties are broken from the rows.
  std::uint64_t seed = 500;
  for (index_t cols : {64, 512, 4096})
    for (index_t rows : {300, 5000, 40000}) {
      expect_equals_reference(traversal_rows(rows, cols, 24, 20, 8, seed++), kGuidedBucketLimit, rows <= 5000);
      expect_equals_reference(clustered_rows(rows, cols, 24, 6, 8, seed++), 4, rows <= 5000);
    }
  // Full sibling groups in both orders after a shared first leaf.
  std::vector<std::vector<std::int32_t>> all;
  for (index_t r = 0; r < 200; ++r) {
    std::vector<std::int32_t> row{0};
    for (std::int32_t c = 8; c < 16; ++c) row.push_back(r % 2 ? c : 23 - c);
    if (r % 3 == 0) row.pop_back();
    if (r % 5 == 0) row.push_back(16 + static_cast<std::int32_t>(r % 7));
    all.push_back(row);
  }
  for (index_t cols : {64, 4096}) {
    expect_equals_reference(with_rows(cols, 12, all, 8));
    expect_equals_reference(with_rows(cols, 12, all, 8), 1);
  }
  // The same groups one level further down, after a step to one of the leaves 24..26.
  for (std::size_t r = 0; r < all.size(); ++r) all[r].insert(all[r].begin() + 1, static_cast<std::int32_t>(24 + r % 3));
  for (index_t cols : {64, 4096}) {
    expect_equals_reference(with_rows(cols, 13, all, 8));
    expect_equals_reference(with_rows(cols, 13, all, 8), 1);
  }
}

TEST(GuidedScheduler, StepsAcrossTheWindowEdge) {
  // A group of 8 siblings (columns 8..15, in one of a few orders, some cut short) after the
  // first leaf 0 and k single leaves of other groups: as k varies the group's step starts at
  // every position, so it lies inside the implementation's packed copy of the row's first
  // entries, straddles its end, or lies past it. Queries with equal steps up to the edge and
  // different ones after it must still be told apart.
  const std::vector<std::vector<std::int32_t>> groups{{8, 9, 10, 11, 12, 13, 14, 15},
                                                      {8, 9, 10, 11, 12, 13, 14},
                                                      {8, 9, 10, 11, 12, 13, 15, 14},
                                                      {8, 9, 10, 11, 12, 13, 15},
                                                      {8, 9, 10, 11, 12},
                                                      {9, 8, 10, 11, 12, 13, 14, 15}};
  for (index_t cols : {64, 128, 1024, 4096}) {
    const index_t max_k = std::min<index_t>(cols / 8 - 2, 16);
    std::mt19937_64 rng(static_cast<std::uint64_t>(cols));
    std::vector<std::vector<std::int32_t>> all(3000);
    for (auto& row : all) {
      const index_t k = static_cast<index_t>(rng() % static_cast<std::uint64_t>(max_k + 1));
      row = {0};
      for (index_t i = 0; i < k; ++i) row.push_back(static_cast<std::int32_t>(16 + 8 * i));
      const auto& g = groups[rng() % groups.size()];
      row.insert(row.end(), g.begin(), g.end());
      if (rng() % 3 == 0) row.push_back(static_cast<std::int32_t>(16 + 8 * (rng() % max_k)));
    }
    for (index_t max_bucket : {1, 32}) expect_equals_reference(with_rows(cols, 28, all, 8), max_bucket);
  }
}

TEST(GuidedScheduler, ConcurrentAndRepeatedCalls) {
  // Calls from many tasks at once (each thread keeps its own scratch; a call nested in another
  // on one thread by work stealing takes fresh scratch), and calls of growing and shrinking
  // sizes on one thread.
  std::vector<Input> inputs;
  for (index_t i = 0; i < 8; ++i)
    inputs.push_back(clustered_rows(i % 2 ? 40000 : 3000, 128, 12, 3 + i, 2, 900 + static_cast<std::uint64_t>(i)));
  std::vector<Schedule> expected;
  for (const Input& in : inputs)
    expected.push_back(reference_schedule(in.view(), in.parent.data(), kGuidedBucketLimit));
  std::vector<Schedule> got(inputs.size());
  tbb::parallel_for(std::size_t{0}, inputs.size(), [&](std::size_t i) {
    got[i] = guided_schedule(inputs[i].view(), inputs[i].parent.data());
  });
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(got[i].order, expected[i].order) << i;
    EXPECT_EQ(got[i].bucket_offsets, expected[i].bucket_offsets) << i;
  }
  for (std::size_t i : {1u, 0u, 3u, 2u}) {
    const Schedule s = guided_schedule(inputs[i].view(), inputs[i].parent.data());
    EXPECT_EQ(s.order, expected[i].order) << i;
    EXPECT_EQ(s.bucket_offsets, expected[i].bucket_offsets) << i;
  }
}

TEST(GuidedScheduler, ManyColumnsFewRows) {
  // More columns than a per-column histogram is worth: level 0 is sorted like the others.
  for (index_t firsts : {5, 300000}) {
    std::mt19937_64 rng(firsts);
    std::vector<std::vector<std::int32_t>> all(3000);
    for (auto& row : all) {
      const std::int32_t c = static_cast<std::int32_t>(rng() % std::min<index_t>(firsts, 150000)) * 2;
      row = {c, c + 1, static_cast<std::int32_t>(rng() % 300000)};
    }
    expect_equals_reference(with_rows(300000, 4, all));
  }
}

TEST(GuidedScheduler, MaxBucketExtremes) {
  const Input in = traversal_rows(3000, 128, 10, 8, 2, 9);
  expect_equals_reference(in, 1);
  // A limit above the row count: the input order, one bucket.
  const Schedule s = guided_schedule(in.view(), in.parent.data(), index_t{1} << 40);
  std::vector<index_t> identity(3000);
  std::iota(identity.begin(), identity.end(), index_t{0});
  EXPECT_EQ(s.order, identity);
  EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 3000}));
  expect_equals_reference(in, 2999);
}

TEST(GuidedScheduler, MaxBucketOneGivesEqualRowsPerBucket) {
  const Input in = clustered_rows(5000, 128, 12, 20, 2, 31);
  const Schedule s = guided_schedule(in.view(), in.parent.data(), 1);
  for (std::size_t b = 0; b + 1 < s.bucket_offsets.size(); ++b) {
    const auto first = effective_row(in.view(), s.order[s.bucket_offsets[b]]);
    for (index_t i = s.bucket_offsets[b]; i < s.bucket_offsets[b + 1]; ++i)
      EXPECT_EQ(effective_row(in.view(), s.order[i]), first);
  }
  expect_equals_reference(in, 1);
}

// The GPU inspector leaves the entries past a row's kRowEnd unwritten: whatever they hold is
// never read, not even for a row that ends at entry 0 (once misread as a bad column).
TEST(GuidedScheduler, EntriesPastTheEndAreNeverRead) {
  std::vector<std::vector<std::int32_t>> all;
  for (index_t r = 0; r < 3000; ++r) {
    const index_t len = (r * 5) % 9;  // 0 .. 8 of 12 entries
    std::vector<std::int32_t> row;
    for (index_t j = 0; j < len; ++j) row.push_back(static_cast<std::int32_t>((r + 3 * j) % 16));
    all.push_back(row);
  }
  const Input clean = with_rows(16, 12, all);
  Input dirty = clean;
  for (index_t r = 0; r < 3000; ++r) {
    const index_t len = clean.view().length(r);
    for (index_t j = len + 1; j < 12; ++j) dirty.matrix.row(r)[j] = static_cast<std::int32_t>(-35373187 + r * j);
  }
  for (index_t max_bucket : {index_t{1}, index_t{32}, kGuidedBucketLimit}) {
    const Schedule want = guided_schedule(clean.view(), clean.parent.data(), max_bucket);
    const Schedule got = guided_schedule(dirty.view(), dirty.parent.data(), max_bucket);
    EXPECT_EQ(got.order, want.order) << max_bucket;
    EXPECT_EQ(got.bucket_offsets, want.bucket_offsets) << max_bucket;
  }
}

TEST(GuidedScheduler, RejectsBadInput) {
  const Input in = with_rows(8, 4, std::vector<std::vector<std::int32_t>>(40, {0, 1, 2}));
  EXPECT_THROW(guided_schedule(in.view(), in.parent.data(), 0), Error);
  EXPECT_THROW(guided_schedule(in.view(), nullptr), Error);
  for (std::int32_t bad : {8, -2}) {
    for (index_t at : {0, 2}) {
      Input b = in;
      b.matrix.row(17)[at] = bad;
      EXPECT_THROW(guided_schedule(b.view(), b.parent.data()), Error) << bad << " at " << at;
    }
  }
}

}  // namespace
}  // namespace canopy
