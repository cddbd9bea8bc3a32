#include "runtime/barnes_hut.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/detail/workloads.hpp"
#include "runtime/engine.hpp"

namespace canopy {
namespace {


detail::BhWorkload workload(const BhOptions& opt) {
  if (!std::isfinite(opt.theta) || opt.theta < 0.0f)
    throw Error("theta = " + std::to_string(opt.theta) + " must be finite and >= 0");
  if (!std::isfinite(opt.softening) || opt.softening < 0.0f)
    throw Error("softening = " + std::to_string(opt.softening) + " must be finite and >= 0");
  detail::BhWorkload w;
  w.theta2 = opt.theta * opt.theta;
  w.eps2 = opt.softening * opt.softening;
  return w;
}

}  // namespace

// The bodies in their original order (the queries), from the tree-ordered copy.
void detail::BhData::original_order() const {
  if (!mass.empty()) return;  // an octree has at least one body
  const index_t n = tree.size();
  xyz.resize(static_cast<std::size_t>(n) * 3);
  mass.resize(static_cast<std::size_t>(n));
  const std::vector<float>& b = tree.bodies();
  const std::vector<index_t>& ids = tree.body_ids();
  for (index_t i = 0; i < n; ++i) {
    std::copy_n(&b[i * 4], 3, &xyz[ids[i] * 3]);
    mass[ids[i]] = b[i * 4 + 3];
  }
}

BarnesHut::BarnesHut(const Octree& tree, Device device)
    : tree_(tree),
      data_(std::make_unique<detail::BhData>(detail::BhData{tree, {}, {}})),
      engine_(std::make_unique<Engine<detail::BhWorkload>>(*data_, device)) {}
BarnesHut::~BarnesHut() = default;

Device BarnesHut::device() const { return engine_->device(); }

BhResult BarnesHut::run(const BhOptions& opt) {
  BhResult r;
  r.forces.assign(static_cast<std::size_t>(tree_.size()) * 3, 0.0f);
  static_cast<TraversalStats&>(r) = run(opt, r.forces.data());
  return r;
}

TraversalStats BarnesHut::run(const BhOptions& opt, float* forces) { return run(opt, 0, tree_.size(), forces); }

TraversalStats BarnesHut::run(const BhOptions& opt, index_t first, index_t count, float* forces) {
  detail::BhWorkload w = workload(opt);
  if (first < 0 || count < 0 || first > tree_.size() - count)
    throw Error("BarnesHut::run: bodies " + std::to_string(first) + " .. " + std::to_string(first + count - 1) +
                " are outside the tree's " + std::to_string(tree_.size()) + " bodies");
  if (!forces && count > 0) throw Error("BarnesHut::run: the forces buffer is null");
  w.first = first;
  CallData call;
  call.n = count;
  call.outputs[0] = forces;
  return engine_->run(w, call, opt);
}

}  // namespace canopy
