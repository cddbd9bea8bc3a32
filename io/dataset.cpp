#include "io/dataset.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <random>
#include <stdexcept>

#include <unistd.h>

#include "io/line_reader.hpp"

namespace canopy {
namespace {

std::vector<std::string> split_fields(const std::string& line) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    out.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\"");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\"");
  return s.substr(b, e - b + 1);
}

// n points of `dims` coordinates as a vector size. A count beyond what a vector holds is an
// Error: wrapped around, it gave too few points (uniform) or writes past the end (plummer).
std::size_t coordinate_count(const char* what, index_t n, int dims) {
  if (static_cast<std::size_t>(n) > std::vector<float>().max_size() / static_cast<std::size_t>(dims))
    throw Error(std::string(what) + ": N = " + std::to_string(n) + " points of " + std::to_string(dims) +
                " coordinates are more than memory can hold");
  return static_cast<std::size_t>(n) * static_cast<std::size_t>(dims);
}

}  // namespace

std::vector<int> parse_columns(const std::string& spec) {
  std::vector<int> cols;
  if (trim(spec).empty()) return cols;
  for (const std::string& part_raw : split_fields(spec)) {
    const std::string part = trim(part_raw);
    auto number = [&](const std::string& s) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || errno || v < 0 || v > 1000000)
        throw Error("--columns: '" + part + "' is not a column number or range like 0-6");
      return static_cast<int>(v);
    };
    const std::size_t dash = part.find('-');
    if (dash == std::string::npos) {
      cols.push_back(number(part));
    } else {
      const int a = number(trim(part.substr(0, dash))), b = number(trim(part.substr(dash + 1)));
      if (b < a) throw Error("--columns: range '" + part + "' runs backwards");
      // A short spec must not ask for gigabytes ("0-1000000" a thousand times).
      if (static_cast<std::size_t>(b - a) + cols.size() >= kMaxColumns)
        throw Error("--columns: '" + spec.substr(0, 40) + (spec.size() > 40 ? "...'" : "'") + " names more than " +
                    std::to_string(kMaxColumns) + " columns");
      for (int c = a; c <= b; ++c) cols.push_back(c);
    }
    if (cols.size() > kMaxColumns) throw Error("--columns: more than " + std::to_string(kMaxColumns) + " columns");
  }
  return cols;
}

PointSet read_csv(const std::string& path, const std::string& columns) {
  return read_csv(path, columns, ReadOptions{});
}

PointSet read_csv(const std::string& path, const std::string& columns, const ReadOptions& options) {
  LineReader in(path);
  std::string line;
  if (!in.next(line)) throw Error(path + ": the file is empty (a header row is expected)");
  const std::vector<std::string> header = split_fields(line);
  const int n_fields = static_cast<int>(header.size());
  std::vector<int> cols = parse_columns(columns);
  if (cols.empty()) {
    cols.resize(static_cast<std::size_t>(n_fields));
    std::iota(cols.begin(), cols.end(), 0);
  }
  for (int c : cols)
    if (c >= n_fields)
      throw Error(path + ": column " + std::to_string(c) + " is out of range: the header has " +
                  std::to_string(n_fields) + " columns (0.." + std::to_string(n_fields - 1) + ")");
  PointSet ps;
  ps.dims = static_cast<int>(cols.size());
  for (int c : cols) ps.names.push_back(trim(header[c]));

  std::vector<const char*> starts(static_cast<std::size_t>(n_fields));
  std::vector<std::size_t> lens(static_cast<std::size_t>(n_fields));
  index_t line_no = 1;
  while (in.next(line)) {
    ++line_no;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
    // Split in place: field boundaries only, no allocation per field.
    int f = 0;
    std::size_t s = 0;
    for (;;) {
      const std::size_t comma = line.find(',', s);
      if (f < n_fields) {
        starts[f] = line.c_str() + s;
        lens[f] = (comma == std::string::npos ? line.size() : comma) - s;
      }
      ++f;
      if (comma == std::string::npos) break;
      s = comma + 1;
    }
    if (f != n_fields)
      throw Error(path + ":" + std::to_string(line_no) + ": expected " + std::to_string(n_fields) +
                  " fields (as in the header), found " + std::to_string(f));
    bool incomplete = false;
    const std::size_t row_start = ps.coords.size();
    for (std::size_t k = 0; k < cols.size(); ++k) {
      const int c = cols[k];
      const std::string field = trim(std::string(starts[c], lens[c]));
      if (field.empty()) {
        if (!options.skip_incomplete)
          throw Error(path + ":" + std::to_string(line_no) + ": column " + std::to_string(c) + " (" + ps.names[k] +
                      ") is empty; to drop such rows, pass --skip-incomplete (canopy-bench) or set "
                      "ReadOptions::skip_incomplete");
        // The rest of the row is still checked: only empty fields make a row skippable.
        incomplete = true;
        continue;
      }
      char* end = nullptr;
      const float v = std::strtof(field.c_str(), &end);
      if (*end != '\0')
        throw Error(path + ":" + std::to_string(line_no) + ": column " + std::to_string(c) + " (" +
                    ps.names[k] + "): '" + field + "' is not a number");
      if (!std::isfinite(v))
        throw Error(path + ":" + std::to_string(line_no) + ": column " + std::to_string(c) + " (" +
                    ps.names[k] + "): '" + field + "' is not finite");
      ps.coords.push_back(v);
    }
    if (incomplete) {
      ps.coords.resize(row_start);
      ++ps.skipped_incomplete;
    }
  }
  if (ps.coords.empty() && ps.skipped_incomplete > 0)
    throw Error(path + ": no complete data rows: every one of the " + std::to_string(ps.skipped_incomplete) +
                " data rows has an empty field in the chosen columns");
  if (ps.coords.empty()) throw Error(path + ": no data rows after the header");
  return ps;
}

Ranges ranges_of(const PointSet& ps) {
  Ranges r;
  r.lo.assign(static_cast<std::size_t>(ps.dims), 0.0f);
  r.hi.assign(static_cast<std::size_t>(ps.dims), 0.0f);
  if (ps.size() == 0) return r;
  for (int d = 0; d < ps.dims; ++d) r.lo[d] = r.hi[d] = ps.coords[d];
  for (index_t i = 0; i < ps.size(); ++i)
    for (int d = 0; d < ps.dims; ++d) {
      r.lo[d] = std::min(r.lo[d], ps.coords[i * ps.dims + d]);
      r.hi[d] = std::max(r.hi[d], ps.coords[i * ps.dims + d]);
    }
  return r;
}

void normalize(PointSet& ps, const Ranges& r) {
  if (static_cast<int>(r.lo.size()) != ps.dims || static_cast<int>(r.hi.size()) != ps.dims)
    throw Error("normalize: the ranges have " + std::to_string(r.lo.size()) + " dimensions, the points " +
                std::to_string(ps.dims));
  for (int d = 0; d < ps.dims; ++d) {
    const double lo = r.lo[d], range = static_cast<double>(r.hi[d]) - lo;
    for (index_t i = 0; i < ps.size(); ++i) {
      float& x = ps.coords[i * ps.dims + d];
      x = range > 0 ? static_cast<float>((x - lo) / range) : 0.0f;
    }
  }
}

PointSet generate_uniform(index_t n, int dims, std::uint64_t seed) {
  if (n <= 0) throw Error("generate uniform: N = " + std::to_string(n) + " must be at least 1");
  if (dims <= 0) throw Error("generate uniform: D = " + std::to_string(dims) + " must be at least 1");
  PointSet ps;
  ps.dims = dims;
  ps.coords.resize(coordinate_count("generate uniform", n, dims));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : ps.coords) x = u(rng);
  for (int d = 0; d < dims; ++d) ps.names.push_back("x" + std::to_string(d));
  return ps;
}

PointSet generate_plummer(index_t n, std::uint64_t seed) {
  if (n <= 0) throw Error("generate plummer: N = " + std::to_string(n) + " must be at least 1");
  PointSet ps;
  ps.dims = 3;
  ps.coords.resize(coordinate_count("generate plummer", n, 3));
  std::mt19937_64 rng(seed);
  // 53 random bits by hand rather than std::uniform_real_distribution, whose algorithm the
  // standard leaves open, so the draws do not depend on the standard library.
  auto unit = [&] { return static_cast<double>(rng() >> 11) * 0x1p-53; };  // [0, 1)
  const double pi = 3.14159265358979323846;
  // The Plummer model's radius has an unbounded tail (mass fraction within r is
  // r^3 / (1 + r^2)^(3/2)); the ~0.4% of radii beyond 20 scale radii are redrawn so that a
  // few far-out bodies do not stretch the root cell and waste octree levels.
  const double cutoff = 20.0;
  for (index_t i = 0; i < n; ++i) {
    double r;
    do {
      const double u = unit();
      r = 1.0 / std::sqrt(std::pow(u, -2.0 / 3.0) - 1.0);  // inverse of the cumulative mass
    } while (!(r <= cutoff));
    const double cos_t = 2.0 * unit() - 1.0, phi = 2.0 * pi * unit();
    const double sin_t = std::sqrt(std::max(0.0, 1.0 - cos_t * cos_t));
    ps.coords[i * 3] = static_cast<float>(r * sin_t * std::cos(phi));
    ps.coords[i * 3 + 1] = static_cast<float>(r * sin_t * std::sin(phi));
    ps.coords[i * 3 + 2] = static_cast<float>(r * cos_t);
  }
  for (int d = 0; d < 3; ++d) ps.names.push_back("x" + std::to_string(d));
  return ps;
}

PointSet generate(const std::string& spec, std::uint64_t seed) {
  const std::vector<std::string> parts = split_fields([&] {
    std::string s = spec;
    std::replace(s.begin(), s.end(), ':', ',');
    return s;
  }());
  auto number = [&](const std::string& s, const char* what) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno || v <= 0)
      throw Error("--generate " + spec + ": " + what + " '" + s + "' is not a positive integer");
    return static_cast<index_t>(v);
  };
  // A size no memory holds is an Error naming the spec, not std::bad_alloc.
  auto sized = [&](index_t n, index_t d, auto&& make) -> PointSet {
    if (n > INT64_MAX / 4 / d)
      throw Error("--generate " + spec + ": " + std::to_string(n) + " x " + std::to_string(d) + " coordinates overflow");
    // More than the machine's memory: refused before asking for it (an allocator may grant
    // address space it cannot back, and a sanitizer's allocator aborts instead of throwing).
    const double gib = static_cast<double>(n) * static_cast<double>(d) * 4 / (1u << 30);
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    const double ram_gib = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) / (1u << 30) : 0;
    if (ram_gib > 0 && gib > ram_gib)
      throw Error("--generate " + spec + ": " + std::to_string(n) + " points x " + std::to_string(d) + " dimensions (" +
                  std::to_string(gib) + " GiB) do not fit in memory (" + std::to_string(ram_gib) + " GiB)");
    try {
      return make();
    } catch (const std::bad_alloc&) {  // also std::length_error below
      throw Error("--generate " + spec + ": " + std::to_string(n) + " points x " + std::to_string(d) + " dimensions (" +
                  std::to_string(static_cast<double>(n) * static_cast<double>(d) * 4 / (1u << 30)) +
                  " GiB) do not fit in memory");
    } catch (const std::length_error&) {
      throw Error("--generate " + spec + ": " + std::to_string(n) + " points x " + std::to_string(d) + " dimensions (" +
                  std::to_string(static_cast<double>(n) * static_cast<double>(d) * 4 / (1u << 30)) +
                  " GiB) do not fit in memory");
    }
  };
  if (parts.size() == 3 && parts[0] == "uniform") {
    const index_t n = number(parts[1], "N"), d = number(parts[2], "D");
    // Checked before the narrowing: 4294967297 would otherwise become 1 dimension.
    if (d > INT_MAX) throw Error("--generate " + spec + ": D '" + parts[2] + "' is too large (at most " + std::to_string(INT_MAX) + ")");
    return sized(n, d, [&] { return generate_uniform(n, static_cast<int>(d), seed); });
  }
  if (parts.size() == 2 && parts[0] == "plummer") {
    const index_t n = number(parts[1], "N");
    return sized(n, 4, [&] { return generate_plummer(n, seed); });  // positions and a mass
  }
  throw Error("--generate " + spec + ": expected uniform:N:D or plummer:N");
}

void shuffle(PointSet& ps, std::uint64_t seed) {
  const index_t n = ps.size();
  std::vector<index_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), index_t{0});
  std::mt19937_64 rng(seed);
  for (index_t i = n - 1; i > 0; --i) {
    std::uniform_int_distribution<index_t> pick(0, i);
    std::swap(perm[i], perm[pick(rng)]);
  }
  std::vector<float> out(ps.coords.size());
  for (index_t i = 0; i < n; ++i)
    std::copy(ps.coords.begin() + perm[i] * ps.dims, ps.coords.begin() + (perm[i] + 1) * ps.dims,
              out.begin() + i * ps.dims);
  ps.coords.swap(out);
}

}  // namespace canopy
