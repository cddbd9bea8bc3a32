#include "layouts/resident.hpp"

#include <algorithm>
#include <cstring>

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

// A download's page-locked staging: two slots, so the device fills one while the host empties
// the other. Made per download and freed after it (a tree's host copy is made once), so no
// memory outlives the copies (a process-wide staging was a leak to the tools).
constexpr std::size_t kStageBytes = std::size_t{8} << 20;

}  // namespace

void ResidentArrays::download(const std::vector<Download>& copies) const {
  if (copies.empty()) return;
  std::size_t largest = 0;
  for (const Download& c : copies) largest = std::max(largest, c.bytes);
  const std::size_t stage = std::min(kStageBytes, std::max<std::size_t>(largest, 1));
  Stream stream;  // its own: a build's allocations (resident_stream) need not wait
  PinnedMemory slot[2];
  for (PinnedMemory& m : slot) m.reserve(stage, "the host copy's staging", nullptr);
  Event filled[2];
  // Declared last, so it runs first: no copy may still be writing a slot when it is freed.
  struct WaitOnExit {
    cudaStream_t s;
    ~WaitOnExit() { cudaStreamSynchronize(s); }
  } wait_on_exit{stream.get()};
  // The chunk in a slot that the host has yet to copy out (slot -1: none).
  struct Pending {
    char* dst = nullptr;
    std::size_t bytes = 0;
    int slot = -1;
  } pending;
  auto empty_pending = [&] {
    if (pending.slot < 0) return;
    CANOPY_CUDA_CHECK(cudaEventSynchronize(filled[pending.slot].get()));
    copy_on_cores(pending.dst, slot[pending.slot].get(), pending.bytes);
    pending.slot = -1;
  };
  int next = 0;
  for (const Download& c : copies) {
    const char* src = static_cast<const char*>(find(c.name));
    for (std::size_t at = 0; at < c.bytes; at += stage) {
      const std::size_t len = std::min(stage, c.bytes - at);
      // Slot `next` is empty: the host copied it out right after the last chunk went out.
      CANOPY_CUDA_CHECK(cudaMemcpyAsync(slot[next].get(), src + at, len, cudaMemcpyDeviceToHost, stream.get()));
      filled[next].record(stream.get());
      empty_pending();
      pending = {static_cast<char*>(c.dst) + at, len, next};
      next ^= 1;
    }
  }
  empty_pending();
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
