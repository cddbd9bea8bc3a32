// Auto: the executor and the schedule chosen per input, by a trial on a sample of a call (the
// declarations; runtime/engine.cpp defines them, runtime/engine.hpp runs the trial).
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/types.hpp"
#include "executor/executor.hpp"
#include "runtime/options.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

// A trial of ExecutorKind::Auto / ScheduleKind::Auto runs each candidate on a sample of the call
// (auto_sample_size queries: all of a small call), in kAutoBlocks blocks of consecutive positions
// spread over the call: positions of the input for the input order, of the call's own schedule
// for the sorted candidates, so that each runs at the density and in the order it would meet in
// the whole call. The sample and its results stay in device memory. The trial stops trying
// candidates before its wall time would pass kAutoTrialBudget times the call's. The sample's
// floor: smaller samples mis-picked on the H200 (kNN over 171k and 254k points, where the input
// order wins by 1.1-1.3x, took the leaf sort on samples of 65,536 queries).
constexpr index_t kAutoSample = index_t{1} << 20;
constexpr index_t kAutoSampleMin = index_t{1} << 18;
constexpr int kAutoBlocks = 8;
constexpr double kAutoTrialBudget = 2.0;

struct AutoPick {
  ScheduleKind schedule;
  ExecutorKind executor;
};

// What an Auto call on `device` chooses between, the prior first: the pick a shape's first call
// runs without a trial. On the GPU: LeafSort (where the workload has a sort key; else HybridKey)
// under independent threads for guided rows, FSM lockstep for unguided ones. Guided rows: then
// the input order, then HybridKey, under independent threads, and lockstep over the sorted order
// only for a `wide` search (see workload_wide). Unguided rows: HybridKey under lockstep, the
// sorted orders under independent threads, the input order last. A kind the options fix stays
// fixed. On the CPU no trial: independent tasks over the input order (the lockstep kinds are the
// warp emulator, there to count nodes).
std::vector<AutoPick> auto_candidates(const TraversalOptions& opt, Device device, bool sort_key, bool guided,
                                      bool wide = false);

// Drops each candidate of schedule `twin` that has a candidate of schedule `of` under the same
// executor: where the two give the same order (key_is_leaf_sort), a run of both measures one.
void drop_twins(std::vector<AutoPick>& candidates, ScheduleKind twin, ScheduleKind of);

// A guided workload says with an optional `bool wide_search() const` that its queries search
// regions wide beside a warp's group of sorted queries (kNN with k > 16 over a kd-tree). There a
// lockstep warp's union of paths costs little more than each lane's own, and it shares the nodes'
// and leaves' loads: on the H200, 10^6 uniform 3-d points, k = 30, 7.9 against 9.1 ms; over the
// cities file it loses (0.83 against 0.48 ms), so Auto tries it rather than assuming it.
template <class W, class = void>
struct has_wide_search : std::false_type {};
template <class W>
struct has_wide_search<W, std::void_t<decltype(std::declval<const W&>().wide_search())>> : std::true_type {};
template <class W>
bool workload_wide(const W& w) {
  if constexpr (has_wide_search<W>::value)
    return w.wide_search();
  else
    return false;
}

// The queries of each candidate's trial for a call of n: about one call's work over all the
// candidates, within [kAutoSampleMin, kAutoSample] (n when smaller).
index_t auto_sample_size(index_t n, std::size_t candidates);

// The positions of a sample of m of n queries: `blocks` runs of `each` consecutive positions, run b
// from first[b], spread evenly over 0..n-1 (m < n, 1 <= blocks <= kAutoBlocks).
struct SampleRuns {
  index_t each = 0;
  int blocks = 0;
  index_t first[kAutoBlocks] = {};
  CANOPY_HD index_t size() const { return each * blocks; }
};
SampleRuns sample_runs(index_t n, index_t m, int blocks);

// m distinct query indices, in position order, taken as `blocks` runs (at most kAutoBlocks: more
// are taken as kAutoBlocks) of consecutive positions of `order` (a permutation; null: the input
// order) spread evenly over 0..n-1 (sample_runs); all of them when m >= n.
std::vector<index_t> block_sample(const index_t* order, index_t n, index_t m, int blocks);

// Auto's picks, process-wide (a simulation that rebuilds its tree every step pays for one trial,
// not one per tree): per workload type, tree shape (height, and the power of two of its size),
// batch-size class (the power of two of the query count), device and the options that
// shape a run. A shape's first call leaves the prior there, unsettled: the trial runs on its
// second call, once the shape has shown it recurs, so a one-shot call costs one call. Thread-safe.
class AutoChoice {
 public:
  struct Key {
    std::size_t workload = 0;
    int height = 0, tree_scale = 0, scale = 0;
    int device = 0, schedule = 0, executor = 0, depth = 0, pipeline = 0, budget = 0, probe = 0;
    index_t row_cap = 0;
    bool operator==(const Key& o) const;
  };
  // tree_size: the tree's node count (or leaf count, for a topology that does not say it).
  static Key key(std::size_t workload, int height, index_t tree_size, index_t n, Device device,
                 const TraversalOptions& opt);
  static bool find(const Key& k, AutoPick* pick, bool* settled = nullptr);
  static void remember(const Key& k, AutoPick pick, bool settled = true);
  static void forget_all();  // tests
};

}  // namespace canopy
