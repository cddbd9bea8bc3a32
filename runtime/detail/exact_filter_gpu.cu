// exact_pairs_gpu (runtime/exact_filter.hpp): the candidates' lists stay in device memory, two
// passes over each query's candidates (count the kept, then write them at the scanned offsets).
#include <cub/device/device_scan.cuh>

#include <cstdint>
#include <limits>
#include <string>

#include "core/cuda.cuh"
#include "layouts/resident.hpp"
#include "runtime/exact_filter.hpp"

namespace canopy {
namespace {

enum class Norm { L1, L2, Max };

template <class T>
__device__ double exact_distance(const double* q, const T* x, int m, Norm norm) {
  double s = 0;
  for (int d = 0; d < m; ++d) {
    const double v = __dsub_rn(static_cast<double>(x[d]), q[d]);
    if (norm == Norm::L2) s = __dadd_rn(s, __dmul_rn(v, v));
    else if (norm == Norm::L1) s = __dadd_rn(s, fabs(v));
    else s = (fabs(v) > s || isnan(v)) ? fabs(v) : s;
  }
  return norm == Norm::L2 ? __dsqrt_rn(s) : s;
}

struct Filter {
  const index_t* offsets;
  const index_t* ids;
  const index_t* rows;
  const double* q;
  const double* rr;
  const void* data;
  bool data_f64;
  index_t n_data;
  const index_t* keep;
  index_t n_ids;
  int dims;
  Norm norm;
  bool upper;
};

// Query a's kept candidates: counted (ij null) or written from `at` on. bad: an id out of range.
__device__ index_t visit_row(const Filter& f, index_t a, index_t at, index_t* ij, double* d, int* bad) {
  const index_t row = f.rows[a];
  const double* qa = f.q + a * f.dims;
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
    const double dist = f.data_f64 ? exact_distance(qa, static_cast<const double*>(f.data) + j * f.dims, f.dims, f.norm)
                                   : exact_distance(qa, static_cast<const float*>(f.data) + j * f.dims, f.dims, f.norm);
    if (!(dist <= f.rr[a])) continue;
    if (ij) {
      ij[2 * (at + kept)] = row;
      ij[2 * (at + kept) + 1] = j;
      if (d) d[at + kept] = dist;
    }
    ++kept;
  }
  return kept;
}

__global__ void count_kept(Filter f, index_t n, index_t* kept, int* bad) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t a = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < n; a += stride)
    kept[a] = visit_row(f, a, 0, nullptr, nullptr, bad);
}

__global__ void write_kept(Filter f, index_t n, const index_t* start, index_t* ij, double* d, int* bad) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t a = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; a < n; a += stride)
    visit_row(f, a, start[a], ij, d, bad);
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

}  // namespace

RaggedStats exact_pairs_gpu(PointCorrelation& pc, const float* queries, index_t n, const PcListOptions& opt,
                            const ExactFilter& f, const std::function<ExactPairsOut(index_t total)>& out) {
  const std::string who = "exact_pairs_gpu: ";
  if (!exact_filter_p(f.p)) throw Error(who + "p = " + std::to_string(f.p) + " (the device filter takes 1, 2, infinity)");
  if (n >= std::numeric_limits<std::int32_t>::max())  // (CUB's scan below counts in int)
    throw Error(who + "n = " + std::to_string(n) + " queries is more than one call takes (2^31 - 2); split it");
  if (f.dims != pc.tree().dims())
    throw Error(who + "dims = " + std::to_string(f.dims) + ", the tree's " + std::to_string(pc.tree().dims()));
  Stream stream;  // first: the buffers below are freed on it
  const cudaStream_t s = stream.get();
  detail::StagingSlots staging;  // the pinned slots of every copy of the call
  Event ready;
  if (opt.stream) stream.wait_for(opt.stream, ready);
  const std::size_t un = static_cast<std::size_t>(std::max<index_t>(n, 0));
  DeviceBuffer<index_t> offsets, ids, rows, keep, kept, ij;
  DeviceBuffer<double> q, rr, data64, d;
  DeviceBuffer<float> data32;
  DeviceBuffer<int> bad;
  offsets.reserve(un + 1, "the candidates' offsets", s);
  stream.sync();  // (the lists are written from the engine's own stream)
  PcListOptions o = opt;
  o.stream = s;
  RaggedStats st = pc.run_lists(queries, n, o, offsets.get(), [&](index_t total) {
    ids.reserve(static_cast<std::size_t>(total), "the candidates", s);
    stream.sync();
    return ids.get();
  });
  Filter g{};
  g.offsets = offsets.get();
  g.ids = ids.get();
  g.rows = upload(rows, f.rows, un, "the rows", s, staging);
  g.q = upload(q, f.q, un * f.dims, "the float64 queries", s, staging);
  g.rr = upload(rr, f.rr, un, "the radii", s, staging);
  const std::size_t data_values = static_cast<std::size_t>(f.n_data) * f.dims;
  g.data = f.data_f64 ? static_cast<const void*>(upload(data64, static_cast<const double*>(f.data), data_values, "the data", s, staging))
                      : static_cast<const void*>(upload(data32, static_cast<const float*>(f.data), data_values, "the data", s, staging));
  g.data_f64 = f.data_f64;
  g.n_data = f.n_data;
  g.keep = upload(keep, f.keep, static_cast<std::size_t>(f.n_ids), "the point ids' rows", s, staging);
  g.n_ids = f.n_ids;
  g.dims = f.dims;
  g.norm = f.p == 2 ? Norm::L2 : f.p == 1 ? Norm::L1 : Norm::Max;
  g.upper = f.upper;
  kept.reserve(un + 1, "the kept counts", s);
  bad.reserve(1, "the filter's flag", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(kept.get(), 0, (un + 1) * sizeof(index_t), s));
  CANOPY_CUDA_CHECK(cudaMemsetAsync(bad.get(), 0, sizeof(int), s));
  const int block = 256;
  const int grid = static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>((un + block - 1) / block, 8192)));
  if (n > 0) {
    count_kept<<<grid, block, 0, s>>>(g, n, kept.get(), bad.get());
    CANOPY_CUDA_CHECK_LAUNCH("count_kept");
  }
  if (f.counts) {
    int flag = 0;
    copy_to_host(&flag, bad.get(), 1, s);
    if (n > 0) detail::copy_down(f.counts, kept.get(), un * sizeof(index_t), s, &staging);
    stream.sync();
    check_flag(who, flag);
    return st;
  }
  DeviceBuffer<unsigned char> temp;
  run_cub("cub::DeviceScan::ExclusiveSum (the kept pairs)", temp, "the filter's scan space", s,
          [&](void* t, std::size_t& bytes) {
            return cub::DeviceScan::ExclusiveSum(t, bytes, kept.get(), kept.get(), static_cast<int>(un + 1), s);
          });
  index_t total = 0;
  int flag = 0;
  copy_to_host(&total, kept.get() + un, 1, s);
  copy_to_host(&flag, bad.get(), 1, s);
  stream.sync();
  check_flag(who, flag);
  ij.reserve(2 * static_cast<std::size_t>(total), "the kept pairs", s);
  if (f.with_d) d.reserve(static_cast<std::size_t>(total), "the kept distances", s);
  if (n > 0 && total > 0) {
    write_kept<<<grid, block, 0, s>>>(g, n, kept.get(), ij.get(), f.with_d ? d.get() : nullptr, bad.get());
    CANOPY_CUDA_CHECK_LAUNCH("write_kept");
  }
  const ExactPairsOut dst = out(total);
  // Through pinned slots, the host's side on all its cores: the fresh pages of a large result
  // are the cost (H200 host, 258 MB: 75 ms by one pageable copy, 18 ms into touched pages).
  const std::size_t pairs_bytes = 2 * static_cast<std::size_t>(total) * sizeof(index_t);
  if (total > 0) detail::copy_down(dst.ij, ij.get(), pairs_bytes, s, &staging);
  if (total > 0 && f.with_d && dst.d) detail::copy_down(dst.d, d.get(), pairs_bytes / 2, s, &staging);
  stream.sync();
  return st;
}

}  // namespace canopy
