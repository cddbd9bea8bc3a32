// The queries in the order of the cells of a kd-tree's top levels: a stable sort of the queries
// by the cell they fall in, cells left to right. A contiguous run of this order is a region of
// space that holds its queries at their own density, which is what a shard of the queries should
// be (distributed/: each rank takes a run, so its GPU touches its part of the tree and its warps
// keep the coherence of the whole set; a random half of the queries is half as dense).
//
// The order is computed where the queries are: on the GPU for device memory (a descent of the
// top levels and a radix sort of the cell keys), with TBB for host memory (a counting sort); both
// give the same order. Scratch memory is kept from call to call. CUDA-free.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/types.hpp"
#include "layouts/kdtree.hpp"

namespace canopy {

// The cell of query q under a cut of `depth` levels held as a complete binary heap (1-based):
// split dimension (-1: every query goes left) and value per slot; cells 0 .. 2^depth - 1.
CANOPY_HD inline std::uint32_t spatial_cell(const std::int32_t* dim, const float* value, int depth, const float* q) {
  std::uint32_t h = 1;
  for (int l = 0; l < depth; ++l) {
    const std::int32_t d = dim[h];
    h = 2 * h + (d >= 0 && q[d] > value[h] ? 1u : 0u);
  }
  return h - (1u << depth);
}

class SpatialOrder {
 public:
  SpatialOrder();
  ~SpatialOrder();
  SpatialOrder(const SpatialOrder&) = delete;
  SpatialOrder& operator=(const SpatialOrder&) = delete;

  // The splits of tree's first `depth` levels (1..kMaxDepth; a branch that ends sooner keeps
  // its queries in its leftmost cell), then the order of queries [n][tree.dims()] by their cell:
  // a query goes right where the tree's descent would (q[d] > the left child's upper bound).
  // Device queries are read after the work queued on `after`. Throws on a depth out of range.
  static constexpr int kMaxDepth = 16;
  void compute(const KdTree& tree, int depth, const float* queries, index_t n, stream_t after = nullptr);

  index_t size() const { return n_; }
  bool on_device() const { return device_; }
  // The cell of one query (host memory): 0 .. 2^depth - 1, as compute() files it.
  std::uint32_t cell(const float* q) const;
  // The whole order in host memory (copied from the device once, when it was computed there).
  const std::vector<index_t>& host_order() const;

  // Rows of row_bytes bytes (a multiple of 4) between a full array, indexed by query, and a
  // compact one, indexed by position in order[begin, begin + count): gather copies
  // full[order[begin + j]] to compact[j], scatter compact[j] to full[order[begin + j]]. Each
  // array may be host or device memory; device work runs after `after` and is finished on return.
  void gather(const void* full, std::size_t row_bytes, index_t begin, index_t count, void* compact,
              stream_t after = nullptr) const;
  void scatter(const void* compact, std::size_t row_bytes, index_t begin, index_t count, void* full,
               stream_t after = nullptr) const;

  // Scratch memory for a shard's queries or results, kept between calls: `slot` 0..3, in device
  // memory or host memory.
  void* buffer(int slot, std::size_t bytes, bool device);

 private:
  struct Gpu;  // device scratch and stream (scheduler/spatial_order_gpu.cu)
  Gpu& gpu() const;
  void move_rows(const void* from, void* to, std::size_t row_bytes, index_t begin, index_t count, bool gather,
                 stream_t after) const;

  int depth_ = 0, dims_ = 0;
  index_t n_ = 0;
  bool device_ = false;
  // The cut as a complete binary heap (1-based): split dimension (-1: all go left) and value.
  std::vector<std::int32_t> dim_;
  std::vector<float> value_;
  mutable std::vector<index_t> host_order_;
  mutable bool host_ready_ = false;
  std::vector<std::vector<unsigned char>> host_buffers_;
  mutable std::unique_ptr<Gpu> gpu_;
};

}  // namespace canopy
