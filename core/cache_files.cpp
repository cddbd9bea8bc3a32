#include "core/cache_files.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/types.hpp"

namespace canopy {

std::string canopy_cache_dir() {
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  if (const std::string d = env("CANOPY_CACHE_DIR"); !d.empty()) return d;
  if (const std::string d = env("XDG_CACHE_HOME"); !d.empty()) return (std::filesystem::path(d) / "canopy").string();
  if (const std::string d = env("HOME"); !d.empty()) return (std::filesystem::path(d) / ".cache" / "canopy").string();
  return "";
}

void write_file_atomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  if (path.empty()) throw Error("write_file_atomically: the path is empty");
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw Error(path + ": cannot create the directory " + target.parent_path().string() + ": " + ec.message());
  }
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(path + ": cannot write (cannot create " + tmp + ")");
    f << text;
    f.close();
    if (!f) {
      fs::remove(tmp, ec);
      throw Error(path + ": cannot write (writing " + tmp + " failed)");
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw Error(path + ": cannot write: " + ec.message());
  }
}

}  // namespace canopy
