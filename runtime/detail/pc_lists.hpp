// PointCorrelation::run_lists (radius neighbour lists) on the ragged engine (runtime/ragged.hpp):
// its ragged visitor, and its GPU side (runtime/detail/pc_lists_gpu.cu) behind a CUDA-free face.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "layouts/kdtree.hpp"
#include "runtime/pc_visitor.hpp"
#include "runtime/ragged_result.hpp"

namespace canopy {
namespace detail {

// Emits the original index of every tree point within the query's radius: point correlation's
// visitor (its arithmetic, so a query's list holds exactly its count's points; its home hint)
// whose leaf emits instead of counting, in the kd-tree's leaf order. The radius is radius2's for
// every query, or per query radii[q] squared; upper_from >= 0: only points of original index >
// upper_from + query (PcListOptions::upper_from). The sort key (LeafSort) is the kd-tree leaf the
// query falls in, as point correlation's. (The base's counts are not used.)
template <int MaxDim>
struct PcListVisitor : PointCorrelationVisitor<MaxDim> {
  using Base = PointCorrelationVisitor<MaxDim>;
  using Item = index_t;
  const float* radii = nullptr;  // [queries], or null
  index_t upper_from = -1;

  struct State : Base::State {
    float r2;
    index_t above;  // the smallest index listed, less one
  };

  CANOPY_HD State init(index_t query) const {
    State s;
    static_cast<typename Base::State&>(s) = Base::init(query);
    s.r2 = this->radius2;
    if (radii) s.r2 = radii[query] * radii[query];
    s.above = upper_from >= 0 ? upper_from + query : -1;
    return s;
  }
  CANOPY_HD bool descend(State& s, node_id n) const {
    return box_distance2(s.q, this->tree.lo(n), this->tree.hi(n)) <= s.r2;
  }
  template <class Emit>
  CANOPY_HD void leaf(State& s, node_id n, Emit& emit) const {
    const KdNode node = this->tree.nodes[n];
    for (index_t i = node.first; i < node.first + node.count; ++i)
      if (point_distance2(s.q, this->tree.point(i)) <= s.r2) {
        const index_t id = this->tree.point_ids[i];
        if (id > s.above) emit(id);
      }
  }
  CANOPY_HD std::uint64_t sort_key(index_t q) const {
    return static_cast<std::uint64_t>(this->tree.find_leaf(this->queries + q * this->tree.dims));
  }
  std::uint64_t max_sort_key() const { return static_cast<std::uint64_t>(this->tree.n_nodes); }
};

// The GPU side of run_lists: a device copy of the tree (shared with a tree its GPU build left
// on the device), the queries' and radii's device buffers and the ragged engine's state.
// queries and radii (null: radius2 for all) may be host or device memory, already checked.
class PcListsGpu {
 public:
  virtual ~PcListsGpu() = default;
  virtual RaggedStats run(const float* queries, const float* radii, index_t n, float radius2, index_t upper_from,
                          const RaggedOptions& opt, index_t* offsets, const ItemBuffer<index_t>& indices) = 0;
};
std::unique_ptr<PcListsGpu> make_pc_lists_gpu(const KdTree& tree);

// What a PointCorrelation keeps for run_lists: the GPU side, made by the first GPU call under
// the lock, which GPU calls hold throughout (they take turns, as run()'s do).
struct PcLists {
  std::mutex mutex;
  std::unique_ptr<PcListsGpu> gpu;
};

}  // namespace detail
}  // namespace canopy
