// PointCorrelation::run_radii_totals on the GPU (runtime/detail/pc_totals_gpu.cu): the walk's
// counts stay in device memory, which sums them and flags the queries the comparisons pick.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/point_correlation.hpp"

namespace canopy {
namespace detail {

constexpr int kMaxRadiiCompare = 32;  // one bit of PcRadiiTotals::flags each

// run_radii_totals' comparisons, the one rule of the host's and the device's flags: bit c of a
// query's flags is set where its counts at radii a[c] and b[c] differ (b[c] < 0: against 0).
struct RadiiComparisons {
  int a[kMaxRadiiCompare];
  int b[kMaxRadiiCompare];
  int n = 0;

  // who: the caller's name, the start of the error when there are more than kMaxRadiiCompare.
  RadiiComparisons(const std::vector<std::pair<int, int>>& compare, const std::string& who)
      : n(static_cast<int>(compare.size())) {
    if (compare.size() > static_cast<std::size_t>(kMaxRadiiCompare))
      throw Error(who + std::to_string(compare.size()) + " comparisons (at most " + std::to_string(kMaxRadiiCompare) + ")");
    for (int i = 0; i < n; ++i) {
      a[i] = compare[static_cast<std::size_t>(i)].first;
      b[i] = compare[static_cast<std::size_t>(i)].second;
    }
  }
  CANOPY_HD std::uint32_t flags(const index_t* row) const {
    std::uint32_t f = 0;
    for (int i = 0; i < n; ++i)
      if (row[a[i]] != (b[i] < 0 ? 0 : row[b[i]])) f |= 1u << i;
    return f;
  }
};

// run(first, count, counts, stream) fills counts [count][m] (device memory) for queries first ..
// first + count - 1, after the work queued on `stream` and ready when it returns. Batches of at
// most `batch` queries; adds to out.totals ([m], zeroed by the caller) and appends the flagged
// rows (numbered from 0 for the whole call; in no particular order), their flags and counts.
// The last batch's statistics go into out.
using TotalsRun = std::function<TraversalStats(index_t first, index_t count, index_t* counts, stream_t stream)>;
void radii_totals_gpu(index_t n, int m, const RadiiComparisons& compare, index_t batch,
                      stream_t caller, const TotalsRun& run, PcRadiiTotals& out);

}  // namespace detail
}  // namespace canopy
