#include "runtime/options.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "inspector/scheduling_matrix.hpp"

namespace canopy {

namespace {
double mean(const std::vector<index_t>& v) {
  if (v.empty()) return 0.0;
  return static_cast<double>(std::accumulate(v.begin(), v.end(), index_t{0})) / static_cast<double>(v.size());
}
}  // namespace

double TraversalStats::nodes_per_warp() const { return mean(warp_nodes); }
double TraversalStats::gpu_nodes_per_warp() const { return mean(gpu_warp_nodes); }

GuidedRows guided_rows(const TraversalOptions& opt, Device device, bool builtin) {
  if (opt.row_cap < 0) throw Error("row_cap = " + std::to_string(opt.row_cap) + " is negative (0: every top-leaf)");
  GuidedRows r;
  const bool pipelined = opt.pipeline && device == Device::Gpu;
  r.probe = opt.probe ? *opt.probe : pipelined && builtin ? GuidedProbe::None : GuidedProbe::Full;
  r.cap = opt.row_cap > 0 ? opt.row_cap : r.probe == GuidedProbe::None ? kDefaultPositionalRowCap : 0;
  return r;
}

int guided_default_depth(const TraversalOptions& opt, Device device) {
  return guided_rows(opt, device).probe == GuidedProbe::None ? kDefaultPositionalDepth : kDefaultTopTreeDepth;
}

}  // namespace canopy
