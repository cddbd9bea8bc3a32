// The autoropes traversal of one query (the loop body shared by the CPU executor and the GPU
// independent kernel): pop a node, ask the visitor whether to go on, process a leaf or push
// the children in reverse order so child 0 comes off the stack first.
#pragma once

#include "executor/visitor.hpp"

namespace canopy {

template <class Topology, class Visitor>
CANOPY_HD inline void traverse_one(const Topology& tree, const Visitor& v, index_t query) {
  node_id stack[Topology::kMaxStack];
  int sp = 0;
  stack[sp++] = 0;
  auto s = v.init(query);
  while (sp > 0) {
    const node_id n = stack[--sp];
    if (!v.descend(s, n)) continue;
    if (tree.is_leaf(n)) {
      v.leaf(s, n);
    } else {
      for (int i = tree.child_count(n) - 1; i >= 0; --i) stack[sp++] = tree.child(n, i);
    }
  }
  v.finish(s, query);
}

// The query run at schedule position i; a null order is the input order.
CANOPY_HD inline index_t scheduled_query(const index_t* order, index_t i) {
  return order ? order[i] : i;
}

}  // namespace canopy
