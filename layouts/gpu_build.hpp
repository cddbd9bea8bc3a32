// Where a tree is built, and what the GPU tree builders report. Every GPU build
// (KdTree::build_on_gpu, BallTree::build_on_gpu, VpTree::build_on_gpu, Octree::build_on_gpu)
// returns the tree its CPU build gives for the same input, bit for bit: the same node order,
// bounds, point order and ids, so every result and schedule over it is the same too. The device
// is therefore only a question of speed, which Device::Auto answers.
#pragma once

#include <string>

#include "core/device.hpp"
#include "core/types.hpp"

namespace canopy {

struct GpuBuildStats {
  double build_ms = 0;     // the build on the device, from the points in device memory (GPU time)
  double upload_ms = 0;    // copying host input to the device (0 for device input)
  double download_ms = 0;  // copying the finished tree to the host (a point tree's: none, PointTree)
};

// Device::Auto builds on the GPU from this many points up, when one is present: below it the
// level-by-level build is a few hundred short kernels, and the host cores finish first.
constexpr index_t kGpuBuildMinPoints = index_t{1} << 15;

namespace detail {

// Whether a build with `requested` runs on the GPU: Gpu always (its build names a missing
// device); input in device memory always, unless Cpu asks for the host build, which cannot read
// it; Auto for n >= kGpuBuildMinPoints when a GPU is present.
inline bool build_on_gpu(Device requested, bool input_on_device, index_t n, const char* tree) {
  if (requested == Device::Gpu) return true;
  if (input_on_device) {
    if (requested == Device::Cpu)
      throw Error(std::string(tree) + ": the points are in device memory; a CPU build (device = cpu) needs them in "
                                      "host memory");
    return true;
  }
  return requested == Device::Auto && n >= kGpuBuildMinPoints && gpu_available();
}

}  // namespace detail
}  // namespace canopy
