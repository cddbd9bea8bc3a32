#include <algorithm>
#include <array>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

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

// One stable counting-sort pass: moves a[0, n) into ascending order of digit_at(i), a value in
// [0, radix) for the element at position i, through tmp and back into a; chunks of the range
// run in parallel when `parallel`. Returns the bucket starts (radix + 1 entries). When one
// digit holds everything, nothing moves.
template <class T, class DigitAt>
std::vector<index_t> counting_pass(T* a, T* tmp, index_t n, index_t radix, DigitAt digit_at, bool parallel) {
  const index_t chunks = parallel ? std::min<index_t>(n / 8192, 2 * tbb::this_task_arena::max_concurrency()) : 1;
  const index_t per = (n + chunks - 1) / chunks;
  std::vector<index_t> hist(static_cast<std::size_t>(chunks * radix), 0);
  auto for_chunks = [&](auto&& f) {
    if (chunks > 1)
      tbb::parallel_for(index_t{0}, chunks, [&](index_t ch) { f(ch, hist.data() + ch * radix); });
    else
      f(0, hist.data());
  };
  for_chunks([&](index_t ch, index_t* h) {
    for (index_t i = ch * per; i < std::min(n, (ch + 1) * per); ++i) ++h[digit_at(i)];
  });
  std::vector<index_t> start(static_cast<std::size_t>(radix + 1));
  index_t sum = 0, largest = 0;
  for (index_t d = 0; d < radix; ++d) {
    start[d] = sum;
    const index_t before = sum;
    for (index_t ch = 0; ch < chunks; ++ch) {
      const index_t c = hist[ch * radix + d];
      hist[ch * radix + d] = sum;
      sum += c;
    }
    largest = std::max(largest, sum - before);
  }
  start[radix] = n;
  if (largest == n) return start;
  for_chunks([&](index_t ch, index_t* h) {
    for (index_t i = ch * per; i < std::min(n, (ch + 1) * per); ++i) tmp[h[digit_at(i)]++] = a[i];
  });
  if (parallel)
    tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1 << 14), [&](const tbb::blocked_range<index_t>& r) {
      std::copy(tmp + r.begin(), tmp + r.end(), a + r.begin());
    });
  else
    std::copy(tmp, tmp + n, a);
  return start;
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
    const std::vector<index_t> bucket_start = counting_pass(
        idx, tmp, n, K, [&](index_t i) { return chr[i] < 0 ? cursor : cursor - 1 - chr[i]; }, parallel);

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

// Each row as a 128-bit key that compares, as an unsigned number, as the row does: the row's
// highest column c (as c + 1, in `bits` bits, 0 for an empty row), then the row's next
// 127 - bits columns below c as they are, then one flag bit set when the row has columns
// further below. Rows whose keys are equal with the flag clear are equal; ties with the flag
// set are refined from the matrix. A fixed amount of work per row, whatever its bits.
struct KeyedRow {
  std::uint64_t hi, lo;
  index_t idx;
};

class RowKeys {
 public:
  explicit RowKeys(index_t cols) {
    while ((index_t{1} << bits_) <= cols) ++bits_;
  }

  KeyedRow encode(const SchedulingMatrixView& m, index_t r) const {
    const std::uint64_t* row = m.row(r);
    const index_t words = m.words_per_row;
    index_t w = words - 1;
    while (w >= 0 && row[w] == 0) --w;
    if (w < 0) return {0, 0, r};
    const index_t c = w * 64 + 63 - __builtin_clzll(row[w]);
    // Columns c-1 .. c-64 and c-65 .. c-128, most significant first.
    auto bits_ending_at = [&](index_t p) -> std::uint64_t {
      if (p < 0) return 0;
      const index_t low = p - 63;
      if (low < 0) return row[0] << (-low);
      const index_t lw = low / 64, s = low % 64;
      std::uint64_t v = row[lw] >> s;
      if (s && lw + 1 < words) v |= row[lw + 1] << (64 - s);
      return v;
    };
    const unsigned __int128 window =
        ((static_cast<unsigned __int128>(bits_ending_at(c - 1)) << 64) | bits_ending_at(c - 65)) >> bits_;
    // The flag stands for every column at or below c - 128 + bits (the bit the window drops).
    const index_t t = c - 128 + bits_;
    bool more = false;
    if (t >= 0) {
      const index_t tw = t / 64;
      more = (row[tw] & low_mask(t % 64)) != 0;
      for (index_t k = 0; k < tw && !more; ++k) more = row[k] != 0;
    }
    const unsigned __int128 key = (static_cast<unsigned __int128>(c + 1) << (128 - bits_)) |
                                  (window & ~static_cast<unsigned __int128>(1)) | (more ? 1 : 0);
    return {static_cast<std::uint64_t>(key >> 64), static_cast<std::uint64_t>(key), r};
  }
  int bits() const { return bits_; }
  // The highest column of a row (-1 for an empty row).
  index_t first_column(const KeyedRow& k) const { return static_cast<index_t>(k.hi >> (64 - bits_)) - 1; }
  // Rows with equal flagged keys agree on every column at or above this one.
  index_t tie_cursor(const KeyedRow& k) const { return first_column(k) - 127 + bits_; }

 private:
  int bits_ = 1;
};

bool key_greater(const KeyedRow& a, const KeyedRow& b) { return a.hi != b.hi ? a.hi > b.hi : a.lo > b.lo; }
bool key_equal(const KeyedRow& a, const KeyedRow& b) { return a.hi == b.hi && a.lo == b.lo; }

// Ranges below this size are finished with a comparison sort: a bucket pass costs more.
constexpr index_t kRadixRange = 256;
// Ranges at least this large take 11-bit digits (a 2048-entry histogram) instead of 8.
constexpr index_t kWideRange = 1 << 14;

// Stable MSD radix sort of keyed rows, descending: buckets by the `width` key bits below the
// `bit` bits already equal across the range, then each bucket by the next 8.
void radix_sort_keys(KeyedRow* a, KeyedRow* tmp, index_t n, int bit, int width) {
  for (;;) {
    if (n < kRadixRange) {
      std::stable_sort(a, a + n, key_greater);
      return;
    }
    if (bit >= 128) return;  // equal keys: keep their order
    width = std::min(width, 128 - bit);
    const int shift = 128 - bit - width;
    const index_t radix = index_t{1} << width;
    // The digit's bits lie in hi, in lo, or across both; descending order reverses the digit.
    const std::uint64_t dmask = static_cast<std::uint64_t>(radix - 1);
    auto digit = [=](const KeyedRow& r) {
      std::uint64_t d;
      if (shift >= 64) d = r.hi >> (shift - 64);
      else if (shift == 0) d = r.lo;
      else d = (r.lo >> shift) | (r.hi << (64 - shift));
      return static_cast<index_t>(dmask - (d & dmask));
    };
    const bool parallel = n >= kParallelRange;
    const std::vector<index_t> start = counting_pass(a, tmp, n, radix, [&](index_t i) { return digit(a[i]); }, parallel);
    const bool one_digit =
        std::adjacent_find(start.begin(), start.end(), [n](index_t x, index_t y) { return y - x == n; }) != start.end();
    if (one_digit) {  // nothing moved
      if (std::all_of(a + 1, a + n, [&](const KeyedRow& r) { return key_equal(r, a[0]); })) return;
      bit += width;
      width = n >= kWideRange ? 11 : 8;
      continue;
    }
    auto run = [&](index_t d) {
      const index_t len = start[d + 1] - start[d];
      // Wide digits for large buckets: fewer passes over them.
      if (len > 1) radix_sort_keys(a + start[d], tmp + start[d], len, bit + width, len >= kWideRange ? 11 : 8);
    };
    if (parallel)
      tbb::parallel_for(index_t{0}, radix, run);
    else
      for (index_t d = 0; d < radix; ++d) run(d);
    return;
  }
}

}  // namespace

Schedule input_order(index_t n) {
  Schedule s;
  s.order.resize(static_cast<std::size_t>(n));
  std::iota(s.order.begin(), s.order.end(), index_t{0});
  s.bucket_offsets = {0, n};
  return s;
}

struct SandpileScheduler::Workspace {
  std::unique_ptr<KeyedRow[]> rows, tmp;
  std::unique_ptr<index_t[]> scratch;
  std::unique_ptr<std::int32_t[]> chr;
  index_t capacity = 0;

  // Uninitialised storage: every element is written before it is read.
  void reserve(index_t n) {
    if (n <= capacity) return;
    rows.reset(new KeyedRow[static_cast<std::size_t>(n)]);
    tmp.reset(new KeyedRow[static_cast<std::size_t>(n)]);
    scratch.reset(new index_t[static_cast<std::size_t>(n)]);
    chr.reset(new std::int32_t[static_cast<std::size_t>(n)]);
    capacity = n;
  }
};

SandpileScheduler::SandpileScheduler() : ws_(std::make_unique<Workspace>()) {}
SandpileScheduler::~SandpileScheduler() = default;

void SandpileScheduler::run(const SchedulingMatrixView& m, index_t* order, std::vector<index_t>* bucket_offsets) {
  const index_t n = m.rows;
  if (n == 0) {
    if (bucket_offsets) *bucket_offsets = {0, 0};
    return;
  }
  ws_->reserve(n);
  KeyedRow* rows = ws_->rows.get();
  const RowKeys keys(m.cols);
  constexpr index_t kGrain = 4096;
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, kGrain), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) rows[i] = keys.encode(m, i);
  });
  // The first pass buckets by the row's highest column exactly.
  radix_sort_keys(rows, ws_->tmp.get(), n, 0, keys.bits());
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, kGrain), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) order[i] = rows[i].idx;
  });

  // Rows whose keys overflowed and tie: order them by the columns below the last one encoded.
  // Each run is refined by the block holding its first row.
  const SandpileSorter sorter(m);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, kGrain), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t b = r.begin(); b < r.end(); ++b) {
      if (!(rows[b].lo & 1) || (b > 0 && key_equal(rows[b], rows[b - 1]))) continue;
      index_t e = b + 1;
      while (e < n && key_equal(rows[e], rows[b])) ++e;
      const index_t len = e - b;
      if (len < 2) continue;
      const bool identical = std::all_of(order + b + 1, order + e, [&](index_t q) {
        return std::equal(m.row(q), m.row(q) + m.words_per_row, m.row(order[b]));
      });
      if (!identical) sorter.sort(order + b, ws_->scratch.get() + b, ws_->chr.get() + b, len, keys.tie_cursor(rows[b]));
    }
  });

  if (bucket_offsets)
    *bucket_offsets = bucket_boundaries(n, [&](index_t i) { return keys.first_column(rows[i]); });
}

index_t highest_column(const SchedulingMatrixView& m, index_t r) {
  const std::uint64_t* row = m.row(r);
  for (index_t w = m.words_per_row - 1; w >= 0; --w)
    if (row[w]) return w * 64 + 63 - __builtin_clzll(row[w]);
  return -1;
}

Schedule sandpile(const SchedulingMatrixView& m) {
  Schedule s;
  s.order.resize(static_cast<std::size_t>(m.rows));
  SandpileScheduler().run(m, s.order.data(), &s.bucket_offsets);
  return s;
}

namespace {
template <class Key>
Schedule stable_sort_by_key(const Key* keys, index_t n) {
  std::vector<std::pair<Key, index_t>> kv(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) kv[i] = {keys[i], i};
  });
  // (key, index) is a total order, so the unstable parallel sort is stable by key.
  tbb::parallel_sort(kv.begin(), kv.end());
  Schedule s;
  s.order.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) s.order[i] = kv[i].second;
  s.bucket_offsets = bucket_boundaries(n, [&](index_t i) { return kv[i].first; });
  return s;
}
}  // namespace

Schedule sort_by_key(const std::int64_t* keys, index_t n) { return stable_sort_by_key(keys, n); }
Schedule sort_by_key(const std::uint64_t* keys, index_t n) { return stable_sort_by_key(keys, n); }

Schedule sort_by_small_key(const std::uint32_t* keys, index_t n, std::uint32_t max_key) {
  // start[k]: the first position of key k (a count per key, then their running sum).
  std::vector<index_t> start(static_cast<std::size_t>(max_key) + 2, 0);
  for (index_t i = 0; i < n; ++i) {
    if (keys[i] > max_key)
      throw Error("sort_by_small_key: key " + std::to_string(keys[i]) + " of query " + std::to_string(i) +
                  " exceeds the bound " + std::to_string(max_key));
    ++start[static_cast<std::size_t>(keys[i]) + 1];
  }
  Schedule s;
  s.bucket_offsets.push_back(0);
  for (std::size_t k = 1; k < start.size(); ++k) {
    if (start[k] > 0) s.bucket_offsets.push_back(start[k - 1] + start[k]);
    start[k] += start[k - 1];
  }
  if (n == 0) s.bucket_offsets.push_back(0);  // (bucket_boundaries' {0, 0})
  s.order.resize(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) s.order[start[keys[i]]++] = i;  // input order within a key: stable
  return s;
}

}  // namespace canopy
