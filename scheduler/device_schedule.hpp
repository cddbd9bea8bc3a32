// Step 2 of a GPU run: a schedule computed from the inspector's DeviceMatrix
// (inspector/device_matrix.cuh) into device memory, ready for the executor. Hybrid takes the
// matrix's host copy through the CPU scheduler (the sandpile for unguided rows, the recursive
// buckets for guided ones) and uploads the order; HybridDevice computes the same order, bit for
// bit, on the device (guided rows: where DeviceGuidedScheduler::supports() the top-tree, else
// on the host too). HybridKey sorts the inspector's compact keys on the device. CUDA-free.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_buffer.hpp"
#include "layouts/top_tree.hpp"
#include "scheduler/guided_gpu.hpp"
#include "scheduler/sandpile_gpu.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {

struct DeviceMatrix;
struct KeySortScratch;

// An execution order in device memory and what is known of its buckets.
struct DeviceSchedule {
  DeviceBuffer<index_t> order;  // order[i]: the query run at position i
  index_t size = 0;
  // Buckets, when asked for: the host scheduler's offsets, or a flag per position on the device
  // (1 where a bucket starts).
  std::vector<index_t> buckets;
  DeviceBuffer<std::uint8_t> heads;
  bool has_heads = false;
};

// Owns the schedulers' scratch memory (host and device), reused from call to call.
class DeviceScheduler {
 public:
  DeviceScheduler();
  ~DeviceScheduler();
  // Whether `kind` reads the matrix on the host (the inspector must then copy it there).
  static bool on_host(ScheduleKind kind, bool guided, const TopTree& top, index_t rows);

  // The schedule of m's rows (queries 0 .. m.rows-1) under `kind` (Hybrid, HybridDevice, or
  // HybridKey for a keyed matrix) into out, on `stream`; with `buckets`, out also learns its
  // buckets. The host path returns once its order is uploaded; the device path enqueues (its
  // guided levels wait for the host).
  void schedule(const DeviceMatrix& m, ScheduleKind kind, const TopTree& top, DeviceSchedule& out, stream_t stream,
                bool buckets);

  // order[i] += first for i < n, on `stream`: a chunk's schedule (positions 0..n-1 of the chunk)
  // as the caller's query ids.
  static void offset(index_t* order, index_t n, index_t first, stream_t stream);
  // A given order (e.g. a host schedule of the caller's) in device memory.
  static void upload(const std::vector<index_t>& order, DeviceSchedule& out, stream_t stream);
  // The order and its buckets on the host (one bucket when none are known); waits for `stream`.
  static Schedule download(const DeviceSchedule& s, stream_t stream);

 private:
  SandpileScheduler sandpile_;
  DeviceSandpile device_sandpile_;
  DeviceGuidedScheduler device_guided_;
  std::unique_ptr<KeySortScratch> key_sort_;  // HybridKey's radix sort
  PinnedBuffer<index_t> staging_;
};

}  // namespace canopy
