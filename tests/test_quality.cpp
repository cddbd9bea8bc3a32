#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "scheduler/quality.hpp"

namespace canopy {
namespace {

// ---- References, written as plainly as possible on std::set.

using Family = std::vector<std::set<node_id>>;

std::int64_t naive_symdiff(const std::set<node_id>& a, const std::set<node_id>& b) {
  std::int64_t d = 0;
  for (node_id x : a) d += b.count(x) == 0;
  for (node_id x : b) d += a.count(x) == 0;
  return d;
}

std::int64_t naive_delta(const Family& f, const std::vector<index_t>& order) {
  std::int64_t d = 0;
  for (std::size_t i = 0; i + 1 < order.size(); ++i) d += naive_symdiff(f[order[i]], f[order[i + 1]]);
  return d;
}

std::int64_t naive_group_union(const Family& f, const std::vector<index_t>& order, int group) {
  std::int64_t sum = 0;
  for (std::size_t first = 0; first < order.size(); first += group) {
    std::set<node_id> u;
    for (std::size_t i = first; i < std::min(order.size(), first + group); ++i) u.insert(f[order[i]].begin(), f[order[i]].end());
    sum += static_cast<std::int64_t>(u.size());
  }
  return sum;
}

std::vector<std::vector<std::int64_t>> naive_distances(const Family& f) {
  std::vector<std::vector<std::int64_t>> d(f.size(), std::vector<std::int64_t>(f.size(), 0));
  for (std::size_t u = 0; u < f.size(); ++u)
    for (std::size_t v = 0; v < u; ++v) d[u][v] = d[v][u] = naive_symdiff(f[u], f[v]);
  return d;
}

// Textbook O(n^2) Prim on the distance matrix.
std::int64_t reference_mst_weight(const std::vector<std::vector<std::int64_t>>& d) {
  const std::size_t n = d.size();
  if (n < 2) return 0;
  std::vector<bool> in(n, false);
  std::vector<std::int64_t> best(n, std::numeric_limits<std::int64_t>::max());
  best[0] = 0;
  std::int64_t total = 0;
  for (std::size_t step = 0; step < n; ++step) {
    std::size_t u = n;
    for (std::size_t v = 0; v < n; ++v)
      if (!in[v] && (u == n || best[v] < best[u])) u = v;
    in[u] = true;
    total += best[u];
    for (std::size_t v = 0; v < n; ++v)
      if (!in[v]) best[v] = std::min(best[v], d[u][v]);
  }
  return total;
}

// The least Δ over all orders (n <= 8).
std::int64_t brute_force_opt(const std::vector<std::vector<std::int64_t>>& d) {
  std::vector<index_t> p(d.size());
  std::iota(p.begin(), p.end(), index_t{0});
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  do {
    std::int64_t s = 0;
    for (std::size_t i = 0; i + 1 < p.size(); ++i) s += d[p[i]][p[i + 1]];
    best = std::min(best, s);
  } while (std::next_permutation(p.begin(), p.end()));
  return best;
}

std::set<node_id> random_set(std::mt19937& rng, int max_size, node_id universe, node_id base = 0) {
  std::set<node_id> s;
  const int size = static_cast<int>(rng() % static_cast<unsigned>(max_size + 1));
  while (static_cast<int>(s.size()) < std::min<int>(size, universe)) s.insert(base + static_cast<node_id>(rng() % universe));
  return s;
}

// Random sets plus the awkward cases: empty, repeated, and disjoint from everything else.
Family random_family(std::mt19937& rng, int n, int max_size, node_id universe, node_id base = 0) {
  Family f;
  for (int i = 0; i < n; ++i) {
    const unsigned kind = rng() % 10;
    if (kind == 0) f.emplace_back();
    else if (kind == 1 && !f.empty()) f.push_back(f[rng() % f.size()]);
    else if (kind == 2) f.push_back(random_set(rng, max_size, 1000, base + universe));  // beyond the universe
    else f.push_back(random_set(rng, max_size, universe, base));
  }
  return f;
}

VisitSets to_visit_sets(const Family& f) {
  VisitSets s;
  for (const auto& set : f) {
    const std::vector<node_id> v(set.begin(), set.end());
    s.add(v.data(), v.size());
  }
  return s;
}

std::int64_t symdiff(const std::set<node_id>& a, const std::set<node_id>& b) {
  const std::vector<node_id> va(a.begin(), a.end()), vb(b.begin(), b.end());
  return symmetric_difference_size(va.data(), va.size(), vb.data(), vb.size());
}

std::vector<index_t> random_permutation(std::mt19937& rng, index_t n) {
  std::vector<index_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), index_t{0});
  std::shuffle(p.begin(), p.end(), rng);
  return p;
}

// ---- VisitSets and the set difference.

TEST(QualityVisitSets, StoresSetsAndRejectsUnsortedOrNegative) {
  VisitSets s;
  const node_id a[] = {1, 4, 9};
  s.add(a, 3);
  s.add(nullptr, 0);
  s.add(a + 1, 2);
  ASSERT_EQ(s.size(), 3);
  EXPECT_EQ(s.count(0), 3);
  EXPECT_EQ(s.count(1), 0);
  EXPECT_EQ(s.count(2), 2);
  EXPECT_EQ(s.data(2)[0], 4);
  EXPECT_EQ(s.data(2)[1], 9);
  const node_id unsorted[] = {3, 2}, repeated[] = {2, 2}, negative[] = {-1, 2};
  EXPECT_THROW(s.add(unsorted, 2), Error);
  EXPECT_THROW(s.add(repeated, 2), Error);
  EXPECT_THROW(s.add(negative, 2), Error);
  EXPECT_THROW(s.add(nullptr, 1), Error);
  EXPECT_EQ(s.size(), 3);  // a rejected set is not half-added
  EXPECT_EQ(s.nodes.size(), 5u);
}

TEST(QualitySymmetricDifference, MatchesNaiveOnRandomSets) {
  std::mt19937 rng(11);
  // Sizes from empty to thousands, so the block merge, its tails and galloping all run, on
  // universes from dense (many common nodes) to sparse.
  const int sizes[] = {0, 1, 3, 4, 5, 17, 64, 300, 2000, 5000};
  const node_id universes[] = {8, 100, 3000, 1 << 20};
  for (int trial = 0; trial < 600; ++trial) {
    const node_id universe = universes[trial % 4];
    const auto a = random_set(rng, sizes[rng() % 10], universe);
    const auto b = random_set(rng, sizes[rng() % 10], universe);
    ASSERT_EQ(symdiff(a, b), naive_symdiff(a, b)) << "trial " << trial;
    ASSERT_EQ(symdiff(b, a), naive_symdiff(a, b)) << "trial " << trial;
    ASSERT_EQ(symdiff(a, a), 0);
  }
}

TEST(QualitySymmetricDifference, EdgeCases) {
  std::set<node_id> evens, odds, low, high, all;
  for (node_id x = 0; x < 1000; ++x) {
    (x % 2 ? odds : evens).insert(x);
    (x < 500 ? low : high).insert(x);
    all.insert(x);
  }
  const std::set<node_id> empty, one{499}, ends{0, 999};
  EXPECT_EQ(symdiff(empty, empty), 0);
  EXPECT_EQ(symdiff(empty, all), 1000);
  EXPECT_EQ(symdiff(all, empty), 1000);
  EXPECT_EQ(symdiff(evens, odds), 1000);  // interleaved and disjoint
  EXPECT_EQ(symdiff(low, high), 1000);    // disjoint ranges
  EXPECT_EQ(symdiff(evens, all), 500);    // a subset
  EXPECT_EQ(symdiff(all, all), 0);
  EXPECT_EQ(symdiff(one, all), 999);      // one element in a long set (galloping)
  EXPECT_EQ(symdiff(all, one), 999);
  EXPECT_EQ(symdiff(ends, all), 998);
  EXPECT_EQ(symdiff(ends, odds), naive_symdiff(ends, odds));
  EXPECT_EQ(symdiff(one, high), 501);
}

// ---- Δ and the lockstep union.

TEST(QualityScheduleDelta, MatchesNaiveForIdentityAndPermutedOrders) {
  std::mt19937 rng(3);
  for (int n : {0, 1, 2, 7, 300, 3000}) {
    const Family f = random_family(rng, n, 200, 2000);
    const VisitSets s = to_visit_sets(f);
    std::vector<index_t> identity(static_cast<std::size_t>(n));
    std::iota(identity.begin(), identity.end(), index_t{0});
    EXPECT_EQ(schedule_delta(s, nullptr, n), naive_delta(f, identity)) << "n " << n;
    const auto perm = random_permutation(rng, n);
    EXPECT_EQ(schedule_delta(s, perm.data(), n), naive_delta(f, perm)) << "n " << n;
    // A prefix, and an order that repeats sets.
    const index_t half = n / 2;
    EXPECT_EQ(schedule_delta(s, perm.data(), half), naive_delta(f, {perm.begin(), perm.begin() + half}));
    if (n > 0) {
      std::vector<index_t> repeats(50);
      for (auto& q : repeats) q = static_cast<index_t>(rng() % n);
      EXPECT_EQ(schedule_delta(s, repeats.data(), 50), naive_delta(f, repeats));
    }
  }
}

TEST(QualityScheduleDelta, RejectsBadOrders) {
  std::mt19937 rng(4);
  const VisitSets s = to_visit_sets(random_family(rng, 10, 20, 100));
  const index_t bad[] = {0, 1, 10};
  EXPECT_THROW(schedule_delta(s, bad, 3), Error);
  EXPECT_THROW(schedule_delta(s, nullptr, 11), Error);
  EXPECT_THROW(schedule_delta(s, nullptr, -1), Error);
  const index_t negative[] = {-1};
  EXPECT_THROW(schedule_delta(s, negative, 1), Error);
}

TEST(QualityGroupUnionSum, MatchesNaiveWithShortLastGroups) {
  std::mt19937 rng(5);
  for (int n : {0, 1, 31, 32, 33, 100, 1000}) {
    const Family f = random_family(rng, n, 150, 3000);
    const VisitSets s = to_visit_sets(f);
    std::vector<index_t> identity(static_cast<std::size_t>(n));
    std::iota(identity.begin(), identity.end(), index_t{0});
    const auto perm = random_permutation(rng, n);
    for (int group : {1, 7, 32, 5000}) {
      EXPECT_EQ(group_union_sum(s, nullptr, n, group), naive_group_union(f, identity, group)) << n << " " << group;
      EXPECT_EQ(group_union_sum(s, perm.data(), n, group), naive_group_union(f, perm, group)) << n << " " << group;
    }
    EXPECT_EQ(group_union_sum(s, perm.data(), n), naive_group_union(f, perm, 32));
  }
}

TEST(QualityGroupUnionSum, SparseNodeIds) {
  // Ids near 2^30 in a few small sets: the union is found without a per-id table.
  std::mt19937 rng(6);
  const Family f = random_family(rng, 90, 40, 500000, 1 << 30);
  const VisitSets s = to_visit_sets(f);
  const auto perm = random_permutation(rng, 90);
  for (int group : {1, 8, 32}) EXPECT_EQ(group_union_sum(s, perm.data(), 90, group), naive_group_union(f, perm, group));
}

TEST(QualityGroupUnionSum, GroupSizeOneIsTheTotalSizeAndBadGroupsThrow) {
  std::mt19937 rng(7);
  const VisitSets s = to_visit_sets(random_family(rng, 40, 60, 500));
  EXPECT_EQ(group_union_sum(s, nullptr, s.size(), 1), static_cast<std::int64_t>(s.nodes.size()));
  EXPECT_THROW(group_union_sum(s, nullptr, s.size(), 0), Error);
  const index_t bad[] = {40};
  EXPECT_THROW(group_union_sum(s, bad, 1), Error);
}

// ---- The MST bound.

// Everything mst_bound promises about one family, against the references.
void check_mst(const Family& f, const std::string& what) {
  const VisitSets s = to_visit_sets(f);
  const MstBound b = mst_bound(s);
  const auto d = naive_distances(f);
  const index_t n = static_cast<index_t>(f.size());
  ASSERT_EQ(b.weight, reference_mst_weight(d)) << what;

  // parent is a spanning tree rooted at 0 of exactly that weight.
  ASSERT_EQ(b.parent.size(), f.size()) << what;
  ASSERT_EQ(b.parent[0], 0) << what;
  std::int64_t tree_weight = 0;
  for (index_t v = 1; v < n; ++v) {
    index_t u = v;
    for (index_t steps = 0; u != 0; ++steps) {
      ASSERT_LT(steps, n) << what << ": parent has a cycle through " << v;
      u = b.parent[u];
      ASSERT_TRUE(u >= 0 && u < n) << what;
    }
    tree_weight += d[v][b.parent[v]];
  }
  EXPECT_EQ(tree_weight, b.weight) << what;

  // preorder is that tree's depth-first preorder from 0 with children ascending.
  std::vector<std::vector<index_t>> children(f.size());
  for (index_t v = 1; v < n; ++v) children[b.parent[v]].push_back(v);  // ascending v
  std::vector<index_t> expected;
  std::vector<index_t> stack{0};
  while (!stack.empty()) {
    const index_t u = stack.back();
    stack.pop_back();
    expected.push_back(u);
    stack.insert(stack.end(), children[u].rbegin(), children[u].rend());
  }
  EXPECT_EQ(b.preorder, expected) << what;
  std::vector<index_t> sorted = b.preorder;
  std::sort(sorted.begin(), sorted.end());
  for (index_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << what << ": preorder is not a permutation";

  EXPECT_EQ(b.preorder_delta, naive_delta(f, b.preorder)) << what;
  EXPECT_EQ(b.preorder_delta, schedule_delta(s, b.preorder.data(), n)) << what;
  EXPECT_LE(b.weight, b.preorder_delta) << what;
  EXPECT_LE(b.preorder_delta, 2 * b.weight) << what;
  EXPECT_GE(b.graph_ms, 0.0);
  EXPECT_GE(b.mst_ms, 0.0);
}

TEST(QualityMstBound, WeightMatchesReferencePrim) {
  std::mt19937 rng(8);
  // Sizes past 255 nodes, counts not multiples of 8, dense and sparse universes.
  for (int n : {2, 3, 9, 17, 64, 150}) {
    check_mst(random_family(rng, n, 40, 60), "dense n=" + std::to_string(n));
    check_mst(random_family(rng, n, 700, 2000), "long n=" + std::to_string(n));
  }
  // Ids near 2^30: the distances are computed on renumbered ids.
  check_mst(random_family(rng, 70, 300, 400000, 1 << 30), "sparse ids");
}

TEST(QualityMstBound, IdenticalAndEmptySets) {
  check_mst(Family(5, std::set<node_id>{}), "all empty");
  check_mst(Family(9, std::set<node_id>{1, 2, 3}), "all identical");
  check_mst(Family{{1}, {2}, {3}, {}, {1, 2, 3}}, "singletons");
  EXPECT_EQ(mst_bound(to_visit_sets(Family(9, std::set<node_id>{1, 2, 3}))).weight, 0);
}

TEST(QualityMstBound, BracketsTheOptimumOnSmallFamilies) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 2 + trial % 7;  // 2..8
    const Family f = random_family(rng, n, 1 + static_cast<int>(rng() % 60), 1 + static_cast<node_id>(rng() % 80));
    const MstBound b = mst_bound(to_visit_sets(f));
    const std::int64_t opt = brute_force_opt(naive_distances(f));
    EXPECT_LE(b.weight, opt) << "trial " << trial;
    EXPECT_LE(opt, b.preorder_delta) << "trial " << trial;
    EXPECT_LE(b.preorder_delta, 2 * b.weight) << "trial " << trial;
    ASSERT_EQ(b.preorder.front(), 0);
    ASSERT_EQ(b.preorder.size(), static_cast<std::size_t>(n));
  }
}

TEST(QualityMstBound, ZeroOrOneSetWeighNothing) {
  const MstBound none = mst_bound(VisitSets{});
  EXPECT_EQ(none.weight, 0);
  EXPECT_TRUE(none.preorder.empty());
  const MstBound one = mst_bound(to_visit_sets(Family{{1, 5, 9}}));
  EXPECT_EQ(one.weight, 0);
  EXPECT_EQ(one.preorder_delta, 0);
  EXPECT_EQ(one.preorder, std::vector<index_t>{0});
}

TEST(QualityMstBound, TooManySetsThrowsBeforeAllocating) {
  // kMaxMstSets + 1 empty sets: small to build, and the check comes before the ~3 GiB matrix.
  VisitSets s;
  s.offsets.assign(static_cast<std::size_t>(kMaxMstSets) + 2, 0);
  ASSERT_EQ(s.size(), kMaxMstSets + 1);
  try {
    mst_bound(s);
    FAIL() << "mst_bound accepted " << s.size() << " sets";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(std::to_string(kMaxMstSets + 1)), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::to_string(kMaxMstSets)), std::string::npos) << msg;
    EXPECT_NE(msg.find("sample size"), std::string::npos) << msg;
  }
}

// ---- Sampling.

TEST(QualitySample, AscendingDistinctInRangeAndDeterministic) {
  for (index_t n : {1, 10, 1000, 100000}) {
    for (index_t size : {index_t{0}, index_t{1}, n / 3, n - 1}) {
      const auto a = sample_indices(n, size, 42);
      ASSERT_EQ(static_cast<index_t>(a.size()), size) << n << " " << size;
      for (std::size_t k = 0; k < a.size(); ++k) {
        ASSERT_TRUE(a[k] >= 0 && a[k] < n);
        if (k > 0) {
          ASSERT_LT(a[k - 1], a[k]);
        }
      }
      EXPECT_EQ(sample_indices(n, size, 42), a);
    }
  }
  EXPECT_NE(sample_indices(1000000, 100, 1), sample_indices(1000000, 100, 2));
  std::vector<index_t> all(50);
  std::iota(all.begin(), all.end(), index_t{0});
  EXPECT_EQ(sample_indices(50, 50, 3), all);
  EXPECT_EQ(sample_indices(50, 51, 3), all);
  EXPECT_TRUE(sample_indices(0, 10, 3).empty());
  EXPECT_THROW(sample_indices(-1, 10, 3), Error);
  EXPECT_THROW(sample_indices(10, -1, 3), Error);
}

TEST(QualitySample, EverySubsetEquallyLikely) {
  // 2 of 5: 10 subsets, 20000 draws, about 2000 each (sd ~42).
  std::vector<int> hits(25, 0);
  for (std::uint64_t seed = 0; seed < 20000; ++seed) {
    const auto s = sample_indices(5, 2, seed);
    ++hits[s[0] * 5 + s[1]];
  }
  for (int a = 0; a < 5; ++a)
    for (int b = a + 1; b < 5; ++b) EXPECT_NEAR(hits[a * 5 + b], 2000, 250) << a << "," << b;
}

TEST(QualitySample, RestrictOrderMatchesNaive) {
  std::mt19937 rng(10);
  for (index_t n : {0, 1, 5, 1000, 100000}) {
    const auto order = random_permutation(rng, n);
    for (index_t size : {index_t{0}, n / 10, n}) {
      const auto sample = sample_indices(n, size, rng());
      std::vector<index_t> pos(static_cast<std::size_t>(n));
      for (index_t i = 0; i < n; ++i) pos[order[i]] = i;
      std::vector<index_t> expected(sample.size());
      std::iota(expected.begin(), expected.end(), index_t{0});
      std::sort(expected.begin(), expected.end(), [&](index_t x, index_t y) { return pos[sample[x]] < pos[sample[y]]; });
      EXPECT_EQ(restrict_order(order.data(), n, sample), expected) << n << " " << size;
    }
  }
  // The identity order keeps the sample's order.
  const std::vector<index_t> identity{0, 1, 2, 3, 4, 5};
  EXPECT_EQ(restrict_order(identity.data(), 6, {1, 3, 4}), (std::vector<index_t>{0, 1, 2}));
  const std::vector<index_t> reversed{5, 4, 3, 2, 1, 0};
  EXPECT_EQ(restrict_order(reversed.data(), 6, {1, 3, 4}), (std::vector<index_t>{2, 1, 0}));
}

TEST(QualitySample, RestrictOrderRejectsBadInput) {
  const std::vector<index_t> order{2, 0, 1};
  EXPECT_THROW(restrict_order(order.data(), 3, {1, 0}), Error);  // not ascending
  EXPECT_THROW(restrict_order(order.data(), 3, {3}), Error);     // out of range
  const std::vector<index_t> repeated{2, 2, 1};
  EXPECT_THROW(restrict_order(repeated.data(), 3, {0, 2}), Error);  // 0 never appears
  const std::vector<index_t> outside{2, 7, 1};
  EXPECT_THROW(restrict_order(outside.data(), 3, {1}), Error);
}

}  // namespace
}  // namespace canopy
