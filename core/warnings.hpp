// Warnings: what Canopy tells a caller without failing the call (a corrupt cache file it
// ignores, say). By default one line on stderr, "canopy: warning: ..."; a program (the Python
// package: Python's warnings module) may take them instead. CUDA-free.
#pragma once

#include <functional>
#include <string>

namespace canopy {

// Reports `message` to the handler (thread-safe; the handler runs on the caller's thread).
void warn(const std::string& message);

// Replaces the handler; an empty function restores stderr. Returns the previous one.
using WarningHandler = std::function<void(const std::string&)>;
WarningHandler set_warning_handler(WarningHandler handler);

}  // namespace canopy
