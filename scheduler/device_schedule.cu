#include "scheduler/device_schedule.hpp"

#include "core/cuda.cuh"
#include "inspector/device_matrix.cuh"
#include "scheduler/guided.hpp"
#include "scheduler/key_sort.cuh"

namespace canopy {
namespace {

constexpr int kBlock = 256;

// A sandpile bucket starts where the highest set column of the row changes (highest_column()).
__device__ index_t highest_set_column(const std::uint64_t* row, index_t words) {
  for (index_t w = words - 1; w >= 0; --w)
    if (row[w]) return w * 64 + 63 - __clzll(static_cast<long long>(row[w]));
  return -1;
}

__global__ void __launch_bounds__(kBlock)
sandpile_heads_kernel(const std::uint64_t* bits, index_t words, const index_t* order, index_t n, std::uint8_t* heads) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  heads[i] = i == 0 || highest_set_column(bits + order[i] * words, words) !=
                           highest_set_column(bits + order[i - 1] * words, words);
}

__global__ void __launch_bounds__(kBlock) offset_kernel(index_t* order, index_t n, index_t first) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i < n) order[i] += first;
}

}  // namespace

DeviceScheduler::DeviceScheduler() : key_sort_(std::make_unique<KeySortScratch>()) {}
DeviceScheduler::~DeviceScheduler() = default;

void DeviceScheduler::offset(index_t* order, index_t n, index_t first, stream_t stream) {
  if (n <= 0) return;
  offset_kernel<<<static_cast<unsigned>((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(order, n, first);
  CANOPY_CUDA_CHECK_LAUNCH("offset_kernel");
}

bool DeviceScheduler::on_host(ScheduleKind kind, bool guided, const TopTree& top, index_t rows) {
  if (kind == ScheduleKind::HybridKey) return false;
  if (kind == ScheduleKind::Hybrid) return true;
  return kind == ScheduleKind::HybridDevice && guided &&
         !DeviceGuidedScheduler::supports(top.parents().data(), top.size(), rows);
}

void DeviceScheduler::schedule(const DeviceMatrix& m, ScheduleKind kind, const TopTree& top, DeviceSchedule& out,
                               stream_t stream, bool buckets) {
  const index_t n = m.rows;
  out.size = n;
  out.buckets.clear();
  out.has_heads = false;
  out.order.reserve(static_cast<std::size_t>(n), "the schedule", stream);
  if (n == 0) return;
  if (m.keyed) {
    if (buckets) out.heads.reserve(static_cast<std::size_t>(n), "the schedule's bucket heads", stream);
    gpu::sort_stored_keys(m, *key_sort_, out.order.get(), buckets ? out.heads.get() : nullptr, stream);
    out.has_heads = buckets;
    return;
  }
  if (on_host(kind, m.guided, top, n)) {
    staging_.reserve(static_cast<std::size_t>(n));  // pinned: the upload is a true asynchronous copy
    std::vector<index_t>* want = buckets ? &out.buckets : nullptr;
    if (m.guided)
      guided_schedule(m.host_rows_view(), top.parents().data(), staging_.get(), want);
    else
      sandpile_.run(m.host_bits_view(), staging_.get(), want);
    copy_to_device(out.order.get(), staging_.get(), static_cast<std::size_t>(n), stream);
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  if (m.guided) {
    out.heads.reserve(static_cast<std::size_t>(n), "the schedule's bucket heads", stream);
    device_guided_.run(m.entries.get(), n, m.cols, m.width, top.parents().data(), out.order.get(), out.heads.get(),
                       stream);
    out.has_heads = true;  // the guided scheduler marks its buckets as it goes
    return;
  }
  device_sandpile_.run(m.bits.get(), n, m.words(), out.order.get(), stream);
  if (buckets) {
    out.heads.reserve(static_cast<std::size_t>(n), "the schedule's bucket heads", stream);
    sandpile_heads_kernel<<<static_cast<unsigned>((n + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
        m.bits.get(), m.words(), out.order.get(), n, out.heads.get());
    CANOPY_CUDA_CHECK_LAUNCH("sandpile_heads_kernel");
    out.has_heads = true;
  }
}

void DeviceScheduler::upload(const std::vector<index_t>& order, DeviceSchedule& out, stream_t stream) {
  out.size = static_cast<index_t>(order.size());
  out.buckets.clear();
  out.has_heads = false;
  out.order.reserve(order.size(), "the schedule", stream);
  copy_to_device(out.order.get(), order.data(), order.size(), stream);
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(stream));
}

Schedule DeviceScheduler::download(const DeviceSchedule& s, stream_t stream) {
  Schedule out;
  out.order.resize(static_cast<std::size_t>(s.size));
  copy_to_host(out.order.data(), s.order.get(), out.order.size(), stream);
  std::vector<std::uint8_t> heads;
  if (s.has_heads) {
    heads.resize(static_cast<std::size_t>(s.size));
    copy_to_host(heads.data(), s.heads.get(), heads.size(), stream);
  }
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (!s.buckets.empty()) {
    out.bucket_offsets = s.buckets;
  } else if (s.has_heads && s.size > 0) {
    for (index_t i = 0; i < s.size; ++i)
      if (heads[static_cast<std::size_t>(i)]) out.bucket_offsets.push_back(i);
    out.bucket_offsets.push_back(s.size);
  } else {
    out.bucket_offsets = {0, s.size};
  }
  return out;
}

}  // namespace canopy
