// Bit widths of keys and packed fields: one rule for the radix sorts' end bits and the forest
// layouts' packed indices, on the host and the device; Auto's size classes; a float's bits.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/types.hpp"

namespace canopy {

// The fewest bits, at least 1, that hold every value in 0 .. max_value: 1 for 0 and 1, b + 1 for
// 2^b .. 2^(b+1) - 1, and 64 for every value from 2^63 to 2^64 - 1. A radix sort of keys that
// are all <= max_value sorts the bits [0, bits_for(max_value)); a field that indexes n >= 1 items
// (the values 0 .. n - 1) needs bits_for(n - 1). Defined for every argument (a negative signed
// one converts to a value of 2^63 or more: 64).
CANOPY_HD constexpr int bits_for(std::uint64_t max_value) {
  int b = 1;
  while (b < 64 && (std::uint64_t{1} << b) <= max_value) ++b;
  return b;
}

// Auto's batch-size (and tree-size) class: c for the counts 2^c .. 2^(c+1) - 1 (0 for 0 and 1).
// The traversal engine's picks and the forest tuner's choices share it.
CANOPY_HD constexpr int size_class(std::uint64_t n) { return bits_for(n) - 1; }

// A float's bits and back, on the host and the device (forest leaf words and categorical
// offsets, kNN candidate keys).
CANOPY_HD inline std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
CANOPY_HD inline float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace canopy
