#include "runtime/traversal.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace canopy {

namespace {
double mean(const std::vector<index_t>& v) {
  if (v.empty()) return 0.0;
  return static_cast<double>(std::accumulate(v.begin(), v.end(), index_t{0})) / static_cast<double>(v.size());
}
}  // namespace

double TraversalStats::nodes_per_warp() const { return mean(warp_nodes); }
double TraversalStats::gpu_nodes_per_warp() const { return mean(gpu_warp_nodes); }

void TraversalStats::begin(const TraversalOptions& opt, Device held, const char* who, int height, int default_depth) {
  if (opt.depth < 0 || opt.depth > height)
    throw Error("depth = " + std::to_string(opt.depth) + " is deeper than the tree (it has " + std::to_string(height) +
                " levels; use 1.." + std::to_string(height) + ")");
  if (opt.device == Device::Gpu && held != Device::Gpu)
    throw Error(std::string("device gpu was requested but this ") + who + " was created for the cpu (" +
                gpu_description() + ")");
  device = opt.device == Device::Cpu ? Device::Cpu : held;
  depth = opt.depth > 0 ? opt.depth : std::min(default_depth, height);
}

void TraversalStats::keep(const index_t* order, index_t n, std::vector<index_t>&& bucket_offsets) {
  if (order) {
    schedule.order.assign(order, order + n);
    schedule.bucket_offsets = std::move(bucket_offsets);
  } else {
    schedule = input_order(n);
  }
}

}  // namespace canopy
