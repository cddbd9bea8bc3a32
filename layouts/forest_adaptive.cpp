#include "layouts/forest_adaptive.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/bits.hpp"

namespace canopy {

std::vector<std::vector<double>> forest_node_probabilities(const Forest& f) {
  std::vector<std::vector<double>> out(static_cast<std::size_t>(f.n_trees()));
  for (std::size_t t = 0; t < out.size(); ++t) {
    const ForestTree& tree = f.trees()[t];
    const std::size_t n = static_cast<std::size_t>(tree.size());
    std::vector<double>& p = out[t];
    p.assign(n, 0.0);
    p[0] = 1.0;
    const bool weights = tree.cover.size() == n && tree.cover[0] > 0;
    // Breadth-first ids: a parent comes before its children.
    for (std::size_t k = 0; k < n; ++k) {
      if (tree.left[k] < 0) continue;
      const std::size_t l = static_cast<std::size_t>(tree.left[k]), r = static_cast<std::size_t>(tree.right[k]);
      // The parent's probability split by the children's weights: always a probability, even
      // when a file's weights do not add up.
      const double wl = weights ? tree.cover[l] : 0, wr = weights ? tree.cover[r] : 0;
      if (wl + wr > 0) {
        p[l] = p[k] * (wl / (wl + wr));
        p[r] = p[k] * (wr / (wl + wr));
      } else {
        p[l] = p[r] = p[k] / 2;
      }
    }
  }
  return out;
}

AdaptiveForest AdaptiveForest::build(const Forest& f, const AdaptiveOptions& opt) {
  AdaptiveForest a(f);
  const index_t T = a.common.n_trees;
  a.node_rearranged = opt.node_rearrangement;
  a.feature_bits = bits_for(f.n_features() > 0 ? f.n_features() - 1 : 0);  // the features 0 .. n - 1
  const int child_bits = kAdaptivePayloadBits - a.feature_bits;
  if (child_bits < 1)
    throw Error("adaptive layout: " + std::to_string(f.n_features()) + " features leave no bits for child indices");
  const std::vector<std::vector<double>> prob = forest_node_probabilities(f);

  a.tree_begin.assign(static_cast<std::size_t>(T) + 1, 0);
  a.expected_visits.assign(static_cast<std::size_t>(T), 0.0);
  a.depth.assign(static_cast<std::size_t>(T), 0);
  std::vector<std::int32_t> order;  // stored position -> the tree's node id
  std::vector<std::int32_t> pos;    // the tree's node id -> stored position
  for (index_t t = 0; t < T; ++t) {
    const index_t src = a.common.order[static_cast<std::size_t>(t)];
    const ForestTree& tree = f.trees()[static_cast<std::size_t>(src)];
    const std::vector<double>& p = prob[static_cast<std::size_t>(src)];
    const index_t n = tree.size();
    if (n > (index_t{1} << child_bits))
      throw Error("adaptive layout: tree " + std::to_string(src) + " has " + std::to_string(n) + " nodes; with " +
                  std::to_string(a.feature_bits) + " feature bits a tree may have at most 2^" +
                  std::to_string(child_bits) + " (use the csr or hier layout)");
    // Breadth-first in stored-child order, so the two children of a node are adjacent.
    order.assign(1, 0);
    pos.assign(static_cast<std::size_t>(n), -1);
    std::vector<std::uint8_t> swapped(static_cast<std::size_t>(n), 0);
    for (std::size_t q = 0; q < order.size(); ++q) {
      const std::size_t k = static_cast<std::size_t>(order[q]);
      pos[k] = static_cast<std::int32_t>(q);
      if (tree.left[k] < 0) continue;
      const std::int32_t l = tree.left[k], r = tree.right[k];
      const bool sw = opt.node_rearrangement && p[static_cast<std::size_t>(r)] > p[static_cast<std::size_t>(l)];
      swapped[k] = sw;
      order.push_back(sw ? r : l);
      order.push_back(sw ? l : r);
    }
    const index_t base = a.tree_begin[static_cast<std::size_t>(t)];
    a.tree_begin[static_cast<std::size_t>(t) + 1] = base + n;
    a.max_nodes = std::max(a.max_nodes, n);
    std::vector<int> level(static_cast<std::size_t>(n), 0);
    for (std::size_t q = 0; q < order.size(); ++q) {
      const std::size_t k = static_cast<std::size_t>(order[q]);
      ForestNode node;
      std::uint32_t leaf_word = 0;
      if (tree.left[k] < 0) {
        // Points at itself with a test every row fails to pass (see the header).
        node.value = std::numeric_limits<float>::quiet_NaN();
        node.info = kForestLeafBit | kAdaptiveLtSecondBit | (static_cast<std::uint32_t>(q) << a.feature_bits);
        if (a.common.leaf_width > 0) leaf_word = static_cast<std::uint32_t>(tree.leaf_index[k]);
        else leaf_word = float_to_bits(tree.value[k]);
        a.expected_visits[static_cast<std::size_t>(t)] += p[k] * (level[k] + 1);
        a.depth[static_cast<std::size_t>(t)] = std::max(a.depth[static_cast<std::size_t>(t)], level[k]);
      } else {
        const bool sw = swapped[k] != 0;
        const std::size_t first = static_cast<std::size_t>(sw ? tree.right[k] : tree.left[k]);
        const std::size_t second = static_cast<std::size_t>(sw ? tree.left[k] : tree.right[k]);
        level[first] = level[second] = level[k] + 1;
        // The test's x < threshold side is the tree's left child: stored second when swapped.
        const ForestNode plain = a.common.inner_node(src, tree, static_cast<index_t>(k));
        node.value = plain.value;
        node.info = static_cast<std::uint32_t>(tree.feature[k]) |
                    (static_cast<std::uint32_t>(pos[first]) << a.feature_bits) | (sw ? kAdaptiveLtSecondBit : 0u) |
                    (tree.default_left[k] ? kAdaptiveNanLtBit : 0u) |
                    ((plain.info & kForestCategoricalBit) ? kAdaptiveCategoricalBit : 0u);
        a.swapped_nodes += sw;
      }
      a.nodes.push_back(node);
      a.leaf.push_back(leaf_word);
      a.leaf_number.push_back(tree.left[k] < 0 && k < tree.leaf_index.size() ? tree.leaf_index[k] : -1);
    }
  }

  if (a.common.categories.empty()) a.build_fast_copy();

  if (opt.tree_order.empty()) {
    a.inter_tree.resize(static_cast<std::size_t>(T));
    for (index_t t = 0; t < T; ++t) a.inter_tree[static_cast<std::size_t>(t)] = t;
  } else {
    if (static_cast<index_t>(opt.tree_order.size()) != T)
      throw Error("adaptive layout: the tree order has " + std::to_string(opt.tree_order.size()) + " entries for " +
                  std::to_string(T) + " trees");
    std::vector<char> seen(static_cast<std::size_t>(T), 0);
    for (index_t t : opt.tree_order) {
      if (t < 0 || t >= T || seen[static_cast<std::size_t>(t)])
        throw Error("adaptive layout: the tree order is not a permutation (tree " + std::to_string(t) + ")");
      seen[static_cast<std::size_t>(t)] = 1;
    }
    a.inter_tree = opt.tree_order;
    for (index_t s = 0; s < T; ++s) a.tree_rearranged |= opt.tree_order[static_cast<std::size_t>(s)] != s;
  }
  a.inter.assign(static_cast<std::size_t>(a.max_nodes * T), ForestNode{0.0f, kForestLeafBit});
  a.inter_depth.resize(static_cast<std::size_t>(T));
  for (index_t s = 0; s < T; ++s) {
    const index_t t = a.inter_tree[static_cast<std::size_t>(s)];
    a.inter_depth[static_cast<std::size_t>(s)] = a.depth[static_cast<std::size_t>(t)];
    const index_t b = a.tree_begin[static_cast<std::size_t>(t)], e = a.tree_begin[static_cast<std::size_t>(t) + 1];
    for (index_t k = 0; k < e - b; ++k) a.inter[static_cast<std::size_t>(k * T + s)] = a.nodes[static_cast<std::size_t>(b + k)];
  }
  return a;
}

void AdaptiveForest::build_fast_copy() {
  fast_nodes.assign(nodes.size(), ForestNode{});
  fast_leaf.assign(leaf.size(), 0);
  const int W = common.leaf_width;
  const bool vectors = W > 0 && W <= kAdaptiveFastVectorWidth;
  if (vectors) fast_leaf_vectors.assign(nodes.size() * static_cast<std::size_t>(W), 0.0);
  std::vector<std::uint32_t> queue;  // breadth-first: positions in `nodes`, queue[q] -> fast position q
  for (std::size_t t = 0; t + 1 < tree_begin.size(); ++t) {
    const index_t base = tree_begin[t];
    ForestNode* out = fast_nodes.data() + base;
    queue.assign(1, 0);
    for (std::size_t q = 0; q < queue.size(); ++q) {
      const std::size_t k = static_cast<std::size_t>(base) + queue[q];
      const ForestNode n = nodes[k];
      if (n.info & kForestLeafBit) {
        out[q] = ForestNode{std::numeric_limits<float>::quiet_NaN(), static_cast<std::uint32_t>(q) << feature_bits};
        fast_leaf[static_cast<std::size_t>(base) + q] = leaf[k];
        if (vectors) {
          const std::size_t from = static_cast<std::size_t>(common.tree_leaf_begin[t] + (leaf[k] & kForestIndexMask)) * W;
          std::copy(common.leaf_values.begin() + from, common.leaf_values.begin() + from + W,
                    fast_leaf_vectors.begin() + (static_cast<std::size_t>(base) + q) * W);
        }
        continue;
      }
      const std::uint32_t first = (n.info & kAdaptivePayloadMask) >> feature_bits;
      const bool lt_second = (n.info & kAdaptiveLtSecondBit) != 0;
      out[q] = ForestNode{n.value, (n.info & ((1u << feature_bits) - 1u)) |
                                       (static_cast<std::uint32_t>(queue.size()) << feature_bits)};
      queue.push_back(lt_second ? first : first + 1);  // the x >= threshold side first
      queue.push_back(lt_second ? first + 1 : first);
    }
  }
}

std::string AdaptiveForest::details() const {
  std::ostringstream s;
  s << feature_bits << " feature bits, " << swapped_nodes << " nodes swapped"
    << (node_rearranged ? "" : " (node rearrangement off)") << ", trees " << (tree_rearranged ? "rearranged" : "in model order")
    << ", interleaved copy " << max_nodes << " slots x " << common.n_trees << " trees";
  return s.str();
}

}  // namespace canopy
