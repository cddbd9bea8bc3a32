// Similarity-based tree rearrangement: fingerprints checked against a brute-force rebuild that
// walks every root-to-leaf path in a shuffled order, the ordering against a brute-force greedy
// over all pairs, and the properties the rearrangement is for (similar trees next to each
// other, balanced round-robin work).
#include <gtest/gtest.h>

#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "layouts/forest.hpp"
#include "core/types.hpp"
#include "io/forest_data.hpp"
#include "scheduler/tree_similarity.hpp"
#include "test_errors.hpp"

namespace canopy {
namespace {

using Probs = std::vector<std::vector<double>>;

// A random tree numbered breadth-first: every node above max_depth splits with probability
// split (the root always), children left before right.
ForestTree random_tree(std::mt19937_64& rng, int max_depth, int n_features, double split = 0.8) {
  ForestTree t;
  std::vector<int> depth{0};
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> f(0, n_features - 1);
  for (std::size_t v = 0; v < depth.size(); ++v) {
    const bool inner = depth[v] < max_depth && (v == 0 || u(rng) < split);
    t.feature.push_back(inner ? f(rng) : 0);
    t.value.push_back(static_cast<float>(u(rng)));
    t.default_left.push_back(1);
    t.leaf_index.push_back(-1);
    if (inner) {
      const auto l = static_cast<std::int32_t>(depth.size());
      t.left.push_back(l);
      t.right.push_back(l + 1);
      depth.push_back(depth[v] + 1);
      depth.push_back(depth[v] + 1);
    } else {
      t.left.push_back(-1);
      t.right.push_back(-1);
    }
    t.depth = std::max(t.depth, depth[v]);
  }
  return t;
}

// Probabilities of reaching each node: each inner node sends a random share left.
std::vector<double> random_probs(std::mt19937_64& rng, const ForestTree& t) {
  std::vector<double> p(t.left.size(), 0.0);
  p[0] = 1.0;
  std::uniform_real_distribution<double> q(0.05, 0.95);
  for (std::size_t v = 0; v < p.size(); ++v)
    if (t.left[v] >= 0) {
      const double s = q(rng);
      p[static_cast<std::size_t>(t.left[v])] = p[v] * s;
      p[static_cast<std::size_t>(t.right[v])] = p[v] * (1 - s);
    }
  return p;
}

struct RandomForest {
  std::vector<ForestTree> trees;
  Probs probs;
};

RandomForest random_forest(std::size_t n, std::uint64_t seed, int min_depth = 2, int max_depth = 8) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(min_depth, max_depth);
  RandomForest f;
  for (std::size_t i = 0; i < n; ++i) {
    f.trees.push_back(random_tree(rng, d(rng), 20));
    f.probs.push_back(random_probs(rng, f.trees.back()));
  }
  return f;
}

// The same tree numbered in depth-first preorder, right subtree first (children still come after
// their parent); p_out gets the probabilities renumbered alike.
ForestTree renumber_preorder_right_first(const ForestTree& t, const std::vector<double>& p, std::vector<double>& p_out) {
  std::vector<std::int32_t> order, stack{0};
  while (!stack.empty()) {
    const std::int32_t v = stack.back();
    stack.pop_back();
    order.push_back(v);
    if (t.left[static_cast<std::size_t>(v)] >= 0) {
      stack.push_back(t.left[static_cast<std::size_t>(v)]);
      stack.push_back(t.right[static_cast<std::size_t>(v)]);
    }
  }
  std::vector<std::int32_t> id(t.left.size());
  for (std::size_t k = 0; k < order.size(); ++k) id[static_cast<std::size_t>(order[k])] = static_cast<std::int32_t>(k);
  ForestTree r = t;
  p_out.assign(p.size(), 0.0);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const auto v = static_cast<std::size_t>(order[k]);
    r.left[k] = t.left[v] < 0 ? -1 : id[static_cast<std::size_t>(t.left[v])];
    r.right[k] = t.right[v] < 0 ? -1 : id[static_cast<std::size_t>(t.right[v])];
    r.feature[k] = t.feature[v];
    r.value[k] = t.value[v];
    p_out[k] = p[v];
  }
  return r;
}

// ---- Brute-force fingerprint: every root-to-leaf path cut into tokens from the root, the
// distinct path pieces kept, then summed in a shuffled order.

struct BruteToken {
  index_t offset;
  std::vector<TokenNode> nodes;
  std::int32_t last;  // the node whose probability weighs it
};

std::vector<BruteToken> brute_tokens(const ForestTree& t, int T) {
  std::vector<std::vector<std::int32_t>> paths;
  std::vector<std::vector<std::int32_t>> stack{{0}};
  while (!stack.empty()) {
    std::vector<std::int32_t> path = stack.back();
    stack.pop_back();
    const auto v = static_cast<std::size_t>(path.back());
    if (t.left[v] < 0) {
      paths.push_back(path);
      continue;
    }
    for (const std::int32_t c : {t.left[v], t.right[v]}) {
      std::vector<std::int32_t> longer = path;
      longer.push_back(c);
      stack.push_back(longer);
    }
  }
  // A piece is the same piece on every path through it: its nodes and the step out of its last.
  std::map<std::vector<std::int32_t>, BruteToken> unique;
  for (const auto& path : paths)
    for (std::size_t first = 0; first < path.size(); first += static_cast<std::size_t>(T)) {
      const std::size_t end = std::min(path.size(), first + static_cast<std::size_t>(T));
      BruteToken tok{static_cast<index_t>(first), {}, path[end - 1]};
      std::vector<std::int32_t> key(path.begin() + static_cast<std::ptrdiff_t>(first),
                                    path.begin() + static_cast<std::ptrdiff_t>(end));
      for (std::size_t k = first; k < end; ++k) {
        const auto v = static_cast<std::size_t>(path[k]);
        if (t.left[v] < 0) {
          tok.nodes.push_back({kTokenLeaf, TokenStep::None});
          key.push_back(0);
        } else {
          const TokenStep s = path[k + 1] == t.left[v] ? TokenStep::Left : TokenStep::Right;
          tok.nodes.push_back({t.feature[v], s});
          if (k + 1 == end) key.push_back(static_cast<std::int32_t>(s));
        }
      }
      unique.emplace(key, tok);
    }
  std::vector<BruteToken> out;
  for (auto& kv : unique) out.push_back(kv.second);
  return out;
}

std::vector<std::uint64_t> brute_fingerprint(const ForestTree& t, const std::vector<double>& p,
                                             const TreeSimilarityOptions& opt, std::mt19937_64& rng) {
  std::vector<BruteToken> tokens = brute_tokens(t, opt.token_nodes);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  std::vector<std::int64_t> sum(static_cast<std::size_t>(opt.hash_bits), 0);
  std::vector<std::uint64_t> h(static_cast<std::size_t>(opt.hash_bits / 64));
  for (const BruteToken& tok : tokens) {
    token_hash(tok.offset, tok.nodes.data(), static_cast<int>(tok.nodes.size()), opt.hash_bits, h.data());
    const auto w = static_cast<std::int64_t>(std::llround(p[static_cast<std::size_t>(tok.last)] * kSimHashWeightScale));
    for (int b = 0; b < opt.hash_bits; ++b) sum[static_cast<std::size_t>(b)] += (h[b / 64] >> (b % 64)) & 1 ? w : -w;
  }
  std::vector<std::uint64_t> fp(h.size(), 0);
  for (int b = 0; b < opt.hash_bits; ++b)
    if (sum[static_cast<std::size_t>(b)] >= 0) fp[b / 64] |= std::uint64_t{1} << (b % 64);
  return fp;
}

// ---- Brute-force ordering: all pairs compared, sorted, joined greedily.

TreeOrdering brute_order(const std::vector<std::vector<std::uint64_t>>& fps, const TreeSimilarityOptions& opt) {
  const std::size_t n = fps.size();
  std::vector<std::vector<std::uint64_t>> keys;
  for (const auto& fp : fps) keys.push_back(lsh_chunk_keys(fp, opt));
  std::vector<std::tuple<int, std::size_t, std::size_t>> pairs;  // (-count, a, b)
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t b = a + 1; b < n; ++b) {
      int c = 0;
      for (int i = 0; i < opt.chunks; ++i) c += keys[a][static_cast<std::size_t>(i)] == keys[b][static_cast<std::size_t>(i)];
      if (c > 0) pairs.emplace_back(-c, a, b);
    }
  std::sort(pairs.begin(), pairs.end());
  std::vector<std::size_t> label(n);
  std::iota(label.begin(), label.end(), std::size_t{0});
  std::vector<std::vector<std::size_t>> adj(n);
  for (const auto& [c, a, b] : pairs) {
    (void)c;
    if (adj[a].size() >= 2 || adj[b].size() >= 2 || label[a] == label[b]) continue;
    const std::size_t from = label[a], to = label[b];
    for (auto& l : label)
      if (l == from) l = to;
    adj[a].push_back(b);
    adj[b].push_back(a);
  }
  TreeOrdering r;
  r.candidate_pairs = pairs.size();
  std::vector<bool> placed(n, false);
  for (std::size_t t = 0; t < n; ++t) {
    if (placed[t]) continue;
    std::vector<std::size_t> ends;
    for (std::size_t v = 0; v < n; ++v)
      if (label[v] == label[t] && adj[v].size() < 2) ends.push_back(v);
    std::size_t cur = *std::min_element(ends.begin(), ends.end()), prev = n;
    while (true) {
      r.order.push_back(static_cast<index_t>(cur));
      placed[cur] = true;
      std::size_t nxt = n;
      for (const std::size_t w : adj[cur])
        if (w != prev) nxt = w;
      if (nxt == n) break;
      prev = cur;
      cur = nxt;
    }
  }
  return r;
}

void expect_permutation(const std::vector<index_t>& order, std::size_t n) {
  ASSERT_EQ(order.size(), n);
  std::vector<index_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(sorted[k], static_cast<index_t>(k));
}

using test::error_of;

// ---- Fingerprints.

TEST(TreeSimilarity, IdenticalTreesHaveIdenticalFingerprintsAndCollideInEveryChunk) {
  RandomForest f = random_forest(12, 7, 4, 8);
  // Tree 12 is a copy of tree 3, probabilities included.
  f.trees.push_back(f.trees[3]);
  f.probs.push_back(f.probs[3]);
  const TreeSimilarityOptions opt;
  const auto fps = simhash_fingerprints(f.trees, f.probs, opt);
  ASSERT_EQ(fps.size(), 13u);
  EXPECT_EQ(fps[12], fps[3]);
  const auto k3 = lsh_chunk_keys(fps[3], opt), k12 = lsh_chunk_keys(fps[12], opt);
  ASSERT_EQ(k3.size(), static_cast<std::size_t>(opt.chunks));
  int shared = 0;
  for (int i = 0; i < opt.chunks; ++i) shared += k3[static_cast<std::size_t>(i)] == k12[static_cast<std::size_t>(i)];
  EXPECT_EQ(shared, opt.chunks);
  for (std::size_t t = 0; t < 12; ++t) {
    if (t == 3) continue;
    EXPECT_NE(fps[t], fps[3]) << "tree " << t;
  }
  // Sharing every bucket, the copies are the first pair joined: they end up side by side.
  const TreeOrdering o = similarity_order(f.trees, f.probs, opt);
  const auto at = [&](index_t t) { return std::find(o.order.begin(), o.order.end(), t) - o.order.begin(); };
  EXPECT_EQ(std::abs(at(3) - at(12)), 1);
}

TEST(TreeSimilarity, FingerprintMatchesShuffledBruteForce) {
  const RandomForest f = random_forest(12, 11, 1, 9);
  std::mt19937_64 rng(5);
  for (const TreeSimilarityOptions opt : {TreeSimilarityOptions{}, TreeSimilarityOptions{1, 64, 8},
                                          TreeSimilarityOptions{2, 256, 32}, TreeSimilarityOptions{3, 512, 512},
                                          TreeSimilarityOptions{7, 192, 3}, TreeSimilarityOptions{20, 128, 64}}) {
    const auto fps = simhash_fingerprints(f.trees, f.probs, opt);
    for (std::size_t t = 0; t < f.trees.size(); ++t)
      for (int shuffle = 0; shuffle < 4; ++shuffle)
        EXPECT_EQ(fps[t], brute_fingerprint(f.trees[t], f.probs[t], opt, rng))
            << "tree " << t << " token_nodes " << opt.token_nodes << " hash_bits " << opt.hash_bits;
  }
}

TEST(TreeSimilarity, FingerprintIgnoresNodeNumbering) {
  RandomForest f = random_forest(10, 23, 3, 9);
  for (std::size_t t = 0; t < 10; ++t) {
    std::vector<double> p;
    f.trees.push_back(renumber_preorder_right_first(f.trees[t], f.probs[t], p));
    f.probs.push_back(p);
  }
  for (const TreeSimilarityOptions opt : {TreeSimilarityOptions{}, TreeSimilarityOptions{3, 512, 64}}) {
    const auto fps = simhash_fingerprints(f.trees, f.probs, opt);
    for (std::size_t t = 0; t < 10; ++t) EXPECT_EQ(fps[t], fps[t + 10]) << "tree " << t;
  }
}

TEST(TreeSimilarity, TokenContentChangesTheHash) {
  const TokenNode a[2] = {{3, TokenStep::Left}, {kTokenLeaf, TokenStep::None}};
  const TokenNode b[2] = {{3, TokenStep::Right}, {kTokenLeaf, TokenStep::None}};
  const TokenNode c[2] = {{4, TokenStep::Left}, {kTokenLeaf, TokenStep::None}};
  const TokenNode d[2] = {{0, TokenStep::Left}, {0, TokenStep::None}};  // feature 0 is not a leaf
  std::uint64_t ha[2], hb[2], hc[2], hd[2], he[2], hf[2];
  token_hash(0, a, 2, 128, ha);
  token_hash(0, b, 2, 128, hb);
  token_hash(0, c, 2, 128, hc);
  token_hash(0, d, 2, 128, hd);
  token_hash(4, a, 2, 128, he);  // another depth
  token_hash(0, a, 1, 128, hf);  // a prefix
  std::set<std::pair<std::uint64_t, std::uint64_t>> distinct;
  for (const auto* h : {ha, hb, hc, hd, he, hf}) distinct.emplace(h[0], h[1]);
  EXPECT_EQ(distinct.size(), 6u);
  EXPECT_NE(ha[0], ha[1]);  // the words are seeded apart
  // Well mixed: about half of the bits differ between neighbouring contents.
  const int flipped = __builtin_popcountll(ha[0] ^ hb[0]) + __builtin_popcountll(ha[1] ^ hb[1]);
  EXPECT_GT(flipped, 32);
  EXPECT_LT(flipped, 96);
}

// ---- Ordering.

TEST(TreeSimilarity, OrderIsADeterministicPermutation) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{50}, std::size_t{1000}}) {
    const RandomForest f = random_forest(n, 100 + n);
    const TreeOrdering a = similarity_order(f.trees, f.probs);
    expect_permutation(a.order, n);
    EXPECT_GE(a.seconds, 0.0);
    const TreeOrdering b = similarity_order(f.trees, f.probs);
    EXPECT_EQ(a.order, b.order) << n << " trees";
    EXPECT_EQ(a.candidate_pairs, b.candidate_pairs);
    TreeOrdering c;
    tbb::task_arena one(1);
    one.execute([&] { c = similarity_order(f.trees, f.probs); });
    EXPECT_EQ(a.order, c.order) << n << " trees, one thread";
    EXPECT_EQ(a.candidate_pairs, c.candidate_pairs);
  }
  EXPECT_TRUE(similarity_order({}, {}).order.empty());
  EXPECT_TRUE(simhash_fingerprints({}, {}).empty());
}

TEST(TreeSimilarity, OrderMatchesBruteForceGreedy) {
  // Short chunks (every pair collides, counts spread out), long chunks (few collisions, many
  // fragments) and one chunk (only equal fingerprints collide).
  for (const TreeSimilarityOptions opt : {TreeSimilarityOptions{}, TreeSimilarityOptions{2, 64, 8},
                                          TreeSimilarityOptions{3, 512, 512}, TreeSimilarityOptions{4, 64, 1}}) {
    for (const std::uint64_t seed : {1u, 2u, 3u}) {
      RandomForest f = random_forest(60, seed, 1, 6);
      // A few exact copies, so that long chunks collide too.
      for (std::size_t t = 0; t < 10; ++t) {
        f.trees.push_back(f.trees[t * 5]);
        f.probs.push_back(f.probs[t * 5]);
      }
      const TreeOrdering got = similarity_order(f.trees, f.probs, opt);
      const TreeOrdering want = brute_order(simhash_fingerprints(f.trees, f.probs, opt), opt);
      EXPECT_EQ(got.order, want.order) << "seed " << seed << " chunks " << opt.chunks;
      EXPECT_EQ(got.candidate_pairs, want.candidate_pairs) << "seed " << seed << " chunks " << opt.chunks;
    }
  }
}

// Copies of `base` with a feature changed at a deep node or two, and the probabilities jittered.
RandomForest family_of(const ForestTree& base, const std::vector<double>& base_p, std::size_t n, std::mt19937_64& rng) {
  RandomForest f;
  std::vector<std::size_t> deep;
  std::vector<int> depth(base.left.size(), 0);
  for (std::size_t v = 0; v < base.left.size(); ++v)
    if (base.left[v] >= 0) {
      depth[static_cast<std::size_t>(base.left[v])] = depth[static_cast<std::size_t>(base.right[v])] = depth[v] + 1;
      if (depth[v] >= 4) deep.push_back(v);
    }
  std::uniform_int_distribution<std::size_t> pick(0, deep.size() - 1);
  std::uniform_int_distribution<int> feature(0, 19), changes(1, 2);
  std::uniform_real_distribution<double> jitter(-0.02, 0.02);
  for (std::size_t k = 0; k < n; ++k) {
    ForestTree t = base;
    for (int c = changes(rng); c > 0; --c) t.feature[deep[pick(rng)]] = feature(rng);
    std::vector<double> p(base_p.size(), 0.0);
    p[0] = 1.0;
    for (std::size_t v = 0; v < p.size(); ++v)
      if (t.left[v] >= 0) {
        const double s = std::clamp(base_p[static_cast<std::size_t>(t.left[v])] / base_p[v] + jitter(rng), 0.0, 1.0);
        p[static_cast<std::size_t>(t.left[v])] = p[v] * s;
        p[static_cast<std::size_t>(t.right[v])] = p[v] * (1 - s);
      }
    f.trees.push_back(t);
    f.probs.push_back(p);
  }
  return f;
}

TEST(TreeSimilarity, TwoFamiliesComeOutContiguous) {
  for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u}) {
    std::mt19937_64 rng(seed);
    const ForestTree x = random_tree(rng, 7, 20, 0.9), y = random_tree(rng, 7, 20, 0.9);
    const std::vector<double> px = random_probs(rng, x), py = random_probs(rng, y);
    const RandomForest fx = family_of(x, px, 20, rng), fy = family_of(y, py, 20, rng);
    std::vector<std::pair<int, std::size_t>> members;  // (family, index in it)
    for (std::size_t k = 0; k < 20; ++k) members.emplace_back(0, k), members.emplace_back(1, k);
    std::shuffle(members.begin(), members.end(), rng);
    RandomForest f;
    std::vector<int> family;
    for (const auto& [fam, k] : members) {
      f.trees.push_back(fam == 0 ? fx.trees[k] : fy.trees[k]);
      f.probs.push_back(fam == 0 ? fx.probs[k] : fy.probs[k]);
      family.push_back(fam);
    }
    const TreeOrdering o = similarity_order(f.trees, f.probs);
    expect_permutation(o.order, 40);
    int changes = 0, shuffled_changes = 0;
    for (std::size_t k = 0; k + 1 < 40; ++k) {
      changes += family[static_cast<std::size_t>(o.order[k])] != family[static_cast<std::size_t>(o.order[k + 1])];
      shuffled_changes += family[k] != family[k + 1];
    }
    EXPECT_LE(changes, 3) << "seed " << seed << " (the shuffled input had " << shuffled_changes << ")";
  }
}

// ---- Load balance.

TEST(TreeSimilarity, RoundRobinCvHandComputed) {
  // Threads get 1 + 3 = 4 and 2 + 4 = 6: mean 5, stddev 1.
  EXPECT_DOUBLE_EQ(round_robin_cv({1, 2, 3, 4}, {0, 1, 2, 3}, 2), 0.2);
  // Order 3, 0, 1, 2 on three threads: sums 4 + 3 = 7, 1, 2; mean 10/3.
  const double mean = 10.0 / 3;
  const double sd = std::sqrt(((7 - mean) * (7 - mean) + (1 - mean) * (1 - mean) + (2 - mean) * (2 - mean)) / 3);
  EXPECT_NEAR(round_robin_cv({1, 2, 3, 4}, {3, 0, 1, 2}, 3), sd / mean, 1e-12);
  // More threads than trees: the idle threads count, with sums 5, 5, 0, 0: mean 2.5, stddev 2.5.
  EXPECT_DOUBLE_EQ(round_robin_cv({5, 5}, {1, 0}, 4), 1.0);
  EXPECT_EQ(round_robin_cv({2, 2, 2}, {2, 1, 0}, 3), 0.0);
  EXPECT_EQ(round_robin_cv({0, 0}, {0, 1}, 2), 0.0);
  EXPECT_EQ(round_robin_cv({}, {}, 3), 0.0);
}

TEST(TreeSimilarity, SimilarityOrderBalancesClusteredTallTrees) {
  // 8 copies of a tall tree among 24 copies of a short one, the tall ones at every 4th input
  // position: dealt round-robin to 4 threads as given, thread 0 gets every tall tree. The copies
  // of a kind share every bucket and the two kinds do not, so each kind becomes one fragment:
  // the 8 tall trees sit in 8 consecutive positions, 2 per thread, and the load is exactly even.
  std::mt19937_64 rng(99);
  const ForestTree tall = random_tree(rng, 12, 20, 0.85), short_tree = random_tree(rng, 3, 20, 1.0);
  const std::vector<double> pt = random_probs(rng, tall), ps = random_probs(rng, short_tree);
  RandomForest f;
  std::vector<double> work;
  for (int k = 0; k < 32; ++k) {
    const bool is_tall = k % 4 == 0;
    f.trees.push_back(is_tall ? tall : short_tree);
    f.probs.push_back(is_tall ? pt : ps);
    work.push_back(static_cast<double>(f.trees.back().left.size()));
  }
  ASSERT_GT(tall.left.size(), 4 * short_tree.left.size());
  const auto fps = simhash_fingerprints(f.trees, f.probs);
  ASSERT_NE(fps[0], fps[1]);
  std::vector<index_t> input(32);
  std::iota(input.begin(), input.end(), index_t{0});
  const TreeOrdering o = similarity_order(f.trees, f.probs);
  expect_permutation(o.order, 32);
  const double before = round_robin_cv(work, input, 4), after = round_robin_cv(work, o.order, 4);
  EXPECT_GT(before, 0.5);
  EXPECT_LT(after, 1e-12);
  EXPECT_LT(after, before);
}

// ---- Errors.

TEST(TreeSimilarity, BadOptionsThrow) {
  const RandomForest f = random_forest(3, 1);
  const auto both = [&](const TreeSimilarityOptions& opt) {
    const std::string a = error_of([&] { simhash_fingerprints(f.trees, f.probs, opt); });
    const std::string b = error_of([&] { similarity_order(f.trees, f.probs, opt); });
    EXPECT_EQ(a, b);
    return a;
  };
  EXPECT_HAS(both({0, 128, 64}), "token_nodes = 0");
  EXPECT_HAS(both({-2, 128, 64}), "token_nodes = -2");
  EXPECT_HAS(both({4, 100, 4}), "hash_bits = 100");
  EXPECT_HAS(both({4, 0, 1}), "hash_bits = 0");
  EXPECT_HAS(both({4, 576, 64}), "hash_bits = 576");
  EXPECT_HAS(both({4, 128, 0}), "chunks = 0");
  EXPECT_HAS(both({4, 128, 3}), "chunks = 3");
  EXPECT_HAS(both({4, 128, 256}), "chunks = 256");
  // Options are checked even with no trees.
  EXPECT_HAS(error_of([] { similarity_order({}, {}, {4, 128, 3}); }), "chunks");
  EXPECT_HAS(error_of([] { lsh_chunk_keys({0, 0}, {4, 128, 5}); }), "chunks = 5");
  EXPECT_HAS(error_of([] { lsh_chunk_keys({0}, {}); }), "hash_bits = 128");
}

TEST(TreeSimilarity, BadInputThrows) {
  const RandomForest f = random_forest(4, 3, 2, 4);
  Probs p = f.probs;
  p.pop_back();
  EXPECT_HAS(error_of([&] { similarity_order(f.trees, p); }), "node_prob has 3 trees, the forest 4");
  p = f.probs;
  p[2].pop_back();
  EXPECT_HAS(error_of([&] { similarity_order(f.trees, p); }), "node_prob[2] has");
  p = f.probs;
  p[1][1] = 1.5;
  EXPECT_HAS(error_of([&] { simhash_fingerprints(f.trees, p); }), "node_prob[1][1]");
  p[1][1] = std::nan("");
  EXPECT_HAS(error_of([&] { simhash_fingerprints(f.trees, p); }), "node_prob[1][1]");

  std::vector<ForestTree> bad = f.trees;
  bad[3].left[0] = 0;  // a child before its parent
  EXPECT_HAS(error_of([&] { similarity_order(bad, f.probs); }), "tree 3 node 0");
  bad = f.trees;
  bad[2].right[0] = -1;
  EXPECT_HAS(error_of([&] { similarity_order(bad, f.probs); }), "tree 2 node 0 has one child");
  bad = f.trees;
  bad[1].left.clear();
  EXPECT_HAS(error_of([&] { similarity_order(bad, f.probs); }), "tree 1");

  EXPECT_HAS(error_of([] { round_robin_cv({1, 2}, {0, 1}, 0); }), "threads = 0");
  EXPECT_HAS(error_of([] { round_robin_cv({1, 2}, {0, 0}, 2); }), "order[1] = 0");
  EXPECT_HAS(error_of([] { round_robin_cv({1, 2}, {0, 2}, 2); }), "order[1] = 2");
  EXPECT_HAS(error_of([] { round_robin_cv({1, 2}, {0}, 2); }), "order has 1 positions");
  EXPECT_HAS(error_of([] { round_robin_cv({1, -2}, {0, 1}, 2); }), "work[1]");
}

// ---- Real and large forests (timings printed for the record).

TEST(TreeSimilarity, XgbHiggsTrees) {
  const Forest forest = Forest::load(std::string(CANOPY_TEST_DATA) + "/forest/xgb_higgs.json");
  const ForestData rows = read_forest_csv(std::string(CANOPY_TEST_DATA) + "/forest/higgs_rows.csv", "label");
  ASSERT_EQ(rows.n_features, forest.n_features());
  // Node probabilities measured on the rows, as a trainer's node statistics would give them.
  Probs probs;
  std::vector<double> work;  // expected nodes visited per row
  for (const ForestTree& t : forest.trees()) {
    std::vector<double> visits(t.left.size(), 0.0);
    for (index_t r = 0; r < rows.n_rows; ++r) {
      const float* x = rows.row(r);
      std::size_t v = 0;
      visits[v] += 1;
      while (t.left[v] >= 0) {
        const float xv = x[t.feature[v]];
        const bool left = std::isnan(xv) ? t.default_left[v] != 0 : xv < t.value[v];
        v = static_cast<std::size_t>(left ? t.left[v] : t.right[v]);
        visits[v] += 1;
      }
    }
    double w = 0;
    for (double& c : visits) {
      c /= static_cast<double>(rows.n_rows);
      w += c;
    }
    probs.push_back(visits);
    work.push_back(w);
  }
  const TreeOrdering o = similarity_order(forest.trees(), probs);
  expect_permutation(o.order, forest.trees().size());
  EXPECT_EQ(o.order, similarity_order(forest.trees(), probs).order);
  const std::size_t n = forest.trees().size();
  const auto fingerprints = simhash_fingerprints(forest.trees(), probs);
  // Neighbours' fingerprints: the mean number of differing SimHash bits between trees placed
  // next to each other.
  auto mean_neighbour_distance = [&](const std::vector<index_t>& order) {
    double bits = 0;
    for (std::size_t k = 1; k < n; ++k) {
      const auto& a = fingerprints[static_cast<std::size_t>(order[k - 1])];
      const auto& b = fingerprints[static_cast<std::size_t>(order[k])];
      for (std::size_t w = 0; w < a.size(); ++w) bits += __builtin_popcountll(a[w] ^ b[w]);
    }
    return bits / static_cast<double>(n - 1);
  };
  // The baseline: the same trees in seeded random orders, what an order blind to the
  // fingerprints gives. Each figure of the similarity order is ranked among theirs.
  constexpr int kRandomOrders = 1000;
  std::vector<double> cv_random, near_random;
  std::mt19937_64 rng(36);
  std::vector<index_t> shuffled(n);
  std::iota(shuffled.begin(), shuffled.end(), index_t{0});
  for (int k = 0; k < kRandomOrders; ++k) {
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    cv_random.push_back(round_robin_cv(work, shuffled, 4));
    near_random.push_back(mean_neighbour_distance(shuffled));
  }
  std::sort(cv_random.begin(), cv_random.end());
  std::sort(near_random.begin(), near_random.end());
  const double cv_random_p90 = cv_random[kRandomOrders * 9 / 10], near_random_min = near_random.front();
  // A broken deal: trees of like work on one thread (the heaviest quarter dealt to thread 0,
  // the next to thread 1, ...), what dealing similar neighbours round-robin must not become.
  std::vector<index_t> by_work(n);
  std::iota(by_work.begin(), by_work.end(), index_t{0});
  std::stable_sort(by_work.begin(), by_work.end(), [&](index_t a, index_t b) { return work[a] > work[b]; });
  std::vector<index_t> lumped;
  for (int thread = 0; thread < 4; ++thread)
    for (std::size_t k = static_cast<std::size_t>(thread); k < n; k += 4) lumped.push_back(k);
  std::vector<index_t> clumped(n);
  for (std::size_t r = 0; r < n; ++r) clumped[static_cast<std::size_t>(lumped[r])] = by_work[r];
  const double cv_similar = round_robin_cv(work, o.order, 4), cv_clumped = round_robin_cv(work, clumped, 4);
  const double near_similar = mean_neighbour_distance(o.order);
  std::printf("[ timing   ] xgb_higgs: %zu trees, %lld nodes: similarity_order %.3f ms, %zu candidate pairs; "
              "round-robin CV on 4 threads: similarity order %.6f, %d random orders median %.6f, 90th percentile "
              "%.6f, like work lumped %.6f; neighbours' fingerprints differ in %.2f bits (similarity order), "
              "%.2f .. %.2f (random orders)\n",
              n, static_cast<long long>(forest.n_nodes()), o.seconds * 1e3, o.candidate_pairs, cv_similar, kRandomOrders,
              cv_random[kRandomOrders / 2], cv_random_p90, cv_clumped, near_similar, near_random_min, near_random.back());
  // What the order exists for: similar trees next to each other, closer than in any of the
  // random orders.
  EXPECT_LT(near_similar, near_random_min);
  // And it keeps the round-robin deal balanced: no worse than 9 in 10 random deals. These 40
  // trees are of near-equal work (5.97 to 6.00 nodes a row), so no order balances them much
  // better than chance, but lumping like trees on one thread (a broken deal) is worse than
  // every random one.
  EXPECT_LE(cv_similar, cv_random_p90);
  EXPECT_GT(cv_clumped, cv_random.back()) << "the bound above would not catch a broken deal";
}

TEST(TreeSimilarity, Synthetic3500TreeForest) {
  const RandomForest f = random_forest(3500, 2024, 4, 10);
  std::size_t nodes = 0;
  for (const auto& t : f.trees) nodes += t.left.size();
  const TreeOrdering o = similarity_order(f.trees, f.probs);
  expect_permutation(o.order, 3500);
  std::printf("[ timing   ] synthetic: 3500 trees, %zu nodes: similarity_order %.3f ms (%d threads), %zu candidate pairs\n",
              nodes, o.seconds * 1e3, tbb::this_task_arena::max_concurrency(), o.candidate_pairs);
  // A loose bound, to catch a quadratic blow-up rather than to time the machine.
  EXPECT_LT(o.seconds, 10.0);
}

}  // namespace
}  // namespace canopy
