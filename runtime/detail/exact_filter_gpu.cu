// ExactPairsGpu (runtime/exact_filter.hpp): the candidates' lists stay in device memory, two
// passes over each query's candidates (count the kept, then write them at the scanned offsets).
#include <cub/device/device_scan.cuh>

#include <cstdint>
#include <limits>
#include <mutex>
#include <string>

#include "core/cuda.cuh"
#include "layouts/resident.hpp"
#include "runtime/exact_filter.hpp"

namespace canopy {
namespace {

enum class Norm { L1, L2, Max };

// What scipy's cKDTree compares with r (the host's power_sum, python/exact_filter.cpp): the sum
// of squares for L2 (against r * r), the norm itself for L1 and the max. Q: the queries' type
// (double, or the data's own when the queries are data rows: each value widened exactly), T:
// the data's.
template <class Q, class T>
__device__ double power_sum(const Q* q, const T* x, int m, Norm norm) {
  double s = 0;
  for (int d = 0; d < m; ++d) {
    const double v = __dsub_rn(static_cast<double>(x[d]), static_cast<double>(q[d]));
    if (norm == Norm::L2) s = __dadd_rn(s, __dmul_rn(v, v));
    else if (norm == Norm::L1) s = __dadd_rn(s, fabs(v));
    else s = (fabs(v) > s || isnan(v)) ? fabs(v) : s;
  }
  return s;
}

struct Filter {
  const index_t* offsets;
  const index_t* ids;
  const index_t* rows;  // null: row0 + a
  index_t row0;
  const void* q;  // Q [][dims]: row a, or with q_by_row (the data itself) row rows[a]
  bool q_by_row;
  const double* rr;  // null: r
  double r;
  const void* data;
  index_t n_data;
  const index_t* keep;
  index_t n_ids;
  int dims;
  Norm norm;
  bool upper;
};

// Query a's kept candidates: counted (ij null) or written from `at` on. bad: an id out of range.
template <class Q, class T>
__device__ index_t visit_row(const Filter& f, index_t a, index_t at, index_t* ij, double* d, int* bad) {
  const index_t row = f.rows ? f.rows[a] : f.row0 + a;
  const T* data = static_cast<const T*>(f.data);
  const Q* qa = static_cast<const Q*>(f.q) + (f.q_by_row ? row : a) * f.dims;
  const double radius = f.rr ? f.rr[a] : f.r;
  const double bound = f.norm == Norm::L2 ? __dmul_rn(radius, radius) : radius;
  index_t kept = 0;
  for (index_t c = f.offsets[a]; c < f.offsets[a + 1]; ++c) {
    const index_t id = f.ids[c];
    if (id < 0 || id >= f.n_ids) {
      *bad = 1;
      return 0;
    }
    const index_t j = f.keep ? f.keep[id] : id;
    if (j < 0 || j >= f.n_data) {
      *bad = 2;
      return 0;
    }
    if (f.upper && j <= row) continue;
    const double ps = power_sum(qa, data + j * f.dims, f.dims, f.norm);
    if (!(ps <= bound)) continue;
    if (ij) {
      ij[2 * (at + kept)] = row;
      ij[2 * (at + kept) + 1] = j;
      if (d) d[at + kept] = f.norm == Norm::L2 ? __dsqrt_rn(ps) : ps;
    }
    ++kept;
  }
  return kept;
}

template <class Q, class T>
__global__ void count_kept(Filter f, index_t n, index_t* kept, int* bad) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t a = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < n; a += stride)
    kept[a] = visit_row<Q, T>(f, a, 0, nullptr, nullptr, bad);
}

template <class Q, class T>
__global__ void write_kept(Filter f, index_t n, const index_t* start, index_t* ij, double* d, int* bad) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t a = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < n; a += stride)
    visit_row<Q, T>(f, a, start[a], ij, d, bad);
}

// The kernel for the queries' and the data's types: count (ij null) or write.
void launch_filter(const Filter& g, bool data_f64, index_t n, int grid, int block, cudaStream_t s, index_t* kept,
                   index_t* ij, double* d, int* bad) {
  const bool self = g.q_by_row;
  if (!ij) {
    if (data_f64) count_kept<double, double><<<grid, block, 0, s>>>(g, n, kept, bad);
    else if (self) count_kept<float, float><<<grid, block, 0, s>>>(g, n, kept, bad);
    else count_kept<double, float><<<grid, block, 0, s>>>(g, n, kept, bad);
    CANOPY_CUDA_CHECK_LAUNCH("count_kept");
    return;
  }
  if (data_f64) write_kept<double, double><<<grid, block, 0, s>>>(g, n, kept, ij, d, bad);
  else if (self) write_kept<float, float><<<grid, block, 0, s>>>(g, n, kept, ij, d, bad);
  else write_kept<double, float><<<grid, block, 0, s>>>(g, n, kept, ij, d, bad);
  CANOPY_CUDA_CHECK_LAUNCH("write_kept");
}

template <class T>
const T* upload(DeviceBuffer<T>& buf, const T* src, std::size_t count, const char* what, cudaStream_t s,
                detail::StagingSlots& staging) {
  if (!src) return nullptr;
  buf.reserve(count, what, s);
  detail::copy_up(buf.get(), src, count * sizeof(T), s, &staging);
  return buf.get();
}

void check_flag(const std::string& who, int flag) {
  if (flag) throw Error(who + (flag == 1 ? "a candidate's id is outside the tree's points" : "keep maps a candidate outside the data"));
}

// A device copy of a host array the caller keeps (ExactPairsGpu's contract): copied again only
// when a call passes another address or length; null stays null.
template <class T>
struct KeptCopy {
  DeviceBuffer<T> buf;
  const T* from = nullptr;
  std::size_t count = 0;

  const T* get(const T* src, std::size_t n, const char* what, cudaStream_t s, detail::StagingSlots& staging) {
    if (!src) return nullptr;
    if (src != from || n != count) {
      from = nullptr;  // (until the copy is complete)
      upload(buf, src, n, what, s, staging);
      from = src, count = n;
    }
    return buf.get();
  }
};

}  // namespace

// What the calls share: the stream (first: the buffers are freed on it), the pinned slots, the
// kept copies of the data, keep and queries, the n-sized buffers.
struct ExactPairsGpu::Kept {
  Stream stream;
  detail::StagingSlots staging;
  KeptCopy<double> data64;
  KeptCopy<float> data32, queries;
  KeptCopy<index_t> keep;
  DeviceBuffer<index_t> offsets, rows, kept;
  DeviceBuffer<double> q, rr;
  DeviceBuffer<int> bad;
  DeviceBuffer<unsigned char> temp;
};

ExactPairsGpu::ExactPairsGpu() = default;
ExactPairsGpu::~ExactPairsGpu() = default;

RaggedStats ExactPairsGpu::operator()(PointCorrelation& pc, const float* queries, index_t n, const PcListOptions& opt,
                                      const ExactFilter& f, const std::function<ExactPairsOut(index_t total)>& out,
                                      const std::function<void(index_t candidates)>& counted) {
  const std::string who = "ExactPairsGpu: ";
  if (!exact_filter_p(f.p)) throw Error(who + "p = " + std::to_string(f.p) + " (the device filter takes 1, 2, infinity)");
  if (n >= std::numeric_limits<std::int32_t>::max())  // (CUB's scan below counts in int)
    throw Error(who + "n = " + std::to_string(n) + " queries is more than one call takes (2^31 - 2); split it");
  if (f.dims != pc.tree().dims())
    throw Error(who + "dims = " + std::to_string(f.dims) + ", the tree's " + std::to_string(pc.tree().dims()));
  const std::lock_guard<std::mutex> lock(mu_);
  if (!kept_) kept_ = std::make_unique<Kept>();
  Kept& k = *kept_;
  const cudaStream_t s = k.stream.get();
  Event ready;
  if (opt.stream) k.stream.wait_for(opt.stream, ready);
  const std::size_t un = static_cast<std::size_t>(std::max<index_t>(n, 0));
  DeviceBuffer<index_t> ids, ij;
  DeviceBuffer<double> d;
  k.offsets.reserve(un + 1, "the candidates' offsets", s);
  k.stream.sync();  // (the lists are written from the engine's own stream)
  PcListOptions o = opt;
  o.stream = s;
  const std::size_t values = static_cast<std::size_t>(f.n_data) * f.dims;
  // (a float32 tree's own points as the queries: one device copy serves as both)
  const bool queries_are_data = f.queries_kept && !f.data_f64 && static_cast<const void*>(queries) == f.data &&
                                static_cast<std::size_t>(n) * f.dims == values;
  const float* listed = queries;
  if (queries_are_data) listed = k.data32.get(queries, values, "the data", s, k.staging);
  else if (f.queries_kept && n > 0) listed = k.queries.get(queries, un * f.dims, "the kept queries", s, k.staging);
  RaggedStats st = pc.run_lists(listed, n, o, k.offsets.get(), [&](index_t total) {
    ids.reserve(static_cast<std::size_t>(total), "the candidates", s);
    k.stream.sync();
    if (counted && !f.counts) counted(total);
    return ids.get();
  });
  Filter g{};
  g.offsets = k.offsets.get();
  g.ids = ids.get();
  g.rows = upload(k.rows, f.rows, un, "the rows", s, k.staging);
  g.row0 = f.row0;
  g.data = f.data_f64 ? static_cast<const void*>(k.data64.get(static_cast<const double*>(f.data), values, "the data", s, k.staging))
                      : static_cast<const void*>(k.data32.get(static_cast<const float*>(f.data), values, "the data", s, k.staging));
  g.q_by_row = f.q == nullptr;
  g.q = f.q ? static_cast<const void*>(upload(k.q, f.q, un * f.dims, "the float64 queries", s, k.staging)) : g.data;
  g.rr = upload(k.rr, f.rr, un, "the radii", s, k.staging);
  g.r = f.r;
  g.n_data = f.n_data;
  g.keep = k.keep.get(f.keep, static_cast<std::size_t>(f.n_ids), "the point ids' rows", s, k.staging);
  g.n_ids = f.n_ids;
  g.dims = f.dims;
  g.norm = f.p == 2 ? Norm::L2 : f.p == 1 ? Norm::L1 : Norm::Max;
  g.upper = f.upper;
  k.kept.reserve(un + 1, "the kept counts", s);
  k.bad.reserve(1, "the filter's flag", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(k.kept.get(), 0, (un + 1) * sizeof(index_t), s));
  CANOPY_CUDA_CHECK(cudaMemsetAsync(k.bad.get(), 0, sizeof(int), s));
  const int block = 256;
  const int grid = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>((un + block - 1) / block, 8192)));
  if (n > 0) launch_filter(g, f.data_f64, n, grid, block, s, k.kept.get(), nullptr, nullptr, k.bad.get());
  int flag = 0;
  if (f.counts) {
    copy_to_host(&flag, k.bad.get(), 1, s);
    if (n > 0) detail::copy_down(f.counts, k.kept.get(), un * sizeof(index_t), s, &k.staging);
    k.stream.sync();
    check_flag(who, flag);
    return st;
  }
  run_cub("cub::DeviceScan::ExclusiveSum (the kept pairs)", k.temp, "the filter's scan space", s,
          [&](void* t, std::size_t& bytes) {
            return cub::DeviceScan::ExclusiveSum(t, bytes, k.kept.get(), k.kept.get(), static_cast<int>(un + 1), s);
          });
  index_t total = 0;
  copy_to_host(&total, k.kept.get() + un, 1, s);
  copy_to_host(&flag, k.bad.get(), 1, s);
  k.stream.sync();
  check_flag(who, flag);
  ij.reserve(2 * static_cast<std::size_t>(total), "the kept pairs", s);
  if (f.with_d) d.reserve(static_cast<std::size_t>(total), "the kept distances", s);
  if (n > 0 && total > 0) launch_filter(g, f.data_f64, n, grid, block, s, k.kept.get(), ij.get(), f.with_d ? d.get() : nullptr, k.bad.get());
  const ExactPairsOut dst = out(total);
  // Through pinned slots, the host's side on all its cores: the fresh pages of a large result
  // are the cost (H200 host, 258 MB: 75 ms by one pageable copy, 18 ms into touched pages).
  const std::size_t pairs_bytes = 2 * static_cast<std::size_t>(total) * sizeof(index_t);
  if (total > 0) detail::copy_down(dst.ij, ij.get(), pairs_bytes, s, &k.staging);
  if (total > 0 && f.with_d && dst.d) detail::copy_down(dst.d, d.get(), pairs_bytes / 2, s, &k.staging);
  k.stream.sync();
  return st;
}

}  // namespace canopy
