#include "layouts/resident.hpp"

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

}  // namespace

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
