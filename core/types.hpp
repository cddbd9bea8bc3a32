// The vocabulary every Canopy component shares: sizes, node ids, errors, the CUDA stream type.
// Compiles with a plain C++ compiler; includes nothing of Canopy (core/ is the floor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define CANOPY_HD __host__ __device__
#else
#define CANOPY_HD
#endif

// cudaStream_t is CUstream_st*: naming the struct lets CUDA-free headers take a stream.
struct CUstream_st;

namespace canopy {

// A CUDA stream (cudaStream_t) in headers that do not include CUDA; null: none given.
using stream_t = CUstream_st*;

// Node ids index the flattened tree; 2^31 nodes is ~8e9 points at leaf size 8, checked at build.
using node_id = std::int32_t;
// Point and query counts can exceed 2^31.
using index_t = std::int64_t;

constexpr node_id kNoNode = -1;

// Every error Canopy reports: bad input, bad options, CUDA failures. The message names the
// file, line, parameter or CUDA call at fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The GPU (or the caller's memory budget) has not the memory a call needs; what() says what
// was to be allocated and how much is free. Python raises MemoryError for it.
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& what) : Error(what) {}
};

// A CUDA call failed; what() names the call and CUDA's message.
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& what) : Error(what) {}
};

// The name of enumerator e, given the names in declaration order; "?" for any other value.
template <class E, std::size_t N>
constexpr const char* enum_name(E e, const char* const (&names)[N]) {
  const auto i = static_cast<std::size_t>(e);
  return i < N ? names[i] : "?";
}

}  // namespace canopy
