// A tree's arrays left in device memory by its GPU build, so that the engines read them in place
// and the tree makes its host copies only when a CPU path asks for them (PointTree). Each array
// goes by the name the tree's map_view gives it. CUDA-free; layouts/resident.cu holds the CUDA.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "core/device_buffer.hpp"

namespace canopy {
namespace detail {

class ResidentArrays {
 public:
  ResidentArrays() = default;
  ResidentArrays(const ResidentArrays&) = delete;
  ResidentArrays& operator=(const ResidentArrays&) = delete;
  // Waits for the device before freeing: an engine's kernels may still read the arrays.
  ~ResidentArrays();

  // Device memory for `bytes` under `name`, ready for use on `stream` (the build's).
  void* add(const std::string& name, std::size_t bytes, stream_t stream);
  // The array named `name`; an error naming it if there is none.
  const void* find(const std::string& name) const;
  std::size_t bytes(const std::string& name) const;
  std::size_t bytes() const { return bytes_; }

 private:
  struct Array {
    DeviceMemory memory;
    std::size_t bytes = 0;
  };
  std::map<std::string, Array> arrays_;
  std::size_t bytes_ = 0;
};

}  // namespace detail
}  // namespace canopy
