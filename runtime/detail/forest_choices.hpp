// Internal: Auto's choices on disk, so that the next process starts tuned. One file per model
// (its fingerprint names it) under <cache dir>/forest_choices/, holding for each GPU (uuid),
// batch-size class and row-scheduling depth the strategy and the knobs that were set. A file
// that is missing is empty; one that cannot be read or parsed, or an entry that does not make
// sense, is ignored with a warning (core/warnings.hpp). CUDA-free.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "layouts/forest.hpp"
#include "runtime/forest_predictor.hpp"

namespace canopy {
namespace detail {

// Bumped when a kernel change may move the fastest schedule: older files are ignored.
constexpr int kForestChoicesVersion = 1;

// A forest and the options its adaptive layout was built with, as 64 bits (FNV-1a over the
// trees' arrays, the objective, the base margins and the layout options).
std::uint64_t forest_fingerprint(const Forest& forest, const AdaptiveConfig& adaptive);

struct ForestChoice {
  ForestKernel kernel = ForestKernel::Direct;
  ForestSchedule knobs;  // as set (0 / -1: the engine's default)
};

// (size class, row-scheduling depth) -> the tuned choice.
using ForestChoiceMap = std::map<std::pair<int, int>, ForestChoice>;

class ForestChoiceFile {
 public:
  ForestChoiceFile() = default;  // no file: load() is empty, save() does nothing
  // cache_dir: ForestConfig::cache_dir ("" = canopy_cache_dir(), "none" = no file).
  ForestChoiceFile(const std::string& cache_dir, std::uint64_t model, std::string gpu_uuid, std::string gpu_name);

  const std::string& path() const { return path_; }
  // This GPU's entries.
  ForestChoiceMap load() const;
  // Merges `choices` into the file (read again first): they replace this GPU's entries of the
  // same class and depth; other entries stay (another predictor's, another GPU's). A file
  // that cannot be written is a warning, not an error.
  void save(const ForestChoiceMap& choices) const;

 private:
  std::string path_, uuid_, name_, model_;
};

}  // namespace detail
}  // namespace canopy
