// PointCorrelation::run_radii_totals on the GPU (runtime/detail/pc_totals_gpu.cu): the walk's
// counts stay in device memory, which sums them and flags the queries the comparisons pick.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "runtime/point_correlation.hpp"

namespace canopy {
namespace detail {

constexpr int kMaxRadiiCompare = 32;  // one bit of PcRadiiTotals::flags each

// run(first, count, counts, stream) fills counts [count][m] (device memory) for queries first ..
// first + count - 1, after the work queued on `stream` and ready when it returns. Batches of at
// most `batch` queries; adds to out.totals ([m], zeroed by the caller) and appends the flagged
// rows (numbered from 0 for the whole call; in no particular order), their flags and counts.
// The last batch's statistics go into out.
using TotalsRun = std::function<TraversalStats(index_t first, index_t count, index_t* counts, stream_t stream)>;
void radii_totals_gpu(index_t n, int m, const std::vector<std::pair<int, int>>& compare, index_t batch,
                      stream_t caller, const TotalsRun& run, PcRadiiTotals& out);

}  // namespace detail
}  // namespace canopy
