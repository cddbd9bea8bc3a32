// Internal: the schedules Auto times inside a call (ForestEngine::predict), CUDA-free so that
// the tuner's header can name them.
#pragma once

#include <utility>
#include <vector>

#include "core/types.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace detail {

// Auto's trial inside a call (adaptive layout): after the call's kernel, these schedules run on
// the call's first rows[i] rows (0 or none given: all of them) into a scratch buffer, each timed
// alone with CUDA events (ms: +inf when one could not run: a launch this forest or batch cannot
// take).
struct ForestTrialRuns {
  std::vector<std::pair<ForestKernel, ForestSchedule>> runs;  // resolved schedules
  std::vector<index_t> rows;
  std::vector<double> ms;
};

}  // namespace detail
}  // namespace canopy
