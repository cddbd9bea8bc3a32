// Radius pairs decided in float64 on the GPU, for data searched through a kd-tree of its float32
// rows (the Python package's exact pair queries): the tree lists each query's candidates within a
// float32 radius past every rounding (PointCorrelation::run_lists, into device memory), and the
// device keeps candidate j of query a where q[a] and data row keep[j] are within rr[a] as scipy's
// cKDTree decides it (the float64 sum of squared differences <= rr[a] * rr[a] for p = 2; the
// 1-norm or the largest difference <= rr[a]): the differences summed in order, each operation
// rounded on its own (no fused multiply-add), as the host computes it. Only the kept pairs reach
// the host.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <mutex>

#include "runtime/point_correlation.hpp"

namespace canopy {

struct ExactFilter {
  const index_t* rows = nullptr;  // [n] the number each query reports as its pairs' i; null: row0 + a
  index_t row0 = 0;
  const double* q = nullptr;      // [n][dims] the queries in float64; null: query a is data row i (a tree's own points)
  const double* rr = nullptr;     // [n] their radii; null: r for every query
  double r = 0;
  const void* data = nullptr;     // [n_data][dims], double (data_f64) or float
  bool data_f64 = true;
  index_t n_data = 0;
  const index_t* keep = nullptr;  // [n_ids] the tree's point ids -> data rows; null: the same
  index_t n_ids = 0;
  int dims = 0;
  double p = 2;        // 1, 2 or infinity (exact_filter_p)
  bool upper = false;  // only pairs with data row > rows[a]
  bool with_d = true;  // the distances too
  // The queries are an array the caller keeps unchanged (a tree's own rows): on the device from
  // one call to the next, as the data.
  bool queries_kept = false;
  // Set: each query's number of kept pairs, host [n], and no pairs (out is not called): an exact
  // count without the pairs crossing (the float64 counts of rows within rounding of r).
  index_t* counts = nullptr;
};

// Where the kept pairs go, once their number is known: ij [total][2] (i, j) and d [total] (null
// when !with_d), host memory.
struct ExactPairsOut {
  index_t* ij = nullptr;
  double* d = nullptr;
};

// The p the device filter computes as the host does (other p: its pow may differ in the last bit).
inline bool exact_filter_p(double p) { return p == 1 || p == 2 || std::isinf(p); }

// The device's exact pairs, as a tree's calls share it: the data and keep (and kept queries) stay
// on the device from one call to the next, copied again only when a call passes another address or
// size (so they must be arrays the caller keeps, unchanged, while it calls with them: a tree's
// own), and so do the pinned slots of the copies and the n-sized buffers; the candidates and pairs
// are the call's. Calls through one object take turns.
// queries: the engine's float32 rows [n][tree dims] (host); opt: run_lists' (sorted lists keep
// the pairs ordered by (i, j) where keep is increasing). Errors: run_lists', a p the filter does
// not take, a candidate id outside 0..n_ids - 1 or a data row outside 0..n_data - 1. With
// f.counts, `out` may be empty. `counted`, when given, is called once the candidates are counted,
// before they are listed, sorted and filtered (every kept pair is one of them): a caller may make
// the result's host memory ready meanwhile.
class ExactPairsGpu {
 public:
  ExactPairsGpu();
  ~ExactPairsGpu();
  ExactPairsGpu(const ExactPairsGpu&) = delete;
  ExactPairsGpu& operator=(const ExactPairsGpu&) = delete;
  RaggedStats operator()(PointCorrelation& pc, const float* queries, index_t n, const PcListOptions& opt,
                         const ExactFilter& f, const std::function<ExactPairsOut(index_t total)>& out,
                         const std::function<void(index_t candidates)>& counted = {});

 private:
  struct Kept;
  std::mutex mu_;
  std::unique_ptr<Kept> kept_;  // made by the first call (a CPU-only process makes none)
};

}  // namespace canopy
