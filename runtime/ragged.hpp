// Ragged results: traversals whose queries each output a number of items that is not known in
// advance (neighbour lists, pairs, the leaves a box meets), in two passes over one schedule:
//
//   count   the engine's call (runtime/engine.hpp: Auto, depth, inspector and scheduler as for any
//           workload) runs the visitor with a sink that only counts, and keeps the schedule
//   offsets an exclusive scan of the counts: offsets[n + 1], query q's items at
//           items[offsets[q] .. offsets[q + 1])
//   fill    the visitor runs again over the count pass's schedule (no second inspection), its sink
//           writing each item at its query's offset; optionally each query's items sorted
//
// This header is the CPU path (traverse_ragged_cpu) and compiles with a plain C++ compiler;
// runtime/ragged.cuh runs the same on the GPU (RaggedTraverser). PointCorrelation::run_lists
// (radius neighbour lists) is built on it.
//
// A ragged visitor is a visitor (executor/visitor.hpp) whose leaf() emits items instead of a
// finish() that writes a result; all CANOPY_HD and const:
//
//   struct BoxLeaves {
//     using Item = canopy::node_id;   // what a query outputs: trivially copyable (sorting: arithmetic)
//     using State = ...;
//     State init(canopy::index_t query) const;
//     bool descend(State&, canopy::node_id) const;
//     template <class Emit>
//     void leaf(State& s, canopy::node_id n, Emit& emit) const { if (...) emit(Item{n}); }
//     // optional, as for any visitor: kGuided and first_child(), home_child(), probe_satisfied();
//     // optional: std::uint64_t sort_key(index_t q) and max_sort_key(), which allow LeafSort.
//   };
//
// The rule: a query must emit the same number of items in both passes. Every executor walks an
// unguided visitor's nodes in one order, so its items come in that order on every schedule,
// executor and device. A guided visitor's children may come in another order under a lockstep
// warp's vote (executor/visitor.hpp), so the number of items it emits must not depend on the
// order. A fill pass that emits another number than its count pass is a canopy::Error naming the
// visitor's call; no item is written outside its query's range either way.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include "runtime/custom.hpp"
#include "runtime/ragged_result.hpp"

namespace canopy {
namespace detail {

// The count pass's sink: counts what the visitor emits.
struct RaggedCounter {
  index_t n = 0;
  template <class Item>
  CANOPY_HD void operator()(const Item&) {
    ++n;
  }
};
// The fill pass's sink: writes into the query's range, never past it, and counts.
template <class Item>
struct RaggedWriter {
  Item* at = nullptr;
  index_t room = 0;
  index_t n = 0;
  CANOPY_HD void operator()(const Item& x) {
    if (n < room) at[n] = x;
    ++n;
  }
};

// A ragged visitor under one pass: a visitor of the engine's (executor/visitor.hpp) whose state
// carries the pass's sink. RaggedCount and RaggedFill add init() and finish().
template <class V, class Sink>
struct RaggedPass {
  static constexpr bool kGuided = is_guided_v<V>;
  static constexpr bool kHomeHint = has_home_hint_v<V>;
  struct State {
    typename V::State inner;
    Sink sink;
  };
  V inner;

  CANOPY_HD bool descend(State& s, node_id n) const { return inner.descend(s.inner, n); }
  CANOPY_HD void leaf(State& s, node_id n) const { inner.leaf(s.inner, n, s.sink); }
  CANOPY_HD int first_child(const State& s, node_id n) const { return preferred_child(inner, s.inner, n); }
  CANOPY_HD int home_child(const State& s, node_id n) const { return canopy::home_child(inner, s.inner, n); }
  CANOPY_HD bool probe_satisfied(const State& s) const { return canopy::probe_satisfied(inner, s.inner); }
};

// The count pass: counts[q] = the items query q emits (assigned: the engine may rerun it).
template <class V>
struct RaggedCount : RaggedPass<V, RaggedCounter> {
  using State = typename RaggedPass<V, RaggedCounter>::State;
  index_t* counts = nullptr;
  CANOPY_HD State init(index_t q) const { return State{this->inner.init(q), RaggedCounter{}}; }
  CANOPY_HD void finish(State& s, index_t q) const { counts[q] = s.sink.n; }
};

// The fill pass over one batch of queries: query q's items go to items[offsets[q] - shift ..];
// the executor's query index i is query i + first (a batch run in input order without an
// order array). A query that emits another number than it counted sets *mismatch.
template <class V>
struct RaggedFill : RaggedPass<V, RaggedWriter<typename V::Item>> {
  using Item = typename V::Item;
  using State = typename RaggedPass<V, RaggedWriter<Item>>::State;
  const index_t* offsets = nullptr;
  Item* items = nullptr;
  index_t shift = 0, first = 0;
  int* mismatch = nullptr;

  CANOPY_HD State init(index_t i) const {
    const index_t q = i + first;
    return State{this->inner.init(q), RaggedWriter<Item>{items + (offsets[q] - shift), offsets[q + 1] - offsets[q], 0}};
  }
  CANOPY_HD void finish(State& s, index_t) const {
    if (s.sink.n == s.sink.room) return;
#if defined(__CUDA_ARCH__)
    atomicExch(mismatch, 1);
#else
    __atomic_store_n(mismatch, 1, __ATOMIC_RELAXED);
#endif
  }
};

// A ragged visitor's optional sort key (LeafSort).
template <class V, class = void>
struct has_ragged_sort_key : std::false_type {};
template <class V>
struct has_ragged_sort_key<V, std::void_t<decltype(std::declval<const V&>().sort_key(index_t{})),
                                          decltype(std::declval<const V&>().max_sort_key())>> : std::true_type {};
template <class V>
struct RaggedSortKey {
  V v;
  CANOPY_HD std::uint64_t operator()(index_t q) const { return static_cast<std::uint64_t>(v.sort_key(q)); }
};

// The count pass as the engine's workload (runtime/engine.hpp): the visitor holds its queries
// and the counts, so the engine moves no data (a memory budget bounds the scheduling matrix).
template <class Topology, class V>
struct RaggedCountWorkload {
  using View = Topology;
  static constexpr bool kGuided = is_guided_v<V>, kBuiltinTree = false;
  static constexpr bool kSortKey = has_ragged_sort_key<V>::value;
  static constexpr bool kRerunnable = true;  // the counts are assigned
  static const Topology& topology(const Topology& t) { return t; }

  V visitor;
  const char* name;
  index_t* counts = nullptr;
  int default_depth = kDefaultTopTreeDepth;
  int query_dims = 0;
  std::size_t output_bytes[2] = {0, 0};

  template <class F>
  void with_visitor(const Topology& /*tree*/, const float* /*queries*/, void* const* /*outputs*/, F&& f) const {
    RaggedCount<V> c;
    c.inner = visitor;
    c.counts = counts;
    f(c);
  }
  template <class F>
  void with_sort_key(const Topology& /*tree*/, const float* /*queries*/, F&& f) const {
    if constexpr (kSortKey) f(RaggedSortKey<V>{visitor}, static_cast<std::uint64_t>(visitor.max_sort_key()));
  }
};

// The count pass's options: the caller's, the schedule kept for the fill.
inline TraversalOptions count_pass_options(const TraversalOptions& opt) {
  TraversalOptions c = opt;
  c.keep_schedule = true;
  return c;
}

// Errors of every ragged call (runtime/ragged.cpp): n < 0, a null offsets buffer.
void check_ragged_call(const char* who, index_t n, const index_t* offsets);
// offsets[0 .. n] of counts[0 .. n - 1] (host memory); returns offsets[n].
index_t exclusive_scan(const index_t* counts, index_t n, index_t* offsets);
// The order the fill runs (null: the input order): the count pass's kept order.
const index_t* fill_order(const TraversalStats& count_pass);
// A null item buffer for total > 0, or a mismatch between the passes: errors naming `who`.
void check_item_buffer(const char* who, const void* items, index_t total);
[[noreturn]] void throw_pass_mismatch(const char* who);
// Host memory for the items of a call that cannot take them all: an OutOfMemory naming the size.
[[noreturn]] void throw_host_out_of_memory(const char* who, index_t total, std::size_t item_bytes);
// The most items one fill batch may hold on the device at item_bytes each: what the memory
// budget leaves beside the `used` bytes (no budget: what is free, less a sixteenth for CUB's
// scratch), and at most 2^31 - 1 (CUB's item counts).
index_t ragged_batch_capacity(std::size_t budget, std::size_t used, std::size_t free_bytes, std::size_t item_bytes);
// Query boundaries 0 = b[0] < b[1] < ... < b[k] = n of consecutive batches whose items fit
// `capacity` (offsets[n + 1] in host memory; at most 2^31 - 2 queries a batch); one query whose
// items alone do not fit is an OutOfMemory naming its count and size.
std::vector<index_t> ragged_batches(const index_t* offsets, index_t n, index_t capacity, std::size_t item_bytes,
                                    const char* who);
// `order` (null: the input order) regrouped stably by batch: batch b's queries, in their order,
// at positions bounds[b] .. bounds[b + 1].
std::vector<index_t> split_order(const index_t* order, index_t n, const std::vector<index_t>& bounds);

// Each query's items sorted ascending, in host memory.
template <class Item>
void sort_segments(Item* items, const index_t* offsets, index_t n, const char* who) {
  if constexpr (std::is_arithmetic_v<Item>) {
    tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 256), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t q = r.begin(); q < r.end(); ++q) std::sort(items + offsets[q], items + offsets[q + 1]);
    });
  } else {
    (void)items;
    (void)offsets;
    (void)n;
    throw Error(std::string(who) + ": sort needs an arithmetic item type");
  }
}

// A ragged call into host vectors: call(offsets, items) is the call into buffers.
template <class Item, class Call>
RaggedResult<Item> into_vectors(index_t n, const char* who, Call&& call) {
  RaggedResult<Item> r;
  r.offsets.resize(static_cast<std::size_t>(std::max<index_t>(n, 0)) + 1);
  const ItemBuffer<Item> items = [&](index_t total) -> Item* {
    try {
      r.items.resize(static_cast<std::size_t>(total));
    } catch (const std::bad_alloc&) {
      throw_host_out_of_memory(who, total, sizeof(Item));
    }
    return r.items.data();
  };
  static_cast<RaggedStats&>(r) = call(r.offsets.data(), items);
  return r;
}

// A ragged CPU call's steps after the counts: the offsets (a scan), the items' room, fill(offsets,
// items) writing each query's items at its offsets, each query's items sorted if asked, the
// offsets and items written to the caller's memory where that is device memory.
template <class Item, class Fill>
void place_items(RaggedStats& st, const index_t* counts, index_t n, const RaggedOptions& opt, const char* who,
                 index_t* offsets, const ItemBuffer<Item>& items, Fill&& fill) {
  auto t0 = std::chrono::steady_clock::now();
  const bool device_offsets = is_device_pointer(offsets);
  std::vector<index_t> staged_offsets(device_offsets ? static_cast<std::size_t>(n) + 1 : 0);
  index_t* off = device_offsets ? staged_offsets.data() : offsets;
  st.total = exclusive_scan(counts, n, off);
  st.scan_ms = ms_since(t0);
  Item* out = items(st.total);
  check_item_buffer(who, out, st.total);
  std::vector<Item> staged_items;
  const bool device_items = st.total > 0 && is_device_pointer(out);
  if (device_items) {
    try {
      staged_items.resize(static_cast<std::size_t>(st.total));
    } catch (const std::bad_alloc&) {
      throw_host_out_of_memory(who, st.total, sizeof(Item));
    }
  }
  Item* host_items = device_items ? staged_items.data() : out;
  t0 = std::chrono::steady_clock::now();
  fill(static_cast<const index_t*>(off), host_items);
  st.fill_ms = ms_since(t0);
  st.fill_batches = n > 0 ? 1 : 0;
  if (opt.sort) {
    t0 = std::chrono::steady_clock::now();
    sort_segments(host_items, off, n, who);
    st.sort_ms = ms_since(t0);
  }
  if (device_items) copy_memory(out, staged_items.data(), static_cast<std::size_t>(st.total) * sizeof(Item), opt.stream);
  if (device_offsets) copy_memory(offsets, off, (static_cast<std::size_t>(n) + 1) * sizeof(index_t), opt.stream);
}

// The ragged call on the CPU (traverse_ragged_cpu), the offsets and items in host or device
// memory (device memory goes through the host).
template <class Topology, class V>
RaggedStats ragged_cpu(const Topology& tree, const V& v, index_t n, const RaggedOptions& opt, const char* who,
                       index_t* offsets, const ItemBuffer<typename V::Item>& items) {
  using Item = typename V::Item;
  const auto start = std::chrono::steady_clock::now();
  check_ragged_call(who, n, offsets);
  std::vector<index_t> counts(static_cast<std::size_t>(n));
  RaggedCountWorkload<Topology, V> w{v, who, counts.data()};
  EngineState state;
  CallData call;
  call.n = n;
  RaggedStats st;
  static_cast<TraversalStats&>(st) = run_call(w, tree, Device::Cpu, static_cast<GpuPart<decltype(w)>*>(nullptr),
                                              state, call, count_pass_options(opt));
  place_items(st, counts.data(), n, opt, who, offsets, items, [&](const index_t* off, Item* dst) {
    int mismatch = 0;
    RaggedFill<V> fill;
    fill.inner = v;
    fill.offsets = off;
    fill.items = dst;
    fill.mismatch = &mismatch;
    execute_cpu(tree, fill, fill_order(st), n);
    if (mismatch) throw_pass_mismatch(who);
  });
  if (!opt.keep_schedule) st.schedule = Schedule{};
  st.wall_ms = ms_since(start);
  return st;
}

// One pass's sink: appends to its thread's arena, from `begin` on.
template <class Item>
struct ArenaSink {
  std::vector<Item>* arena = nullptr;
  std::size_t begin = 0;
  index_t n = 0;
  void operator()(const Item& x) {
    arena->push_back(x);
    ++n;
  }
};

// The one pass: query q's items are the run of arena_of[q] from begin[q], counts[q] long.
template <class V>
struct RaggedCollect : RaggedPass<V, ArenaSink<typename V::Item>> {
  using Item = typename V::Item;
  using State = typename RaggedPass<V, ArenaSink<Item>>::State;
  tbb::enumerable_thread_specific<std::vector<Item>>* arenas = nullptr;
  index_t* counts = nullptr;
  std::vector<Item>** arena_of = nullptr;
  std::size_t* begin = nullptr;
  State init(index_t q) const {
    std::vector<Item>& a = arenas->local();
    return State{this->inner.init(q), ArenaSink<Item>{&a, a.size(), 0}};
  }
  void finish(State& s, index_t q) const {
    counts[q] = s.sink.n;
    arena_of[q] = s.sink.arena;
    begin[q] = s.sink.begin;
  }
};

// Whether a CPU ragged call of a visitor that emits the same items on every run may take one pass
// (ragged_cpu_one_pass): every engine option at its default (Auto's CPU pick is the input order
// on independent threads), the device not the GPU. Any other goes through the engine's count
// pass, which also checks it (a depth deeper than the tree, the GPU asked of a CPU object).
inline bool one_pass_fits(const RaggedOptions& opt) {
  return opt.device != Device::Gpu && opt.schedule == ScheduleKind::Auto && opt.executor == ExecutorKind::Auto &&
         opt.depth == 0 && !opt.count_nodes && !opt.gpu_count_nodes && !opt.keep_schedule && !opt.probe &&
         opt.row_cap == 0 && !opt.pipeline && opt.chunk == 0 && opt.memory_budget == 0 && !opt.measure_overlap;
}

// One pass on the CPU, for a visitor whose every run emits the same items (the built-in radius
// lists, not a custom visitor, whose two passes check each other): the queries in input order on
// independent threads, each query start to end on one thread, its items one run of that thread's
// arena; then the offsets, the items' room and each run copied to its query's range. Half the
// traversals of ragged_cpu (whose count pass is a whole traversal too); the arenas hold every item
// until the copy.
template <class Topology, class V>
RaggedStats ragged_cpu_one_pass(const Topology& tree, const V& v, index_t n, const RaggedOptions& opt,
                                const char* who, index_t* offsets, const ItemBuffer<typename V::Item>& items) {
  using Item = typename V::Item;
  const auto start = std::chrono::steady_clock::now();
  check_ragged_call(who, n, offsets);
  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<index_t> counts(un);
  std::vector<std::vector<Item>*> arena_of(un, nullptr);
  std::vector<std::size_t> begin(un, 0);
  tbb::enumerable_thread_specific<std::vector<Item>> arenas;
  RaggedCollect<V> c;
  c.inner = v;
  c.arenas = &arenas;
  c.counts = counts.data();
  c.arena_of = arena_of.data();
  c.begin = begin.data();
  RaggedStats st;
  try {
    execute_cpu(tree, c, nullptr, n);
  } catch (const std::bad_alloc&) {
    index_t held = 0;
    for (const std::vector<Item>& a : arenas) held += static_cast<index_t>(a.size());
    throw_host_out_of_memory(who, held, sizeof(Item));
  }
  st.times.execute_ms = ms_since(start);
  st.device = Device::Cpu;
  st.schedule_kind = ScheduleKind::InputOrder;
  st.executor_kind = ExecutorKind::Independent;
  place_items(st, counts.data(), n, opt, who, offsets, items, [&](const index_t* off, Item* dst) {
    tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1024), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t q = r.begin(); q < r.end(); ++q)
        if (counts[static_cast<std::size_t>(q)] > 0)
          std::copy_n(arena_of[static_cast<std::size_t>(q)]->data() + begin[static_cast<std::size_t>(q)],
                      counts[static_cast<std::size_t>(q)], dst + off[q]);
    });
  });
  st.wall_ms = ms_since(start);
  return st;
}

}  // namespace detail

// Runs the ragged visitor `v` (above) over n_queries on the CPU (TBB threads): the count pass
// through the engine (every schedule the CPU takes; LeafSort where the visitor has a sort key),
// the scan, then the fill over the count pass's order. offsets[n_queries + 1] and the items
// (`items(total)`) may be host or device memory. Errors: as traverse_cpu's, a null offsets
// buffer, a null item buffer for items, a pass mismatch (above); host memory too small for the
// items is an OutOfMemory naming their size.
template <class Topology, class V>
RaggedStats traverse_ragged_cpu(const Topology& tree, const V& v, index_t n_queries, const RaggedOptions& opt,
                                index_t* offsets, const ItemBuffer<typename V::Item>& items) {
  if (opt.device == Device::Gpu)
    throw Error("traverse_ragged_cpu runs on the CPU; device gpu was requested (use canopy::RaggedTraverser from "
                "runtime/ragged.cuh)");
  detail::require_host_arrays(tree, "traverse_ragged_cpu");
  return detail::ragged_cpu(tree, v, n_queries, opt, "traverse_ragged_cpu", offsets, items);
}

// The same into host vectors.
template <class Topology, class V>
RaggedResult<typename V::Item> traverse_ragged_cpu(const Topology& tree, const V& v, index_t n_queries,
                                                   const RaggedOptions& opt = {}) {
  return detail::into_vectors<typename V::Item>(n_queries, "traverse_ragged_cpu", [&](index_t* offsets, const auto& items) {
    return traverse_ragged_cpu(tree, v, n_queries, opt, offsets, items);
  });
}

}  // namespace canopy
