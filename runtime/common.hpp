// Basic vocabulary shared by every Canopy component. Compiles with a plain C++ compiler.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define CANOPY_HD __host__ __device__
#define CANOPY_DEVICE_INLINE __device__ __forceinline__
#else
#define CANOPY_HD
#endif

namespace canopy {

// Node ids index the flattened tree; 2^31 nodes is ~8e9 points at leaf size 8, checked at build.
using node_id = std::int32_t;
// Point and query counts can exceed 2^31.
using index_t = std::int64_t;

constexpr node_id kNoNode = -1;

// Every error Canopy reports: bad input, bad options, CUDA failures. The message names the
// file, line, parameter or CUDA call at fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A CUDA call failed; what() names the call and CUDA's message.
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& what) : Error(what) {}
};

// Round-to-nearest float arithmetic that the CUDA compiler may not contract into an FMA, so
// the CPU and GPU make bit-identical distance decisions (host code builds with
// -ffp-contract=off for the same reason).
CANOPY_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CANOPY_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CANOPY_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// Correctly rounded square root (IEEE-754 requires it on the host; on the device the _rn
// intrinsic guarantees it whatever the compiler flags), so CPU and GPU agree bit for bit.
CANOPY_HD inline float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
CANOPY_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The same for float64 (forest sums and their exp / sigmoid are computed in float64).
CANOPY_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
CANOPY_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CANOPY_HD inline double div_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace canopy
