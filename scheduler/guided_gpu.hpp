// The guided scheduler on the GPU: the same recursive bucket partition as guided_schedule()
// (scheduler/guided.hpp), order and buckets bit for bit, computed where the inspector left the
// matrix, so neither the rows nor the order cross PCIe. CUDA-free.
//
// It runs level by level: every bucket still larger than max_bucket is split at once by one
// stable radix sort of (bucket start, step key) over the queries of all such buckets. A step
// key holds at most two top-leaves, so it serves top-trees whose leaves come at most two to a
// parent (every binary tree); supports() says whether a top-tree qualifies.
#pragma once

#include <cstdint>
#include <memory>

#include "core/types.hpp"

namespace canopy {

class DeviceGuidedScheduler {
 public:
  DeviceGuidedScheduler();
  ~DeviceGuidedScheduler();

  // column_parent: host array [cols] (TopTree::parents()).
  static bool supports(const node_id* column_parent, index_t cols, index_t rows);

  // matrix: device rows [rows][width] of columns in [0, cols) (the guided inspector's output:
  // each row ends at its first kRowEnd or after width entries); column_parent: host [cols].
  // Writes the order into device memory order[rows] and, in heads[rows] (device memory), a 1
  // where a final bucket starts, else 0 (the buckets of Schedule are the positions of the 1s).
  void run(const std::int32_t* matrix, index_t rows, index_t cols, index_t width, const node_id* column_parent,
           index_t* order, std::uint8_t* heads, stream_t stream, index_t max_bucket = 32);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canopy
