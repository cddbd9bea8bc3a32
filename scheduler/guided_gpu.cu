#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <map>
#include <vector>

#include "core/bits.hpp"
#include "core/cuda.cuh"
#include "inspector/scheduling_matrix.hpp"
#include "scheduler/guided_gpu.hpp"

namespace canopy {
namespace {

constexpr int kBlock = 256;
unsigned grid_for(index_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

// The partition's state on the device, which every level's kernels read and update.
struct Partition {
  index_t* order;              // the schedule being formed: order[slot] = a query
  std::int32_t* cur;           // per slot: the cursor into its query's row
  index_t* bstart;             // per slot: the slot its bucket starts at
  std::uint8_t* heads;         // per slot: 1 where a final bucket starts
  const std::int32_t* matrix;  // the rows, [queries][width]
  index_t width;
  const node_id* parent;       // per column: its top-leaf's parent
  int fb;                      // bits of one column field of a step key
  index_t max_bucket;
};

// One level's active slots and its scratch arrays.
struct Level {
  index_t m;            // active slots
  const index_t* act;   // their slot numbers, ascending
  std::uint64_t* keys;  // (bucket start, step) per active slot, then sorted
  std::uint64_t* sorted_keys;
  index_t* vals;
  index_t* sorted_vals;
  std::int32_t* next_cur;
  index_t* tmp_q;
  std::int32_t* tmp_c;
  index_t* head;        // 1 where a sorted key differs from the one before
  index_t* seg_id;      // inclusive sum of head (1-based segment numbers)
  index_t* seg_begin;
  std::uint8_t* still_active;
};

__global__ void __launch_bounds__(kBlock) init_kernel(Partition p, index_t n, index_t* act) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  p.order[i] = i;
  p.cur[i] = 0;
  p.bstart[i] = 0;
  p.heads[i] = i == 0;
  act[i] = i;
}

// The step of a row (of `width` entries) at cursor c, as a key: two fields of fb bits, the
// first column + 1 and the second (its sibling, visited next) + 1 or 0; all ones when the row
// has ended, so ended queries sort last. At cursor 0 the first entry alone (level 0). *nc: the
// cursor after it.
__device__ __forceinline__ std::uint64_t step_key(const Partition& p, index_t slot, std::int32_t* nc) {
  const std::int32_t* row = p.matrix + p.order[slot] * p.width;
  const std::int32_t c = p.cur[slot];
  *nc = c;
  if (c >= p.width || row[c] == kRowEnd) return (std::uint64_t{1} << (2 * p.fb)) - 1;
  const std::int32_t c0 = row[c];
  std::uint64_t second = 0;
  *nc = c + 1;
  if (c > 0 && c + 1 < p.width) {
    const std::int32_t c1 = row[c + 1];
    if (c1 != kRowEnd && p.parent[c1] == p.parent[c0]) {
      second = static_cast<std::uint64_t>(c1) + 1;
      *nc = c + 2;
    }
  }
  return ((static_cast<std::uint64_t>(c0) + 1) << p.fb) | second;
}

// Keys (bucket start, step) of the active queries of one level; vals[j] = j.
__global__ void __launch_bounds__(kBlock) key_kernel(Partition p, Level l) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= l.m) return;
  const index_t slot = l.act[j];
  std::int32_t nc;
  const std::uint64_t k = step_key(p, slot, &nc);
  l.keys[j] = (static_cast<std::uint64_t>(p.bstart[slot]) << (2 * p.fb)) | k;
  l.vals[j] = j;
  l.next_cur[j] = nc;
}

__global__ void __launch_bounds__(kBlock) gather_kernel(Partition p, Level l) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= l.m) return;
  const index_t src = l.sorted_vals[j];
  l.tmp_q[j] = p.order[l.act[src]];
  l.tmp_c[j] = l.next_cur[src];
  l.head[j] = j == 0 || l.sorted_keys[j] != l.sorted_keys[j - 1];
}

__global__ void __launch_bounds__(kBlock) scatter_kernel(Partition p, Level l) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= l.m) return;
  p.order[l.act[j]] = l.tmp_q[j];
  p.cur[l.act[j]] = l.tmp_c[j];
}

__global__ void __launch_bounds__(kBlock) segment_begin_kernel(Level l) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= l.m) return;
  if (l.head[j]) l.seg_begin[l.seg_id[j] - 1] = j;
  if (j == l.m - 1) l.seg_begin[l.seg_id[j]] = l.m;
}

// Each new sub-bucket starts at the slot of its first query; it is final when it holds at most
// max_bucket queries or its queries' rows have ended, and stays active otherwise.
__global__ void __launch_bounds__(kBlock) mark_kernel(Partition p, Level l) {
  const index_t j = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (j >= l.m) return;
  const index_t id = l.seg_id[j] - 1;
  const index_t b = l.seg_begin[id];
  const index_t size = l.seg_begin[id + 1] - b;
  const std::uint64_t all_ones = (std::uint64_t{1} << (2 * p.fb)) - 1;
  const bool ended = (l.sorted_keys[j] & all_ones) == all_ones;
  const bool final = ended || size <= p.max_bucket;
  const index_t slot = l.act[j];
  p.bstart[slot] = l.act[b];
  if (final && j == b) p.heads[slot] = 1;
  l.still_active[j] = !final;
}

// The last levels, once at most kTail queries are still active: one block runs every level
// that remains in shared memory (the same steps as the kernels above, block-wide), so many
// small levels cost one launch instead of a dozen launches and a round trip each.
constexpr int kTailThreads = 256;
constexpr int kTailItems = 4;
constexpr int kTail = kTailThreads * kTailItems;

__global__ void __launch_bounds__(kTailThreads)
tail_kernel(Partition p, index_t m0, const index_t* act_in, int end_bit) {
  using Sort = cub::BlockRadixSort<std::uint64_t, kTailThreads, kTailItems, int>;
  using Scan = cub::BlockScan<int, kTailThreads>;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ index_t s_act[kTail];
  __shared__ std::uint64_t s_key[kTail];
  __shared__ std::int32_t s_next[kTail];
  __shared__ int s_begin[kTail + 1];
  __shared__ int s_count;
  const int t = threadIdx.x;
  const std::uint64_t all_ones = (std::uint64_t{1} << (2 * p.fb)) - 1;
  const std::uint64_t pad = end_bit >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << end_bit) - 1;
  for (int j = t; j < m0; j += kTailThreads) s_act[j] = act_in[j];
  int m = static_cast<int>(m0);
  __syncthreads();
  while (m > 0) {
    std::uint64_t key[kTailItems];
    int val[kTailItems];
    for (int i = 0; i < kTailItems; ++i) {
      const int j = t * kTailItems + i;
      val[i] = j;
      key[i] = pad;  // past the active queries: sorts after them, and the sort is stable
      if (j < m) {
        const index_t slot = s_act[j];
        std::int32_t nc;
        key[i] = (static_cast<std::uint64_t>(p.bstart[slot]) << (2 * p.fb)) | step_key(p, slot, &nc);
        s_next[j] = nc;
      }
    }
    __syncthreads();
    Sort(temp.sort).Sort(key, val, 0, end_bit);
    __syncthreads();
    index_t q[kTailItems];
    std::int32_t c[kTailItems];
    for (int i = 0; i < kTailItems; ++i) {
      const int j = t * kTailItems + i;
      s_key[j] = key[i];
      if (j < m) {
        q[i] = p.order[s_act[val[i]]];
        c[i] = s_next[val[i]];
      }
    }
    __syncthreads();
    int head[kTailItems], seg[kTailItems];
    for (int i = 0; i < kTailItems; ++i) {
      const int j = t * kTailItems + i;
      head[i] = j < m && (j == 0 || s_key[j] != s_key[j - 1]);
      if (j < m) {
        p.order[s_act[j]] = q[i];
        p.cur[s_act[j]] = c[i];
      }
    }
    int n_seg;
    Scan(temp.scan).InclusiveSum(head, seg, n_seg);
    for (int i = 0; i < kTailItems; ++i) {
      const int j = t * kTailItems + i;
      if (head[i]) s_begin[seg[i] - 1] = j;
    }
    if (t == 0) s_begin[n_seg] = m;
    __syncthreads();
    int keep[kTailItems], pos[kTailItems];
    index_t slot_of[kTailItems];
    for (int i = 0; i < kTailItems; ++i) {
      const int j = t * kTailItems + i;
      keep[i] = 0;
      if (j >= m) continue;
      const int b = s_begin[seg[i] - 1];
      const int size = s_begin[seg[i]] - b;
      const bool final = (s_key[j] & all_ones) == all_ones || size <= p.max_bucket;
      slot_of[i] = s_act[j];
      p.bstart[slot_of[i]] = s_act[b];
      if (final && j == b) p.heads[slot_of[i]] = 1;
      keep[i] = !final;
    }
    int kept;
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(keep, pos, kept);
    __syncthreads();
    for (int i = 0; i < kTailItems; ++i)
      if (keep[i]) s_act[pos[i]] = slot_of[i];  // compaction keeps slot order
    if (t == 0) s_count = kept;
    __syncthreads();
    m = s_count;
    __syncthreads();
  }
}

}  // namespace

struct DeviceGuidedScheduler::Impl {
  DeviceBuffer<std::int32_t> cur, next_cur, tmp_c;
  DeviceBuffer<index_t> bstart, act, act_next, vals_in, vals_out, tmp_q, head, seg_id, seg_begin, count;
  DeviceBuffer<std::uint64_t> keys_in, keys_out;
  DeviceBuffer<std::uint8_t> still_active;
  DeviceBuffer<node_id> parent;
  DeviceBuffer<unsigned char> temp;
  PinnedBuffer<index_t> host_count;
};

DeviceGuidedScheduler::DeviceGuidedScheduler() : impl_(std::make_unique<Impl>()) {}
DeviceGuidedScheduler::~DeviceGuidedScheduler() = default;

bool DeviceGuidedScheduler::supports(const node_id* column_parent, index_t cols, index_t rows) {
  std::map<node_id, int> leaves_per_parent;
  for (index_t c = 0; c < cols; ++c)
    if (++leaves_per_parent[column_parent[c]] > 2) return false;
  const int fb = bits_for(static_cast<std::uint64_t>(cols) + 1);
  return 2 * fb + bits_for(static_cast<std::uint64_t>(std::max<index_t>(rows, 1))) <= 64;
}

void DeviceGuidedScheduler::run(const std::int32_t* matrix, index_t rows, index_t cols, index_t width,
                                const node_id* column_parent, index_t* order, std::uint8_t* heads, stream_t stream,
                                index_t max_bucket) {
  Impl& s = *impl_;
  if (rows <= 0) return;
  const cudaStream_t st = stream;
  const std::size_t n = static_cast<std::size_t>(rows);
  s.cur.reserve(n, "the guided scheduler cursors", st);
  s.next_cur.reserve(n, "the guided scheduler cursors", st);
  s.tmp_c.reserve(n, "the guided scheduler cursors", st);
  for (DeviceBuffer<index_t>* b : {&s.bstart, &s.act, &s.act_next, &s.vals_in, &s.vals_out, &s.tmp_q, &s.head, &s.seg_id})
    b->reserve(n, "the guided scheduler workspace", st);
  s.seg_begin.reserve(n + 1, "the guided scheduler segments", st);
  s.count.reserve(1, "the guided scheduler count", st);
  s.keys_in.reserve(n, "the guided scheduler keys", st);
  s.keys_out.reserve(n, "the guided scheduler keys", st);
  s.still_active.reserve(n, "the guided scheduler flags", st);
  s.parent.reserve(static_cast<std::size_t>(std::max<index_t>(cols, 1)), "the top-leaf parents", st);
  s.host_count.reserve(1);
  copy_to_device(s.parent.get(), column_parent, static_cast<std::size_t>(cols), st);

  const int fb = bits_for(static_cast<std::uint64_t>(cols) + 1);
  const int end_bit = 2 * fb + bits_for(static_cast<std::uint64_t>(rows - 1));
  // Not run_cub: the scratch space is sized once for every level's sort, scan and select (their largest).
  std::size_t sort_bytes = 0, scan_bytes = 0, select_bytes = 0;
  CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, s.keys_in.get(), s.keys_out.get(),
                                                    s.vals_in.get(), s.vals_out.get(), rows, 0, end_bit, st));
  CANOPY_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, s.head.get(), s.seg_id.get(), rows, st));
  CANOPY_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, select_bytes, s.act.get(), s.still_active.get(),
                                               s.act_next.get(), s.count.get(), rows, st));
  s.temp.reserve(std::max(sort_bytes, std::max(scan_bytes, select_bytes)), "the guided scheduler scratch space", st);

  const Partition p{order, s.cur.get(), s.bstart.get(), heads, matrix, width, s.parent.get(), fb, max_bucket};
  init_kernel<<<grid_for(rows), kBlock, 0, st>>>(p, rows, s.act.get());
  CANOPY_CUDA_CHECK_LAUNCH("init_kernel");
  index_t m = rows > max_bucket ? rows : 0;
  while (m > kTail) {
    const Level l{m, s.act.get(), s.keys_in.get(), s.keys_out.get(), s.vals_in.get(), s.vals_out.get(),
                  s.next_cur.get(), s.tmp_q.get(), s.tmp_c.get(), s.head.get(), s.seg_id.get(), s.seg_begin.get(),
                  s.still_active.get()};
    key_kernel<<<grid_for(m), kBlock, 0, st>>>(p, l);
    CANOPY_CUDA_CHECK_LAUNCH("key_kernel");
    std::size_t bytes = sort_bytes;
    // Stable: queries with one step keep their order, as the recursive partition keeps it.
    CANOPY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.temp.get(), bytes, l.keys, l.sorted_keys, l.vals,
                                                      l.sorted_vals, m, 0, end_bit, st));
    gather_kernel<<<grid_for(m), kBlock, 0, st>>>(p, l);
    CANOPY_CUDA_CHECK_LAUNCH("gather_kernel");
    scatter_kernel<<<grid_for(m), kBlock, 0, st>>>(p, l);
    CANOPY_CUDA_CHECK_LAUNCH("scatter_kernel");
    bytes = scan_bytes;
    CANOPY_CUDA_CHECK(cub::DeviceScan::InclusiveSum(s.temp.get(), bytes, l.head, l.seg_id, m, st));
    segment_begin_kernel<<<grid_for(m), kBlock, 0, st>>>(l);
    CANOPY_CUDA_CHECK_LAUNCH("segment_begin_kernel");
    mark_kernel<<<grid_for(m), kBlock, 0, st>>>(p, l);
    CANOPY_CUDA_CHECK_LAUNCH("mark_kernel");
    bytes = select_bytes;
    CANOPY_CUDA_CHECK(cub::DeviceSelect::Flagged(s.temp.get(), bytes, s.act.get(), s.still_active.get(),
                                                 s.act_next.get(), s.count.get(), m, st));
    copy_to_host(s.host_count.get(), s.count.get(), 1, st);
    CANOPY_CUDA_CHECK(cudaStreamSynchronize(st));
    m = *s.host_count.get();
    std::swap(s.act, s.act_next);
  }
  if (m > 0) {
    tail_kernel<<<1, kTailThreads, 0, st>>>(p, m, s.act.get(), end_bit);
    CANOPY_CUDA_CHECK_LAUNCH("tail_kernel");
  }
}

}  // namespace canopy
