// CPU executors: a TBB-parallel executor (one task per query, in schedule order) and the warp
// emulator, which runs groups of 32 scheduled queries in lockstep exactly as the GPU lockstep
// kernels do (the warp's vote on the first child included) and counts the nodes each warp
// visits (the paper's divergence metric, Table 1).
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include <tbb/parallel_for.h>

#include "executor/executor.hpp"
#include "executor/traversal.hpp"

namespace canopy {

constexpr int kWarpSize = 32;
// The warp's vote (the paper's Figure 11, lines 20-26): the child most of the voting lanes
// want to visit first; a tie goes to the lower index. pref[l] is lane l's preferred child, for
// the lanes set in `voters`. Counted child by child, as the GPU's ballots do, so a node may
// have any number of children.
inline int majority_child(const int* pref, std::uint32_t voters, int n_children) {
  int best = 0, best_votes = -1;
  for (int c = 0; c < n_children; ++c) {
    int votes = 0;
    for (std::uint32_t t = voters; t; t &= t - 1) votes += pref[__builtin_ctz(t)] == c;
    if (votes > best_votes) {
      best = c;
      best_votes = votes;
    }
  }
  return best;
}

enum class LockstepMode {
  Mask,  // Goldfarb et al.: the warp's mask vector travels on the rope stack
  Fsm,   // the paper's FSM: per-lane traversing/truncated state and critical stack depth
};

// The emulator mode that matches a GPU lockstep executor.
inline LockstepMode lockstep_mode(ExecutorKind k) {
  return k == ExecutorKind::MaskLockstep ? LockstepMode::Mask : LockstepMode::Fsm;
}

template <class Topology, class Visitor>
void execute_cpu(const Topology& tree, const Visitor& v, const index_t* order, index_t n_queries) {
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n_queries, 64),
                    [&](const tbb::blocked_range<index_t>& r) {
                      for (index_t i = r.begin(); i < r.end(); ++i)
                        traverse_one(tree, v, scheduled_query(order, i));
                    });
}

namespace detail {

// One warp of the emulator. Returns the nodes the warp popped off its rope stack; the GPU
// lockstep kernels visit the same nodes, in the same order, and count them the same way.
template <class Topology, class Visitor>
index_t emulate_warp(const Topology& tree, const Visitor& v, const index_t* order, index_t first,
                     int lanes, LockstepMode mode) {
  using State = typename Visitor::State;
  State st[kWarpSize];
  index_t query[kWarpSize];
  for (int l = 0; l < lanes; ++l) {
    query[l] = scheduled_query(order, first + l);
    st[l] = v.init(query[l]);
  }
  const std::uint32_t valid = lanes == kWarpSize ? 0xffffffffu : ((1u << lanes) - 1u);
  node_id stack[Topology::kMaxStack];
  std::uint32_t mask_stack[Topology::kMaxStack];  // Mask mode only
  int critical[kWarpSize];                        // Fsm mode only
  for (int l = 0; l < kWarpSize; ++l) critical[l] = INT_MAX;
  std::uint32_t traversing = valid;  // Fsm mode: lanes in the traversing state
  int sp = 0;
  stack[sp] = 0;
  mask_stack[sp] = valid;
  ++sp;
  index_t visited = 0;
  while (sp > 0) {
    --sp;
    const node_id n = stack[sp];
    ++visited;
    std::uint32_t active;
    if (mode == LockstepMode::Mask) {
      active = mask_stack[sp];
    } else {
      // Transition back to traversing once the stack drops below a lane's critical depth.
      for (std::uint32_t t = valid & ~traversing; t; t &= t - 1) {
        const int l = __builtin_ctz(t);
        if (sp < critical[l]) {
          traversing |= 1u << l;
          critical[l] = INT_MAX;
        }
      }
      active = traversing;
    }
    std::uint32_t cond = 0;
    for (std::uint32_t t = active; t; t &= t - 1) {
      const int l = __builtin_ctz(t);
      if (v.descend(st[l], n)) cond |= 1u << l;
    }
    if (cond == 0) continue;  // the whole warp truncates here
    if (mode == LockstepMode::Fsm) {
      for (std::uint32_t t = traversing & ~cond; t; t &= t - 1) critical[__builtin_ctz(t)] = sp;
      traversing = cond;
    }
    if (tree.is_leaf(n)) {
      for (std::uint32_t t = cond; t; t &= t - 1) {
        const int l = __builtin_ctz(t);
        v.leaf(st[l], n);
      }
    } else {
      const int nc = tree.child_count(n);
      int first = 0;
      if constexpr (is_guided_v<Visitor>) {
        int pref[kWarpSize];
        for (std::uint32_t t = cond; t; t &= t - 1) pref[__builtin_ctz(t)] = v.first_child(st[__builtin_ctz(t)], n);
        first = majority_child(pref, cond, nc);
      }
      for (int i = nc - 1; i >= 0; --i) {
        stack[sp] = tree.child(n, visit_rank_child(first, i));
        mask_stack[sp] = cond;
        ++sp;
      }
    }
  }
  for (int l = 0; l < lanes; ++l) v.finish(st[l], query[l]);
  return visited;
}

}  // namespace detail

// Runs the visitor over all queries in lockstep warps of 32 consecutive schedule positions;
// returns the nodes visited by each warp.
template <class Topology, class Visitor>
std::vector<index_t> emulate_lockstep(const Topology& tree, const Visitor& v, const index_t* order,
                                      index_t n_queries, LockstepMode mode) {
  const index_t warps = (n_queries + kWarpSize - 1) / kWarpSize;
  std::vector<index_t> nodes(static_cast<std::size_t>(warps));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, warps, 4), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t w = r.begin(); w < r.end(); ++w) {
      const index_t first = w * kWarpSize;
      const int lanes = static_cast<int>(std::min<index_t>(kWarpSize, n_queries - first));
      nodes[w] = detail::emulate_warp(tree, v, order, first, lanes, mode);
    }
  });
  return nodes;
}

}  // namespace canopy
