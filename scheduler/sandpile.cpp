#include <algorithm>
#include <atomic>
#include <numeric>

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>
#include <tbb/task_arena.h>

#include "scheduler/schedule.hpp"

namespace canopy {
namespace {

// Ranges this small are finished by insertion sort.
constexpr index_t kSmallRange = 32;
// Ranges this large run their passes, and their buckets, in parallel.
constexpr index_t kParallelRange = 1 << 15;

std::uint64_t low_mask(index_t bit) {  // bits 0..bit of a word
  return bit >= 63 ? ~std::uint64_t{0} : ((std::uint64_t{1} << (bit + 1)) - 1);
}

// Sorts query ids by their rows, descending, stably. Invariant of sort(): the rows in a range
// agree on every column >= cursor, so only the columns below it still decide the order.
class SandpileSorter {
 public:
  explicit SandpileSorter(const SchedulingMatrixView& m) : m_(m) {}

  // Highest column below `cursor` set in row r, or -1.
  std::int32_t next_bit(index_t r, index_t cursor) const {
    if (cursor <= 0) return -1;
    const std::uint64_t* row = m_.row(r);
    index_t w = (cursor - 1) / 64;
    std::uint64_t word = row[w] & low_mask((cursor - 1) % 64);
    for (;;) {
      if (word) return static_cast<std::int32_t>(w * 64 + 63 - __builtin_clzll(word));
      if (w == 0) return -1;
      word = row[--w];
    }
  }

  // Row a's columns below cursor, read as a binary number, exceed row b's.
  bool greater(index_t a, index_t b, index_t cursor) const {
    if (cursor <= 0) return false;
    const std::uint64_t* ra = m_.row(a);
    const std::uint64_t* rb = m_.row(b);
    index_t w = (cursor - 1) / 64;
    std::uint64_t mask = low_mask((cursor - 1) % 64);
    for (;;) {
      const std::uint64_t x = ra[w] & mask, y = rb[w] & mask;
      if (x != y) return x > y;
      if (w == 0) return false;
      --w;
      mask = ~std::uint64_t{0};
    }
  }

  // Highest column below cursor where some row of the range differs from the first, or -1.
  std::int32_t highest_difference(const index_t* idx, index_t n, index_t cursor) const {
    const index_t top = (cursor - 1) / 64;
    std::int32_t best = -1;
    for (index_t w = top; w >= 0 && best < 0; --w) {
      const std::uint64_t mask = w == top ? low_mask((cursor - 1) % 64) : ~std::uint64_t{0};
      const std::uint64_t first = m_.row(idx[0])[w];
      auto diff_of = [&](index_t b, index_t e, std::uint64_t acc) {
        for (index_t i = b; i < e; ++i) acc |= (m_.row(idx[i])[w] ^ first);
        return acc;
      };
      std::uint64_t diff;
      if (n >= kParallelRange) {
        diff = tbb::parallel_reduce(
            tbb::blocked_range<index_t>(1, n, 4096), std::uint64_t{0},
            [&](const tbb::blocked_range<index_t>& r, std::uint64_t acc) { return diff_of(r.begin(), r.end(), acc); },
            [](std::uint64_t a, std::uint64_t b) { return a | b; });
      } else {
        diff = diff_of(1, n, 0);
      }
      diff &= mask;
      if (diff) best = static_cast<std::int32_t>(w * 64 + 63 - __builtin_clzll(diff));
    }
    return best;
  }

  void sort(index_t* idx, index_t* tmp, std::int32_t* chr, index_t n, index_t cursor) const {
    for (;;) {
      if (n <= 1) return;
      if (n <= kSmallRange) {
        insertion_sort(idx, n, cursor);
        return;
      }
      // A histogram over every column below the cursor does not pay for a small range.
      if (n * 8 < cursor) {
        std::stable_sort(idx, idx + n, [&](index_t a, index_t b) { return greater(a, b, cursor); });
        return;
      }
      const bool parallel = n >= kParallelRange;
      // Each query's next column: the highest set bit below the cursor.
      auto fill = [&](index_t b, index_t e) {
        for (index_t i = b; i < e; ++i) chr[i] = next_bit(idx[i], cursor);
      };
      if (parallel)
        tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096),
                          [&](const tbb::blocked_range<index_t>& r) { fill(r.begin(), r.end()); });
      else
        fill(0, n);
      const std::int32_t c0 = chr[0];
      const bool one_bucket = std::all_of(chr, chr + n, [c0](std::int32_t c) { return c == c0; });
      if (one_bucket) {
        if (c0 < 0) return;  // no bit below the cursor: the rows are equal, keep their order
        const std::int32_t h = highest_difference(idx, n, c0);
        if (h < 0) return;   // identical rows
        cursor = h + 1;      // they all agree above h; skip straight there
        continue;
      }
      counting_sort_and_recurse(idx, tmp, chr, n, cursor, parallel);
      return;
    }
  }

 private:
  void insertion_sort(index_t* idx, index_t n, index_t cursor) const {
    for (index_t i = 1; i < n; ++i) {
      const index_t x = idx[i];
      index_t j = i;
      while (j > 0 && greater(x, idx[j - 1], cursor)) {
        idx[j] = idx[j - 1];
        --j;
      }
      idx[j] = x;
    }
  }

  // Stable counting sort by next column, descending (no column last), then each bucket with
  // a column recurses with that column as its cursor.
  void counting_sort_and_recurse(index_t* idx, index_t* tmp, std::int32_t* chr, index_t n,
                                 index_t cursor, bool parallel) const {
    const index_t K = cursor + 1;  // key k = cursor - 1 - column; "no column" is k = cursor
    auto key = [cursor](std::int32_t c) { return c < 0 ? cursor : cursor - 1 - c; };
    const index_t chunks = parallel ? std::min<index_t>(n / 8192, 4 * tbb::this_task_arena::max_concurrency()) : 1;
    const index_t per = (n + chunks - 1) / chunks;
    std::vector<index_t> hist(static_cast<std::size_t>(chunks * K), 0);
    auto count = [&](index_t ch) {
      index_t* h = hist.data() + ch * K;
      for (index_t i = ch * per; i < std::min(n, (ch + 1) * per); ++i) ++h[key(chr[i])];
    };
    auto for_chunks = [&](auto&& f) {
      if (chunks > 1)
        tbb::parallel_for(index_t{0}, chunks, [&](index_t ch) { f(ch); });
      else
        f(0);
    };
    for_chunks(count);
    std::vector<index_t> bucket_start(static_cast<std::size_t>(K + 1));
    index_t sum = 0;
    for (index_t k = 0; k < K; ++k) {
      bucket_start[k] = sum;
      for (index_t ch = 0; ch < chunks; ++ch) {
        const index_t c = hist[ch * K + k];
        hist[ch * K + k] = sum;
        sum += c;
      }
    }
    bucket_start[K] = n;
    for_chunks([&](index_t ch) {
      index_t* h = hist.data() + ch * K;
      for (index_t i = ch * per; i < std::min(n, (ch + 1) * per); ++i) tmp[h[key(chr[i])]++] = idx[i];
    });
    if (parallel)
      tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1 << 14), [&](const tbb::blocked_range<index_t>& r) {
        std::copy(tmp + r.begin(), tmp + r.end(), idx + r.begin());
      });
    else
      std::copy(tmp, tmp + n, idx);

    // Buckets with a column and more than one query recurse; the last key (no column) holds
    // rows that are zero below the cursor, hence equal, and stays in order.
    std::vector<std::pair<index_t, index_t>> todo;  // (key, size)
    for (index_t k = 0; k + 1 < K; ++k)
      if (bucket_start[k + 1] - bucket_start[k] > 1) todo.emplace_back(k, bucket_start[k + 1] - bucket_start[k]);
    auto run = [&](std::size_t t) {
      const index_t k = todo[t].first, off = bucket_start[k];
      sort(idx + off, tmp + off, chr + off, todo[t].second, cursor - 1 - k);
    };
    if (parallel)
      tbb::parallel_for(std::size_t{0}, todo.size(), run);
    else
      for (std::size_t t = 0; t < todo.size(); ++t) run(t);
  }

  SchedulingMatrixView m_;
};

}  // namespace

Schedule input_order(index_t n) {
  Schedule s;
  s.order.resize(static_cast<std::size_t>(n));
  std::iota(s.order.begin(), s.order.end(), index_t{0});
  s.bucket_offsets = {0, n};
  return s;
}

Schedule sandpile(const SchedulingMatrixView& m) {
  const index_t n = m.rows;
  Schedule s = input_order(n);
  if (n == 0) return s;
  std::vector<index_t> tmp(static_cast<std::size_t>(n));
  std::vector<std::int32_t> chr(static_cast<std::size_t>(n));
  SandpileSorter sorter(m);
  sorter.sort(s.order.data(), tmp.data(), chr.data(), n, m.cols);

  // Bucket = the highest set bit of the row (the last top-leaf reached).
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) chr[i] = sorter.next_bit(s.order[i], m.cols);
  });
  s.bucket_offsets.assign(1, 0);
  for (index_t i = 1; i < n; ++i)
    if (chr[i] != chr[i - 1]) s.bucket_offsets.push_back(i);
  s.bucket_offsets.push_back(n);
  return s;
}

Schedule sort_by_key(const std::int64_t* keys, index_t n) {
  std::vector<std::pair<std::int64_t, index_t>> kv(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) kv[i] = {keys[i], i};
  });
  // (key, index) is a total order, so the unstable parallel sort is stable by key.
  tbb::parallel_sort(kv.begin(), kv.end());
  Schedule s;
  s.order.resize(static_cast<std::size_t>(n));
  s.bucket_offsets.assign(1, 0);
  for (index_t i = 0; i < n; ++i) {
    s.order[i] = kv[i].second;
    if (i > 0 && kv[i].first != kv[i - 1].first) s.bucket_offsets.push_back(i);
  }
  s.bucket_offsets.push_back(n);
  return s;
}

}  // namespace canopy
