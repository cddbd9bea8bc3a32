// The sandpile on the GPU: the same schedule as sandpile() (bit for bit), computed where the
// scheduling matrix already is, so neither the matrix nor the order crosses PCIe. CUDA-free.
#pragma once

#include <cstdint>
#include <memory>

#include "core/types.hpp"


namespace canopy {

// Keeps its device scratch memory between calls.
class DeviceSandpile {
 public:
  DeviceSandpile();
  ~DeviceSandpile();

  // matrix: device rows [rows][words_per_row]; writes the order into device memory order[rows].
  // Stable radix sorts, one per word of the rows from the least significant word to the most,
  // each over the bits that vary in that word; equal to the descending stable sort of the
  // rows, which is the sandpile.
  void run(const std::uint64_t* matrix, index_t rows, index_t words_per_row, index_t* order, stream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace canopy
