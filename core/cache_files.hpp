// Canopy's cache directory and the one way files in it are written. CUDA-free.
#pragma once

#include <string>

namespace canopy {

// $CANOPY_CACHE_DIR, else $XDG_CACHE_HOME/canopy, else $HOME/.cache/canopy (empty variables
// count as unset); "" when none of them is set.
std::string canopy_cache_dir();

// Writes `text` to `path`, creating its directories: written beside it under a name no other
// process or thread uses, then renamed over it (atomic on POSIX), so a concurrent reader sees
// the old file or the new one, never half of one. An Error naming the path on failure.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace canopy
