// GPU tests skip, with the reason, on machines without a usable CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "core/device.hpp"

#define CANOPY_REQUIRE_GPU()                                                                      \
  do {                                                                                            \
    if (!::canopy::gpu_available()) GTEST_SKIP() << "no CUDA device: " << ::canopy::gpu_description(); \
  } while (0)

// A test on the CPU (Suite.NameCpu) and its twin on the GPU (SuiteGpu.Name: skipped without
// one), both running body(device); body may be a template's name with its arguments.
#define CANOPY_TEST_ON_CPU_AND_GPU(suite, name, ...)                                              \
  TEST(suite, name##Cpu) { __VA_ARGS__(::canopy::Device::Cpu); }                                 \
  TEST(suite##Gpu, name) {                                                                        \
    CANOPY_REQUIRE_GPU();                                                                         \
    __VA_ARGS__(::canopy::Device::Gpu);                                                           \
  }
