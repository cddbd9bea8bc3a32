// Point sets for the benchmark driver and for programs that read their points from files:
// CSV or gzip-compressed CSV with a header row, column selection, normalisation to the unit
// cube, and seeded generators.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace canopy {

struct PointSet {
  std::vector<float> coords;  // row-major [size][dims]
  int dims = 0;
  std::vector<std::string> names;  // column names (from the header) or generated ones
  // Rows read_csv dropped for an empty field (ReadOptions::skip_incomplete); 0 otherwise.
  index_t skipped_incomplete = 0;
  index_t size() const { return dims == 0 ? 0 : static_cast<index_t>(coords.size()) / dims; }
  const float* data() const { return coords.data(); }
};

// "0-6", "1,3,5-7" or "" (every column). Errors name the bad part of the spec; column numbers
// run to 10^6 and a spec names at most kMaxColumns columns.
constexpr std::size_t kMaxColumns = 1000000;
std::vector<int> parse_columns(const std::string& spec);

struct ReadOptions {
  // Drop rows with an empty (or blank, or "") field in a chosen column instead of failing, and
  // count them in PointSet::skipped_incomplete. Empty fields in other columns never matter; a
  // short or long row, text, NaN and infinity stay errors.
  bool skip_incomplete = false;
};

// Reads FILE (plain, or gzip when compressed: detected from the content). The first line is
// the header; every later non-blank line must have the header's number of fields. Errors
// (canopy::Error) name the file and line: a missing or unreadable file, no data rows, a short
// or long row, an empty field in a chosen column (unless options.skip_incomplete; with it, a
// file whose rows are all incomplete), a field that is not a number, NaN or infinity, a column
// out of range.
PointSet read_csv(const std::string& path, const std::string& columns, const ReadOptions& options);
PointSet read_csv(const std::string& path, const std::string& columns = "");

// Per-dimension minimum and maximum of a point set.
struct Ranges {
  std::vector<float> lo, hi;
};
Ranges ranges_of(const PointSet& points);
// Maps each dimension affinely so that [lo, hi] becomes [0, 1] (a constant dimension maps to
// 0). Queries are mapped with the ranges of the points they are searched against.
void normalize(PointSet& points, const Ranges& ranges);
inline void normalize_unit_cube(PointSet& points) { normalize(points, ranges_of(points)); }

// n points uniform in [0, 1)^dims from a seeded generator.
PointSet generate_uniform(index_t n, int dims, std::uint64_t seed);

// n positions of the Plummer model (scale radius 1, centred at the origin, 3 dims) from a
// seeded generator; radii beyond 20 scale radii are redrawn. Masses are the caller's (the
// Barnes-Hut workload gives every body 1/n).
PointSet generate_plummer(index_t n, std::uint64_t seed);

// Parses "uniform:N:D" (the paper's Rand_Dim7 is uniform:400000:7) or "plummer:N".
PointSet generate(const std::string& spec, std::uint64_t seed);

// Reorders the points by a seeded random permutation.
void shuffle(PointSet& points, std::uint64_t seed);

}  // namespace canopy
