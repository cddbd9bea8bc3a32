#include "layouts/resident.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda.cuh"

namespace canopy {
namespace detail {
namespace {

// The arrays outlive the build (and its stream): they are allocated and freed on a stream that
// lives as long as the process, created once and never destroyed.
cudaStream_t resident_stream() {
  static const cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    CANOPY_CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

// Page-locked staging: two slots, so the device fills one while the host empties the other (or
// the reverse). Made per copy and freed after it (a tree's host copy is made once), or kept by
// the builder that asks (its next build's copies allocate nothing); never process-wide (that was
// a leak to the tools).
constexpr std::size_t kStageBytes = std::size_t{8} << 20;

class Staging {
 public:
  Staging(std::size_t largest, cudaStream_t stream, StagingSlots* keep)
      : stage_(std::min(kStageBytes, std::max<std::size_t>(largest, 1))), stream_(stream), slot_(keep ? *keep : own_) {
    slot_.reserve(stage_, "the staging of a host copy");
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  // No copy may still use a slot when it is freed.
  ~Staging() { cudaStreamSynchronize(stream_); }

  void to_host(char* dst, const char* src, std::size_t bytes) {
    for (std::size_t at = 0; at < bytes; at += stage_) {
      const std::size_t len = std::min(stage_, bytes - at);
      // Slot `next_` is empty: the host copied it out right after the last chunk went out.
      CANOPY_CUDA_CHECK(cudaMemcpyAsync(slot_[next_].get(), src + at, len, cudaMemcpyDeviceToHost, stream_));
      used_[next_].record(stream_);
      empty_pending();
      pending_ = {dst + at, len, next_};
      next_ ^= 1;
    }
  }
  // Host to device: slot `next_` is refilled once its last chunk has gone out.
  void to_device(char* dst, const char* src, std::size_t bytes) {
    for (std::size_t at = 0; at < bytes; at += stage_) {
      const std::size_t len = std::min(stage_, bytes - at);
      CANOPY_CUDA_CHECK(cudaEventSynchronize(used_[next_].get()));
      copy_on_cores(slot_[next_].get(), src + at, len);
      CANOPY_CUDA_CHECK(cudaMemcpyAsync(dst + at, slot_[next_].get(), len, cudaMemcpyHostToDevice, stream_));
      used_[next_].record(stream_);
      next_ ^= 1;
    }
  }
  // The last chunk of a download, copied out of its slot.
  void empty_pending() {
    if (pending_.slot < 0) return;
    CANOPY_CUDA_CHECK(cudaEventSynchronize(used_[pending_.slot].get()));
    copy_on_cores(pending_.dst, slot_[pending_.slot].get(), pending_.bytes);
    pending_.slot = -1;
  }

 private:
  std::size_t stage_;
  cudaStream_t stream_;
  StagingSlots own_;
  StagingSlots& slot_;
  Event used_[2];  // each slot's last copy
  int next_ = 0;
  struct Pending {
    char* dst = nullptr;
    std::size_t bytes = 0;
    int slot = -1;  // -1: none
  } pending_;
};

// Freed slot blocks, lent to the next slots that need one (StagingSlots, layouts/resident.hpp).
// Made after the CUDA runtime has started, so destroyed before its teardown; slots released after
// that (by other static objects) free their blocks themselves.
std::atomic<bool> g_slot_pool_alive{false};

class SlotPool {
 public:
  static SlotPool& get() {
    static SlotPool pool;
    return pool;
  }
  // The smallest pooled block of at least `bytes` moved into `slot` (false: none; a block the
  // slot held goes in its place and is freed).
  bool lend(PinnedMemory& slot, std::size_t bytes) {
    const std::lock_guard<std::mutex> lock(mu_);
    auto best = blocks_.end();
    for (auto b = blocks_.begin(); b != blocks_.end(); ++b)
      if (b->bytes() >= bytes && (best == blocks_.end() || b->bytes() < best->bytes())) best = b;
    if (best == blocks_.end()) return false;
    slot = std::move(*best);
    blocks_.erase(best);
    return true;
  }
  // The slot's block moved into the pool: where there is room, or in place of a smaller one (the
  // slot then holds that one, which its owner frees).
  void take_back(PinnedMemory& slot) {
    if (slot.bytes() > kStageBytes) return;
    const std::lock_guard<std::mutex> lock(mu_);
    if (blocks_.size() < kBlocks) {
      blocks_.push_back(std::move(slot));
      return;
    }
    auto smallest = std::min_element(blocks_.begin(), blocks_.end(),
                                     [](const PinnedMemory& a, const PinnedMemory& b) { return a.bytes() < b.bytes(); });
    if (smallest->bytes() < slot.bytes()) std::swap(*smallest, slot);
  }

 private:
  static constexpr std::size_t kBlocks = 8;
  SlotPool() {
    cudaFree(nullptr);  // (starts the runtime if nothing has: its teardown then comes after ours)
    g_slot_pool_alive = true;
  }
  ~SlotPool() { g_slot_pool_alive = false; }
  std::mutex mu_;
  std::vector<PinnedMemory> blocks_;
};

}  // namespace

StagingSlots::~StagingSlots() {
  for (PinnedMemory& m : slots_)
    if (m.get() && g_slot_pool_alive) SlotPool::get().take_back(m);
}

void StagingSlots::reserve(std::size_t bytes, const char* what) {
  for (PinnedMemory& m : slots_) {
    if (m.get() && m.bytes() >= bytes) continue;
    if (m.get() && g_slot_pool_alive) SlotPool::get().take_back(m);  // (too small: another may use it)
    if (!SlotPool::get().lend(m, bytes)) m.reserve(bytes, what, nullptr);
  }
}

void staged_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep) {
  if (bytes == 0) return;
  Staging staging(bytes, static_cast<cudaStream_t>(stream), keep);
  staging.to_host(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  staging.empty_pending();
}

void staged_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep) {
  if (bytes == 0) return;
  Staging staging(bytes, static_cast<cudaStream_t>(stream), keep);
  staging.to_device(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
}

void copy_up(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep) {
  if (bytes >= kStagedCopyMin)
    staged_to_device(dst, src, bytes, stream, keep);
  else
    copy_async(dst, src, bytes, stream);
}

void copy_down(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep) {
  if (bytes >= kStagedCopyMin)
    staged_to_host(dst, src, bytes, stream, keep);
  else
    copy_async(dst, src, bytes, stream);
}

void ResidentArrays::download(const std::vector<Download>& copies) const {
  if (copies.empty()) return;
  std::size_t largest = 0;
  for (const Download& c : copies) largest = std::max(largest, c.bytes);
  Stream stream;  // its own: a build's allocations (resident_stream) need not wait
  Staging staging(largest, stream.get(), nullptr);
  for (const Download& c : copies)
    staging.to_host(static_cast<char*>(c.dst), static_cast<const char*>(find(c.name)), c.bytes);
  staging.empty_pending();
}

ResidentArrays::~ResidentArrays() {
  if (!arrays_.empty()) cudaDeviceSynchronize();
}

std::shared_ptr<ResidentArrays> next_resident(std::shared_ptr<ResidentArrays>& last) {
  if (last && last.use_count() == 1) {
    last->reuse();
  } else {
    last = std::make_shared<ResidentArrays>();
  }
  return last;
}

void ResidentArrays::reuse() { CANOPY_CUDA_CHECK(cudaDeviceSynchronize()); }

void* ResidentArrays::add(const std::string& name, std::size_t bytes, stream_t stream) {
  Array& a = arrays_[name];
  bytes_ = bytes_ - a.bytes + bytes;
  a.bytes = bytes;
  if (a.memory.bytes() < bytes || !a.memory.get()) a.memory.reserve(bytes + bytes / 4, name.c_str(), resident_stream());
  Event allocated;
  stream_wait(static_cast<cudaStream_t>(stream), resident_stream(), allocated);
  return a.memory.get();
}

const void* ResidentArrays::find(const std::string& name) const {
  const auto it = arrays_.find(name);
  if (it == arrays_.end()) throw Error("internal: a tree left on the device has no array named '" + name + "'");
  return it->second.memory.get();
}

std::size_t ResidentArrays::bytes(const std::string& name) const {
  const auto it = arrays_.find(name);
  return it == arrays_.end() ? 0 : it->second.bytes;
}

}  // namespace detail
}  // namespace canopy
