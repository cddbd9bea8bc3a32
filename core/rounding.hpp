// Correctly rounded arithmetic that the CUDA compiler may not contract into an FMA, so the CPU
// and GPU take bit-identical decisions (host code builds with -ffp-contract=off for the same
// reason). Float for distances and forces, float64 for forest sums and their exp / sigmoid.
#pragma once

#include <cmath>

#include "core/types.hpp"

// The device intrinsic in device code, the plain operation (IEEE-754 rounded) on the host.
#if defined(__CUDA_ARCH__)
#define CANOPY_DEVICE_OR_HOST(device, host) (device)
#else
#define CANOPY_DEVICE_OR_HOST(device, host) (host)
#endif

namespace canopy {

CANOPY_HD inline float mul_rn(float a, float b) { return CANOPY_DEVICE_OR_HOST(__fmul_rn(a, b), a * b); }
CANOPY_HD inline float add_rn(float a, float b) { return CANOPY_DEVICE_OR_HOST(__fadd_rn(a, b), a + b); }
CANOPY_HD inline float sub_rn(float a, float b) { return CANOPY_DEVICE_OR_HOST(__fsub_rn(a, b), a - b); }
CANOPY_HD inline float div_rn(float a, float b) { return CANOPY_DEVICE_OR_HOST(__fdiv_rn(a, b), a / b); }
// std::sqrt is correctly rounded on the host (IEEE-754 requires it); on the device the _rn
// intrinsic is, whatever the compiler flags.
CANOPY_HD inline float sqrt_rn(float a) { return CANOPY_DEVICE_OR_HOST(__fsqrt_rn(a), std::sqrt(a)); }

CANOPY_HD inline double add_rn(double a, double b) { return CANOPY_DEVICE_OR_HOST(__dadd_rn(a, b), a + b); }
CANOPY_HD inline double sub_rn(double a, double b) { return CANOPY_DEVICE_OR_HOST(__dsub_rn(a, b), a - b); }
CANOPY_HD inline double mul_rn(double a, double b) { return CANOPY_DEVICE_OR_HOST(__dmul_rn(a, b), a * b); }
CANOPY_HD inline double div_rn(double a, double b) { return CANOPY_DEVICE_OR_HOST(__ddiv_rn(a, b), a / b); }

}  // namespace canopy
