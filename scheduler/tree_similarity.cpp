#include "scheduler/tree_similarity.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>
#include <tbb/parallel_sort.h>

namespace canopy {
namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Rabin–Karp works modulo the Mersenne prime 2^61 - 1, whose reduction is a shift and an add.
constexpr std::uint64_t kRkPrime = (std::uint64_t{1} << 61) - 1;
constexpr std::uint64_t kRkBase = 0x1F3D5B79A2C4E68Bull % kRkPrime;
// Tree ids are held in 32 bits.
constexpr index_t kMaxTrees = std::numeric_limits<std::uint32_t>::max();

// splitmix64's finaliser: every input bit flips about half of the output bits.
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Folds one value into a running hash. The constant keeps a zero value from being a fixed point
// (mix64(0) == 0).
inline std::uint64_t absorb(std::uint64_t h, std::uint64_t v) { return mix64(h ^ mix64(v + kGolden)); }

inline std::uint64_t node_code(const TokenNode& n) {
  // feature + 1 keeps the leaf marker (-1) apart from feature 0; the step takes the low 2 bits.
  return (static_cast<std::uint64_t>(static_cast<std::int64_t>(n.feature) + 1) << 2) |
         static_cast<std::uint64_t>(n.next);
}

void token_words(index_t depth_offset, const TokenNode* nodes, int count, int words, std::uint64_t* out) {
  for (int j = 0; j < words; ++j) {
    // One seeded hash per word, so the words are independent of one another.
    std::uint64_t h = mix64(kGolden * static_cast<std::uint64_t>(j + 1));
    h = absorb(h, static_cast<std::uint64_t>(depth_offset));
    for (int k = 0; k < count; ++k) h = absorb(h, node_code(nodes[k]));
    out[j] = absorb(h, static_cast<std::uint64_t>(count));
  }
}

inline std::uint64_t mulmod_rk(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 x = static_cast<unsigned __int128>(a) * b;
  std::uint64_t r = (static_cast<std::uint64_t>(x) & kRkPrime) + static_cast<std::uint64_t>(x >> 61);
  return r >= kRkPrime ? r - kRkPrime : r;
}

void chunk_keys(const std::uint64_t* fp, const TreeSimilarityOptions& opt, std::uint64_t* out) {
  const int bits = opt.hash_bits / opt.chunks;
  for (int i = 0; i < opt.chunks; ++i) {
    std::uint64_t h = static_cast<std::uint64_t>(i) + 1;
    for (int b = i * bits; b < (i + 1) * bits; ++b) {
      // Digits 1 and 2 rather than 0 and 1, so leading zero bits still change the hash.
      const std::uint64_t digit = ((fp[b / 64] >> (b % 64)) & 1) + 1;
      h = mulmod_rk(h, kRkBase) + digit;
      if (h >= kRkPrime) h -= kRkPrime;
    }
    out[i] = h;
  }
}

void check_options(const TreeSimilarityOptions& opt) {
  if (opt.token_nodes < 1)
    throw Error("tree similarity: token_nodes = " + std::to_string(opt.token_nodes) + " must be >= 1");
  if (opt.hash_bits < 64 || opt.hash_bits > 512 || opt.hash_bits % 64 != 0)
    throw Error("tree similarity: hash_bits = " + std::to_string(opt.hash_bits) +
                " must be a multiple of 64 in 64..512");
  if (opt.chunks < 1 || opt.hash_bits % opt.chunks != 0)
    throw Error("tree similarity: chunks = " + std::to_string(opt.chunks) + " must be >= 1 and divide hash_bits = " +
                std::to_string(opt.hash_bits));
}

// Per node of a tree: its parent, depth and the step from the parent to it.
struct Shape {
  std::vector<std::int32_t> parent;
  std::vector<std::int32_t> depth;
  std::vector<TokenStep> step;
};

// Fills `s`; the error (tree t named) when the tree is not one: children after their parent
// (which also rules out cycles), every node but the root the child of exactly one node.
void tree_shape(const ForestTree& tree, std::size_t t, Shape& s) {
  // Messages are built only on failure: this runs for every node of every tree.
  const auto where = [t] { return "tree similarity: tree " + std::to_string(t); };
  const auto node = [&](std::size_t v) { return where() + " node " + std::to_string(v); };
  const std::size_t n = tree.left.size();
  if (n == 0) throw Error(where() + " has no nodes");
  if (tree.right.size() != n || tree.feature.size() != n)
    throw Error(where() + ": left, right and feature have " + std::to_string(n) + ", " +
                std::to_string(tree.right.size()) + " and " + std::to_string(tree.feature.size()) + " entries");
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw Error(where() + " has more than 2^31 - 1 nodes");
  s.parent.assign(n, -1);
  s.depth.assign(n, 0);
  s.step.assign(n, TokenStep::None);
  for (std::size_t v = 0; v < n; ++v) {
    if (v > 0 && s.parent[v] < 0) throw Error(node(v) + " is not reachable from the root (node 0)");
    const std::int32_t l = tree.left[v], r = tree.right[v];
    if ((l < 0) != (r < 0))
      throw Error(node(v) + " has one child (" + std::to_string(l) + ", " + std::to_string(r) + ")");
    if (l < 0) continue;
    if (tree.feature[v] < 0) throw Error(node(v) + ": feature " + std::to_string(tree.feature[v]) + " is negative");
    for (const std::int32_t c : {l, r}) {
      if (static_cast<std::size_t>(c) <= v || static_cast<std::size_t>(c) >= n)
        throw Error(node(v) + ": child " + std::to_string(c) + " is not in " + std::to_string(v + 1) + ".." +
                    std::to_string(n - 1) + " (children come after their parent)");
      if (s.parent[c] >= 0)
        throw Error(node(c) + " is a child of both " + std::to_string(s.parent[c]) + " and " + std::to_string(v));
      s.parent[c] = static_cast<std::int32_t>(v);
      s.depth[c] = s.depth[v] + 1;
      s.step[c] = c == l ? TokenStep::Left : TokenStep::Right;
    }
  }
}

void check_input(const std::vector<ForestTree>& trees, const std::vector<std::vector<double>>& node_prob,
                 const TreeSimilarityOptions& opt) {
  check_options(opt);
  if (node_prob.size() != trees.size())
    throw Error("tree similarity: node_prob has " + std::to_string(node_prob.size()) + " trees, the forest " +
                std::to_string(trees.size()));
  if (static_cast<index_t>(trees.size()) > kMaxTrees)
    throw Error("tree similarity: " + std::to_string(trees.size()) + " trees, at most " + std::to_string(kMaxTrees));
  Shape s;
  for (std::size_t t = 0; t < trees.size(); ++t) {
    // Sequentially, so that the first bad tree is the one reported.
    tree_shape(trees[t], t, s);
    if (node_prob[t].size() != trees[t].left.size())
      throw Error("tree similarity: node_prob[" + std::to_string(t) + "] has " + std::to_string(node_prob[t].size()) +
                  " entries, tree " + std::to_string(t) + " " + std::to_string(trees[t].left.size()) + " nodes");
    for (std::size_t v = 0; v < node_prob[t].size(); ++v) {
      const double p = node_prob[t][v];
      if (!(p >= 0 && p <= 1))
        throw Error("tree similarity: node_prob[" + std::to_string(t) + "][" + std::to_string(v) +
                    "] = " + std::to_string(p) + " is not a probability in [0, 1]");
    }
  }
}

struct FingerprintScratch {
  Shape shape;
  std::vector<std::uint64_t> ones;  // per bit: the weight of the tokens with a 1 there
  std::vector<TokenNode> token;
  std::vector<std::uint64_t> words;
};

// One tree's fingerprint into fp (hash_bits / 64 words); the tree is already checked.
void fingerprint(const ForestTree& tree, const std::vector<double>& prob, const TreeSimilarityOptions& opt,
                 FingerprintScratch& s, std::uint64_t* fp) {
  const int words = opt.hash_bits / 64, T = opt.token_nodes;
  tree_shape(tree, 0, s.shape);
  s.ones.assign(static_cast<std::size_t>(opt.hash_bits), 0);
  s.words.resize(static_cast<std::size_t>(words));
  // Unsigned integer sums are exact, so the order tokens come in cannot change a bit. A tree has
  // fewer than 1.5 * 2^31 tokens of weight <= 2^32 each: the total stays below 2^64.
  std::uint64_t total = 0;
  auto add = [&](index_t offset, int count, std::uint64_t w) {
    token_words(offset, s.token.data(), count, words, s.words.data());
    total += w;
    for (int j = 0; j < words; ++j) {
      const std::uint64_t h = s.words[static_cast<std::size_t>(j)];
      std::uint64_t* o = s.ones.data() + 64 * j;
      for (int b = 0; b < 64; ++b) o[b] += w & (std::uint64_t{0} - ((h >> b) & 1));
    }
  };
  const std::size_t n = tree.left.size();
  for (std::size_t v = 0; v < n; ++v) {
    const bool leaf = tree.left[v] < 0;
    const int d = s.shape.depth[v], k = d % T;  // the token holds k + 1 nodes, v the last
    if (!leaf && k != T - 1) continue;
    s.token.resize(static_cast<std::size_t>(k) + 1);
    // The k nodes above v, each with the step towards v.
    for (std::size_t u = v, i = static_cast<std::size_t>(k); i > 0; --i) {
      const std::size_t p = static_cast<std::size_t>(s.shape.parent[u]);
      s.token[i - 1] = {tree.feature[p], s.shape.step[u]};
      u = p;
    }
    const std::uint64_t w = static_cast<std::uint64_t>(std::llround(prob[v] * kSimHashWeightScale));
    if (leaf) {
      s.token[static_cast<std::size_t>(k)] = {kTokenLeaf, TokenStep::None};
      add(d - k, k + 1, w);
    } else {
      for (const TokenStep next : {TokenStep::Left, TokenStep::Right}) {
        s.token[static_cast<std::size_t>(k)] = {tree.feature[v], next};
        add(d - k, k + 1, w);
      }
    }
  }
  for (int j = 0; j < words; ++j) {
    std::uint64_t word = 0;
    for (int b = 0; b < 64; ++b) {
      // sum = ones - (total - ones) >= 0, without the signed overflow.
      const std::uint64_t one = s.ones[static_cast<std::size_t>(64 * j + b)];
      word |= static_cast<std::uint64_t>(one >= total - one) << b;
    }
    fp[j] = word;
  }
}

std::vector<std::vector<std::uint64_t>> fingerprints_checked(const std::vector<ForestTree>& trees,
                                                             const std::vector<std::vector<double>>& node_prob,
                                                             const TreeSimilarityOptions& opt) {
  std::vector<std::vector<std::uint64_t>> fps(trees.size(),
                                              std::vector<std::uint64_t>(static_cast<std::size_t>(opt.hash_bits / 64)));
  tbb::enumerable_thread_specific<FingerprintScratch> scratch;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, trees.size()), [&](const tbb::blocked_range<std::size_t>& r) {
    FingerprintScratch& s = scratch.local();
    for (std::size_t t = r.begin(); t < r.end(); ++t) fingerprint(trees[t], node_prob[t], opt, s, fps[t].data());
  });
  return fps;
}

// The LSH buckets: bucket_tree lists the trees bucket by bucket, ascending within a bucket;
// the bucket of entry e ends at bucket_end[e]; tree t's entry for chunk i is slot[t * m + i].
struct Buckets {
  const std::uint32_t* bucket_tree;
  const std::uint32_t* bucket_end;
  const std::uint32_t* slot;
  std::size_t n, m;
};

// Where row a of the upper triangle (the pairs (a, b), b = a + 1 .. n - 1) starts.
inline std::size_t row_start(std::size_t a, std::size_t n) { return a * (2 * n - a - 1) / 2; }

// Pair counts are scanned for one value this many at a time: a block without it is skipped after
// one vectorised pass.
constexpr std::size_t kScanBlock = 64;
// The triangle of pair counts may take this much memory.
constexpr std::size_t kMaxTriangleBytes = std::size_t{1} << 32;

// Counts the collisions of every pair and joins the pairs greedily into path fragments: by count
// descending, then (a, b); an edge joins two trees with a free end each, never closing a cycle.
// Fills nbr (two per tree, -1 where none) and degree; returns the number of colliding pairs.
template <class Count>
std::size_t join_fragments(const Buckets& lsh, std::vector<std::int64_t>& nbr, std::vector<std::uint8_t>& degree) {
  const std::size_t n = lsh.n, m = lsh.m;
  std::vector<Count> tri(n * (n - 1) / 2, 0);
  std::vector<Count> row_max(n, 0);
  // Row a counts the buckets a shares with each later tree: the bucket entries after a's own.
  const std::size_t pairs = tbb::parallel_reduce(
      tbb::blocked_range<std::size_t>(0, n), std::size_t{0},
      [&](const tbb::blocked_range<std::size_t>& r, std::size_t pairs) {
        for (std::size_t a = r.begin(); a < r.end(); ++a) {
          Count* row = tri.data() + row_start(a, n);
          const std::uint32_t* first = lsh.slot + a * m;
          for (std::size_t i = 0; i < m; ++i)
            for (std::size_t f = first[i] + 1, end = lsh.bucket_end[first[i]]; f < end; ++f)
              ++row[lsh.bucket_tree[f] - a - 1];
          Count most = 0;
          std::size_t nonzero = 0;
          for (std::size_t j = 0; j < n - 1 - a; ++j) {
            most = std::max(most, row[j]);
            nonzero += row[j] != 0;
          }
          row_max[a] = most;
          pairs += nonzero;
        }
        return pairs;
      },
      [](std::size_t x, std::size_t y) { return x + y; });

  std::vector<std::uint32_t> root(n);
  for (std::size_t t = 0; t < n; ++t) root[t] = static_cast<std::uint32_t>(t);
  auto find = [&](std::size_t x) {
    while (root[x] != x) {
      root[x] = root[root[x]];  // path halving
      x = root[x];
    }
    return x;
  };
  std::size_t edges = 0;
  auto join = [&](std::size_t a, std::size_t b) {
    if (degree[b] == 2) return;
    const std::size_t ra = find(a), rb = find(b);
    if (ra == rb) return;
    root[ra] = static_cast<std::uint32_t>(rb);
    nbr[2 * a + degree[a]++] = static_cast<std::int64_t>(b);
    nbr[2 * b + degree[b]++] = static_cast<std::int64_t>(a);
    ++edges;
  };
  // Level by level, the pairs of count c in (a, b) order. A tree with two edges takes no more,
  // so its row is skipped, as is a row without the count; one path holding every tree ends it.
  for (std::size_t c = m; c >= 1 && edges + 1 < n; --c)
    for (std::size_t a = 0; a < n && edges + 1 < n; ++a) {
      if (degree[a] == 2 || row_max[a] < c) continue;
      const Count* row = tri.data() + row_start(a, n);
      const std::size_t len = n - 1 - a;
      const Count want = static_cast<Count>(c);
      for (std::size_t j0 = 0; j0 < len && degree[a] < 2; j0 += kScanBlock) {
        const std::size_t j1 = std::min(len, j0 + kScanBlock);
        unsigned hit = 0;
        for (std::size_t j = j0; j < j1; ++j) hit |= row[j] == want;
        if (hit == 0) continue;
        for (std::size_t j = j0; j < j1 && degree[a] < 2; ++j)
          if (row[j] == want) join(a, a + 1 + j);
      }
    }
  return pairs;
}

}  // namespace

void token_hash(index_t depth_offset, const TokenNode* nodes, int count, int hash_bits, std::uint64_t* out) {
  if (hash_bits < 64 || hash_bits > 512 || hash_bits % 64 != 0)
    throw Error("token_hash: hash_bits = " + std::to_string(hash_bits) + " must be a multiple of 64 in 64..512");
  if (count < 1) throw Error("token_hash: count = " + std::to_string(count) + " must be >= 1");
  token_words(depth_offset, nodes, count, hash_bits / 64, out);
}

std::vector<std::vector<std::uint64_t>> simhash_fingerprints(const std::vector<ForestTree>& trees,
                                                             const std::vector<std::vector<double>>& node_prob,
                                                             const TreeSimilarityOptions& opt) {
  check_input(trees, node_prob, opt);
  return fingerprints_checked(trees, node_prob, opt);
}

std::vector<std::uint64_t> lsh_chunk_keys(const std::vector<std::uint64_t>& fingerprint,
                                          const TreeSimilarityOptions& opt) {
  check_options(opt);
  if (fingerprint.size() != static_cast<std::size_t>(opt.hash_bits / 64))
    throw Error("lsh_chunk_keys: the fingerprint has " + std::to_string(fingerprint.size()) +
                " words, hash_bits = " + std::to_string(opt.hash_bits) + " needs " + std::to_string(opt.hash_bits / 64));
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(opt.chunks));
  chunk_keys(fingerprint.data(), opt, keys.data());
  return keys;
}

TreeOrdering similarity_order(const std::vector<ForestTree>& trees, const std::vector<std::vector<double>>& node_prob,
                              const TreeSimilarityOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  check_input(trees, node_prob, opt);
  TreeOrdering result;
  const index_t N = static_cast<index_t>(trees.size());
  const int M = opt.chunks;
  const std::size_t sN = static_cast<std::size_t>(N), sM = static_cast<std::size_t>(M);
  if (N == 0) return result;
  if (sN * sM > std::numeric_limits<std::uint32_t>::max())
    throw Error("tree similarity: " + std::to_string(N) + " trees x " + std::to_string(M) +
                " chunks is more than 2^32 - 1 bucket entries");
  const std::size_t count_bytes = M <= std::numeric_limits<std::uint8_t>::max() ? 1 : 2;
  if (sN * (sN - 1) / 2 > kMaxTriangleBytes / count_bytes)
    throw Error("tree similarity: the collision counts of " + std::to_string(N) + " trees would take " +
                std::to_string(sN * (sN - 1) / 2 * count_bytes >> 20) + " MiB, more than the " +
                std::to_string(kMaxTriangleBytes >> 20) + " MiB allowed");
  const auto fps = fingerprints_checked(trees, node_prob, opt);

  // LSH: one entry per (tree, chunk), sorted by (chunk, key, tree) so that a bucket is a run of
  // entries with its trees ascending.
  struct Entry {
    std::uint64_t key;
    std::uint32_t chunk, tree;
  };
  std::vector<Entry> entries(sN * sM);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, sN), [&](const tbb::blocked_range<std::size_t>& r) {
    std::vector<std::uint64_t> keys(sM);
    for (std::size_t t = r.begin(); t < r.end(); ++t) {
      chunk_keys(fps[t].data(), opt, keys.data());
      for (std::size_t i = 0; i < sM; ++i)
        entries[t * sM + i] = {keys[i], static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(t)};
    }
  });
  tbb::parallel_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.chunk != b.chunk) return a.chunk < b.chunk;
    if (a.key != b.key) return a.key < b.key;
    return a.tree < b.tree;
  });
  // Compact arrays for the scans: the trees in bucket order, where each entry's bucket ends, and
  // where (tree, chunk) sits.
  std::vector<std::uint32_t> bucket_tree(entries.size());
  std::vector<std::uint32_t> bucket_end(entries.size());
  std::vector<std::uint32_t> slot(entries.size());
  for (std::size_t e = entries.size(); e-- > 0;) {
    const bool last = e + 1 == entries.size() || entries[e + 1].chunk != entries[e].chunk ||
                      entries[e + 1].key != entries[e].key;
    bucket_end[e] = last ? static_cast<std::uint32_t>(e + 1) : bucket_end[e + 1];
    bucket_tree[e] = entries[e].tree;
    slot[entries[e].tree * sM + entries[e].chunk] = static_cast<std::uint32_t>(e);
  }
  std::vector<Entry>().swap(entries);

  // Pair counts as an upper triangle, one byte a pair while counts fit: short chunks make buckets
  // so big that nearly every pair collides, and then the triangle is the smallest way to hold
  // them (a list of pairs would take 8 bytes each and a sort).
  std::vector<std::int64_t> nbr(2 * sN, -1);
  std::vector<std::uint8_t> degree(sN, 0);
  const Buckets lsh{bucket_tree.data(), bucket_end.data(), slot.data(), sN, sM};
  if (count_bytes == 1)
    result.candidate_pairs = join_fragments<std::uint8_t>(lsh, nbr, degree);
  else
    result.candidate_pairs = join_fragments<std::uint16_t>(lsh, nbr, degree);

  // The next tree along a fragment coming from prev, or -1 at its end.
  auto next = [&](std::int64_t cur, std::int64_t prev) -> std::int64_t {
    for (int k = 0; k < 2; ++k) {
      const std::int64_t n = nbr[2 * static_cast<std::size_t>(cur) + k];
      if (n >= 0 && n != prev) return n;
    }
    return -1;
  };
  auto far_end = [&](std::int64_t from, std::int64_t prev) {
    for (std::int64_t n = next(from, prev); n >= 0; n = next(from, prev)) {
      prev = from;
      from = n;
    }
    return from;
  };
  result.order.reserve(sN);
  std::vector<std::uint8_t> placed(sN, 0);
  for (std::size_t t = 0; t < sN; ++t) {
    if (placed[t]) continue;  // t is the smallest tree of a fragment not yet laid out
    const std::int64_t tt = static_cast<std::int64_t>(t);
    const std::int64_t e1 = degree[t] == 0 ? tt : far_end(nbr[2 * t], tt);
    const std::int64_t e2 = degree[t] < 2 ? tt : far_end(nbr[2 * t + 1], tt);
    std::int64_t prev = -1;
    for (std::int64_t cur = std::min(e1, e2); cur >= 0;) {
      result.order.push_back(cur);
      placed[static_cast<std::size_t>(cur)] = 1;
      const std::int64_t n = next(cur, prev);
      prev = cur;
      cur = n;
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

double round_robin_cv(const std::vector<double>& work, const std::vector<index_t>& order, int threads) {
  if (threads < 1) throw Error("round_robin_cv: threads = " + std::to_string(threads) + " must be >= 1");
  if (order.size() != work.size())
    throw Error("round_robin_cv: order has " + std::to_string(order.size()) + " positions, work " +
                std::to_string(work.size()) + " trees");
  std::vector<std::uint8_t> seen(work.size(), 0);
  std::vector<double> sums(static_cast<std::size_t>(threads), 0.0);
  for (std::size_t k = 0; k < order.size(); ++k) {
    const index_t t = order[k];
    if (t < 0 || static_cast<std::size_t>(t) >= work.size() || seen[static_cast<std::size_t>(t)])
      throw Error("round_robin_cv: order[" + std::to_string(k) + "] = " + std::to_string(t) +
                  " is out of range or repeated (order must be a permutation of 0.." +
                  std::to_string(static_cast<index_t>(work.size()) - 1) + ")");
    seen[static_cast<std::size_t>(t)] = 1;
    const double w = work[static_cast<std::size_t>(t)];
    if (!(std::isfinite(w) && w >= 0))
      throw Error("round_robin_cv: work[" + std::to_string(t) + "] = " + std::to_string(w) + " must be finite and >= 0");
    sums[k % static_cast<std::size_t>(threads)] += w;
  }
  double total = 0;
  for (const double s : sums) total += s;
  const double mean = total / threads;
  if (mean == 0) return 0;
  double var = 0;
  for (const double s : sums) var += (s - mean) * (s - mean);
  return std::sqrt(var / threads) / mean;
}

}  // namespace canopy
