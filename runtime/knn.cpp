#include "runtime/knn.hpp"

#include <algorithm>
#include <string>

#include "runtime/detail/workloads.hpp"
#include "runtime/engine.hpp"

namespace canopy {

const char* to_string(SearchTree t) {
  static constexpr const char* kNames[] = {"kd-tree", "ball tree", "vantage-point tree"};
  return enum_name(t, kNames);
}

NearestNeighbors::NearestNeighbors(const KdTree& tree, Device device)
    : kind_(SearchTree::Kd), kd_tree_(&tree), kd_(std::make_unique<Engine<detail::KnnWorkload<KdTree>>>(tree, device)) {
  keep_sizes();
}
NearestNeighbors::NearestNeighbors(const BallTree& tree, Device device)
    : kind_(SearchTree::Ball), ball_(std::make_unique<Engine<detail::KnnWorkload<BallTree>>>(tree, device)) {
  keep_sizes();
}
NearestNeighbors::NearestNeighbors(const VpTree& tree, Device device)
    : kind_(SearchTree::Vp), vp_(std::make_unique<Engine<detail::KnnWorkload<VpTree>>>(tree, device)) {
  keep_sizes();
}
NearestNeighbors::~NearestNeighbors() = default;

template <class F>
decltype(auto) NearestNeighbors::with_engine(F&& f) const {
  switch (kind_) {
    case SearchTree::Kd: return f(*kd_);
    case SearchTree::Ball: return f(*ball_);
    case SearchTree::Vp: break;
  }
  return f(*vp_);
}

Device NearestNeighbors::device() const {
  return with_engine([](const auto& e) { return e.device(); });
}
void NearestNeighbors::keep_sizes() {
  with_engine([&](const auto& e) {
    const auto v = e.view();
    dims_ = v.dims;
    size_ = v.n_points;
    height_ = v.height;
  });
}

KnnResult NearestNeighbors::run(const float* queries, index_t n, const KnnOptions& opt) {
  KnnResult r;
  r.k = opt.k;
  const std::size_t slots = static_cast<std::size_t>(std::max<index_t>(n, 0)) * static_cast<std::size_t>(std::max(opt.k, 0));
  r.indices.assign(slots, -1);
  r.distances.assign(slots, 0.0f);
  static_cast<TraversalStats&>(r) = run(queries, n, opt, r.indices.data(), r.distances.data());
  return r;
}

TraversalStats NearestNeighbors::run(const float* queries, index_t n, const KnnOptions& opt, index_t* indices,
                                     float* distances) {
  const index_t points = size();
  if (opt.k < 1 || opt.k > points)
    throw Error("k = " + std::to_string(opt.k) + " is outside 1.." + std::to_string(points) + " (the " +
                to_string(kind_) + " has " + std::to_string(points) + " points)");
  if ((!indices || !distances) && n > 0) throw Error("NearestNeighbors::run: an output buffer is null");
  return with_engine([&](auto& e) {
    const typename std::decay_t<decltype(e)>::Workload w(dims(), opt.k);
    CallData call;
    call.queries = queries;
    call.n = n;
    call.outputs[0] = indices;
    call.outputs[1] = distances;
    return e.run(w, call, opt);
  });
}

}  // namespace canopy
