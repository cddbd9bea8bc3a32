// What the GPU tree builders (KdTree::build_on_gpu, Octree::build_on_gpu) report. Each returns
// the tree its CPU build gives for the same input, bit for bit: the same node order, bounds,
// point order and ids, so every result and schedule over it is the same too.
#pragma once

namespace canopy {

struct GpuBuildStats {
  double build_ms = 0;     // the build on the device, from the points in device memory (GPU time)
  double upload_ms = 0;    // copying host input to the device (0 for device input)
  double download_ms = 0;  // copying the finished tree to the host
};

}  // namespace canopy
