// The autoropes traversal of one query (the loop body shared by the CPU executor and the GPU
// independent kernel): ask the visitor whether to go on at the current node, process a leaf
// or push the other children in reverse visit order and move to the first; pop when a path
// ends. A guided visitor picks the first child; an unguided one visits child 0 first.
#pragma once

#include "executor/visitor.hpp"

namespace canopy {

template <class Topology, class Visitor>
CANOPY_HD inline void traverse_one(const Topology& tree, const Visitor& v, index_t query) {
  node_id stack[Topology::kMaxStack];
  int sp = 0;
  node_id n = 0;
  auto s = v.init(query);
  for (;;) {
    if (v.descend(s, n)) {
      if (!tree.is_leaf(n)) {
        // The first child is visited next, so it never goes through the stack.
        const int first = preferred_child(v, s, n);
        for (int i = tree.child_count(n) - 1; i > 0; --i) stack[sp++] = tree.child(n, visit_rank_child(first, i));
        n = tree.child(n, first);
        continue;
      }
      v.leaf(s, n);
    }
    if (sp == 0) break;
    n = stack[--sp];
  }
  v.finish(s, query);
}

// The query run at schedule position i; a null order is the input order.
CANOPY_HD inline index_t scheduled_query(const index_t* order, index_t i) {
  return order ? order[i] : i;
}

}  // namespace canopy
