#include "runtime/detail/forest_choices.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cache_files.hpp"
#include "core/warnings.hpp"

namespace canopy {
namespace detail {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "canopy-forest-choices";

struct Fnv {
  std::uint64_t h = 14695981039346656037ull;
  void bytes(const void* p, std::size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  }
  template <class T>
  void value(const T& v) {
    bytes(&v, sizeof v);
  }
  template <class T>
  void array(const std::vector<T>& v) {
    value(v.size());
    if (!v.empty()) bytes(v.data(), v.size() * sizeof(T));
  }
  template <class... T>
  void values(const T&... v) {
    (value(v), ...);
  }
  template <class... T>
  void arrays(const std::vector<T>&... v) {
    (array(v), ...);
  }
};

// The knobs of a schedule, by name: the file's spelling.
const std::pair<const char*, int ForestSchedule::*> kKnobs[] = {
    {"block_threads", &ForestSchedule::block_threads}, {"rows_per_thread", &ForestSchedule::rows_per_thread},
    {"tree_interleave", &ForestSchedule::tree_interleave}, {"cache_rows", &ForestSchedule::cache_rows},
    {"tree_sync", &ForestSchedule::tree_sync},           {"rows_per_block", &ForestSchedule::rows_per_block},
    {"tree_group", &ForestSchedule::tree_group},         {"interleaved", &ForestSchedule::interleaved},
    {"top_rows", &ForestSchedule::top_rows},             {"part_kib", &ForestSchedule::part_kib}};

bool adaptive_strategy(ForestKernel k) {
  switch (k) {
    case ForestKernel::Direct:
    case ForestKernel::SharedData:
    case ForestKernel::SharedForest:
    case ForestKernel::SplitSharedForest: return true;
    case ForestKernel::Hybrid:
    case ForestKernel::Auto: return false;
  }
  return false;
}

// The whole file, or null when there is none; a warning and null when it cannot be used.
json read_file(const std::string& path, const std::string& model) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return nullptr;
  std::ifstream f(path, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  if (!f) {
    warn(path + ": cannot be read; Auto's choices start afresh");
    return nullptr;
  }
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    warn(path + ": not JSON (" + e.what() + "); ignored, Auto's choices start afresh");
    return nullptr;
  }
  if (!j.is_object() || j.value("format", "") != kFormat || !j.contains("entries") || !j["entries"].is_array()) {
    warn(path + ": not a canopy forest-choices file; ignored, Auto's choices start afresh");
    return nullptr;
  }
  if (j.value("version", 0) != kForestChoicesVersion || j.value("model", "") != model) return nullptr;  // stale: silent
  return j;
}

}  // namespace

std::uint64_t forest_fingerprint(const Forest& forest, const AdaptiveConfig& adaptive) {
  Fnv f;
  f.values(forest.objective(), forest.n_features(), forest.n_groups(), forest.leaf_width());
  f.arrays(forest.base_margin(), forest.class_values());
  for (const ForestTree& t : forest.trees()) {
    f.arrays(t.left, t.right, t.feature, t.value, t.default_left, t.leaf_values, t.cover, t.categorical);
    f.value(t.categories.size());
    for (const auto& c : t.categories) f.array(c);
    f.value(t.group);
  }
  f.values(adaptive.node_rearrangement, adaptive.tree_rearrangement, adaptive.token_nodes, adaptive.hash_bits,
           adaptive.chunks);
  return f.h;
}

ForestChoiceFile::ForestChoiceFile(const std::string& cache_dir, std::uint64_t model, std::string gpu_uuid,
                                   std::string gpu_name)
    : uuid_(std::move(gpu_uuid)), name_(std::move(gpu_name)) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(model));
  model_ = hex;
  if (cache_dir == "none") return;
  const std::string dir = cache_dir.empty() ? canopy_cache_dir() : cache_dir;
  if (dir.empty()) return;
  path_ = (std::filesystem::path(dir) / "forest_choices" / (model_ + ".json")).string();
}

ForestChoiceMap ForestChoiceFile::load() const {
  ForestChoiceMap out;
  const json j = read_file(path_, model_);
  if (j.is_null()) return out;
  for (const json& e : j["entries"]) {
    try {
      if (e.at("gpu").get<std::string>() != uuid_) continue;
      ForestChoice c;
      c.kernel = parse_forest_kernel(e.at("kernel").get<std::string>());
      if (!adaptive_strategy(c.kernel)) throw Error("kernel " + std::string(to_string(c.kernel)) + " is not a strategy");
      const json& s = e.at("schedule");
      for (const auto& [name, field] : kKnobs)
        if (s.contains(name)) c.knobs.*field = s.at(name).get<int>();
      const int size_class = e.at("size_class").get<int>(), depth = e.at("row_depth").get<int>();
      if (size_class < 0 || size_class > 62 || depth < 0) throw Error("size class or depth out of range");
      out[{size_class, depth}] = c;
    } catch (const std::exception& ex) {
      warn(path_ + ": an entry is ignored (" + ex.what() + ")");
    }
  }
  return out;
}

void ForestChoiceFile::save(const ForestChoiceMap& choices) const {
  if (path_.empty()) return;
  json entries = json::array();
  const json old = read_file(path_, model_);
  if (!old.is_null())
    for (const json& e : old["entries"]) {
      if (!e.is_object()) continue;
      if (e.value("gpu", "") == uuid_ && e.contains("size_class") && e.contains("row_depth") &&
          e["size_class"].is_number_integer() && e["row_depth"].is_number_integer() &&
          choices.count({e["size_class"].get<int>(), e["row_depth"].get<int>()}))
        continue;  // replaced below
      entries.push_back(e);
    }
  for (const auto& [key, c] : choices) {
    json s = json::object();
    for (const auto& [name, field] : kKnobs) s[name] = c.knobs.*field;
    entries.push_back({{"gpu", uuid_},
                       {"gpu_name", name_},
                       {"size_class", key.first},
                       {"row_depth", key.second},
                       {"kernel", to_string(c.kernel)},
                       {"schedule", s}});
  }
  const json j = {{"format", kFormat}, {"version", kForestChoicesVersion}, {"model", model_}, {"entries", entries}};
  try {
    write_file_atomically(path_, j.dump(1) + "\n");
  } catch (const Error& e) {
    warn(std::string(e.what()) + "; Auto's choices are not kept for the next process");
  }
}

}  // namespace detail
}  // namespace canopy
