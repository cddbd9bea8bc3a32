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

// The page-locked staging of downloads (ResidentArrays::download), process-wide and made on the
// first one: two slots, so the device fills one while the host empties the other. Never freed
// (it may serve a download until exit); one download at a time.
constexpr std::size_t kStageBytes = std::size_t{8} << 20;
struct Staging {
  std::mutex m;
  PinnedMemory slot[2];
  cudaEvent_t filled[2] = {nullptr, nullptr};
  cudaStream_t stream = nullptr;  // its own: a build's allocations (resident_stream) need not wait
};
Staging& staging() {
  static Staging* const s = new Staging;
  return *s;
}

}  // namespace

void ResidentArrays::download(const std::vector<Download>& copies) const {
  if (copies.empty()) return;
  Staging& st = staging();
  std::lock_guard<std::mutex> lock(st.m);
  if (!st.stream) {
    for (int i = 0; i < 2; ++i) {
      st.slot[i].reserve(kStageBytes, "the download staging", nullptr);
      CANOPY_CUDA_CHECK(cudaEventCreateWithFlags(&st.filled[i], cudaEventDisableTiming));
    }
    CANOPY_CUDA_CHECK(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
  }
  // The chunk in a slot that the host has yet to copy out (slot -1: none).
  struct Pending {
    char* dst = nullptr;
    std::size_t bytes = 0;
    int slot = -1;
  } pending;
  auto empty_pending = [&] {
    if (pending.slot < 0) return;
    CANOPY_CUDA_CHECK(cudaEventSynchronize(st.filled[pending.slot]));
    copy_on_cores(pending.dst, st.slot[pending.slot].get(), pending.bytes);
    pending.slot = -1;
  };
  int next = 0;
  for (const Download& c : copies) {
    const char* src = static_cast<const char*>(find(c.name));
    for (std::size_t at = 0; at < c.bytes; at += kStageBytes) {
      const std::size_t len = std::min(kStageBytes, c.bytes - at);
      // Slot `next` is empty: the host copied it out right after the last chunk went out.
      CANOPY_CUDA_CHECK(cudaMemcpyAsync(st.slot[next].get(), src + at, len, cudaMemcpyDeviceToHost, st.stream));
      CANOPY_CUDA_CHECK(cudaEventRecord(st.filled[next], st.stream));
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
