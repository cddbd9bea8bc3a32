#include "core/checks.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_reduce.h>

#include "core/device.hpp"

namespace canopy {

index_t first_non_finite(const float* v, index_t n) {
  // Each block stops at its first bad value or at the best found so far; the smallest wins,
  // so the answer (and any message built from it) does not depend on the thread count.
  return tbb::parallel_reduce(
      tbb::blocked_range<index_t>(0, n, 1 << 16), n,
      [&](const tbb::blocked_range<index_t>& r, index_t found) {
        for (index_t i = r.begin(); i < r.end() && i < found; ++i)
          if (!std::isfinite(v[i])) return i;
        return found;
      },
      [](index_t a, index_t b) { return std::min(a, b); });
}

void check_queries(const float* queries, index_t n, int dims, stream_t after) {
  if (n < 0) throw Error("n_queries = " + std::to_string(n) + " is negative");
  if (n > 0 && queries == nullptr) throw Error("queries is a null pointer");
  const index_t total = n * dims;
  const bool on_device = is_device_pointer(queries);
  const index_t bad = on_device ? first_non_finite_on_device(queries, total, after) : first_non_finite(queries, total);
  if (bad >= total) return;
  float value = 0;
  copy_memory(&value, queries + bad, sizeof value, after);
  throw Error("query " + std::to_string(bad / dims) + " has a non-finite coordinate (" + std::to_string(value) +
              ") in dimension " + std::to_string(bad % dims));
}

}  // namespace canopy
