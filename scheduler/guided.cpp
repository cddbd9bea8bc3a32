#include "scheduler/guided.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

namespace canopy {
namespace {

// The key of a query whose row has ended at the cursor: above every step key, so the ended
// queries sort to the bottom of their bucket.
constexpr std::uint64_t kEnded = ~std::uint64_t{0};
// Buckets this large compute their keys and scatter in parallel, and run their sub-buckets as
// tasks.
constexpr index_t kParallelRange = 1 << 15;
// Queries per chunk of a parallel pass.
constexpr index_t kChunk = 8192;
// Distinct keys a bucket's counting sort handles (slots fit a byte); a bucket with more is
// comparison-sorted.
constexpr int kMaxDistinct = 256;

struct Child {
  index_t off, n;
  bool ended;
};

// The sub-buckets of one split. Most splits have a handful, kept on the stack.
class Children {
 public:
  void push(const Child& c) {
    if (n_ < kInline) inline_[n_] = c;
    else more_.push_back(c);
    ++n_;
  }
  const Child& operator[](std::size_t i) const { return i < kInline ? inline_[i] : more_[i - kInline]; }
  std::size_t size() const { return n_; }

 private:
  static constexpr std::size_t kInline = 16;
  Child inline_[kInline]{};
  std::vector<Child> more_;
  std::size_t n_ = 0;
};

// The distinct keys of a slice of a bucket in first-seen order, found through a small
// open-addressing hash table: a bucket has few distinct steps, and hashing costs less than a
// search per query.
class KeyTable {
 public:
  void reset(index_t n) {
    size_ = 64;
    while (size_ < 2 * std::min<index_t>(n, kMaxDistinct)) size_ *= 2;
    shift_ = 64 - __builtin_ctzll(static_cast<std::uint64_t>(size_));
    std::fill(table_, table_ + size_, std::int16_t{-1});
    d = 0;
  }

  // The slot of key k, or -1 when it would be one distinct key too many.
  int find_or_add(std::uint64_t k) {
    // Keys keep their columns in the top bits; fold them down before the multiplicative hash.
    std::uint64_t h = ((k ^ (k >> 31)) * 0x9E3779B97F4A7C15ull) >> shift_;
    for (;;) {
      const int s = table_[h];
      if (s < 0) {
        if (d == kMaxDistinct) return -1;
        table_[h] = static_cast<std::int16_t>(d);
        keys[d] = k;
        count[d] = 0;
        return d++;
      }
      if (keys[s] == k) return s;
      h = (h + 1) & static_cast<std::uint64_t>(size_ - 1);
    }
  }

  std::uint64_t keys[kMaxDistinct];
  index_t count[kMaxDistinct];
  index_t dest[kMaxDistinct];  // the next position of each slot's queries in the scatter
  int d = 0;

 private:
  std::int16_t table_[2 * kMaxDistinct];
  index_t size_ = 64;
  int shift_ = 58;
};

index_t chunks_for(index_t n, bool parallel) {
  if (!parallel) return 1;
  return std::max<index_t>(1, std::min<index_t>(n / kChunk, 2 * tbb::this_task_arena::max_concurrency()));
}

// Runs f(chunk, begin, end) over `chunks` equal slices of [0, n), in parallel when there are
// several.
template <class F>
void for_chunks(index_t n, index_t chunks, F&& f) {
  const index_t per = (n + chunks - 1) / chunks;
  if (chunks == 1) {
    f(index_t{0}, index_t{0}, n);
    return;
  }
  tbb::parallel_for(index_t{0}, chunks, [&](index_t ch) { f(ch, ch * per, std::min(n, (ch + 1) * per)); });
}

template <class T>
void copy_range(const T* from, T* to, index_t n, bool parallel) {
  if (!parallel) {
    std::copy(from, from + n, to);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1 << 14), [&](const tbb::blocked_range<index_t>& r) {
    std::copy(from + r.begin(), from + r.end(), to + r.begin());
  });
}

[[noreturn]] void bad_entry(index_t row, index_t pos, std::int32_t value, index_t cols) {
  throw Error("guided scheduling matrix: row " + std::to_string(row) + ", entry " + std::to_string(pos) + " is " +
              std::to_string(value) + ", neither a column in [0, " + std::to_string(cols) + ") nor kRowEnd");
}

// How a query's steps are read. Columns take `bits` bits, enough for 0 .. cols.
//
// Window: one word per query holding its entries 1 .. W, the first in the top field, which
// travels with the query through every scatter, so that a bucket reads its steps from memory
// in bucket order instead of from rows all over the matrix. Each field is a flag bit (this
// entry's column has the previous entry's parent) above the column c as c + 1; a zero field is
// past the row's end. A step at a cursor inside the window is then a few bit operations.
// Entries past the window come from the matrix.
//
// Key at cursor p: compares as the steps at p do among queries with one row prefix, which is
// all it needs. Inside the window: the step's fields (the first flag clear, every further
// one set), then zero fields; past the window: the first column, then each further column
// c as c + 1, then zero fields, in `bits`-bit fields; at p = 0: the first column. A step
// longer than the key (here at most `head(p)` columns) is flagged long and ties are broken from
// the rows. No key equals kEnded: its top bit is clear or its first field is below its maximum.
//
// The hot loops work on a local copy, so that their stores do not make the compiler reload it.
struct StepReader {
  const std::int32_t* entries;
  const index_t* offsets;  // packed rows (see GuidedMatrixView), or null
  index_t width, cols;
  const node_id* parent;
  int bits = 1;        // a column
  int field = 2;       // a window field: flag + column
  index_t window = 32;  // entries in the window
  index_t packed = 64;  // columns in a key past the window
  int pad = 0;          // unused low bits of the window
  std::uint64_t flags = 0;  // the flag bits of the window's fields 1 .. W - 1

  static constexpr std::uint64_t kTop = std::uint64_t{1} << 63;

  StepReader(const GuidedMatrixView& m, const node_id* column_parent)
      : entries(m.entries), offsets(m.offsets), width(m.width), cols(m.cols), parent(column_parent) {
    const index_t largest = std::min<index_t>(cols, INT32_MAX);
    while ((index_t{1} << bits) <= largest) ++bits;
    field = bits + 1;
    window = 64 / field;
    packed = 64 / bits;
    pad = static_cast<int>(64 - field * window);
    for (index_t i = 1; i < window; ++i) flags |= kTop >> (field * i);
  }

  const std::int32_t* row(index_t q) const { return entries + (offsets ? offsets[q] : q * width); }

  std::int32_t column(const std::int32_t* e, index_t q, index_t j) const {
    const std::int32_t c = e[j];
    if (c < 0 || c >= cols) bad_entry(q, j, c, cols);
    return c;
  }

  std::uint64_t pack_window(index_t q) const {
    const std::int32_t* e = row(q);
    std::uint64_t w = 0;
    // A row that ends at entry 0 holds nothing the GPU wrote past it.
    bool live = width > 0 && e[0] != kRowEnd;
    node_id prev = kNoNode;
    for (index_t j = 1; j <= window; ++j) {
      live = live && j < width && e[j] != kRowEnd;
      std::uint64_t f = 0;
      if (live) {
        const std::int32_t c = column(e, q, j);
        f = static_cast<std::uint64_t>(c) + 1;
        if (j > 1 && parent[c] == prev) f |= std::uint64_t{1} << bits;
        prev = parent[c];
      }
      w = (w << field) | f;
    }
    return w << pad;
  }

  // Entry j of query q, whose window is w: its column, or kRowEnd past the row's end. Past the
  // window only for rows live up to j - 1, whose later entries are not garbage.
  std::int32_t entry(index_t q, std::uint64_t w, index_t j) const {
    if (j >= width) return kRowEnd;
    if (j >= 1 && j <= window) {
      const std::uint64_t f = w >> (64 - field * j);
      return static_cast<std::int32_t>(f & ((std::uint64_t{1} << bits) - 1)) - 1;
    }
    const std::int32_t* e = row(q);
    return e[j] == kRowEnd ? kRowEnd : column(e, q, j);
  }

  bool continues(index_t q, std::uint64_t w, index_t j, node_id par) const {
    const std::int32_t c = entry(q, w, j);
    return c != kRowEnd && parent[c] == par;
  }

  // Columns of a step at p that its key holds.
  index_t head(index_t p) const { return p >= 1 && p <= window ? window - (p - 1) : packed; }

  // Key of query q (window w) at cursor p.
  std::uint64_t key(index_t q, std::uint64_t w, index_t p, bool& is_long) const {
    if (p < 1 || p > window) return key_from_matrix(q, w, p, is_long);
    const std::uint64_t x = w << (field * (p - 1));
    if ((x >> (64 - field)) == 0) return kEnded;
    // The step's first flag is clear: entry 1's is packed clear, and at any later cursor the
    // previous step would have gone on had its parent been the same.
    const std::uint64_t stop = ~x & flags;
    const index_t s = stop ? __builtin_clzll(stop) / field : window - (p - 1);
    if (p - 1 + s == window && continues(q, w, window + 1, parent[entry(q, w, window)])) is_long = true;
    return x & ~((std::uint64_t{1} << (64 - field * s)) - 1);
  }

  __attribute__((noinline)) std::uint64_t key_from_matrix(index_t q, std::uint64_t w, index_t p, bool& is_long) const {
    const std::int32_t* e = row(q);
    if (p >= width || e[p] == kRowEnd) return kEnded;
    const std::int32_t c0 = column(e, q, p);
    std::uint64_t k = static_cast<std::uint64_t>(c0);
    if (p == 0) return k;
    const node_id par = parent[c0];
    index_t s = 1;
    for (; s < packed; ++s) {
      const std::int32_t c = entry(q, w, p + s);
      if (c == kRowEnd || parent[c] != par) break;
      k = (k << bits) | (static_cast<std::uint64_t>(c) + 1);
    }
    k <<= bits * (packed - s);
    if (s == packed && continues(q, w, p + s, par)) is_long = true;
    return k;
  }

  // Length of the step of query q (window w) at p, which has not ended.
  index_t step_length(index_t q, std::uint64_t w, index_t p) const {
    if (p == 0) return 1;
    const node_id par = parent[entry(q, w, p)];
    index_t s = 1;
    while (continues(q, w, p + s, par)) ++s;
    return s;
  }
};

// Scratch memory, kept per thread from call to call: at these sizes the page faults of fresh
// buffers cost as much as the scheduling itself. Uninitialised: every element is written
// before it is read, except `starts`, which is cleared per call.
struct Workspace {
  std::unique_ptr<std::uint64_t[]> win, tmp_win;
  std::unique_ptr<index_t[]> tmp_idx;
  std::unique_ptr<std::uint8_t[]> slot, starts;
  index_t capacity = 0;
  bool busy = false;  // a nested call on this thread (a stolen task) takes a fresh one

  void reserve(index_t rows) {
    if (rows <= capacity) return;
    const std::size_t n = static_cast<std::size_t>(rows);
    win.reset(new std::uint64_t[n]);
    tmp_win.reset(new std::uint64_t[n]);
    tmp_idx.reset(new index_t[n]);
    slot.reset(new std::uint8_t[n]);
    starts.reset(new std::uint8_t[n]);
    capacity = rows;
  }
};

class GuidedSorter {
 public:
  // ws holds at least m.rows elements; starts, if given, is cleared.
  GuidedSorter(const GuidedMatrixView& m, const node_id* parent, index_t max_bucket, index_t* order,
               std::uint8_t* starts, Workspace& ws)
      : m_(m), rd_(m, parent), max_(max_bucket), order_(order), starts_(starts), win_(ws.win.get()),
        tmp_win_(ws.tmp_win.get()), tmp_idx_(ws.tmp_idx.get()), slot_(ws.slot.get()) {}

  void run() {
    const index_t rows = m_.rows;
    if (rows <= max_) {
      std::iota(order_, order_ + rows, index_t{0});
      mark(0);
      return;
    }
    // A histogram per chunk over the columns, unless the columns far outnumber the rows.
    if ((m_.cols + 1) * chunks_for(rows, rows >= kParallelRange) > 4 * rows + (1 << 16)) {
      tbb::parallel_for(tbb::blocked_range<index_t>(0, rows, kChunk), [&](const tbb::blocked_range<index_t>& r) {
        const StepReader rd = rd_;
        index_t* order = order_;
        std::uint64_t* win = win_;
        for (index_t q = r.begin(); q < r.end(); ++q) {
          order[q] = q;
          win[q] = rd.pack_window(q);
        }
      });
      process(0, rows, 0);
      return;
    }
    std::vector<Child> big;
    split_first_level(big);
    tbb::parallel_for(std::size_t{0}, big.size(), [&](std::size_t i) { process(big[i].off, big[i].n, 1); });
  }

 private:
  index_t step_length_at(index_t pos, index_t p) const { return rd_.step_length(order_[pos], win_[pos], p); }
  std::int32_t entry(index_t q, std::uint64_t w, index_t j) const { return rd_.entry(q, w, j); }

  void mark(index_t off) const {
    if (starts_) starts_[off] = 1;
  }

  // Level 0: a stable counting sort of all rows by their first column (ended rows last). The
  // one pass over the matrix also packs each row's window (into tmp_win_, by row, with the
  // first column in tmp_idx_) for the scatter. Small buckets are final; the others go to `big`.
  void split_first_level(std::vector<Child>& big) {
    const index_t rows = m_.rows, cols = m_.cols;
    const index_t radix = cols + 1;  // key `cols`: ended
    const index_t chunks = chunks_for(rows, rows >= kParallelRange);
    std::vector<index_t> hist(static_cast<std::size_t>(chunks * radix), 0);
    auto first_key = [](const StepReader& rd, index_t r) -> index_t {
      const std::int32_t* e = rd.row(r);
      return rd.width == 0 || e[0] == kRowEnd ? rd.cols : rd.column(e, r, 0);
    };
    for_chunks(rows, chunks, [&](index_t ch, index_t b, index_t e) {
      const StepReader rd = rd_;
      index_t* first = tmp_idx_;
      std::uint64_t* packed = tmp_win_;
      index_t* h = hist.data() + ch * radix;
      for (index_t r = b; r < e; ++r) {
        const index_t k = first_key(rd, r);
        ++h[k];
        first[r] = k;
        packed[r] = rd.pack_window(r);
      }
    });
    index_t sum = 0;
    for (index_t k = 0; k < radix; ++k) {
      const index_t begin = sum;
      for (index_t ch = 0; ch < chunks; ++ch) {
        const index_t c = hist[ch * radix + k];
        hist[ch * radix + k] = sum;
        sum += c;
      }
      const index_t n = sum - begin;
      if (n == 0) continue;
      if (k == cols || n <= max_) mark(begin);
      else big.push_back({begin, n, false});
    }
    for_chunks(rows, chunks, [&](index_t ch, index_t b, index_t e) {
      const index_t* first = tmp_idx_;
      const std::uint64_t* packed = tmp_win_;
      index_t* order = order_;
      std::uint64_t* win = win_;
      index_t* h = hist.data() + ch * radix;
      for (index_t r = b; r < e; ++r) {
        const index_t dest = h[first[r]]++;
        order[dest] = r;
        win[dest] = packed[r];
      }
    });
  }

  // Splits the bucket order_[off, off + n) (n > max_) at cursor p, and its sub-buckets in
  // turn. The largest sub-bucket continues in this loop and the others recurse, so the
  // recursion is at most log2(n) deep.
  void process(index_t off, index_t n, index_t p) {
    std::optional<tbb::task_group> group;
    for (;;) {
      const bool parallel = n >= kParallelRange;
      Children children;
      split(off, n, p, children);
      std::size_t largest = children.size();
      for (std::size_t i = 0; i < children.size(); ++i) {
        const Child& c = children[i];
        if (c.ended || c.n <= max_) mark(c.off);
        else if (largest == children.size() || c.n > children[largest].n) largest = i;
      }
      if (largest == children.size()) break;
      for (std::size_t i = 0; i < children.size(); ++i) {
        const Child c = children[i];
        if (i == largest || c.ended || c.n <= max_) continue;
        const index_t cp = p + step_length_at(c.off, p);
        if (parallel) {
          if (!group) group.emplace();
          group->run([this, c, cp] { process(c.off, c.n, cp); });
        } else {
          process(c.off, c.n, cp);
        }
      }
      const Child c = children[largest];
      p += step_length_at(c.off, p);
      off = c.off;
      n = c.n;
    }
    if (group) group->wait();
  }

  // Stable sort of the bucket at positions [off, off + n) by key at p; its sub-buckets, in
  // order, into `children`. One pass finds each query's key slot, a second scatters. Not
  // inlined: its tables stay off the frames of the recursion.
  __attribute__((noinline)) void split(index_t off, index_t n, index_t p, Children& children) {
    const bool parallel = n >= kParallelRange;
    const index_t chunks = chunks_for(n, parallel);
    std::uint8_t* slot = slot_ + off;

    KeyTable local;
    std::vector<KeyTable> many(chunks > 1 ? static_cast<std::size_t>(chunks) : 0);
    KeyTable* tables = chunks > 1 ? many.data() : &local;
    std::atomic<bool> overflow{false}, long_seen{false};
    // Past the window, rows are read through the permutation: fetch a few ahead.
    const bool prefetch = p > rd_.window && p < m_.width;
    for_chunks(n, chunks, [&](index_t ch, index_t b, index_t e) {
      const StepReader rd = rd_;
      const index_t* idx = order_ + off;
      const std::uint64_t* win = win_ + off;
      KeyTable& t = tables[ch];
      t.reset(e - b);
      bool is_long = false;
      std::uint64_t last = 0;
      int s = -1;
      for (index_t i = b; i < e; ++i) {
        if (prefetch && i + 8 < e) __builtin_prefetch(rd.row(idx[i + 8]) + p);
        const std::uint64_t k = rd.key(idx[i], win[i], p, is_long);
        if (s < 0 || k != last) {
          s = t.find_or_add(k);
          if (s < 0) {
            overflow.store(true, std::memory_order_relaxed);
            break;
          }
          last = k;
        }
        slot[i] = static_cast<std::uint8_t>(s);
        ++t.count[s];
      }
      if (is_long) long_seen.store(true, std::memory_order_relaxed);
    });

    // The distinct keys of all chunks, ascending.
    std::uint64_t sorted[kMaxDistinct];
    int d = 0;
    for (index_t ch = 0; ch < chunks && !overflow.load(std::memory_order_relaxed); ++ch) {
      std::uint64_t merged[2 * kMaxDistinct], mine[kMaxDistinct];
      const KeyTable& t = tables[ch];
      std::copy(t.keys, t.keys + t.d, mine);
      std::sort(mine, mine + t.d);
      const int m = static_cast<int>(std::set_union(sorted, sorted + d, mine, mine + t.d, merged) - merged);
      if (m > kMaxDistinct) overflow.store(true, std::memory_order_relaxed);
      else d = static_cast<int>(std::copy(merged, merged + m, sorted) - sorted);
    }

    if (overflow.load()) {
      // The first pass stopped early, maybe before a long step.
      if (comparison_sort(off, n, p, parallel, children)) long_seen.store(true);
    } else if (d == 1) {
      children.push({off, n, sorted[0] == kEnded});
    } else {
      // Each chunk's slot of each key, by rank (-1: not in that chunk).
      std::int16_t local_map[kMaxDistinct];
      std::vector<std::int16_t> many_map(chunks > 1 ? static_cast<std::size_t>(chunks * kMaxDistinct) : 0);
      std::int16_t* slot_of = chunks > 1 ? many_map.data() : local_map;
      for (index_t ch = 0; ch < chunks; ++ch) {
        std::int16_t* map = slot_of + ch * kMaxDistinct;
        const KeyTable& t = tables[ch];
        std::fill(map, map + d, std::int16_t{-1});
        for (int j = 0; j < t.d; ++j)
          map[std::lower_bound(sorted, sorted + d, t.keys[j]) - sorted] = static_cast<std::int16_t>(j);
      }
      // Positions: by key, then by chunk, which keeps the order within a key.
      index_t sum = 0;
      for (int r = 0; r < d; ++r) {
        const index_t begin = sum;
        for (index_t ch = 0; ch < chunks; ++ch) {
          const int s = slot_of[ch * kMaxDistinct + r];
          if (s < 0) continue;
          tables[ch].dest[s] = sum;
          sum += tables[ch].count[s];
        }
        children.push({off + begin, sum - begin, sorted[r] == kEnded});
      }
      index_t* idx = order_ + off;
      std::uint64_t* win = win_ + off;
      index_t* tmp_idx = tmp_idx_ + off;
      std::uint64_t* tmp_win = tmp_win_ + off;
      for_chunks(n, chunks, [&](index_t ch, index_t b, index_t e) {
        index_t* dest = tables[ch].dest;
        for (index_t i = b; i < e; ++i) {
          const index_t to = dest[slot[i]]++;
          tmp_idx[to] = idx[i];
          tmp_win[to] = win[i];
        }
      });
      copy_range(tmp_idx, idx, n, parallel);
      copy_range(tmp_win, win, n, parallel);
    }
    if (long_seen.load()) refine_long_steps(p, children);
  }

  // Too many distinct keys for the counting sort: sort (key, position) pairs, which orders
  // equal keys by position, i.e. stably. Returns whether some step was long.
  bool comparison_sort(index_t off, index_t n, index_t p, bool parallel, Children& children) {
    std::vector<std::pair<std::uint64_t, index_t>> kv(static_cast<std::size_t>(n));
    bool is_long = false;
    for (index_t i = 0; i < n; ++i) kv[i] = {rd_.key(order_[off + i], win_[off + i], p, is_long), i};
    if (parallel) tbb::parallel_sort(kv.begin(), kv.end());
    else std::sort(kv.begin(), kv.end());
    index_t* idx = order_ + off;
    std::uint64_t* win = win_ + off;
    index_t* tmp_idx = tmp_idx_ + off;
    std::uint64_t* tmp_win = tmp_win_ + off;
    std::copy(idx, idx + n, tmp_idx);
    std::copy(win, win + n, tmp_win);
    index_t begin = 0;
    for (index_t i = 0; i < n; ++i) {
      idx[i] = tmp_idx[kv[i].second];
      win[i] = tmp_win[kv[i].second];
      if (i + 1 == n || kv[i + 1].first != kv[i].first) {
        children.push({off + begin, i + 1 - begin, kv[i].first == kEnded});
        begin = i + 1;
      }
    }
    return is_long;
  }

  // Sub-buckets whose steps only agree on their first head(p) columns: a stable sort by the
  // rest of the step, then one sub-bucket per distinct step.
  void refine_long_steps(index_t p, Children& children) {
    struct Query {
      index_t q;
      std::uint64_t w;
      index_t len;
    };
    Children refined;
    const index_t head = rd_.head(p);
    for (std::size_t i = 0; i < children.size(); ++i) {
      const Child c = children[i];
      bool has_long = false;
      for (index_t j = 0; j < c.n && !c.ended && c.n > 1 && !has_long; ++j)
        has_long = step_length_at(c.off + j, p) > head;
      if (!has_long) {
        refined.push(c);
        continue;
      }
      // Equal truncated keys and one step longer than the key: every step here has at least
      // head columns, equal in their first head.
      std::vector<Query> qs(static_cast<std::size_t>(c.n));
      for (index_t j = 0; j < c.n; ++j) {
        const index_t pos = c.off + j;
        qs[j] = {order_[pos], win_[pos], step_length_at(pos, p)};
      }
      // Compares the steps' columns from head on: -1, 0 or 1.
      auto compare = [&](const Query& a, const Query& b) {
        for (index_t j = head;; ++j) {
          if (j == a.len || j == b.len) return j == a.len ? (j == b.len ? 0 : -1) : 1;
          const std::int32_t x = entry(a.q, a.w, p + j), y = entry(b.q, b.w, p + j);
          if (x != y) return x < y ? -1 : 1;
        }
      };
      std::stable_sort(qs.begin(), qs.end(), [&](const Query& a, const Query& b) { return compare(a, b) < 0; });
      index_t begin = 0;
      for (index_t j = 0; j < c.n; ++j) {
        order_[c.off + j] = qs[j].q;
        win_[c.off + j] = qs[j].w;
        if (j + 1 == c.n || compare(qs[j], qs[j + 1]) != 0) {
          refined.push({c.off + begin, j + 1 - begin, false});
          begin = j + 1;
        }
      }
    }
    children = std::move(refined);
  }

  GuidedMatrixView m_;
  StepReader rd_;
  index_t max_;
  index_t* order_;
  std::uint8_t* starts_;
  std::uint64_t* win_;
  std::uint64_t* tmp_win_;
  index_t* tmp_idx_;
  std::uint8_t* slot_;
};

}  // namespace

void guided_schedule(const GuidedMatrixView& m, const node_id* column_parent, index_t* order,
                     std::vector<index_t>* bucket_offsets, index_t max_bucket) {
  if (max_bucket < 1) throw Error("guided_schedule: max_bucket is " + std::to_string(max_bucket) + ", not >= 1");
  if (m.rows < 0 || m.width < 0 || m.cols < 0) throw Error("guided_schedule: negative matrix dimensions");
  if (m.cols > 0 && column_parent == nullptr) throw Error("guided_schedule: column_parent is null");
  const index_t rows = m.rows;
  if (rows == 0) {
    if (bucket_offsets) *bucket_offsets = {0, 0};
    return;
  }
  if (m.width > 0 && m.entries == nullptr) throw Error("guided_schedule: the matrix has no entries");

  thread_local Workspace cached;
  Workspace fresh;
  Workspace& ws = cached.busy ? fresh : cached;
  ws.reserve(rows);
  ws.busy = true;
  struct Release {
    Workspace& ws;
    ~Release() { ws.busy = false; }
  } release{ws};
  std::uint8_t* starts = bucket_offsets ? ws.starts.get() : nullptr;
  if (starts) std::memset(starts, 0, static_cast<std::size_t>(rows));
  GuidedSorter(m, column_parent, max_bucket, order, starts, ws).run();
  if (!bucket_offsets) return;

  // Final buckets were marked at their first position; eight positions are tested at once.
  std::vector<index_t>& out = *bucket_offsets;
  out.clear();
  index_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, starts + i, 8);
    if (!w) continue;
    for (index_t j = i; j < i + 8; ++j)
      if (starts[j]) out.push_back(j);
  }
  for (; i < rows; ++i)
    if (starts[i]) out.push_back(i);
  out.push_back(rows);
}

Schedule guided_schedule(const GuidedMatrixView& m, const node_id* column_parent, index_t max_bucket) {
  Schedule s;
  s.order.resize(static_cast<std::size_t>(std::max<index_t>(m.rows, 0)));
  guided_schedule(m, column_parent, s.order.data(), &s.bucket_offsets, max_bucket);
  return s;
}

}  // namespace canopy
