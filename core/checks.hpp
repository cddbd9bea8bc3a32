// Input checks shared by the components that take coordinates from callers.
#pragma once

#include "core/types.hpp"

namespace canopy {

// The index of the first NaN or infinite value of v[0, n), or n when every value is finite.
index_t first_non_finite(const float* v, index_t n);

// Queries of a traversal: n >= 0, a non-null pointer when n > 0, every coordinate finite (an
// error names the first bad query and dimension). Queries in device memory are checked on the
// device, after the work queued on `after` (the caller's stream; null: none).
void check_queries(const float* queries, index_t n, int dims, stream_t after = nullptr);

}  // namespace canopy
