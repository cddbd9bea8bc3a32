// Similarity-based tree rearrangement (Tahoe, Xie et al. EuroSys'21, §4.2): orders the trees of
// a forest so that trees traversed along similar paths sit next to each other, then deals them
// to threads round-robin. Three steps:
//   * tokenisation: every root-to-leaf path is cut into consecutive tokens of token_nodes nodes
//     (the last one may be shorter), starting at the root;
//   * SimHash: each token is hashed into hash_bits bits; per bit the tree adds +w for a 1 and
//     -w for a 0, w = the probability of reaching the token's last node, and the fingerprint
//     bit is (sum >= 0);
//   * LSH: the fingerprint is cut into `chunks` chunks, each Rabin–Karp-hashed with its chunk
//     index; trees sharing a (chunk, hash) bucket collide, and pairs that collide most are
//     placed next to each other.
// Pairwise tree comparison costs O(N^2 * 2^depth); this costs O(N * tokens) for the
// fingerprints plus the bucket scans. CPU only, TBB-parallel, CUDA-free.
#pragma once

#include <cstdint>
#include <vector>

#include "layouts/forest.hpp"
#include "core/types.hpp"

namespace canopy {

struct TreeSimilarityOptions {
  int token_nodes = 4;  // T_nodes: nodes per token (>= 1)
  int hash_bits = 128;  // L_hash: fingerprint length; a multiple of 64 in 64..512
  int chunks = 64;      // M: LSH chunks (>= 1); must divide hash_bits
};

// One node of a token, top down: the feature it tests (kTokenLeaf at a leaf) and the child the
// path takes next (None only at a leaf).
constexpr std::int32_t kTokenLeaf = -1;
enum class TokenStep : std::uint8_t { None = 0, Left = 1, Right = 2 };
struct TokenNode {
  std::int32_t feature;
  TokenStep next;
};

// A token's hash: hash_bits / 64 words written to out, each an independently seeded 64-bit hash
// of (depth_offset, the nodes in order, count). Bit i is bit i % 64 of word i / 64, here and
// in fingerprints. Exposed so that tests can rebuild fingerprints independently.
void token_hash(index_t depth_offset, const TokenNode* nodes, int count, int hash_bits, std::uint64_t* out);

// SimHash weights are added as integers, round(w * kSimHashWeightScale), so a fingerprint is
// exact and independent of the order its tokens are summed in.
constexpr double kSimHashWeightScale = 4294967296.0;  // 2^32

// node_prob[t][n]: probability that a row reaching tree t's root reaches node n (root 1.0);
// every value in [0, 1]. A tree's tokens are its distinct path pieces: a piece shared by
// several root-to-leaf paths counts once (counting it per path would weigh the top of the tree
// by the number of leaves below it). So a token ends at a leaf (one token) or at an inner node
// whose depth is token_nodes - 1 modulo token_nodes (two tokens, one per direction taken next),
// and both kinds are weighted by that node's probability.
// Returns per tree hash_bits / 64 words. TBB-parallel over trees. Throws canopy::Error for bad
// options, node_prob sizes or values that do not match the trees, and malformed trees (children
// must come after their parent, every node reachable from node 0 exactly once).
std::vector<std::vector<std::uint64_t>> simhash_fingerprints(const std::vector<ForestTree>& trees,
                                                             const std::vector<std::vector<double>>& node_prob,
                                                             const TreeSimilarityOptions& opt = {});

// A fingerprint's LSH bucket keys: per chunk i (bits [i * b, (i + 1) * b), b = hash_bits /
// chunks) a Rabin–Karp polynomial hash mod 2^61 - 1 of its bits, seeded with i so that chunk i
// only collides with chunk i of another tree.
std::vector<std::uint64_t> lsh_chunk_keys(const std::vector<std::uint64_t>& fingerprint,
                                          const TreeSimilarityOptions& opt = {});

struct TreeOrdering {
  std::vector<index_t> order;       // order[k] = the tree placed at position k (a permutation)
  double seconds = 0;               // wall time of fingerprints + LSH + ordering
  std::size_t candidate_pairs = 0;  // distinct colliding pairs counted
};

// The collision count of two trees is the number of LSH buckets they share (0..chunks). Pairs
// are taken greedily by count descending, ties by (smaller index, larger index): a pair becomes
// an edge when both trees have fewer than two edges and lie in different path fragments. The
// fragments are then laid out one after another, ordered by their smallest tree, each walked from
// its end with the smaller index (a tree that collides with no free tree is a fragment of its
// own). The result depends only on the input, not on the number of threads. No trees: an empty
// order. The counts are held as an upper triangle, N(N - 1)/2 bytes (twice that when chunks >
// 255): short chunks make nearly every pair collide, and then it is the smallest store of them
// (8 MiB at 4,000 trees); more than 4 GiB of it throws canopy::Error.
TreeOrdering similarity_order(const std::vector<ForestTree>& trees, const std::vector<std::vector<double>>& node_prob,
                              const TreeSimilarityOptions& opt = {});

// Work of the trees dealt round-robin to `threads` threads in the given order (position k goes to
// thread k % threads): the coefficient of variation (population stddev / mean) of the per-thread
// sums; 0 when there is no work. order must be a permutation of 0..work.size()-1, work finite and
// >= 0, threads >= 1.
double round_robin_cv(const std::vector<double>& work, const std::vector<index_t>& order, int threads);

}  // namespace canopy
