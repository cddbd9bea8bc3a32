// Micro-benchmarks for Tahoe's hardware parameters (Table 1). Each kernel keeps every access
// it is meant to time: the values read are folded into an accumulator that is written out
// only if it equals a sentinel passed at run time, so the compiler cannot drop the work, and
// the store almost never happens.
//
// Sizes are chosen for an H100 (132 SMs): each launch fills the GPU with resident blocks (one
// wave, from the occupancy calculator) and runs for roughly 0.05-1 ms, so the six runs of every
// benchmark (a warm-up and five timed) together take a few tens of milliseconds.
#include "scheduler/forest_model_gpu.hpp"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/cuda.cuh"

namespace canopy {
namespace {

constexpr unsigned kSentinel = 0xFFFFFFFFu;
constexpr int kTimedRuns = 5;

// ---- shared memory ----
// A block of kSmemThreads threads owns a 16 KiB array. In round r every thread touches the
// words threadIdx.x + off + k * kSmemThreads, k < kSmemUnroll, with off = 32 r mod 2048: a
// warp's 32 accesses are 32 consecutive words, one per bank (conflict-free), and the offsets
// are compile-time immediates, so the loop is little more than the loads or stores.
constexpr int kSmemThreads = 256;
constexpr int kSmemWords = 4096;  // 16 KiB per block: 8 blocks (2048 threads) fit on an SM
constexpr int kSmemUnroll = 8;
constexpr int kSmemReps = 2048;
constexpr int kSmemOffsetMask = kSmemWords / 2 - 1;  // off + 255 + 7 * 256 < kSmemWords
static_assert(kSmemOffsetMask + 1 - 32 + kSmemThreads * kSmemUnroll <= kSmemWords, "shared accesses out of range");

__global__ void __launch_bounds__(kSmemThreads) smem_read_kernel(unsigned seed, unsigned sentinel, unsigned* out) {
  __shared__ unsigned s[kSmemWords];
#pragma unroll
  for (int k = 0; k < kSmemWords / kSmemThreads; ++k) {
    const int i = threadIdx.x + k * kSmemThreads;
    s[i] = seed * static_cast<unsigned>(i) + blockIdx.x;
  }
  __syncthreads();
  unsigned a0 = 0, a1 = 0, a2 = 0, a3 = 0;  // independent chains
  for (int r = 0; r < kSmemReps; ++r) {
    const unsigned* p = s + threadIdx.x + ((r * 32) & kSmemOffsetMask);
#pragma unroll
    for (int k = 0; k < kSmemUnroll; k += 4) {
      a0 += p[(k + 0) * kSmemThreads];
      a1 += p[(k + 1) * kSmemThreads];
      a2 += p[(k + 2) * kSmemThreads];
      a3 += p[(k + 3) * kSmemThreads];
    }
  }
  const unsigned acc = a0 ^ a1 ^ a2 ^ a3;
  if (acc == sentinel) out[0] = acc;
}

// The stores keep to the thread's own words (offsets in whole multiples of kSmemThreads, the same
// conflict-free banks as the reads): no two threads write one word, which compute-sanitizer's
// racecheck reported as write-after-write hazards while the offsets moved by 32.
constexpr int kSmemWriteOffsetMask = kSmemWords / 2 - kSmemThreads;
static_assert(kSmemWriteOffsetMask + kSmemThreads * kSmemUnroll <= kSmemWords, "shared stores out of range");

__global__ void __launch_bounds__(kSmemThreads) smem_write_kernel(unsigned seed, unsigned sentinel, unsigned* out) {
  __shared__ unsigned s[kSmemWords];
  volatile unsigned* vs = s;  // every store is issued, none merged or found dead
  for (int r = 0; r < kSmemReps; ++r) {
    volatile unsigned* p = vs + threadIdx.x + ((r * kSmemThreads) & kSmemWriteOffsetMask);
    const unsigned v = seed + static_cast<unsigned>(r);
#pragma unroll
    for (int k = 0; k < kSmemUnroll; ++k) p[k * kSmemThreads] = v;
  }
  __syncthreads();
  const unsigned x = vs[threadIdx.x];  // this thread's own word (round 0, and every 8th)
  if (x == sentinel) out[0] = x;
}

// ---- global memory ----
// One 256 MiB array (5x the H100's 50 MiB L2), read whole with consecutive 16-byte loads
// (coalesced), or at random 4-byte words (uncoalesced).
constexpr int kGmemThreads = 256;
constexpr int kGmemLog2Words = 26;  // 2^26 words of 4 bytes = 256 MiB
constexpr std::size_t kGmemWords = std::size_t(1) << kGmemLog2Words;
constexpr std::size_t kGmemVec4 = kGmemWords / 4;

__global__ void __launch_bounds__(kGmemThreads) gmem_coalesced_kernel(const uint4* __restrict__ in, std::size_t n,
                                                                      unsigned sentinel, unsigned* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  // Four independent 16-byte loads in flight per thread; a warp's load is 512 consecutive bytes.
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
    acc += (a.x ^ a.y ^ a.z ^ a.w) + (b.x ^ b.y ^ b.z ^ b.w) + (c.x ^ c.y ^ c.z ^ c.w) + (d.x ^ d.y ^ d.z ^ d.w);
  }
  for (; i < n; i += stride) {
    const uint4 a = in[i];
    acc += a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == sentinel) out[0] = acc;
}

// A per-thread seed (an integer mixing function), then a linear congruential sequence whose
// top bits index the array: neighbouring threads read unrelated words.
__device__ __forceinline__ unsigned mix32(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// kReads random 4-byte reads per thread within a window of 2^kLog2Window words that starts at
// word blockIdx.x << kLog2Window (modulo the array): the whole array (kLog2Window =
// kGmemLog2Words, every block at word 0), or one window per block.
template <int kLog2Window, int kReads>
__global__ void __launch_bounds__(kGmemThreads) gmem_random_kernel(const unsigned* __restrict__ in, unsigned seed,
                                                                   unsigned sentinel, unsigned* out) {
  const unsigned* window = in + ((static_cast<std::size_t>(blockIdx.x) << kLog2Window) & (kGmemWords - 1));
  unsigned x = mix32((blockIdx.x * blockDim.x + threadIdx.x) ^ seed);
  unsigned acc = 0;
#pragma unroll 8
  for (int j = 0; j < kReads; ++j) {
    x = x * 1664525u + 1013904223u;
    acc += window[x >> (32 - kLog2Window)];
  }
  if (acc == sentinel) out[0] = acc;
}

// Uncoalesced reads: at random over the whole array, past L2.
constexpr int kRandomReads = 64;  // per thread
const auto gmem_uncoalesced_kernel = gmem_random_kernel<kGmemLog2Words, kRandomReads>;
// Canopy's additions. Cached random reads: each block reads at random inside its own 32 KiB
// window of the array, so after the first touches every read hits L1.
constexpr int kCachedLog2Words = 13;  // 8192 words = 32 KiB per block
constexpr int kCachedReads = 512;     // per thread
const auto gmem_cached_random_kernel = gmem_random_kernel<kCachedLog2Words, kCachedReads>;

// Latency: one thread follows a random cycle (next = a[cur]) through 8 MiB of global memory
// (more than L1, less than L2) or through 32 KiB of shared memory.
constexpr int kChaseLog2Words = 21;  // 8 MiB
constexpr int kChaseSteps = 4096;
constexpr int kSmemChaseWords = 8192;
constexpr int kSmemChaseSteps = 16384;

__global__ void gmem_chase_kernel(const unsigned* __restrict__ next, unsigned sentinel, unsigned* out) {
  unsigned cur = 0;
  for (int i = 0; i < kChaseSteps; ++i) cur = next[cur];
  if (cur == sentinel) out[0] = cur;
}

__global__ void smem_chase_kernel(const unsigned* __restrict__ next, unsigned sentinel, unsigned* out) {
  __shared__ unsigned s[kSmemChaseWords];
  for (int i = threadIdx.x; i < kSmemChaseWords; i += blockDim.x) s[i] = next[i] & (kSmemChaseWords - 1);
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned cur = 0;
  for (int i = 0; i < kSmemChaseSteps; ++i) cur = s[cur];
  if (cur == sentinel) out[0] = cur;
}

__global__ void empty_kernel() {}

// ---- reductions ----
// B_rate: every resident block does kBlockReduceReps block-wide sums (cub::BlockReduce) of one
// float per thread, the blocks of the whole GPU at once.
constexpr int kReduceThreads = 128;  // ForestCostInputs::threads_per_block's default
constexpr int kBlockReduceReps = 1024;

__global__ void __launch_bounds__(kReduceThreads) block_reduce_kernel(float sentinel, float* out) {
  using Reduce = cub::BlockReduce<float, kReduceThreads>;
  __shared__ typename Reduce::TempStorage temp;
  float x = static_cast<float>(threadIdx.x) * 0.25f;
  float acc = 0;
  for (int r = 0; r < kBlockReduceReps; ++r) {
    const float total = Reduce(temp).Sum(x);  // valid in thread 0
    __syncthreads();                          // before temp is reused
    acc += total;
    x += 1.0f;  // another value each round: no round can be hoisted or merged
  }
  if (threadIdx.x == 0 && acc == sentinel) out[0] = acc;
}

// G_rate: one global reduction of a batch of kGlobalReduceRows rows, kGlobalReduceParts partial
// sums each (row-major, as the split kernel's blocks leave them), by
// cub::DeviceSegmentedReduce::Sum, one segment per row.
constexpr int kGlobalReduceRows = 1 << 16;
constexpr int kGlobalReduceParts = 64;

__global__ void segment_offsets_kernel(int* offsets, int rows, int parts) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= rows) offsets[i] = i * parts;
}

// Median of kTimedRuns event-timed runs of launch(), after one untimed warm-up run.
template <class Launch>
double median_ms(cudaStream_t stream, const Launch& launch) {
  launch();
  Event start, stop;
  std::array<double, kTimedRuns> ms{};
  for (double& m : ms) {
    start.record(stream);
    launch();
    stop.record(stream);
    m = stop.since(start);
  }
  std::sort(ms.begin(), ms.end());
  return ms[kTimedRuns / 2];
}

template <class Kernel>
int resident_blocks(Kernel kernel, int threads, int sm_count) {
  int per_sm = 0;
  CANOPY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0));
  return std::max(per_sm, 1) * sm_count;
}

// Makes `device` current for its lifetime; gives the previous one back.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    CANOPY_CUDA_CHECK(cudaGetDevice(&previous_));
    CANOPY_CUDA_CHECK(cudaSetDevice(device));
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  ~CurrentDevice() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

std::string uuid_hex(const cudaUUID_t& uuid) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(uuid.bytes[i]);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// CANOPY_CUDA_CHECK_LAUNCH for a kernel named at run time.
void check_launch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda_error(err, (std::string("launch of ") + kernel).c_str(), __FILE__, __LINE__);
}

// What every micro-benchmark runs on: the stream, the GPU's SMs, the sentinel stores' target.
struct Bench {
  cudaStream_t stream;
  int sms;
  unsigned* out;
};

// A random cycle through all `words` words (Sattolo's shuffle, xorshift64 from `state`), so a
// chase never repeats early.
std::vector<unsigned> random_cycle(std::size_t words, std::uint64_t& state) {
  std::vector<unsigned> next(words);
  for (std::size_t i = 0; i < words; ++i) next[i] = static_cast<unsigned>(i);
  for (std::size_t i = words - 1; i > 0; --i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::swap(next[i], next[state % i]);
  }
  return next;
}

// GB/s of a shared-memory kernel over one wave of resident blocks: bytes = blocks * threads *
// rounds * accesses per round * 4.
template <class Kernel>
double smem_gbs(const Bench& b, Kernel kernel, unsigned seed, const char* name) {
  const int blocks = resident_blocks(kernel, kSmemThreads, b.sms);
  const double bytes = double(blocks) * kSmemThreads * kSmemReps * kSmemUnroll * sizeof(unsigned);
  const double ms = median_ms(b.stream, [&] {
    kernel<<<blocks, kSmemThreads, 0, b.stream>>>(seed, kSentinel, b.out);
    check_launch(name);
  });
  return bytes / (ms * 1e6);
}

// GB/s of a random-read kernel over one wave of resident blocks, counting the 4 bytes each read
// asks for (not the 32-byte sectors it moves).
template <class Kernel>
double random_read_gbs(const Bench& b, Kernel kernel, int reads, const unsigned* array, unsigned seed, const char* name) {
  const int blocks = resident_blocks(kernel, kGmemThreads, b.sms);
  const double bytes = double(blocks) * kGmemThreads * reads * sizeof(unsigned);
  const double ms = median_ms(b.stream, [&] {
    kernel<<<blocks, kGmemThreads, 0, b.stream>>>(array, seed, kSentinel, b.out);
    check_launch(name);
  });
  return bytes / (ms * 1e6);
}

// BW_RSMEM and BW_WSMEM.
void measure_shared_memory(const Bench& b, ForestHardware* hw) {
  hw->smem_read_gbs = smem_gbs(b, smem_read_kernel, 0x9e3779b9u, "smem_read_kernel");
  hw->smem_write_gbs = smem_gbs(b, smem_write_kernel, 0x85ebca6bu, "smem_write_kernel");
}

// BW^COA_GMEM, BW^NCOA_GMEM and (Canopy's) cached random reads, on the 256 MiB array, filled
// once (its contents do not matter, only that they are defined).
void measure_global_memory(const Bench& b, ForestHardware* hw) {
  const cudaStream_t st = b.stream;
  DeviceBuffer<unsigned> array;
  array.reserve(kGmemWords, "the forest-hardware global-memory benchmark (256 MiB)", st);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(array.get(), 0x5a, kGmemWords * sizeof(unsigned), st));
  const int blocks = resident_blocks(gmem_coalesced_kernel, kGmemThreads, b.sms);
  const uint4* vec = reinterpret_cast<const uint4*>(array.get());
  const double coalesced_ms = median_ms(st, [&] {
    gmem_coalesced_kernel<<<blocks, kGmemThreads, 0, st>>>(vec, kGmemVec4, kSentinel, b.out);
    CANOPY_CUDA_CHECK_LAUNCH("gmem_coalesced_kernel");
  });
  hw->gmem_coalesced_gbs = double(kGmemWords * sizeof(unsigned)) / (coalesced_ms * 1e6);
  hw->gmem_uncoalesced_gbs =
      random_read_gbs(b, gmem_uncoalesced_kernel, kRandomReads, array.get(), 0x27d4eb2fu, "gmem_uncoalesced_kernel");
  hw->gmem_cached_random_gbs =
      random_read_gbs(b, gmem_cached_random_kernel, kCachedReads, array.get(), 0x165667b1u, "gmem_cached_random_kernel");
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(st));  // before the array is freed
}

// Canopy's additions: dependent-load latencies (global and shared memory) and a launch's cost.
void measure_latencies(const Bench& b, ForestHardware* hw) {
  const cudaStream_t st = b.stream;
  std::uint64_t state = 0x2545f4914f6cdd1dull;
  const std::vector<unsigned> next = random_cycle(std::size_t(1) << kChaseLog2Words, state);
  DeviceBuffer<unsigned> chain;
  chain.reserve(next.size(), "the forest-hardware latency benchmark (8 MiB)", st);
  copy_to_device(chain.get(), next.data(), next.size(), st);
  const double g_ms = median_ms(st, [&] {
    gmem_chase_kernel<<<1, 1, 0, st>>>(chain.get(), kSentinel, b.out);
    CANOPY_CUDA_CHECK_LAUNCH("gmem_chase_kernel");
  });
  hw->gmem_latency_ns = g_ms * 1e6 / kChaseSteps;
  // Shared memory: a cycle through 8192 words, copied over the chain's first words.
  const std::vector<unsigned> small = random_cycle(kSmemChaseWords, state);
  copy_to_device(chain.get(), small.data(), small.size(), st);
  const double fill_ms = median_ms(st, [&] {
    smem_chase_kernel<<<1, 256, 0, st>>>(chain.get(), kSentinel, b.out);
    CANOPY_CUDA_CHECK_LAUNCH("smem_chase_kernel");
  });
  hw->smem_latency_ns = fill_ms * 1e6 / kSmemChaseSteps;  // the parallel fill is a few hundred ns of it
  const int launches = 32;
  const double launch_ms = median_ms(st, [&] {
    for (int i = 0; i < launches; ++i) empty_kernel<<<1, 32, 0, st>>>();
    CANOPY_CUDA_CHECK_LAUNCH("empty_kernel");
  });
  hw->launch_ns = launch_ms * 1e6 / launches;
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(st));
}

// B_rate = kernel time / (blocks * reductions per block) / threads per block: the GPU's time
// per block-wide reduction while every SM is reducing (a throughput, like the bandwidths),
// per thread of the block. One reduction stands for one row of the shared-data kernel, so
// B_rate * threads is the reduction's cost per row.
void measure_block_reduction(const Bench& b, ForestHardware* hw) {
  const int blocks = resident_blocks(block_reduce_kernel, kReduceThreads, b.sms);
  const double reduce_ms = median_ms(b.stream, [&] {
    block_reduce_kernel<<<blocks, kReduceThreads, 0, b.stream>>>(-1.0f, reinterpret_cast<float*>(b.out));
    CANOPY_CUDA_CHECK_LAUNCH("block_reduce_kernel");
  });
  hw->block_reduce_ns_per_thread = reduce_ms * 1e6 / (double(blocks) * kBlockReduceReps) / kReduceThreads;
}

// G_rate = the time of one segmented sum over the batch (kGlobalReduceRows rows of
// kGlobalReduceParts partials) / kGlobalReduceParts: ns per block (partial per row), so that
// G_rate * blocks is a batch's global reduction (eq. 3); exact for batches near 65536 rows.
void measure_global_reduction(const Bench& b, ForestHardware* hw) {
  const cudaStream_t st = b.stream;
  const int rows = kGlobalReduceRows, parts = kGlobalReduceParts;
  DeviceBuffer<float> partials, sums;
  DeviceBuffer<int> offsets;
  partials.reserve(std::size_t(rows) * parts, "the global-reduction benchmark's partial sums", st);
  sums.reserve(rows, "the global-reduction benchmark's sums", st);
  offsets.reserve(std::size_t(rows) + 1, "the global-reduction benchmark's offsets", st);
  CANOPY_CUDA_CHECK(cudaMemsetAsync(partials.get(), 0, std::size_t(rows) * parts * sizeof(float), st));
  segment_offsets_kernel<<<(rows + 1 + 255) / 256, 256, 0, st>>>(offsets.get(), rows, parts);
  CANOPY_CUDA_CHECK_LAUNCH("segment_offsets_kernel");

  // Not run_cub: sized once outside the timed region, then run again and again inside it.
  std::size_t temp_bytes = 0;
  CANOPY_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(nullptr, temp_bytes, partials.get(), sums.get(), rows,
                                                    offsets.get(), offsets.get() + 1, st));
  DeviceBuffer<unsigned char> temp;
  temp.reserve(std::max<std::size_t>(temp_bytes, 1), "the global-reduction benchmark's temporary storage", st);
  const double reduce_ms = median_ms(st, [&] {
    CANOPY_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(temp.get(), temp_bytes, partials.get(), sums.get(), rows,
                                                      offsets.get(), offsets.get() + 1, st));
  });
  hw->global_reduce_ns_per_block = reduce_ms * 1e6 / parts;
  CANOPY_CUDA_CHECK(cudaStreamSynchronize(st));  // before the buffers are freed
}

}  // namespace

ForestHardware measure_forest_hardware(int device) {
  int n_devices = 0;
  CANOPY_CUDA_CHECK(cudaGetDeviceCount(&n_devices));
  if (device < 0 || device >= n_devices)
    throw Error("measure_forest_hardware: device " + std::to_string(device) + " is not one of the " +
                std::to_string(n_devices) + " CUDA devices");
  // Declared first, so the stream and buffers below are released on `device`.
  CurrentDevice current(device);

  cudaDeviceProp prop;
  CANOPY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  ForestHardware hw;
  hw.device_name = prop.name;
  hw.device_uuid = uuid_hex(prop.uuid);
  hw.sm_count = prop.multiProcessorCount;

  Stream stream;
  DeviceBuffer<unsigned> sink;  // the sentinel stores' target; never read
  sink.reserve(1, "the forest-hardware benchmarks' sink", stream.get());
  const Bench b{stream.get(), hw.sm_count, sink.get()};
  measure_shared_memory(b, &hw);
  measure_global_memory(b, &hw);
  measure_latencies(b, &hw);
  measure_block_reduction(b, &hw);
  measure_global_reduction(b, &hw);
  return hw;
}

ForestHardware cached_forest_hardware(int device, const std::string& path) {
  const auto [name, uuid] = device_identity(device);
  return load_or_measure_forest_hardware(path, name, uuid, [device] { return measure_forest_hardware(device); });
}

std::pair<std::string, std::string> device_identity(int device) {
  cudaDeviceProp prop;
  CANOPY_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return {prop.name, uuid_hex(prop.uuid)};
}

}  // namespace canopy
