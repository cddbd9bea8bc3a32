// PointCorrelation::run_radii_totals' device side: column sums and flagged rows of counts the GPU
// walk left in device memory, so that only m totals and the few flagged rows cross to the host
// (10^6 queries at 16 radii: 128 MB of counts otherwise).
#include <algorithm>

#include "core/cuda.cuh"
#include "runtime/detail/pc_totals.hpp"
#include "runtime/pc_visitor.hpp"

namespace canopy {
namespace detail {
namespace {

// The grid's threads are a multiple of m (blockDim is), so each thread meets one column only.
__global__ void column_sums(const index_t* counts, std::size_t elems, int m, unsigned long long* totals) {
  __shared__ unsigned long long block_sums[kMaxPcRadii];
  for (int j = threadIdx.x; j < m; j += blockDim.x) block_sums[j] = 0;
  __syncthreads();
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  unsigned long long acc = 0;
  for (std::size_t e = tid; e < elems; e += stride) acc += static_cast<unsigned long long>(counts[e]);
  if (acc) atomicAdd(&block_sums[tid % m], acc);
  __syncthreads();
  for (int j = threadIdx.x; j < m; j += blockDim.x)
    if (block_sums[j]) atomicAdd(&totals[j], block_sums[j]);
}

__global__ void flag_rows(const index_t* counts, index_t n, int m, RadiiComparisons c, unsigned long long* n_flagged,
                          index_t* rows, std::uint32_t* flags) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t r = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < n; r += stride) {
    const std::uint32_t f = c.flags(counts + r * m);
    if (f) {
      const unsigned long long at = atomicAdd(n_flagged, 1ull);
      rows[at] = r;
      flags[at] = f;
    }
  }
}

__global__ void gather_rows(const index_t* counts, int m, const index_t* rows, index_t k, index_t* out) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < k * m; e += stride)
    out[e] = counts[rows[e / m] * m + e % m];
}

int grid_for(std::size_t work, int block) {
  return static_cast<int>(std::max<std::size_t>(1, std::min<std::size_t>((work + block - 1) / block, 4096)));
}

}  // namespace

void radii_totals_gpu(index_t n, int m, const RadiiComparisons& compare, index_t batch,
                      stream_t caller, const TotalsRun& run, PcRadiiTotals& out) {
  Stream stream;  // first: the buffers below are freed on it
  const cudaStream_t s = stream.get();
  Event ready;
  if (caller) stream.wait_for(caller, ready);
  DeviceBuffer<index_t> counts, rows, gathered;
  DeviceBuffer<std::uint32_t> flags;
  DeviceBuffer<unsigned long long> sums;  // [m] totals, then the flagged count
  sums.reserve(m + 1, "run_radii_totals' sums", s);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(sums.get(), 0, (m + 1) * sizeof(unsigned long long), s));
  const int block = (256 / m) * m;
  std::vector<unsigned long long> host_sums(static_cast<std::size_t>(m) + 1);
  for (index_t first = 0; first < n; first += batch) {
    const index_t count = std::min(batch, n - first);
    const std::size_t elems = static_cast<std::size_t>(count) * m;
    counts.reserve(elems, "run_radii_totals' counts", s);
    rows.reserve(static_cast<std::size_t>(count), "run_radii_totals' flagged rows", s);
    flags.reserve(static_cast<std::size_t>(count), "run_radii_totals' flags", s);
    static_cast<TraversalStats&>(out) = run(first, count, counts.get(), s);
    CANOPY_CUDA_CHECK(cudaMemsetAsync(sums.get() + m, 0, sizeof(unsigned long long), s));
    column_sums<<<grid_for(elems, block), block, 0, s>>>(counts.get(), elems, m, sums.get());
    CANOPY_CUDA_CHECK_LAUNCH("column_sums");
    flag_rows<<<grid_for(static_cast<std::size_t>(count), 256), 256, 0, s>>>(counts.get(), count, m, compare,
                                                                              sums.get() + m, rows.get(), flags.get());
    CANOPY_CUDA_CHECK_LAUNCH("flag_rows");
    copy_to_host(host_sums.data(), sums.get(), host_sums.size(), s);
    stream.sync();
    const index_t k = static_cast<index_t>(host_sums[m]);
    if (k == 0) continue;
    gathered.reserve(static_cast<std::size_t>(k) * m, "run_radii_totals' flagged counts", s);
    gather_rows<<<grid_for(static_cast<std::size_t>(k) * m, 256), 256, 0, s>>>(counts.get(), m, rows.get(), k,
                                                                                 gathered.get());
    CANOPY_CUDA_CHECK_LAUNCH("gather_rows");
    const std::size_t at = out.rows.size();
    out.rows.resize(at + k);
    out.flags.resize(at + k);
    out.row_counts.resize((at + k) * m);
    copy_to_host(out.rows.data() + at, rows.get(), static_cast<std::size_t>(k), s);
    copy_to_host(out.flags.data() + at, flags.get(), static_cast<std::size_t>(k), s);
    copy_to_host(out.row_counts.data() + at * m, gathered.get(), static_cast<std::size_t>(k) * m, s);
    stream.sync();
    for (std::size_t i = at; i < at + k; ++i) out.rows[i] += first;
  }
  for (int j = 0; j < m; ++j) out.totals[j] = static_cast<std::int64_t>(host_sums[j]);
}

}  // namespace detail
}  // namespace canopy
