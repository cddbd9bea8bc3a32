// Input checks shared by the components that take coordinates from callers.
#pragma once

#include "runtime/common.hpp"

namespace canopy {

// The index of the first NaN or infinite value of v[0, n), or n when every value is finite.
index_t first_non_finite(const float* v, index_t n);

}  // namespace canopy
