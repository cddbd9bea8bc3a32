// The traversal visitor: one definition of a workload, driven by every loop Canopy has (the
// inspector, the CPU executor, the CPU warp emulator and the GPU kernels).
//
// A Topology (e.g. KdTreeView) answers is_leaf(n), child_count(n), child(n, i) and has a
// kMaxStack bound; children are visited in index order (child 0 first).
//
// A Visitor is trivially copyable and provides, all CANOPY_HD and const:
//   using State = ...;                       // per-query state, held in registers on the GPU
//   State init(index_t query);                // load the query
//   bool descend(State&, node_id n);          // visit n: true = go on into n, false = truncate
//   void leaf(State&, node_id n);             // n is a leaf that descend() accepted
//   void finish(State&, index_t query);       // write the query's result at its original index
//
// The traversal a visitor defines is the recursive one of the paper's Figure 1: descend()
// at n, then leaf() if n is a leaf, else each child in order. Executors only decide who runs
// which query when; the nodes a query visits, and their order, are the visitor's.
//
// A *guided* visitor (nearest neighbour and its kin) chooses, per query, which child to visit
// first; it adds
//   static constexpr bool kGuided = true;
//   int first_child(const State&, node_id n);  // called after descend(n) accepted an inner n
// and the other children follow in index order. Alone, a query visits first_child() first; in
// a lockstep warp the non-truncated lanes vote and the majority's child goes first for all
// (the result must not depend on that order, only the pruning may).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/types.hpp"

namespace canopy {

template <class V, class = void>
struct is_guided : std::false_type {};
template <class V>
struct is_guided<V, std::void_t<decltype(V::kGuided)>> : std::bool_constant<V::kGuided> {};
template <class V>
inline constexpr bool is_guided_v = is_guided<V>::value;

// The guided inspector's probe (inspector/inspector.hpp) walks a reached top-leaf's subtree
// until the visitor has what it needs to prune (a nearest-neighbour search: k candidates); a
// visitor says so with an optional `bool probe_satisfied(const State&)`, else one leaf is enough.
template <class V, class = void>
struct has_probe_satisfied : std::false_type {};
template <class V>
struct has_probe_satisfied<V, std::void_t<decltype(std::declval<const V&>().probe_satisfied(
                                  std::declval<const typename V::State&>()))>> : std::true_type {};
template <class Visitor>
CANOPY_HD inline bool probe_satisfied(const Visitor& v, const typename Visitor::State& s) {
  if constexpr (has_probe_satisfied<Visitor>::value) {
    return v.probe_satisfied(s);
  } else {
    (void)v;
    (void)s;
    return true;
  }
}

// The i-th child visited when child `first` goes first and the rest follow in index order.
CANOPY_HD inline int visit_rank_child(int first, int i) {
  return i == 0 ? first : (i - 1 < first ? i - 1 : i);
}

// The child a query visits first at inner node n: its own choice for a guided visitor, child 0
// for an unguided one.
template <class Visitor>
CANOPY_HD inline int preferred_child(const Visitor& v, const typename Visitor::State& s, node_id n) {
  if constexpr (is_guided_v<Visitor>) {
    return v.first_child(s, n);
  } else {
    (void)v;
    (void)s;
    (void)n;
    return 0;
  }
}

// The compact-key inspector (inspect_key, inspector/inspector.hpp) walks a query's top-tree
// preferred child first when the visitor names one: a guided visitor's first_child(), or an
// unguided visitor's optional `int home_child(const State&, node_id n)`, the child the query
// lies in. The hint changes no visit and no result (executors ignore it for unguided visitors);
// it is for visitors whose descend() also accepts far nodes (Barnes-Hut opens every cell that
// is large for its distance), so that the first top-leaf their walk reaches is the query's own.
template <class V, class = void>
struct has_home_child_member : std::false_type {};
template <class V>
struct has_home_child_member<V, std::void_t<decltype(std::declval<const V&>().home_child(
                                    std::declval<const typename V::State&>(), node_id{}))>> : std::true_type {};
template <class V, class = void>
struct has_home_hint : std::bool_constant<is_guided_v<V> || has_home_child_member<V>::value> {};
template <class V>
struct has_home_hint<V, std::void_t<decltype(V::kHomeHint)>> : std::bool_constant<V::kHomeHint> {};
template <class V>
inline constexpr bool has_home_hint_v = has_home_hint<V>::value;

// The child the key inspector walks first: an unguided visitor's hint, else the child the
// query visits first (preferred_child).
template <class Visitor>
CANOPY_HD inline int home_child(const Visitor& v, const typename Visitor::State& s, node_id n) {
  if constexpr (!is_guided_v<Visitor> && has_home_hint_v<Visitor>) {
    return v.home_child(s, n);
  } else {
    return preferred_child(v, s, n);
  }
}

// Dynamic shared memory a visitor asks the executor kernels for, per thread (0: none), with an
// optional `std::size_t shared_bytes_per_thread() const`; a wrapper holding an `inner` visitor
// asks for what its inner one does. A visitor must work without it too (a kernel that cannot
// give that much launches with none), as KnnVisitor's heap does (runtime/knn_visitor.hpp).
template <class V, class = void>
struct has_shared_bytes : std::false_type {};
template <class V>
struct has_shared_bytes<V, std::void_t<decltype(std::declval<const V&>().shared_bytes_per_thread())>>
    : std::true_type {};
template <class V, class = void>
struct has_inner_visitor : std::false_type {};
template <class V>
struct has_inner_visitor<V, std::void_t<decltype(std::declval<const V&>().inner)>> : std::true_type {};
template <class V>
std::size_t shared_bytes_per_thread(const V& v) {
  if constexpr (has_shared_bytes<V>::value) {
    return v.shared_bytes_per_thread();
  } else if constexpr (has_inner_visitor<V>::value) {
    return shared_bytes_per_thread(v.inner);
  } else {
    (void)v;
    return 0;
  }
}

// A visitor that forwards everything to an inner one: the wrappers (a pipeline chunk's query
// offset, the schedule-quality visit sets) derive from it and replace what they change.
template <class Inner>
struct ForwardingVisitor {
  static constexpr bool kGuided = is_guided_v<Inner>;
  static constexpr bool kHomeHint = has_home_hint_v<Inner>;
  using State = typename Inner::State;
  Inner inner;

  CANOPY_HD State init(index_t q) const { return inner.init(q); }
  CANOPY_HD bool descend(State& s, node_id n) const { return inner.descend(s, n); }
  CANOPY_HD void leaf(State& s, node_id n) const { inner.leaf(s, n); }
  CANOPY_HD int first_child(const State& s, node_id n) const { return preferred_child(inner, s, n); }
  CANOPY_HD int home_child(const State& s, node_id n) const { return canopy::home_child(inner, s, n); }
  CANOPY_HD bool probe_satisfied(const State& s) const { return canopy::probe_satisfied(inner, s); }
  CANOPY_HD void finish(State& s, index_t q) const { inner.finish(s, q); }
};

// Records, per query, the sequence of nodes at which descend() was called (a node id, or its
// bitwise complement when the query truncated there). The soundness tests compare these
// sequences across schedules, executors and devices.
template <class Inner>
struct TracingVisitor {
  static constexpr bool kGuided = is_guided_v<Inner>;
  static constexpr bool kHomeHint = has_home_hint_v<Inner>;
  Inner inner;
  node_id* trace = nullptr;         // [queries][capacity]
  std::int32_t* lengths = nullptr;  // visits per query (may exceed capacity: then truncated)
  std::int32_t capacity = 0;

  struct State {
    typename Inner::State inner;
    index_t query;
    std::int32_t n;
  };

  CANOPY_HD State init(index_t q) const { return State{inner.init(q), q, 0}; }
  CANOPY_HD bool descend(State& s, node_id node) const {
    const bool go = inner.descend(s.inner, node);
    if (s.n < capacity) trace[s.query * capacity + s.n] = go ? node : ~node;
    ++s.n;
    return go;
  }
  CANOPY_HD void leaf(State& s, node_id node) const { inner.leaf(s.inner, node); }
  CANOPY_HD int first_child(const State& s, node_id node) const { return preferred_child(inner, s.inner, node); }
  CANOPY_HD int home_child(const State& s, node_id node) const { return canopy::home_child(inner, s.inner, node); }
  CANOPY_HD bool probe_satisfied(const State& s) const { return canopy::probe_satisfied(inner, s.inner); }
  CANOPY_HD void finish(State& s, index_t q) const {
    inner.finish(s.inner, q);
    lengths[q] = s.n;
  }
};

}  // namespace canopy
