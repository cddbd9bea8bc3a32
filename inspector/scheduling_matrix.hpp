// The scheduling matrix of an unguided traversal: one row per query, one bit per top-tree
// leaf (column) the query's traversal reached, packed into 64-bit words. Bit c of a row is
// bit (c % 64) of word (c / 64), so a row read as a little-endian multi-word integer has its
// last column as the most significant bit.
#pragma once

#include <cstdint>
#include <vector>

#include "core/types.hpp"

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

namespace canopy {

// The scheduling matrix of a guided traversal (the paper's Figure 5): row r lists the columns
// (top-tree leaves) query r reached, in the order it visited them, and ends at the first
// kRowEnd or after `width` entries. A traversal reaches each top-leaf at most once, so the
// full width is the number of top-leaves. Nearest-neighbour rows are short, so the GPU packs
// them (each row then its kRowEnd, back to back, with row offsets) before the copy to the host.
constexpr std::int32_t kRowEnd = -1;

// How the guided inspector bounds a query's walk through the top-tree. At each top-leaf it
// reaches, the traversal below would tighten the query's pruning bound (nearest neighbour: the
// k-th candidate distance), so the inspector may probe that subtree to do the same:
//   Full: the paper's §4.1: probe every reached top-leaf, as the traversal would walk it first.
//   Lean: probe only until the bound has formed (probe_satisfied()), then no more.
//   None: never probe: the row is the top-leaves in the query's own preferred order under the
//         bound it starts with (for nearest neighbour, none), a positional signature. Its cost
//         is a fixed walk of the top-tree, reading no points; it needs a deeper top-tree and a
//         row cap to be a good schedule (docs/design.md, "Guided rows: probe or position").
// The probe only shapes the schedule; results never depend on it.
enum class GuidedProbe : std::uint8_t { Full, Lean, None };
inline const char* to_string(GuidedProbe p) {
  static constexpr const char* kNames[] = {"full", "lean", "none"};
  return enum_name(p, kNames);
}

// How the guided inspector forms rows: the probe, and the most top-leaves a row keeps (the walk
// stops at a full row; 0: every top-leaf).
struct GuidedRows {
  GuidedProbe probe = GuidedProbe::Full;
  index_t cap = 0;
  index_t width(index_t top_leaves) const { return cap > 0 && cap < top_leaves ? cap : top_leaves; }
};

struct GuidedMatrixView {
  const std::int32_t* entries = nullptr;  // [rows][width], or packed rows (see offsets)
  index_t rows = 0;
  index_t cols = 0;   // top-tree leaves
  index_t width = 0;  // entries stored per row (<= cols + 1)
  // Packed form (what crosses PCIe): row r starts at entries + offsets[r] and ends with a
  // kRowEnd before `width` entries; null for the rectangular form.
  const index_t* offsets = nullptr;

  const std::int32_t* row(index_t r) const { return entries + (offsets ? offsets[r] : r * width); }
  index_t length(index_t r) const {
    const std::int32_t* e = row(r);
    index_t n = 0;
    while (n < width && e[n] != kRowEnd) ++n;
    return n;
  }
};

class GuidedMatrix {
 public:
  GuidedMatrix() = default;
  // Rectangular: rows x width entries, all kRowEnd.
  GuidedMatrix(index_t rows, index_t cols, index_t width)
      : entries_(static_cast<std::size_t>(rows * width), kRowEnd), rows_(rows), cols_(cols), width_(width) {}
  // Packed: row r at entries[offsets[r]], each row followed by kRowEnd; width = the longest
  // row + 1.
  GuidedMatrix(index_t rows, index_t cols, index_t width, std::vector<std::int32_t> entries,
               std::vector<index_t> offsets)
      : entries_(std::move(entries)), offsets_(std::move(offsets)), rows_(rows), cols_(cols), width_(width) {}

  GuidedMatrixView view() const {
    return {entries_.data(), rows_, cols_, width_, offsets_.empty() ? nullptr : offsets_.data()};
  }
  std::int32_t* data() { return entries_.data(); }
  std::int32_t* row(index_t r) { return entries_.data() + (offsets_.empty() ? r * width_ : offsets_[r]); }
  index_t rows() const { return rows_; }
  index_t cols() const { return cols_; }
  index_t width() const { return width_; }

 private:
  std::vector<std::int32_t> entries_;
  std::vector<index_t> offsets_;  // packed form only
  index_t rows_ = 0;
  index_t cols_ = 0;
  index_t width_ = 0;
};

}  // namespace canopy
