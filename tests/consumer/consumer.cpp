// Builds against the installed Canopy only: point correlation through the library API (the
// GPU, when there is one, against the CPU path) and a visitor of its own (points inside a box)
// through traverse_cpu, checked by brute force.
#include "runtime/point_correlation.hpp"
#include "runtime/custom.hpp"

#include <cstdio>
#include <random>
#include <vector>

namespace {

// The consumer's own visitor: counts the points of a kd-tree inside an axis-aligned box.
struct InBox {
  canopy::KdTreeView tree;
  const float* boxes;  // [queries][2 * dims]: lo then hi
  canopy::index_t* counts;
  struct State {
    canopy::index_t q, count;
  };
  State init(canopy::index_t q) const { return {q, 0}; }
  bool descend(State& s, canopy::node_id n) const {
    const float* b = boxes + s.q * 2 * tree.dims;
    for (int d = 0; d < tree.dims; ++d)
      if (tree.hi(n)[d] < b[d] || tree.lo(n)[d] > b[tree.dims + d]) return false;
    return true;
  }
  void leaf(State& s, canopy::node_id n) const {
    const float* b = boxes + s.q * 2 * tree.dims;
    const canopy::KdNode node = tree.nodes[n];
    for (canopy::index_t i = node.first; i < node.first + node.count; ++i) {
      bool in = true;
      for (int d = 0; d < tree.dims; ++d) in = in && tree.point(i)[d] >= b[d] && tree.point(i)[d] <= b[tree.dims + d];
      s.count += in;
    }
  }
  void finish(State& s, canopy::index_t q) const { counts[q] = s.count; }
};

}  // namespace

int main() {
  const int dims = 3;
  const canopy::index_t n = 20000, m = 3000;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> pts(n * dims), boxes(m * 2 * dims);
  for (float& x : pts) x = u(rng);
  for (canopy::index_t q = 0; q < m; ++q)
    for (int d = 0; d < dims; ++d) {
      const float c = u(rng), h = 0.05f * u(rng);
      boxes[q * 2 * dims + d] = c - h;
      boxes[q * 2 * dims + dims + d] = c + h;
    }
  const canopy::KdTree tree = canopy::KdTree::build(pts.data(), n, dims);

  canopy::PointCorrelation pc(tree);
  canopy::PcOptions po;
  po.radius = 0.05f;
  const canopy::PcResult r = pc.run(pts.data(), m, po);
  po.device = canopy::Device::Cpu;
  const canopy::PcResult cpu = pc.run(pts.data(), m, po);

  std::vector<canopy::index_t> counts(m);
  canopy::TraversalOptions opt;
  opt.schedule = canopy::ScheduleKind::Hybrid;
  canopy::traverse_cpu(tree.view(), InBox{tree.view(), boxes.data(), counts.data()}, m, opt);

  long bad = 0;
  for (canopy::index_t q = 0; q < m; ++q) {
    canopy::index_t inside = 0;
    for (canopy::index_t i = 0; i < n; ++i) {
      bool in = true;
      for (int d = 0; d < dims; ++d) {
        const float x = pts[i * dims + d];
        in = in && x >= boxes[q * 2 * dims + d] && x <= boxes[q * 2 * dims + dims + d];
      }
      inside += in;
    }
    bad += (r.counts[q] != cpu.counts[q]) + (counts[q] != inside) + (cpu.counts[q] < 1);
  }
  std::printf("consumer: %s, %ld mismatches\n", canopy::to_string(r.device), bad);
  if (bad == 0) std::printf("consumer: ok\n");
  return bad == 0 ? 0 : 1;
}
