// A visitor of your own: count the points of a kd-tree inside an axis-aligned box per query,
// through the same engine, inspector, schedulers and executors as the built-in workloads
// (traverse_cpu here; canopy::Traverser in a .cu file runs the same visitor on the GPU, see
// examples/quadtree_cities_gpu.cu). Checked against brute force.
#include <cstdio>
#include <random>
#include <vector>

#include "layouts/kdtree.hpp"
#include "runtime/custom.hpp"

// The visitor: per-query state, "descend or truncate here?", what to do at a leaf, the result.
struct BoxCount {
  canopy::KdTreeView tree;
  const float* boxes;        // [queries][2][dims]: lo, then hi
  canopy::index_t* counts;   // [queries]
  struct State {
    const float* box;
    canopy::index_t count;
  };
  State init(canopy::index_t q) const { return {boxes + q * 2 * tree.dims, 0}; }
  bool descend(State& s, canopy::node_id n) const {  // does node n's box meet the query box?
    for (int d = 0; d < tree.dims; ++d)
      if (tree.hi(n)[d] < s.box[d] || tree.lo(n)[d] > s.box[tree.dims + d]) return false;
    return true;
  }
  bool inside(const State& s, const float* p) const {
    for (int d = 0; d < tree.dims; ++d)
      if (p[d] < s.box[d] || p[d] > s.box[tree.dims + d]) return false;
    return true;
  }
  void leaf(State& s, canopy::node_id n) const {
    const canopy::KdNode node = tree.nodes[n];
    for (canopy::index_t i = node.first; i < node.first + node.count; ++i) s.count += inside(s, tree.point(i));
  }
  void finish(State& s, canopy::index_t q) const { counts[q] = s.count; }
};

int main() {
  const int dims = 2;
  const canopy::index_t n = 20000, m = 5000;
  std::vector<float> points(n * dims), boxes(m * 2 * dims);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : points) x = u(rng);
  for (canopy::index_t q = 0; q < m; ++q)
    for (int d = 0; d < dims; ++d) {
      boxes[q * 2 * dims + d] = u(rng);
      boxes[q * 2 * dims + dims + d] = boxes[q * 2 * dims + d] + 0.05f;
    }

  const canopy::KdTree tree = canopy::KdTree::build(points.data(), n, dims);
  std::vector<canopy::index_t> counts(m);
  const BoxCount v{tree.view(), boxes.data(), counts.data()};
  canopy::TraversalOptions opt;  // inspector + sandpile, then the warp emulator (lockstep)
  opt.count_nodes = true;        // the divergence metric: nodes each warp of 32 queries visits
  const canopy::TraversalStats st = canopy::traverse_cpu(tree.view(), v, m, opt);

  for (canopy::index_t q = 0; q < m; q += 97) {  // brute force for some queries
    canopy::index_t expect = 0;
    const BoxCount::State s{boxes.data() + q * 2 * dims, 0};
    for (canopy::index_t p = 0; p < n; ++p) expect += v.inside(s, points.data() + p * dims);
    if (expect != counts[q]) {
      std::printf("box %lld: %lld points, brute force %lld\n", static_cast<long long>(q),
                  static_cast<long long>(counts[q]), static_cast<long long>(expect));
      return 1;
    }
  }
  std::printf("custom visitor: box 0 holds %lld points; %.0f nodes per warp; ok\n", static_cast<long long>(counts[0]),
              st.nodes_per_warp());
  return 0;
}
