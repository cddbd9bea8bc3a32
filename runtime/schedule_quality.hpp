// Measuring a schedule against the paper's Sched objective (§3.1): each query's visit set t(q)
// is traced by running its traversal alone on the CPU, then Δ and the per-warp union come from
// scheduler/quality.hpp. t(q) holds every node at which the traversal called descend(),
// accepted or truncated: the nodes the query's thread touches. With that definition the union
// over a lockstep warp's queries is exactly the set of nodes the warp visits (an unguided
// traversal; a guided warp's vote may reorder, and so re-prune, what each lane visits).
#pragma once

#include <algorithm>
#include <vector>

#include <tbb/parallel_for.h>

#include "executor/traversal.hpp"
#include "scheduler/quality.hpp"

namespace canopy {
namespace detail {

// Forwards to the workload's visitor and appends every node descend() is called on to `sink`.
template <class Inner>
struct SetCollectingVisitor : ForwardingVisitor<Inner> {
  using State = typename Inner::State;
  std::vector<node_id>* sink;

  bool descend(State& s, node_id n) const {
    sink->push_back(n);
    return this->inner.descend(s, n);
  }
};

}  // namespace detail

// t(q), sorted ascending (unguided traversals already visit ascending depth-first ids). The
// visitor's finish() runs as usual, so its result buffers must be writable.
template <class Topology, class Visitor>
void trace_visit_set(const Topology& tree, const Visitor& v, index_t q, std::vector<node_id>& out) {
  out.clear();
  traverse_one(tree, detail::SetCollectingVisitor<Visitor>{{v}, &out}, q);
  if (!std::is_sorted(out.begin(), out.end())) std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
}

// The visit sets of `queries`, in that order. TBB-parallel.
template <class Topology, class Visitor>
VisitSets collect_visit_sets(const Topology& tree, const Visitor& v, const std::vector<index_t>& queries) {
  std::vector<std::vector<node_id>> sets(queries.size());
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, queries.size(), 16), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) trace_visit_set(tree, v, queries[i], sets[i]);
  });
  VisitSets out;
  for (const auto& s : sets) out.add(s.data(), s.size());
  return out;
}

struct ScheduleQuality {
  std::int64_t delta = 0;       // Δ over the whole schedule
  std::int64_t warp_union = 0;  // Σ over warps of 32 positions of |∪ t(q)|
  index_t warps = 0;
  double union_per_warp() const { return warps ? static_cast<double>(warp_union) / static_cast<double>(warps) : 0.0; }
};

// Δ and the per-warp union of a whole schedule (order null = input order). Chunks of whole
// warps run in parallel, each holding one warp's sets at a time; each query is traced once
// (two threads tracing one query at once would share its result slots), and the δ across a
// chunk boundary comes from the sets kept at the chunk's ends.
template <class Topology, class Visitor>
ScheduleQuality measure_schedule(const Topology& tree, const Visitor& v, const index_t* order, index_t n) {
  ScheduleQuality q;
  q.warps = (n + 31) / 32;
  const index_t chunks = std::min<index_t>(q.warps, 1024);
  std::vector<std::int64_t> delta(static_cast<std::size_t>(chunks)), uni(static_cast<std::size_t>(chunks));
  std::vector<std::vector<node_id>> head(static_cast<std::size_t>(chunks)), tail(static_cast<std::size_t>(chunks));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, chunks, 1), [&](const tbb::blocked_range<index_t>& r) {
    std::vector<node_id> prev, cur, merged;
    for (index_t c = r.begin(); c < r.end(); ++c) {
      const index_t w0 = q.warps * c / chunks, w1 = q.warps * (c + 1) / chunks;
      for (index_t w = w0; w < w1; ++w) {
        const index_t first = w * 32, last = std::min(n, first + 32);
        merged.clear();
        for (index_t i = first; i < last; ++i) {
          trace_visit_set(tree, v, order ? order[i] : i, cur);
          if (i == w0 * 32) head[c] = cur;
          else delta[c] += symmetric_difference_size(prev.data(), prev.size(), cur.data(), cur.size());
          merged.insert(merged.end(), cur.begin(), cur.end());
          prev.swap(cur);
        }
        std::sort(merged.begin(), merged.end());
        uni[c] += std::unique(merged.begin(), merged.end()) - merged.begin();
      }
      tail[c] = prev;
    }
  });
  for (index_t c = 0; c < chunks; ++c) {
    q.delta += delta[c];
    q.warp_union += uni[c];
    if (c > 0) q.delta += symmetric_difference_size(tail[c - 1].data(), tail[c - 1].size(), head[c].data(), head[c].size());
  }
  return q;
}

}  // namespace canopy
