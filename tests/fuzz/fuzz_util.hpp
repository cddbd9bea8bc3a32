// Helpers the fuzz targets share: the input as a file (plain or gzip), a byte reader, and the
// rule that a canopy::Error is a fine outcome while anything else escaping is a finding.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/types.hpp"

namespace canopy {
namespace fuzz {

// One file per process and tag, rewritten by every input (libFuzzer runs inputs one at a time;
// parallel jobs are separate processes).
inline const std::string& temp_path(const char* tag) {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    return std::string(t && *t ? t : "/tmp");
  }();
  static thread_local std::string path;
  path = dir + "/canopy-fuzz-" + tag + "-" + std::to_string(::getpid());
  return path;
}

// Writes the bytes to `path`, gzip-compressed if asked (zlib, as the readers expect).
inline void write_file(const std::string& path, const void* data, std::size_t size, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size > 0 && gzwrite(f, data, static_cast<unsigned>(size)) != static_cast<int>(size)) std::abort();
    if (gzclose(f) != Z_OK) std::abort();
    return;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  if (std::fclose(f) != 0) std::abort();
}

// A finding the sanitizers cannot see (a wrong answer): message, then abort for libFuzzer.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}
#define CANOPY_FUZZ_CHECK(cond, what) \
  do {                                \
    if (!(cond)) ::canopy::fuzz::fail(std::string(#cond ": ") + (what)); \
  } while (0)

// Runs f; a canopy::Error (the library's documented way to refuse input) is swallowed, any
// other exception escapes to libFuzzer, which reports it.
template <class F>
bool library_call(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Reads the input front to back; past the end every read gives 0.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  std::uint8_t u8() { return i_ < n_ ? p_[i_++] : 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k) v |= static_cast<std::uint32_t>(u8()) << (8 * k);
    return v;
  }
  // 0 .. n-1
  int below(int n) { return n <= 1 ? 0 : static_cast<int>(u8() % n); }
  bool bit() { return (u8() & 1) != 0; }
  std::size_t left() const { return n_ - i_; }
  std::string take(std::size_t len) {
    if (len > left()) len = left();
    std::string s(reinterpret_cast<const char*>(p_ + i_), len);
    i_ += len;
    return s;
  }
  const std::uint8_t* rest() const { return p_ + i_; }

 private:
  const std::uint8_t* p_;
  std::size_t n_, i_ = 0;
};

}  // namespace fuzz
}  // namespace canopy
