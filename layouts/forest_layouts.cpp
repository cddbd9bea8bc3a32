#include "layouts/forest_layouts.hpp"

#include <algorithm>
#include <deque>
#include <numeric>

namespace canopy {

const char* to_string(ForestLayout l) {
  switch (l) {
    case ForestLayout::Csr: return "csr";
    case ForestLayout::Reorg: return "reorg";
    case ForestLayout::Hierarchical: return "hier";
    case ForestLayout::Adaptive: return "adaptive";
    case ForestLayout::Auto: return "auto";
  }
  return "?";
}

ForestLayout parse_forest_layout(const std::string& name) {
  for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Reorg, ForestLayout::Hierarchical, ForestLayout::Adaptive,
                         ForestLayout::Auto})
    if (name == to_string(l)) return l;
  if (name == "hierarchical") return ForestLayout::Hierarchical;
  throw Error("forest layout '" + name + "' is unknown (known: csr, reorg, hier, adaptive, auto)");
}

namespace {

constexpr ForestNode kPaddingNode{0.0f, kForestLeafBit};

// Trees whose node and child indices must fit the 30/31-bit fields of the layouts.
void check_tree_size(const ForestTree& t, index_t pos) {
  if (t.size() >= (index_t{1} << 30))
    throw Error("tree " + std::to_string(pos) + " has " + std::to_string(t.size()) +
                " nodes; the forest layouts take at most 2^30 - 1 per tree");
}

ForestNode make_node(const ForestCommon& c, index_t src, const ForestTree& t, index_t n, bool vector_leaves) {
  const std::size_t i = static_cast<std::size_t>(n);
  if (t.is_leaf(n)) {
    // The leaf's index within its tree (-1 in trees built by hand without one: 0).
    const std::uint32_t index = t.leaf_index[i] >= 0 ? static_cast<std::uint32_t>(t.leaf_index[i]) & kForestIndexMask : 0u;
    if (vector_leaves) return ForestNode{0.0f, kForestLeafBit | index};
    return ForestNode{t.value[i], kForestLeafBit | index};
  }
  return c.inner_node(src, t, n);
}

// Level of each node and its slot within the level (breadth-first numbering makes both
// monotone: the nodes of level l are a contiguous id range).
void levels_and_slots(const ForestTree& t, std::vector<int>& level, std::vector<std::int32_t>& slot) {
  const std::size_t n = static_cast<std::size_t>(t.size());
  level.assign(n, 0);
  slot.assign(n, 0);
  std::int32_t first_of_level = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0 && level[i] != level[i - 1]) first_of_level = static_cast<std::int32_t>(i);
    slot[i] = static_cast<std::int32_t>(i) - first_of_level;
    if (t.left[i] >= 0) {
      level[static_cast<std::size_t>(t.left[i])] = level[i] + 1;
      level[static_cast<std::size_t>(t.right[i])] = level[i] + 1;
    }
  }
}

}  // namespace

// ---- common ---------------------------------------------------------------------------------

ForestCommon::ForestCommon(const Forest& f)
    : n_trees(f.n_trees()), n_features(f.n_features()), n_groups(f.n_groups()), leaf_width(f.leaf_width()),
      objective(f.objective()) {
  const auto& trees = f.trees();
  order.resize(trees.size());
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return trees[static_cast<std::size_t>(a)].group < trees[static_cast<std::size_t>(b)].group;
  });
  group_begin.assign(static_cast<std::size_t>(n_groups) + 1, 0);
  for (const ForestTree& t : trees) ++group_begin[static_cast<std::size_t>(t.group) + 1];
  for (int g = 0; g < n_groups; ++g) group_begin[g + 1] += group_begin[g];
  base_margin = f.base_margin();
  class_values = f.class_values();
  leaf_id_begin.reserve(trees.size() + 1);
  for (index_t src : order) {
    const ForestTree& t = trees[static_cast<std::size_t>(src)];
    leaf_id_begin.push_back(static_cast<index_t>(leaf_source_id.size()));
    std::size_t leaves = 0;
    for (std::size_t k = 0; k < t.left.size(); ++k) leaves += t.left[k] < 0;
    leaf_source_id.resize(leaf_source_id.size() + leaves, -1);
    for (std::size_t k = 0; k < t.left.size(); ++k)
      if (t.left[k] < 0 && k < t.leaf_index.size() && t.leaf_index[k] >= 0 && static_cast<std::size_t>(t.leaf_index[k]) < leaves)
        leaf_source_id[static_cast<std::size_t>(leaf_id_begin.back()) + static_cast<std::size_t>(t.leaf_index[k])] =
            k < t.source_id.size() ? t.source_id[k] : static_cast<std::int32_t>(k);
  }
  leaf_id_begin.push_back(static_cast<index_t>(leaf_source_id.size()));
  category_offset.resize(trees.size());
  for (std::size_t src = 0; src < trees.size(); ++src) {
    const ForestTree& t = trees[src];
    if (t.categorical.empty()) continue;
    category_offset[src].assign(t.categorical.size(), 0);
    for (std::size_t k = 0; k < t.categorical.size(); ++k) {
      if (!t.categorical[k] || t.left[k] < 0) continue;
      const std::vector<std::uint32_t>& set = k < t.categories.size() ? t.categories[k] : std::vector<std::uint32_t>{};
      if (categories.size() + set.size() + 1 > kForestIndexMask)
        throw Error("the forest's category sets exceed 2^30 words");
      category_offset[src][k] = static_cast<std::uint32_t>(categories.size());
      categories.push_back(static_cast<std::uint32_t>(set.size()));
      categories.insert(categories.end(), set.begin(), set.end());
    }
  }
  if (leaf_width > 0) {
    tree_leaf_begin.resize(trees.size());
    index_t rows = 0;
    for (std::size_t p = 0; p < order.size(); ++p) {
      const ForestTree& t = trees[static_cast<std::size_t>(order[p])];
      tree_leaf_begin[p] = rows;
      rows += static_cast<index_t>(t.leaf_values.size()) / leaf_width;
      leaf_values.insert(leaf_values.end(), t.leaf_values.begin(), t.leaf_values.end());
    }
  }
}

ForestNode ForestCommon::inner_node(index_t src, const ForestTree& t, index_t n) const {
  const std::size_t i = static_cast<std::size_t>(n);
  const std::uint32_t info = static_cast<std::uint32_t>(t.feature[i]) | (t.default_left[i] ? kForestDefaultLeftBit : 0u);
  if (!t.is_categorical(n)) return ForestNode{t.value[i], info};
  const std::uint32_t offset = category_offset[static_cast<std::size_t>(src)][i];
  return ForestNode{bits_to_float(offset), info | kForestCategoricalBit};
}

// ---- CSR --------------------------------------------------------------------------------------

CsrForest CsrForest::build(const Forest& f) {
  CsrForest c(f);
  const bool vec = f.leaf_width() > 0;
  const index_t n = f.n_nodes();
  c.info.reserve(static_cast<std::size_t>(n));
  c.value.reserve(static_cast<std::size_t>(n));
  c.child_index.reserve(static_cast<std::size_t>(n));
  c.children.reserve(static_cast<std::size_t>(n));
  for (std::size_t p = 0; p < c.common.order.size(); ++p) {
    const ForestTree& t = f.trees()[static_cast<std::size_t>(c.common.order[p])];
    check_tree_size(t, static_cast<index_t>(p));
    c.tree_node_begin.push_back(static_cast<index_t>(c.info.size()));
    c.tree_child_begin.push_back(static_cast<index_t>(c.children.size()));
    std::int32_t next_child = 0;
    for (index_t i = 0; i < t.size(); ++i) {
      const ForestNode node = make_node(c.common, c.common.order[p], t, i, vec);
      c.info.push_back(node.info);
      c.value.push_back(node.value);
      if (t.is_leaf(i)) {
        c.child_index.push_back(-1);
      } else {
        c.child_index.push_back(next_child);
        c.children.push_back(t.left[static_cast<std::size_t>(i)]);
        c.children.push_back(t.right[static_cast<std::size_t>(i)]);
        next_child += 2;
      }
    }
  }
  return c;
}

std::string CsrForest::details() const {
  return std::to_string(info.size()) + " nodes, " + std::to_string(children.size()) + " child entries";
}

// ---- Reorg --------------------------------------------------------------------------------------

ReorgForest ReorgForest::build(const Forest& f) {
  ReorgForest r(f);
  const bool vec = f.leaf_width() > 0;
  const index_t T = f.n_trees();
  const int levels = f.max_depth() + 1;
  std::vector<index_t> width(static_cast<std::size_t>(levels), 0);
  std::vector<int> level;
  std::vector<std::int32_t> slot;
  for (const ForestTree& t : f.trees()) {
    levels_and_slots(t, level, slot);
    for (std::size_t i = 0; i < level.size(); ++i)
      width[static_cast<std::size_t>(level[i])] =
          std::max(width[static_cast<std::size_t>(level[i])], static_cast<index_t>(slot[i]) + 1);
  }
  r.level_begin.assign(static_cast<std::size_t>(levels) + 1, 0);
  for (int l = 0; l < levels; ++l) r.level_begin[l + 1] = r.level_begin[l] + width[l] * T;
  const index_t slots = r.level_begin[static_cast<std::size_t>(levels)];
  const double gib = static_cast<double>(slots) * (sizeof(ForestNode) + sizeof(std::int32_t)) / (1u << 30);
  if (gib > 32.0)
    throw Error("the reorg layout of this forest would take " + std::to_string(gib) +
                " GiB (its levels are padded to the widest tree); use csr or hier");
  r.nodes.assign(static_cast<std::size_t>(slots), kPaddingNode);
  r.child_slot.assign(static_cast<std::size_t>(slots), -1);
  for (std::size_t p = 0; p < r.common.order.size(); ++p) {
    const ForestTree& t = f.trees()[static_cast<std::size_t>(r.common.order[p])];
    check_tree_size(t, static_cast<index_t>(p));
    levels_and_slots(t, level, slot);
    for (index_t i = 0; i < t.size(); ++i) {
      const std::size_t k = static_cast<std::size_t>(i);
      const index_t at = r.level_begin[static_cast<std::size_t>(level[k])] + slot[k] * T + static_cast<index_t>(p);
      r.nodes[static_cast<std::size_t>(at)] = make_node(r.common, r.common.order[p], t, i, vec);
      if (!t.is_leaf(i)) {
        const std::int32_t l = slot[static_cast<std::size_t>(t.left[k])];
        // Breadth-first numbering puts the right child right after the left one.
        if (slot[static_cast<std::size_t>(t.right[k])] != l + 1) throw Error("reorg layout: children are not adjacent");
        r.child_slot[static_cast<std::size_t>(at)] = l;
      }
    }
  }
  r.padding_nodes = slots - f.n_nodes();
  return r;
}

std::string ReorgForest::details() const {
  return std::to_string(level_begin.size() - 1) + " levels, " + std::to_string(nodes.size()) + " slots (" +
         std::to_string(padding_nodes) + " padding)";
}

// ---- Hierarchical ---------------------------------------------------------------------------------

HierarchicalForest HierarchicalForest::build(const Forest& f, const HierarchicalOptions& opt) {
  if (opt.subtree_depth < 1 || opt.subtree_depth > kMaxSubtreeDepth)
    throw Error("subtree depth " + std::to_string(opt.subtree_depth) + " is outside 1.." +
                std::to_string(kMaxSubtreeDepth));
  if (opt.root_depth < 1 || opt.root_depth > kMaxRootDepth)
    throw Error("root subtree depth " + std::to_string(opt.root_depth) + " is outside 1.." +
                std::to_string(kMaxRootDepth) + " (a root subtree must fit in 48 KiB of shared memory)");
  HierarchicalForest h(f);
  const bool vec = f.leaf_width() > 0;
  const index_t T = f.n_trees();
  h.subtree_depth = opt.subtree_depth;
  h.root_depth = std::min(opt.root_depth, f.max_depth() + 1);
  h.root_stride = (index_t{1} << h.root_depth) - 1;
  h.root_nodes.assign(static_cast<std::size_t>(T * h.root_stride), kPaddingNode);
  h.subtree_node_begin.resize(static_cast<std::size_t>(T));
  h.connection_begin.resize(static_cast<std::size_t>(T));

  struct Pending {
    std::int32_t tree_node;
    index_t id;
  };
  struct Placed {
    std::int32_t tree_node;
    std::int32_t pos;
    int level;
  };
  std::vector<Placed> placed;
  index_t next_id = T;
  for (std::size_t p = 0; p < h.common.order.size(); ++p) {
    const ForestTree& t = f.trees()[static_cast<std::size_t>(h.common.order[p])];
    check_tree_size(t, static_cast<index_t>(p));
    std::deque<Pending> queue{{0, static_cast<index_t>(p)}};
    while (!queue.empty()) {
      const Pending sub = queue.front();
      queue.pop_front();
      const bool root = sub.id < T;
      const int depth = root ? h.root_depth : h.subtree_depth;
      const std::int32_t bottom = (std::int32_t{1} << (depth - 1)) - 1;
      // Place the subtree's nodes at their complete-binary-tree positions.
      placed.clear();
      placed.push_back({sub.tree_node, 0, 0});
      std::int32_t max_pos = 0, max_k = -1;
      std::vector<std::pair<std::int32_t, std::pair<index_t, index_t>>> links;  // (k, (left id, right id))
      for (std::size_t q = 0; q < placed.size(); ++q) {
        const Placed pl = placed[q];
        max_pos = std::max(max_pos, pl.pos);
        const std::size_t n = static_cast<std::size_t>(pl.tree_node);
        if (t.left[n] < 0) continue;
        if (pl.level < depth - 1) {
          placed.push_back({t.left[n], 2 * pl.pos + 1, pl.level + 1});
          placed.push_back({t.right[n], 2 * pl.pos + 2, pl.level + 1});
        } else {
          // A bottom-level inner node: its children root new subtrees.
          // Subtree ids are handed out in creation order, which (FIFO per tree, trees in
          // order) is also the order they are stored in.
          const index_t left_id = next_id;
          next_id += 2;
          queue.push_back({t.left[n], left_id});
          queue.push_back({t.right[n], left_id + 1});
          links.push_back({pl.pos - bottom, {left_id, left_id + 1}});
          max_k = std::max(max_k, pl.pos - bottom);
        }
      }
      // Store the nodes.
      ForestNode* dst;
      if (root) {
        h.subtree_node_begin[static_cast<std::size_t>(sub.id)] = sub.id * h.root_stride;
        dst = h.root_nodes.data() + sub.id * h.root_stride;
      } else {
        if (static_cast<index_t>(h.subtree_node_begin.size()) != sub.id)
          throw Error("hierarchical layout: subtrees out of order");
        h.subtree_node_begin.push_back(static_cast<index_t>(h.nodes.size()));
        h.connection_begin.push_back(0);
        h.nodes.resize(h.nodes.size() + static_cast<std::size_t>(max_pos) + 1, kPaddingNode);
        dst = h.nodes.data() + h.subtree_node_begin.back();
      }
      for (const Placed& pl : placed) dst[pl.pos] = make_node(h.common, h.common.order[p], t, pl.tree_node, vec);
      h.padding_nodes += (root ? h.root_stride : static_cast<index_t>(max_pos) + 1) - static_cast<index_t>(placed.size());
      // Connections of its bottom-level inner nodes.
      h.connection_begin[static_cast<std::size_t>(sub.id)] = static_cast<index_t>(h.connections.size());
      if (max_k >= 0) {
        const std::size_t base = h.connections.size();
        h.connections.resize(base + 2 * (static_cast<std::size_t>(max_k) + 1), -1);
        for (const auto& link : links) {
          h.connections[base + 2 * static_cast<std::size_t>(link.first)] = link.second.first;
          h.connections[base + 2 * static_cast<std::size_t>(link.first) + 1] = link.second.second;
        }
      }
    }
  }
  return h;
}

std::string HierarchicalForest::details() const {
  return "subtree depth " + std::to_string(subtree_depth) + ", root depth " + std::to_string(root_depth) + ", " +
         std::to_string(n_subtrees()) + " subtrees, " + std::to_string(padding_nodes) + " padding nodes";
}

}  // namespace canopy
