// Line-by-line reading of plain or gzip-compressed text files (zlib reads both).
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include <zlib.h>

#include "core/types.hpp"

namespace canopy {

// Strips a trailing \r; the last line needs no newline. Errors name the file.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    if (!file_) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
    gzbuffer(file_, 1 << 18);
  }
  ~LineReader() { if (file_) gzclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  bool next(std::string& line) {
    line.clear();
    for (;;) {
      if (pos_ == end_) {
        const int got = gzread(file_, buf_, sizeof buf_);
        if (got < 0) {
          int code = 0;
          throw Error(path_ + ": read error (" + gzerror(file_, &code) + ")");
        }
        if (got == 0) return !line.empty();
        pos_ = 0;
        end_ = got;
      }
      const char* start = buf_ + pos_;
      const void* nl = std::memchr(start, '\n', static_cast<std::size_t>(end_ - pos_));
      if (nl) {
        const int len = static_cast<int>(static_cast<const char*>(nl) - start);
        line.append(start, static_cast<std::size_t>(len));
        pos_ += len + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        return true;
      }
      line.append(start, static_cast<std::size_t>(end_ - pos_));
      pos_ = end_;
    }
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  char buf_[1 << 16];
  int pos_ = 0, end_ = 0;
};

}  // namespace canopy
