#include "scheduler/quality.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <boost/graph/adjacency_matrix.hpp>
#include <boost/graph/prim_minimum_spanning_tree.hpp>
#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>

#include "core/timing.hpp"

namespace canopy {
namespace {

// Galloping beats the block merge once one side is this many times longer: each of its
// elements costs about a dozen mispredicted probes, the merge about half a cycle per element
// of the long side.
constexpr std::size_t kGallopRatio = 32;

// The number of elements of `small` found in `large`, by exponential search from the last match.
std::int64_t gallop_common(const node_id* small, std::size_t ns, const node_id* large, std::size_t nl) {
  std::int64_t common = 0;
  std::size_t j = 0;
  for (std::size_t i = 0; i < ns && j < nl; ++i) {
    const node_id x = small[i];
    std::size_t k = j;
    if (large[j] < x) {
      // large[lo] < x throughout; widen until large[hi] >= x or the end.
      std::size_t lo = j, step = 1, hi = j + 1;
      while (hi < nl && large[hi] < x) {
        lo = hi;
        step *= 2;
        hi = lo + step;
      }
      k = static_cast<std::size_t>(std::lower_bound(large + lo + 1, large + std::min(hi, nl), x) - large);
    }
    if (k < nl && large[k] == x) {
      ++common;
      ++k;
    }
    j = k;
  }
  return common;
}

// |a ∩ b|, comparing blocks of 4 against 4 with SSE2 (Schlegel et al.'s block merge): every
// block pair whose value ranges overlap meets once, and the branch-free advance keeps the loop
// bound by load latency rather than by mispredictions.
std::int64_t common_count(const node_id* a, std::size_t na, const node_id* b, std::size_t nb) {
  if (na == 0 || nb == 0 || a[na - 1] < b[0] || b[nb - 1] < a[0]) return 0;
  if (na * kGallopRatio <= nb) return gallop_common(a, na, b, nb);
  if (nb * kGallopRatio <= na) return gallop_common(b, nb, a, na);
  std::int64_t common = 0;
  std::size_t i = 0, j = 0;
#if defined(__SSE2__)
  static constexpr std::int8_t kBits[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};
  while (i + 4 <= na && j + 4 <= nb) {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i));
    const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + j));
    const __m128i m0 = _mm_cmpeq_epi32(va, vb);
    const __m128i m1 = _mm_cmpeq_epi32(va, _mm_shuffle_epi32(vb, _MM_SHUFFLE(0, 3, 2, 1)));
    const __m128i m2 = _mm_cmpeq_epi32(va, _mm_shuffle_epi32(vb, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m128i m3 = _mm_cmpeq_epi32(va, _mm_shuffle_epi32(vb, _MM_SHUFFLE(2, 1, 0, 3)));
    const __m128i m = _mm_or_si128(_mm_or_si128(m0, m1), _mm_or_si128(m2, m3));
    // Elements are distinct, so each lane of a matches at most one of b.
    common += kBits[_mm_movemask_ps(_mm_castsi128_ps(m))];
    const node_id amax = a[i + 3], bmax = b[j + 3];
    i += static_cast<std::size_t>(amax <= bmax) * 4;
    j += static_cast<std::size_t>(bmax <= amax) * 4;
  }
  // Fewer than 4 left on one side: look each of them up in the other's rest, which may be long.
  if (na - i < 4 && i < na && j < nb) return common + gallop_common(a + i, na - i, b + j, nb - j);
  if (nb - j < 4 && i < na && j < nb) return common + gallop_common(b + j, nb - j, a + i, na - i);
#endif
  while (i < na && j < nb) {
    const node_id x = a[i], y = b[j];
    common += x == y;
    i += x <= y;
    j += y <= x;
  }
  return common;
}

// The set at position i of a schedule, checked.
index_t set_at(const VisitSets& sets, const index_t* order, index_t i, const char* who) {
  const index_t s = order ? order[i] : i;
  if (s < 0 || s >= sets.size())
    throw Error(std::string(who) + ": order[" + std::to_string(i) + "] is " + std::to_string(s) + ", outside 0.." +
                std::to_string(sets.size() - 1));
  return s;
}

void check_length(const VisitSets& sets, const index_t* order, index_t n, const char* who) {
  if (n < 0) throw Error(std::string(who) + ": n is " + std::to_string(n) + ", not >= 0");
  if (!order && n > sets.size())
    throw Error(std::string(who) + ": n is " + std::to_string(n) + " with a null (identity) order but there are only " +
                std::to_string(sets.size()) + " sets");
}

std::int64_t set_distance(const VisitSets& sets, index_t u, index_t v) {
  return symmetric_difference_size(sets.data(u), static_cast<std::size_t>(sets.count(u)), sets.data(v),
                                   static_cast<std::size_t>(sets.count(v)));
}

// The difference graph's allocator: big blocks on 2 MiB pages where Linux offers them (THP in
// "madvise" mode), since faulting in the matrix 4 KiB at a time cost 10x more than filling it.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr std::size_t kPage = std::size_t{2} << 20;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < kPage) return static_cast<T*>(::operator new(bytes));
    void* p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
    if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__)
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: ignored where unsupported
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) {
    if (n * sizeof(T) < kPage) ::operator delete(p);
    else std::free(p);
  }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

// Bit r of kSpread[m] moved to byte r: adding kSpread[membership byte] counts, in 8 byte lanes,
// how many elements each of 8 sets contains.
struct SpreadTable {
  std::uint64_t v[256];
  constexpr SpreadTable() : v() {
    for (int m = 0; m < 256; ++m)
      for (int r = 0; r < 8; ++r) v[m] |= static_cast<std::uint64_t>((m >> r) & 1) << (8 * r);
  }
};
constexpr SpreadTable kSpread{};
constexpr int kTileRows = 8;  // sets per membership byte

// Node ids renumbered 0..distinct-1, for sets whose ids are sparse (a sample of a huge tree):
// the membership map below has one byte per id.
VisitSets compact_ids(const VisitSets& sets) {
  std::vector<node_id> distinct(sets.nodes);
  tbb::parallel_sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  VisitSets out;
  out.offsets = sets.offsets;
  out.nodes.resize(sets.nodes.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, sets.nodes.size(), 1 << 14),
                    [&](const tbb::blocked_range<std::size_t>& r) {
                      for (std::size_t k = r.begin(); k < r.end(); ++k)
                        out.nodes[k] = static_cast<node_id>(
                            std::lower_bound(distinct.begin(), distinct.end(), sets.nodes[k]) - distinct.begin());
                    });
  return out;
}

// Calls put(u, v, |δ(u, v)|) once for every v < u, TBB-parallel, concurrently for distinct pairs.
// Rather than merging pairs (bound by the latency of each step's loads), a tile of 8 rows u marks
// its nodes in a byte map, bit r for row r; each set v < u then costs one map and one table load
// per node for all 8 rows at once.
template <class Put>
void fill_distances(const VisitSets& input, const Put& put) {
  const index_t n = input.size();
  const node_id max_node = input.nodes.empty() ? -1 : *std::max_element(input.nodes.begin(), input.nodes.end());
  VisitSets compacted;
  const bool sparse = static_cast<std::size_t>(max_node) + 1 > std::max<std::size_t>(std::size_t{1} << 16, input.nodes.size());
  if (sparse) compacted = compact_ids(input);
  const VisitSets& sets = sparse ? compacted : input;
  const std::size_t universe =
      sets.nodes.empty() ? 0 : static_cast<std::size_t>(*std::max_element(sets.nodes.begin(), sets.nodes.end())) + 1;

  tbb::enumerable_thread_specific<std::vector<std::uint8_t>> maps;
  const index_t tiles = (n + kTileRows - 1) / kTileRows;
  tbb::parallel_for(tbb::blocked_range<index_t>(0, tiles, 1), [&](const tbb::blocked_range<index_t>& range) {
    std::vector<std::uint8_t>& map = maps.local();
    if (map.size() < universe) map.assign(universe, 0);
    for (index_t t = range.begin(); t < range.end(); ++t) {
      const index_t u0 = t * kTileRows, rows = std::min<index_t>(kTileRows, n - u0);
      for (index_t r = 0; r < rows; ++r) {
        const node_id* p = sets.data(u0 + r);
        for (std::int64_t k = 0, c = sets.count(u0 + r); k < c; ++k) map[p[k]] |= static_cast<std::uint8_t>(1u << r);
      }
      for (index_t v = 0; v < u0 + rows - 1; ++v) {
        std::int64_t common[kTileRows] = {};
        const node_id* p = sets.data(v);
        const std::int64_t c = sets.count(v);
        // Byte lanes hold at most 255: flush them every 255 nodes.
        for (std::int64_t k0 = 0; k0 < c; k0 += 255) {
          std::uint64_t lanes = 0;
          for (std::int64_t k = k0, k1 = std::min<std::int64_t>(c, k0 + 255); k < k1; ++k) lanes += kSpread.v[map[p[k]]];
          for (int r = 0; r < kTileRows; ++r) common[r] += (lanes >> (8 * r)) & 0xff;
        }
        for (index_t r = std::max<index_t>(0, v + 1 - u0); r < rows; ++r)
          put(u0 + r, v, sets.count(u0 + r) + c - 2 * common[r]);
      }
      for (index_t r = 0; r < rows; ++r) {
        const node_id* p = sets.data(u0 + r);
        for (std::int64_t k = 0, c = sets.count(u0 + r); k < c; ++k) map[p[k]] = 0;
      }
    }
  });
}

// Per-thread scratch of group_union_sum: a "last seen in group" stamp per node, or a buffer.
struct UnionScratch {
  std::vector<std::uint32_t> stamp;
  std::uint32_t generation = 0;
  std::vector<node_id> buffer;
};

// Draws uniformly from [0, bound) with mt19937_64 alone: the standard's distributions differ
// between libraries, and the sample must not.
std::uint64_t draw_below(std::mt19937_64& rng, std::uint64_t bound) {
  const std::uint64_t reject_below = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= reject_below) return r % bound;
  }
}

}  // namespace

void VisitSets::add(const node_id* sorted_unique, std::size_t n) {
  if (n > 0 && sorted_unique == nullptr) throw Error("VisitSets::add: sorted_unique is null with n = " + std::to_string(n));
  for (std::size_t k = 0; k < n; ++k) {
    if (sorted_unique[k] < 0)
      throw Error("VisitSets::add: sorted_unique[" + std::to_string(k) + "] is " + std::to_string(sorted_unique[k]) +
                  ", not a node id >= 0");
    if (k > 0 && sorted_unique[k] <= sorted_unique[k - 1])
      throw Error("VisitSets::add: sorted_unique is not strictly ascending at position " + std::to_string(k));
  }
  nodes.insert(nodes.end(), sorted_unique, sorted_unique + n);
  offsets.push_back(static_cast<std::int64_t>(nodes.size()));
}

std::int64_t symmetric_difference_size(const node_id* a, std::size_t na, const node_id* b, std::size_t nb) {
  return static_cast<std::int64_t>(na + nb) - 2 * common_count(a, na, b, nb);
}

std::int64_t schedule_delta(const VisitSets& sets, const index_t* order, index_t n) {
  check_length(sets, order, n, "schedule_delta");
  if (n < 2) {
    if (n == 1) set_at(sets, order, 0, "schedule_delta");
    return 0;
  }
  return tbb::parallel_reduce(
      tbb::blocked_range<index_t>(0, n - 1, 256), std::int64_t{0},
      [&](const tbb::blocked_range<index_t>& r, std::int64_t sum) {
        index_t prev = set_at(sets, order, r.begin(), "schedule_delta");
        for (index_t i = r.begin(); i < r.end(); ++i) {
          const index_t next = set_at(sets, order, i + 1, "schedule_delta");
          sum += set_distance(sets, prev, next);
          prev = next;
        }
        return sum;
      },
      std::plus<std::int64_t>());
}

std::int64_t group_union_sum(const VisitSets& sets, const index_t* order, index_t n, int group) {
  check_length(sets, order, n, "group_union_sum");
  if (group < 1) throw Error("group_union_sum: group is " + std::to_string(group) + ", not >= 1");
  if (n == 0) return 0;
  const node_id max_node = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, sets.nodes.size(), 1 << 16), node_id{-1},
      [&](const tbb::blocked_range<std::size_t>& r, node_id m) {
        for (std::size_t k = r.begin(); k < r.end(); ++k) m = std::max(m, sets.nodes[k]);
        return m;
      },
      [](node_id x, node_id y) { return std::max(x, y); });
  const std::size_t universe = static_cast<std::size_t>(max_node) + 1;
  // Stamps cost a pass over the group's elements, sorting a log factor more; but the stamp
  // array must not be much bigger than the sets themselves (sparse node ids of a huge tree).
  const bool use_stamps = universe <= std::max<std::size_t>(std::size_t{1} << 16, sets.nodes.size()) &&
                          universe <= (std::size_t{1} << 24);
  const index_t groups = (n + group - 1) / group;
  tbb::enumerable_thread_specific<UnionScratch> scratch;
  return tbb::parallel_reduce(
      tbb::blocked_range<index_t>(0, groups, 4), std::int64_t{0},
      [&](const tbb::blocked_range<index_t>& r, std::int64_t sum) {
        UnionScratch& s = scratch.local();
        if (use_stamps && s.stamp.size() < universe) s.stamp.assign(universe, 0);
        for (index_t g = r.begin(); g < r.end(); ++g) {
          const index_t first = g * group, last = std::min(n, first + group);
          if (use_stamps) {
            if (++s.generation == 0) {  // wrapped: old stamps could collide
              std::fill(s.stamp.begin(), s.stamp.end(), 0);
              s.generation = 1;
            }
            for (index_t i = first; i < last; ++i) {
              const index_t q = set_at(sets, order, i, "group_union_sum");
              const node_id* p = sets.data(q);
              const std::int64_t c = sets.count(q);
              for (std::int64_t k = 0; k < c; ++k) {
                std::uint32_t& st = s.stamp[static_cast<std::size_t>(p[k])];
                sum += st != s.generation;
                st = s.generation;
              }
            }
          } else {
            s.buffer.clear();
            for (index_t i = first; i < last; ++i) {
              const index_t q = set_at(sets, order, i, "group_union_sum");
              s.buffer.insert(s.buffer.end(), sets.data(q), sets.data(q) + sets.count(q));
            }
            std::sort(s.buffer.begin(), s.buffer.end());
            sum += std::unique(s.buffer.begin(), s.buffer.end()) - s.buffer.begin();
          }
        }
        return sum;
      },
      std::plus<std::int64_t>());
}

MstBound mst_bound(const VisitSets& sets) {
  const index_t n = sets.size();
  // Before anything is allocated: the matrix for too many sets may not even fit in memory.
  if (n > kMaxMstSets)
    throw Error("mst_bound: " + std::to_string(n) + " sets (the sample size) exceed the limit of " +
                std::to_string(kMaxMstSets) + " (kMaxMstSets): the dense difference graph takes 12 * n^2 bytes");
  MstBound out;
  if (n <= 1) {
    out.parent.assign(static_cast<std::size_t>(n), 0);
    out.preorder.assign(static_cast<std::size_t>(n), 0);
    return out;
  }

  using Graph = boost::adjacency_matrix<boost::undirectedS, boost::no_property,
                                        boost::property<boost::edge_weight_t, std::int64_t>, boost::no_property,
                                        HugePageAllocator<bool>>;
  const auto t0 = std::chrono::steady_clock::now();
  const auto nv = static_cast<std::size_t>(n);
  Graph g(nv);
  // add_edge counts edges in a plain integer, so the edges are added here, serially, and only
  // their weights are written in parallel (each edge's weight is its own matrix entry).
  for (std::size_t u = 1; u < nv; ++u)
    for (std::size_t v = 0; v < u; ++v) boost::add_edge(u, v, std::int64_t{0}, g);
  auto weight = boost::get(boost::edge_weight, g);
  fill_distances(sets, [&](index_t u, index_t v, std::int64_t w) {
    boost::put(weight, boost::edge(static_cast<std::size_t>(u), static_cast<std::size_t>(v), g).first, w);
  });
  out.graph_ms = ms_since(t0);

  const auto t1 = std::chrono::steady_clock::now();
  std::vector<Graph::vertex_descriptor> pred(nv);
  boost::prim_minimum_spanning_tree(g, pred.data(), boost::root_vertex(Graph::vertex_descriptor{0}));
  out.mst_ms = ms_since(t1);

  out.parent.resize(nv);
  for (std::size_t v = 0; v < nv; ++v) {
    out.parent[v] = static_cast<index_t>(pred[v]);
    if (v > 0) out.weight += boost::get(weight, boost::edge(v, pred[v], g).first);
  }

  // Children in CSR, ascending because v is visited ascending; then an explicit-stack preorder.
  std::vector<index_t> child_offsets(nv + 1, 0), children(nv - 1);
  for (std::size_t v = 1; v < nv; ++v) ++child_offsets[pred[v] + 1];
  std::partial_sum(child_offsets.begin(), child_offsets.end(), child_offsets.begin());
  std::vector<index_t> fill(child_offsets.begin(), child_offsets.end() - 1);
  for (std::size_t v = 1; v < nv; ++v) children[static_cast<std::size_t>(fill[pred[v]]++)] = static_cast<index_t>(v);
  out.preorder.reserve(nv);
  std::vector<index_t> stack{0};
  while (!stack.empty()) {
    const index_t u = stack.back();
    stack.pop_back();
    out.preorder.push_back(u);
    for (index_t k = child_offsets[u + 1]; k > child_offsets[u]; --k) stack.push_back(children[k - 1]);
  }
  out.preorder_delta = schedule_delta(sets, out.preorder.data(), n);
  return out;
}

std::vector<index_t> sample_indices(index_t n, index_t size, std::uint64_t seed) {
  if (n < 0) throw Error("sample_indices: n is " + std::to_string(n) + ", not >= 0");
  if (size < 0) throw Error("sample_indices: size is " + std::to_string(size) + ", not >= 0");
  std::vector<index_t> out;
  if (size >= n) {
    out.resize(static_cast<std::size_t>(n));
    std::iota(out.begin(), out.end(), index_t{0});
    return out;
  }
  // Floyd's algorithm: size draws, each subset equally likely.
  std::mt19937_64 rng(seed);
  std::unordered_set<index_t> chosen;
  chosen.reserve(static_cast<std::size_t>(size) * 2);
  for (index_t j = n - size; j < n; ++j) {
    const auto t = static_cast<index_t>(draw_below(rng, static_cast<std::uint64_t>(j) + 1));
    if (!chosen.insert(t).second) chosen.insert(j);
  }
  out.assign(chosen.begin(), chosen.end());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<index_t> restrict_order(const index_t* order, index_t n, const std::vector<index_t>& sample) {
  if (n < 0) throw Error("restrict_order: n is " + std::to_string(n) + ", not >= 0");
  if (n > 0 && order == nullptr) throw Error("restrict_order: order is null with n = " + std::to_string(n));
  // One bit per query marks the sample; a bit is cleared when found, so a repeated query in
  // order is caught as a missing one.
  std::vector<std::uint64_t> in_sample(static_cast<std::size_t>((n + 63) / 64), 0);
  for (std::size_t k = 0; k < sample.size(); ++k) {
    const index_t q = sample[k];
    if (q < 0 || q >= n || (k > 0 && q <= sample[k - 1]))
      throw Error("restrict_order: sample[" + std::to_string(k) + "] is " + std::to_string(q) +
                  "; the sample must be ascending query indices in 0.." + std::to_string(n - 1));
    in_sample[static_cast<std::size_t>(q) / 64] |= std::uint64_t{1} << (q % 64);
  }
  std::vector<index_t> out;
  out.reserve(sample.size());
  for (index_t i = 0; i < n; ++i) {
    const index_t q = order[i];
    if (q < 0 || q >= n)
      throw Error("restrict_order: order[" + std::to_string(i) + "] is " + std::to_string(q) + ", outside 0.." +
                  std::to_string(n - 1));
    std::uint64_t& word = in_sample[static_cast<std::size_t>(q) / 64];
    const std::uint64_t bit = std::uint64_t{1} << (q % 64);
    if (word & bit) {
      word &= ~bit;
      out.push_back(std::lower_bound(sample.begin(), sample.end(), q) - sample.begin());
    }
  }
  if (out.size() != sample.size())
    throw Error("restrict_order: order is not a permutation of 0.." + std::to_string(n - 1) + ": " +
                std::to_string(sample.size() - out.size()) + " sampled queries never appear in it");
  return out;
}

}  // namespace canopy

