// GPU tests skip, with the reason, on machines without a usable CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "core/device.hpp"

#define CANOPY_REQUIRE_GPU()                                                                      \
  do {                                                                                            \
    if (!::canopy::gpu_available()) GTEST_SKIP() << "no CUDA device: " << ::canopy::gpu_description(); \
  } while (0)
