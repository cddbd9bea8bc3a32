#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include <tbb/task_arena.h>

#include "gpu_trace.hpp"
#include "scheduler/schedule.hpp"
#include "test_util.hpp"

namespace canopy {
namespace {

// The paper's partition-join, literally (Figure 7): for each top-leaf column in order, split
// the sandpile into the queries that visited it (taken) and the rest (untaken), then join.
std::vector<index_t> sequential_partition_join(const SchedulingMatrixView& m) {
  std::vector<index_t> sandpile(static_cast<std::size_t>(m.rows));
  std::iota(sandpile.begin(), sandpile.end(), index_t{0});
  for (index_t c = 0; c < m.cols; ++c) {
    std::vector<index_t> taken, untaken;
    for (index_t q : sandpile) (m.test(q, c) ? taken : untaken).push_back(q);
    taken.insert(taken.end(), untaken.begin(), untaken.end());
    sandpile.swap(taken);
  }
  return sandpile;
}

struct Matrix {
  std::vector<std::uint64_t> words;
  index_t rows = 0, cols = 0;
  SchedulingMatrixView view() const { return {words.data(), rows, cols, words_per_row(cols)}; }
  void set(index_t r, index_t c) { words[r * words_per_row(cols) + c / 64] |= std::uint64_t{1} << (c % 64); }
};

Matrix make(index_t rows, index_t cols) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.words.assign(static_cast<std::size_t>(rows * words_per_row(cols)), 0);
  return m;
}

Matrix random_matrix(index_t rows, index_t cols, double density, std::uint64_t seed) {
  Matrix m = make(rows, cols);
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution bit(density);
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c)
      if (bit(rng)) m.set(r, c);
  return m;
}

// Rows shaped like point correlation's: a short run of neighbouring columns, often repeated.
Matrix local_runs_matrix(index_t rows, index_t cols, std::uint64_t seed) {
  Matrix m = make(rows, cols);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<index_t> start(0, cols - 1);
  std::uniform_int_distribution<index_t> len(0, 6);
  for (index_t r = 0; r < rows; ++r) {
    const index_t s = start(rng) % std::max<index_t>(1, cols / 8) * 8 % cols;
    for (index_t c = s; c < std::min(cols, s + len(rng)); ++c) m.set(r, c);
  }
  return m;
}

void expect_valid(const Schedule& s, const SchedulingMatrixView& m) {
  test::expect_permutation_with_buckets(s, m.rows);
  if (::testing::Test::HasFatalFailure()) return;
  for (std::size_t b = 1; b < s.bucket_offsets.size(); ++b) EXPECT_LT(s.bucket_offsets[b - 1], s.bucket_offsets[b]);
  // Within a bucket every query reached the same last top-leaf; across buckets it differs.
  auto last_column = [&](index_t q) {
    for (index_t c = m.cols - 1; c >= 0; --c)
      if (m.test(q, c)) return c;
    return index_t{-1};
  };
  for (std::size_t b = 0; b + 1 < s.bucket_offsets.size(); ++b) {
    const index_t col = last_column(s.order[s.bucket_offsets[b]]);
    for (index_t i = s.bucket_offsets[b]; i < s.bucket_offsets[b + 1]; ++i) EXPECT_EQ(last_column(s.order[i]), col);
    if (b > 0) {
      EXPECT_NE(col, last_column(s.order[s.bucket_offsets[b] - 1]));
    }
  }
}

// Every matrix the tests check is also scheduled on the GPU where there is one.
void expect_device_equal(const Matrix& m, const std::vector<index_t>& ref) {
  if (!gpu_available()) return;
  EXPECT_EQ(test::device_sandpile_order(m.words, m.rows, m.cols), ref) << "device, " << m.rows << " x " << m.cols;
}

void expect_equals_reference(const Matrix& m) {
  const std::vector<index_t> ref = sequential_partition_join(m.view());
  expect_device_equal(m, ref);
  const Schedule s = sandpile(m.view());
  expect_valid(s, m.view());
  EXPECT_EQ(s.order, ref) << m.rows << " x " << m.cols;
  // The same answer with one thread and with several: the result may not depend on scheduling.
  tbb::task_arena one(1);
  Schedule s1;
  one.execute([&] { s1 = sandpile(m.view()); });
  EXPECT_EQ(s1.order, ref);
  EXPECT_EQ(s1.bucket_offsets, s.bucket_offsets);
}

TEST(Sandpile, PaperExample) {
  // Figure 4's leaf columns 8, 9, 10, 11, 12, 13, 14, 15 for points A..H (rows 0..7).
  const int rows[8][8] = {{1, 1, 0, 0, 0, 0, 1, 1}, {0, 0, 1, 1, 1, 1, 0, 0}, {1, 1, 0, 0, 1, 1, 0, 0},
                          {0, 0, 1, 1, 1, 1, 1, 1}, {1, 1, 0, 0, 0, 0, 1, 1}, {0, 0, 1, 1, 0, 0, 0, 0},
                          {1, 1, 1, 1, 0, 0, 0, 0}, {0, 0, 0, 0, 1, 1, 1, 1}};
  Matrix m = make(8, 8);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 8; ++c)
      if (rows[r][c]) m.set(r, c);
  expect_equals_reference(m);
  // D H A E B C G F, as the paper's Figure 6 ends.
  EXPECT_EQ(sandpile(m.view()).order, (std::vector<index_t>{3, 7, 0, 4, 1, 2, 6, 5}));
}

TEST(Sandpile, EqualsSequentialOnRandomMatrices) {
  std::uint64_t seed = 1;
  for (index_t cols : {1, 2, 63, 64, 65, 130, 256, 1000})
    for (index_t rows : {1, 2, 31, 33, 500, 3000})
      for (double density : {0.01, 0.1, 0.5, 0.9}) expect_equals_reference(random_matrix(rows, cols, density, seed++));
}

TEST(Sandpile, EqualsSequentialOnAdversarialMatrices) {
  for (index_t cols : {1, 64, 65, 300}) {
    expect_equals_reference(make(5000, cols));  // all zeros
    Matrix ones = make(5000, cols);
    for (index_t r = 0; r < 5000; ++r)
      for (index_t c = 0; c < cols; ++c) ones.set(r, c);
    expect_equals_reference(ones);  // all ones
    Matrix single = make(4000, cols);  // one bit per row, cycling
    for (index_t r = 0; r < 4000; ++r) single.set(r, (r * 7) % cols);
    expect_equals_reference(single);
    Matrix blocks = random_matrix(64, cols, 0.3, 99);  // few distinct rows, many copies
    Matrix repeated = make(6400, cols);
    for (index_t r = 0; r < 6400; ++r) std::copy_n(&blocks.words[(r % 64) * words_per_row(cols)], words_per_row(cols),
                                                   &repeated.words[r * words_per_row(cols)]);
    expect_equals_reference(repeated);
  }
  expect_equals_reference(random_matrix(1, 500, 0.5, 7));  // one query
  expect_equals_reference(local_runs_matrix(20000, 512, 8));
  // Rows that share a long prefix of high bits and differ only in the lowest column.
  Matrix prefix = make(3000, 200);
  for (index_t r = 0; r < 3000; ++r) {
    for (index_t c = 100; c < 200; ++c) prefix.set(r, c);
    if (r % 3 == 0) prefix.set(r, 0);
  }
  expect_equals_reference(prefix);
  // Rows whose keys tie (same highest column and window below it) but differ far below: the
  // refinement from the matrix must order them.
  for (index_t cols : {300, 2000}) {
    Matrix far = random_matrix(5000, 60, 0.3, 17);
    Matrix wide = make(5000, cols);
    for (index_t r = 0; r < 5000; ++r) {
      wide.set(r, cols - 1);
      if (r % 2) wide.set(r, cols - 2);
      for (index_t c = 0; c < 60; ++c)
        if (far.view().test(r, c)) wide.set(r, c);
    }
    expect_equals_reference(wide);
  }
}

TEST(Sandpile, EqualsStableSortOfLargeMatrices) {
  // The fact behind the fast version: the final sandpile is a stable sort of the rows,
  // descending, by their value with the last column most significant. Checked at a size the
  // literal partition-join would take too long for.
  for (auto [cols, density] : {std::pair<index_t, double>{256, 0.05}, {4096, 0.002}}) {
    const Matrix m = random_matrix(200000, cols, density, 1234);
    const index_t w = words_per_row(cols);
    std::vector<index_t> ref(static_cast<std::size_t>(m.rows));
    std::iota(ref.begin(), ref.end(), index_t{0});
    std::stable_sort(ref.begin(), ref.end(), [&](index_t a, index_t b) {
      for (index_t k = w - 1; k >= 0; --k)
        if (m.words[a * w + k] != m.words[b * w + k]) return m.words[a * w + k] > m.words[b * w + k];
      return false;
    });
    const Schedule s = sandpile(m.view());
    EXPECT_EQ(s.order, ref) << cols;
    expect_device_equal(m, ref);
    expect_valid(s, m.view());
  }
  const Matrix runs = local_runs_matrix(300000, 1024, 5);
  const Schedule s = sandpile(runs.view());
  expect_valid(s, runs.view());
}

TEST(Sandpile, SchedulerReusesItsWorkspaceAcrossSizes) {
  SandpileScheduler scheduler;
  for (index_t rows : {5000, 100, 20000, 1}) {
    const Matrix m = random_matrix(rows, 300, 0.05, static_cast<std::uint64_t>(rows));
    std::vector<index_t> order(static_cast<std::size_t>(rows)), buckets;
    scheduler.run(m.view(), order.data(), &buckets);
    const Schedule s = sandpile(m.view());
    EXPECT_EQ(order, s.order);
    EXPECT_EQ(buckets, s.bucket_offsets);
  }
}

TEST(SortByKey, IsStableAndBucketsRuns) {
  const std::vector<std::int64_t> keys{5, 3, 5, 1, 3, 3, 9, 1};
  const Schedule s = sort_by_key(keys.data(), static_cast<index_t>(keys.size()));
  EXPECT_EQ(s.order, (std::vector<index_t>{3, 7, 1, 4, 5, 0, 2, 6}));
  EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 2, 5, 7, 8}));
}

// The counting sort gives the comparison sort's schedule, order and buckets alike.
TEST(SortBySmallKey, EqualsTheComparisonSort) {
  std::mt19937 rng(7);
  for (index_t n : {0, 1, 8, 1000, 40000}) {
    for (std::uint32_t max_key : {0u, 1u, 37u, 70000u}) {
      std::vector<std::uint32_t> keys(static_cast<std::size_t>(n));
      std::vector<std::int64_t> wide(keys.size());
      for (std::size_t i = 0; i < keys.size(); ++i) wide[i] = keys[i] = rng() % (max_key + 1);
      const Schedule a = sort_by_small_key(keys.data(), n, max_key), b = sort_by_key(wide.data(), n);
      EXPECT_EQ(a.order, b.order) << "n " << n << " max_key " << max_key;
      EXPECT_EQ(a.bucket_offsets, b.bucket_offsets) << "n " << n << " max_key " << max_key;
    }
  }
  const std::vector<std::uint32_t> over{1, 5, 2};
  EXPECT_THROW(sort_by_small_key(over.data(), 3, 4), Error);
}

TEST(InputOrder, IsTheIdentity) {
  const Schedule s = input_order(5);
  EXPECT_EQ(s.order, (std::vector<index_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.bucket_offsets, (std::vector<index_t>{0, 5}));
}

}  // namespace
}  // namespace canopy
