#include "core/warnings.hpp"

#include <cstdio>
#include <mutex>
#include <utility>

namespace canopy {

namespace {

std::mutex& handler_mutex() {
  static std::mutex m;
  return m;
}

WarningHandler& handler() {
  static WarningHandler h;
  return h;
}

}  // namespace

void warn(const std::string& message) {
  WarningHandler h;
  {
    const std::lock_guard<std::mutex> lock(handler_mutex());
    h = handler();
  }
  if (h) {
    h(message);
    return;
  }
  std::fprintf(stderr, "canopy: warning: %s\n", message.c_str());
}

WarningHandler set_warning_handler(WarningHandler h) {
  const std::lock_guard<std::mutex> lock(handler_mutex());
  return std::exchange(handler(), std::move(h));
}

}  // namespace canopy
