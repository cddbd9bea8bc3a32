#include "executor/forest_schedule.hpp"

#include <sstream>

#include "core/types.hpp"

namespace canopy {

const char* to_string(ForestKernel k) {
  switch (k) {
    case ForestKernel::Direct: return "direct";
    case ForestKernel::Hybrid: return "hybrid";
    case ForestKernel::SharedData: return "shared-data";
    case ForestKernel::SharedForest: return "shared-forest";
    case ForestKernel::SplitSharedForest: return "split-shared-forest";
    case ForestKernel::Auto: return "auto";
  }
  return "?";
}

ForestKernel parse_forest_kernel(const std::string& name) {
  for (ForestKernel k : {ForestKernel::Direct, ForestKernel::Hybrid, ForestKernel::SharedData, ForestKernel::SharedForest,
                         ForestKernel::SplitSharedForest, ForestKernel::Auto})
    if (name == to_string(k)) return k;
  if (name == "shared") return ForestKernel::SharedData;
  if (name == "split") return ForestKernel::SplitSharedForest;
  throw Error("unknown forest kernel '" + name +
              "' (known: direct, hybrid, shared-data, shared-forest, split-shared-forest, auto)");
}

bool ForestSchedule::operator==(const ForestSchedule& o) const {
  return block_threads == o.block_threads && rows_per_thread == o.rows_per_thread && tree_interleave == o.tree_interleave &&
         cache_rows == o.cache_rows && tree_sync == o.tree_sync && rows_per_block == o.rows_per_block &&
         tree_group == o.tree_group && interleaved == o.interleaved && top_rows == o.top_rows && part_kib == o.part_kib;
}

std::string ForestSchedule::describe() const {
  std::ostringstream s;
  auto item = [&](const char* name, int v) {
    if (v <= 0) return;
    if (s.tellp() > 0) s << ", ";
    s << name << " " << v;
  };
  item("block", block_threads);
  item("rows/thread", rows_per_thread);
  item("trees/walk", tree_interleave);
  if (cache_rows >= 0) s << (s.tellp() > 0 ? ", " : "") << (cache_rows ? "rows cached" : "rows from global");
  if (tree_sync >= 0) s << (s.tellp() > 0 ? ", " : "") << (tree_sync ? "sync every " + std::to_string(tree_sync) + " trees" : "no sync");
  item("rows/block", rows_per_block);
  item("rows/pass", tree_group);
  if (interleaved >= 0) s << (s.tellp() > 0 ? ", " : "") << (interleaved ? "interleaved" : "tree-major");
  item("top rows", top_rows);
  item("part KiB", part_kib);
  return s.str();
}

}  // namespace canopy
