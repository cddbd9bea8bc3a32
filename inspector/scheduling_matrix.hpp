// The scheduling matrix of an unguided traversal: one row per query, one bit per top-tree
// leaf (column) the query's traversal reached, packed into 64-bit words. Bit c of a row is
// bit (c % 64) of word (c / 64), so a row read as a little-endian multi-word integer has its
// last column as the most significant bit.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/common.hpp"

namespace canopy {

struct SchedulingMatrixView {
  const std::uint64_t* words = nullptr;  // [rows][words_per_row]
  index_t rows = 0;
  index_t cols = 0;
  index_t words_per_row = 0;

  const std::uint64_t* row(index_t r) const { return words + r * words_per_row; }
  bool test(index_t r, index_t c) const { return (row(r)[c / 64] >> (c % 64)) & 1u; }
};

inline index_t words_per_row(index_t cols) { return (cols + 63) / 64; }

// Host-owned matrix (the CPU inspector's output; the GPU path fills pinned memory instead).
class SchedulingMatrix {
 public:
  SchedulingMatrix() = default;
  SchedulingMatrix(index_t rows, index_t cols)
      : words_(static_cast<std::size_t>(rows * words_per_row(cols)), 0), rows_(rows), cols_(cols) {}

  SchedulingMatrixView view() const { return {words_.data(), rows_, cols_, words_per_row(cols_)}; }
  std::uint64_t* data() { return words_.data(); }
  index_t rows() const { return rows_; }
  index_t cols() const { return cols_; }
  void set(index_t r, index_t c) { words_[r * words_per_row(cols_) + c / 64] |= std::uint64_t{1} << (c % 64); }

 private:
  std::vector<std::uint64_t> words_;
  index_t rows_ = 0;
  index_t cols_ = 0;
};

}  // namespace canopy
