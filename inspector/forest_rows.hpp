// The forest row inspector: each row's walk through the top levels of the leading trees, packed
// into one sort key (the scheduling matrix of a forest, one word per row). The same function
// runs on the CPU (scheduler/forest_rows.hpp's reference) and in the GPU kernel
// (launch_forest_row_keys below).
#pragma once

#include <cstdint>

#include "layouts/forest_adaptive.hpp"

namespace canopy {

// Row scheduling's key for one row (the inspector, on the CPU and the GPU alike): the top-leaf
// the row reaches in each of the first key_trees trees (canonical order), `depth` path bits
// each (1 = the stored second child), the first tree in the most significant bits. A walk that
// meets a leaf above `depth` pads its path with zeros. key_trees * depth <= 64.
CANOPY_HD inline std::uint64_t adaptive_row_key(const AdaptiveForestView& v, const float* row, int depth, int key_trees) {
  std::uint64_t key = 0;
  for (int t = 0; t < key_trees; ++t) {
    const ForestNode* base = v.nodes + v.tree_begin[t];
    std::uint32_t k = 0;
    std::uint64_t path = 0;
    for (int l = 0; l < depth; ++l) {
      const ForestNode n = base[k];
      const std::uint32_t second = adaptive_second(n, row[n.info & v.feature_mask], v.common.categories);
      k = ((n.info & kAdaptivePayloadMask) >> v.feature_bits) + second;
      path = (path << 1) | second;  // a leaf stays put and adds 0
    }
    key = (key << depth) | path;
  }
  return key;
}

// Trees whose top levels make the key: as many as fit 64 bits.
inline int adaptive_key_trees(index_t n_trees, int depth) {
  return static_cast<int>(n_trees < 64 / depth ? n_trees : 64 / depth);
}

// One batch's inspection: its rows and where their keys go, all in device memory.
struct ForestRowKeys {
  const float* rows = nullptr;    // [n_rows][n_features]
  index_t n_rows = 0;
  int depth = 1;                  // the top-tree depth
  int key_trees = 1;              // adaptive_key_trees(n_trees, depth)
  std::uint64_t* keys = nullptr;  // [n_rows]
  index_t* index = nullptr;       // [n_rows]
};

// The GPU inspector (inspector/forest_rows.cu): keys[i] = adaptive_row_key(row i), index[i] = i,
// on `stream`.
void launch_forest_row_keys(const AdaptiveForestView& v, const ForestRowKeys& k, stream_t stream);

}  // namespace canopy
