// The inspector (the paper's §4.1 profiling pass): run each query's traversal through the
// top-tree only and record which top-tree leaves it reached. The row function below is the
// body of both the GPU kernel (inspector/inspector.cuh) and its CPU twin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <tbb/parallel_for.h>

#include "executor/visitor.hpp"
#include "inspector/scheduling_matrix.hpp"
#include "layouts/top_tree.hpp"

namespace canopy {

// The depth-first stack of the top-tree walks below: nodes with their depths, since a walk stops
// at depth top.depth - 1 as well as at a leaf.
template <class Topology>
struct TopTreeStack {
  struct Entry {
    node_id node;
    int depth;
  };
  node_id node[Topology::kMaxStack];
  std::int8_t depth[Topology::kMaxStack];
  int sp = 0;

  CANOPY_HD bool empty() const { return sp == 0; }
  CANOPY_HD void push(node_id n, int d) {
    node[sp] = n;
    depth[sp] = static_cast<std::int8_t>(d);
    ++sp;
  }
  CANOPY_HD Entry pop() {
    --sp;
    return {node[sp], depth[sp]};
  }
};

// Writes one whole row (every word, zeros included) for query q. Unguided traversals reach
// top-leaves left to right, so bits arrive in ascending column order and each word is stored
// once; an out-of-order column (a visitor that is not unguided) falls back to read-modify-write.
template <class Topology, class Visitor>
CANOPY_HD inline void inspect_row(const Topology& tree, const TopTreeView& top, const Visitor& v,
                                  index_t q, std::uint64_t* row, index_t n_words) {
  TopTreeStack<Topology> stack;
  stack.push(0, 0);
  auto s = v.init(q);
  index_t word = 0;        // words below this one are stored
  std::uint64_t bits = 0;  // pending bits of `word`
  while (!stack.empty()) {
    const auto [n, d] = stack.pop();
    if (!v.descend(s, n)) continue;
    if (d == top.depth - 1 || tree.is_leaf(n)) {
      const index_t c = top.column(n);
      const index_t w = c / 64;
      if (w >= word) {
        for (; word < w; ++word) {
          row[word] = bits;
          bits = 0;
        }
        bits |= std::uint64_t{1} << (c % 64);
      } else {
        row[w] |= std::uint64_t{1} << (c % 64);
      }
      continue;
    }
    for (int i = tree.child_count(n) - 1; i >= 0; --i) stack.push(tree.child(n, i), d + 1);
  }
  for (; word < n_words; ++word) {
    row[word] = bits;
    bits = 0;
  }
}

// A guided query's row (the paper's Figure 5): the top-leaves it reaches, in the order its own
// traversal (first_child() first) reaches them, at most `width` of them (the walk stops at a
// full row), then one kRowEnd if it is shorter. Entries past the kRowEnd are left unwritten:
// every reader stops there, and padding each row to full width was most of the GPU
// inspector's memory traffic. Returns the row's length.
// `probe` (GuidedProbe) says how the pruning bound forms. Full: at each reached top-leaf the
// inspector probes its subtree as the real traversal would walk it first (preferred children
// first): until the visitor's probe_satisfied() holds (by default after one leaf), and, once it
// holds, down the preferred path to the first rejected node or a leaf, so that later top-leaves
// are pruned realistically instead of all being reached under an infinite bound. Lean: only
// until probe_satisfied() holds. None: no probe at all.
template <class Topology, class Visitor>
CANOPY_HD inline index_t inspect_row_guided(const Topology& tree, const TopTreeView& top, const Visitor& v,
                                            index_t q, std::int32_t* row, index_t width, GuidedProbe probe) {
  TopTreeStack<Topology> stack;
  stack.push(0, 0);
  auto s = v.init(q);
  index_t len = 0;
  while (!stack.empty()) {
    auto [n, d] = stack.pop();
    if (!v.descend(s, n)) continue;
    if (d == top.depth - 1 || tree.is_leaf(n)) {
      row[len++] = static_cast<std::int32_t>(top.column(n));
      if (len == width) break;  // a full row: the rest of the walk would record nothing
      if (probe == GuidedProbe::None) continue;
      // The probe: a depth-first walk of n's subtree (n is accepted) until satisfied. A
      // visitor satisfied already only follows its preferred path, to its first rejection.
      node_id pstack[Topology::kMaxStack];
      int psp = 0;
      bool accepted = true;
      const bool hungry = !probe_satisfied(v, s);
      if (!hungry && probe == GuidedProbe::Lean) continue;
      for (;;) {
        if (accepted) {
          if (tree.is_leaf(n)) {
            v.leaf(s, n);
            if (probe_satisfied(v, s)) break;
          } else {
            const int first = preferred_child(v, s, n);
            for (int i = tree.child_count(n) - 1; i > 0; --i) pstack[psp++] = tree.child(n, visit_rank_child(first, i));
            n = tree.child(n, first);
            accepted = v.descend(s, n);
            continue;
          }
        }
        if (!hungry || psp == 0) break;
        n = pstack[--psp];
        accepted = v.descend(s, n);
      }
      continue;
    }
    const int first = preferred_child(v, s, n);
    for (int i = tree.child_count(n) - 1; i >= 0; --i) stack.push(tree.child(n, visit_rank_child(first, i)), d + 1);
  }
  if (len < width) row[len] = kRowEnd;
  return len;
}

// ---- The compact key (ScheduleKind::HybridKey) -------------------------------------------------
//
// A query's key summarises what it reaches in the top-tree in one 64-bit number instead of a
// row, so the inspector writes 8 bytes per query whatever the depth and the scheduler is a
// radix sort. It comes from walks that stop at the first top-leaf they reach:
//  - an unguided visitor without a hint: a = the first top-leaf a depth-first walk reaches
//    visiting children in index order, b = the first visiting them in reverse; a and b are the
//    lowest and highest columns of the query's row in the scheduling matrix (an unguided
//    traversal reaches top-leaves left to right).
//  - a guided visitor: a = the first top-leaf its walk reaches, first_child() first: the first
//    column of its guided row.
//  - an unguided visitor with a home hint (one that names the child a query lies in,
//    home_child()): a = the top-leaf the hints lead to from the root, the one the query lies in.
//    It need not be reached (the hint is a sort key, never a visit), so the walk is one descent
//    that evaluates no descend(): for point correlation it is the leaf sort's descent, cut at
//    the top-tree.
// A top-leaf enters the key as its node id less the first top-leaf's (ids grow with the columns,
// so the order is the columns' order, and no walk pays for a binary search of the columns);
// a query that reaches none (with a home hint: that the root rejects) gets span + 1 (span = last - first top-leaf id): it sorts last.
// key = a (span + 2) + b, or a with a hint. The sequential definition is key_from_row() over a
// full inspector row; tests hold the two equal.
//
// How it is computed, the same on both devices: the two walks share their path down to the
// first node with more than one accepted child, and each then descends greedily (the first
// accepted child in its visit order), with no stack; only a descent into a subtree that reaches
// no top-leaf falls back to the full depth-first walk (first_top_leaf).

// The first top-leaf (its node id) a depth-first walk of the top-tree reaches, children visited
// hint first (home_child), in index order, or (reverse) in reverse index order; kNoNode when none.
template <class Topology, class Visitor>
CANOPY_HD inline node_id first_top_leaf(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t q,
                                        bool reverse) {
  TopTreeStack<Topology> stack;
  stack.push(0, 0);
  auto s = v.init(q);
  while (!stack.empty()) {
    const auto [n, d] = stack.pop();
    if (!v.descend(s, n)) continue;
    if (d == top.depth - 1 || tree.is_leaf(n)) return n;
    const int count = tree.child_count(n);
    const int first = reverse ? 0 : home_child(v, s, n);
    for (int i = count - 1; i >= 0; --i)  // pushed last = visited first
      stack.push(tree.child(n, reverse ? count - 1 - i : visit_rank_child(first, i)), d + 1);
  }
  return kNoNode;
}

// The greedy form of first_top_leaf from node n (accepted, at depth d): at each node the first
// accepted child in visit order. kNoNode when it reaches a node none of whose children is
// accepted (the depth-first walk would backtrack there).
template <class Topology, class Visitor>
CANOPY_HD inline node_id greedy_top_leaf(const Topology& tree, const TopTreeView& top, const Visitor& v,
                                         typename Visitor::State& s, node_id n, int d, bool reverse) {
  for (;;) {
    if (d == top.depth - 1 || tree.is_leaf(n)) return n;
    const int count = tree.child_count(n);
    const int first = reverse ? 0 : home_child(v, s, n);
    node_id next = kNoNode;
    for (int i = 0; i < count && next == kNoNode; ++i) {
      const node_id c = tree.child(n, reverse ? count - 1 - i : visit_rank_child(first, i));
      if (v.descend(s, c)) next = c;
    }
    if (next == kNoNode) return kNoNode;
    n = next;
    ++d;
  }
}

// The top-leaf an unguided visitor's home hints lead to from the root: the one the query lies in.
template <class Topology, class Visitor>
CANOPY_HD inline node_id home_top_leaf(const Topology& tree, const TopTreeView& top, const Visitor& v,
                                       const typename Visitor::State& s) {
  node_id n = 0;
  for (int d = 0; d < top.depth - 1 && !tree.is_leaf(n); ++d) n = tree.child(n, home_child(v, s, n));
  return n;
}

// A top-leaf's code in the key (kNoNode: none reached).
CANOPY_HD inline std::uint64_t key_code(const TopTreeView& top, node_id n) {
  return n == kNoNode ? static_cast<std::uint64_t>(top.last_leaf - top.first_leaf) + 1
                      : static_cast<std::uint64_t>(n - top.first_leaf);
}

// The largest key a visitor's queries can have over the top-tree.
template <class Visitor>
CANOPY_HD inline std::uint64_t max_query_key(const TopTreeView& top) {
  const std::uint64_t none = key_code(top, kNoNode);
  return has_home_hint_v<Visitor> ? none : none * (none + 1) + none;
}

template <class Topology, class Visitor>
CANOPY_HD inline std::uint64_t inspect_key(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t q) {
  const std::uint64_t radix = key_code(top, kNoNode) + 1;
  auto s = v.init(q);
  node_id a = kNoNode, b = kNoNode;
  if (v.descend(s, 0)) {
    if constexpr (is_guided_v<Visitor>) {
      a = greedy_top_leaf(tree, top, v, s, 0, 0, false);
      if (a == kNoNode) a = first_top_leaf(tree, top, v, q, false);
    } else if constexpr (has_home_hint_v<Visitor>) {
      a = home_top_leaf(tree, top, v, s);
    } else {
      // The shared path: while exactly one child is accepted, both walks take it.
      node_id n = 0;
      int d = 0;
      for (;;) {
        if (d == top.depth - 1 || tree.is_leaf(n)) {
          a = b = n;
          break;
        }
        const int count = tree.child_count(n);
        int lo = count;
        for (int i = 0; i < count && lo == count; ++i)
          if (v.descend(s, tree.child(n, i))) lo = i;
        if (lo == count) break;  // every ancestor had one accepted child: nothing is reached
        int hi = lo;
        for (int i = count - 1; i > lo && hi == lo; --i)
          if (v.descend(s, tree.child(n, i))) hi = i;
        if (hi == lo) {
          n = tree.child(n, lo);
          ++d;
          continue;
        }
        a = greedy_top_leaf(tree, top, v, s, tree.child(n, lo), d + 1, false);
        if (a == kNoNode) a = first_top_leaf(tree, top, v, q, false);
        b = greedy_top_leaf(tree, top, v, s, tree.child(n, hi), d + 1, true);
        if (b == kNoNode) b = first_top_leaf(tree, top, v, q, true);
        break;
      }
    }
  }
  if constexpr (has_home_hint_v<Visitor>) {
    return key_code(top, a);
  } else {
    return key_code(top, a) * radix + key_code(top, b);
  }
}

// The key's sequential definition for an unguided visitor without a hint, from a query's full
// row (inspect_row) over the top-tree `top` (host leaves): its lowest and highest set columns.
inline std::uint64_t key_from_row(const std::uint64_t* row, const TopTreeView& top) {
  node_id lo = kNoNode, hi = kNoNode;
  for (index_t c = 0; c < top.n_leaves; ++c) {
    if (!((row[c / 64] >> (c % 64)) & 1u)) continue;
    if (lo == kNoNode) lo = top.leaves[c];
    hi = top.leaves[c];
  }
  return key_code(top, lo) * (key_code(top, kNoNode) + 1) + key_code(top, hi);
}

// CPU twin of the key inspector: keys[q] for queries 0..n_queries-1.
template <class Topology, class Visitor>
void inspect_keys_cpu(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t n_queries,
                      std::uint64_t* keys) {
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n_queries, 1024), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t q = r.begin(); q < r.end(); ++q) keys[q] = inspect_key(tree, top, v, q);
  });
}

// CPU twin of the GPU inspector: rows for queries 0..n_queries-1 in input order.
template <class Topology, class Visitor>
SchedulingMatrix inspect_cpu(const Topology& tree, const TopTreeView& top, const Visitor& v,
                             index_t n_queries) {
  SchedulingMatrix m(n_queries, top.n_leaves);
  const index_t w = words_per_row(top.n_leaves);
  std::uint64_t* words = m.data();
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n_queries, 256),
                    [&](const tbb::blocked_range<index_t>& r) {
                      for (index_t q = r.begin(); q < r.end(); ++q)
                        inspect_row(tree, top, v, q, words + q * w, w);
                    });
  return m;
}

}  // namespace canopy

namespace canopy {

// CPU twin of the guided inspector: rows of at most rows.width(top-leaves) entries, packed
// (a rectangular matrix of every top-leaf per query would take 4 GB for 500,000 queries at
// depth 12).
template <class Topology, class Visitor>
GuidedMatrix inspect_cpu_guided(const Topology& tree, const TopTreeView& top, const Visitor& v, index_t n_queries,
                                GuidedRows rows = {}) {
  const index_t width = rows.width(top.n_leaves);
  constexpr index_t kBlock = 1024;  // fixed blocks: the packed order is the query order
  const index_t blocks = (n_queries + kBlock - 1) / kBlock;
  std::vector<std::vector<std::int32_t>> parts(static_cast<std::size_t>(blocks));
  std::vector<index_t> offsets(static_cast<std::size_t>(n_queries) + 1, 0);
  std::vector<index_t> longest(static_cast<std::size_t>(blocks), 0);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, blocks), [&](const tbb::blocked_range<index_t>& r) {
    std::vector<std::int32_t> row(static_cast<std::size_t>(width));
    for (index_t b = r.begin(); b < r.end(); ++b) {
      std::vector<std::int32_t>& out = parts[b];
      for (index_t q = b * kBlock; q < std::min(n_queries, (b + 1) * kBlock); ++q) {
        const index_t len = inspect_row_guided(tree, top, v, q, row.data(), width, rows.probe);
        out.insert(out.end(), row.begin(), row.begin() + len);
        out.push_back(kRowEnd);
        offsets[q + 1] = len + 1;
        longest[b] = std::max(longest[b], len);
      }
    }
  });
  for (index_t q = 0; q < n_queries; ++q) offsets[q + 1] += offsets[q];
  std::vector<std::int32_t> entries;
  entries.reserve(static_cast<std::size_t>(offsets.back()));
  for (const auto& p : parts) entries.insert(entries.end(), p.begin(), p.end());
  const index_t width_used = blocks ? *std::max_element(longest.begin(), longest.end()) + 1 : 1;
  return GuidedMatrix(n_queries, top.n_leaves, width_used, std::move(entries), std::move(offsets));
}

}  // namespace canopy
