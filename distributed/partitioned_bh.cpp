#include "distributed/mpi_detail.hpp"
#include "distributed/partition_detail.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/device.hpp"
#include "core/rounding.hpp"
#include "layouts/geometry.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "inspector/inspector.hpp"
#include "runtime/pc_visitor.hpp"
#include "scheduler/spatial_order.hpp"

namespace canopy {
namespace distributed {

using namespace detail;  // NOLINT: this file is the layer the helpers serve

// ---- Barnes-Hut over partitioned bodies -----------------------------------------------------------

PartitionedBarnesHut::PartitionedBarnesHut(MPI_Comm comm, const float* xyz, const float* mass, index_t n, int depth,
                                           const OctreeOptions& options)
    : comm_(comm), n_(n), options_(options) {
  const Place place = place_in(comm);
  rank_ = place.rank;
  ranks_ = place.ranks;
  TopCut cut = cut_top_tree(xyz, n, 3, depth, ranks_, "partitioned Barnes-Hut");
  ids_ = std::move(cut.ids);
  // Every rank's bounding box (the same on every rank: the cut is).
  boxes_.assign(static_cast<std::size_t>(ranks_) * 6, 0.0f);
  for (int r = 0; r < ranks_; ++r) {
    float* b = boxes_.data() + r * 6;
    for (int d = 0; d < 3; ++d) {
      b[d] = std::numeric_limits<float>::infinity();
      b[3 + d] = -std::numeric_limits<float>::infinity();
    }
    for (index_t id : ids_[static_cast<std::size_t>(r)])
      for (int d = 0; d < 3; ++d) {
        b[d] = std::min(b[d], xyz[id * 3 + d]);
        b[3 + d] = std::max(b[3 + d], xyz[id * 3 + d]);
      }
  }
  const std::vector<index_t>& mine = local_ids();
  const index_t count = static_cast<index_t>(mine.size());
  xyz_.resize(static_cast<std::size_t>(count) * 3);
  mass_.resize(static_cast<std::size_t>(count));
  run_share(comm, "local bodies", Share{0, count}, [&] {
    tbb::parallel_for(index_t{0}, count, [&](index_t i) {
      const index_t id = mine[static_cast<std::size_t>(i)];
      std::copy(xyz + id * 3, xyz + id * 3 + 3, xyz_.begin() + i * 3);
      mass_[static_cast<std::size_t>(i)] = mass[id];
    });
    OctreeOptions own = options;
    own.device = Device::Cpu;  // walked on the host when the others import from it
    own_ = std::make_unique<Octree>(Octree::build(xyz_.data(), mass_.data(), count, own));
  });
}

PartitionedBarnesHut::~PartitionedBarnesHut() = default;

namespace {

// Squared distance, in double, from the box lo[3], hi[3] to the point p.
double box_point_distance2(const float* lo, const float* hi, const float* p) {
  double d2 = 0;
  for (int d = 0; d < 3; ++d) {
    const double gap = std::max(0.0, std::max(static_cast<double>(lo[d]) - p[d], static_cast<double>(p[d]) - hi[d]));
    d2 += gap * gap;
  }
  return d2;
}

// What a rank whose bodies lie in `box` (lo[3], hi[3]) needs of `tree`: (x, y, z, mass)
// records, in the tree's depth-first order. A cell is sent whole when no body in the box would
// open it: the box misses its cube and side^2 < theta^2 d^2 for the box's nearest point (with a
// margin over the walk's float rounding); else its children, and at a leaf its bodies.
std::vector<float> essential_part(const OctreeView& tree, const float* box, float theta) {
  std::vector<float> out;
  if (tree.n_nodes == 0) return out;
  const double theta2 = static_cast<double>(theta) * theta;
  std::vector<node_id> stack{0};
  while (!stack.empty()) {
    const node_id n = stack.back();
    stack.pop_back();
    const float* c = tree.cube(n);
    const float* com = tree.node_com(n);
    if (!(com[3] > 0.0f)) continue;  // no mass: no force
    bool touches = true;
    for (int d = 0; d < 3; ++d)
      if (box[3 + d] < c[d] - c[3] || box[d] > c[d] + c[3]) touches = false;
    const double side = 2.0 * c[3];
    if (!touches && side * side < theta2 * box_point_distance2(box, box + 3, com) * (1 - 1e-4)) {
      out.insert(out.end(), com, com + 4);
      continue;
    }
    if (tree.is_leaf(n)) {
      const OctNode node = tree.nodes[n];
      out.insert(out.end(), tree.body(node.first), tree.body(node.first + node.count));
      continue;
    }
    for (int i = tree.child_count(n) - 1; i >= 0; --i) stack.push_back(tree.child(n, i));
  }
  return out;
}

}  // namespace

BhResult PartitionedBarnesHut::run(const BhOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const index_t count = static_cast<index_t>(local_ids().size());
  if (stats) {
    *stats = DistributedStats{};
    stats->local_items = count;
  }
  // What each other rank needs of this one's bodies.
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks_));
  run_share(comm_, "bodies", Share{0, count}, [&] {
    if (!(std::isfinite(options.theta) && options.theta >= 0))
      throw Error("theta " + std::to_string(options.theta) + " must be finite and >= 0");
    const OctreeView v = own_->view();
    tbb::parallel_for(0, ranks_, [&](int r) {
      if (r == rank_ || ids_[static_cast<std::size_t>(r)].empty()) return;
      const std::vector<float> part = essential_part(v, boxes_.data() + r * 6, options.theta);
      out[static_cast<std::size_t>(r)].resize(part.size() * sizeof(float));
      std::memcpy(out[static_cast<std::size_t>(r)].data(), part.data(), part.size() * sizeof(float));
    });
  });
  const std::vector<std::vector<char>> in = exchange(comm_, out, stats);
  // This rank's bodies first (their forces are the run's), then what arrived, rank by rank.
  std::vector<float> xyz = xyz_, mass = mass_;
  for (const std::vector<char>& b : in)
    for (std::size_t at = 0; at + 4 * sizeof(float) <= b.size(); at += 4 * sizeof(float)) {
      float r[4];
      std::memcpy(r, b.data() + at, sizeof r);
      xyz.insert(xyz.end(), r, r + 3);
      mass.push_back(r[3]);
    }
  imported_ = static_cast<index_t>(mass.size()) - count;
  std::vector<float> forces(static_cast<std::size_t>(count) * 3);
  TraversalStats ts;
  run_timed_share(comm_, "bodies", Share{0, count}, stats, [&] {
    OctreeOptions oo = options_;
    if (options.device == Device::Cpu) oo.device = Device::Cpu;
    const Octree tree = Octree::build(xyz.data(), mass.data(), static_cast<index_t>(mass.size()), oo);
    BarnesHut bh(tree, options.device);
    if (count > 0) ts = bh.run(options, 0, count, forces.data());
  });
  BhResult result;
  static_cast<TraversalStats&>(result) = ts;
  if (!holds_all(gather, rank_) && gather != Gather::Root) {
    result.forces = std::move(forces);
  } else {
    // Gathered in rank order, then put at each body's place.
    std::vector<int> cnt(static_cast<std::size_t>(ranks_)), at(cnt);
    index_t total = 0;
    for (int r = 0; r < ranks_; ++r) {
      cnt[static_cast<std::size_t>(r)] = static_cast<int>(ids_[static_cast<std::size_t>(r)].size());
      at[static_cast<std::size_t>(r)] = static_cast<int>(total);
      total += cnt[static_cast<std::size_t>(r)];
    }
    MPI_Datatype item;
    check_mpi(MPI_Type_contiguous(3, MPI_FLOAT, &item), "MPI_Type_contiguous");
    check_mpi(MPI_Type_commit(&item), "MPI_Type_commit");
    const bool all = holds_all(gather, rank_);
    std::vector<float> by_rank(all ? static_cast<std::size_t>(total) * 3 : 0);
    const int rc = gather == Gather::All
                       ? MPI_Allgatherv(forces.data(), static_cast<int>(count), item, by_rank.data(), cnt.data(), at.data(),
                                        item, comm_)
                       : MPI_Gatherv(forces.data(), static_cast<int>(count), item, by_rank.data(), cnt.data(), at.data(),
                                     item, 0, comm_);
    MPI_Type_free(&item);
    check_mpi(rc, gather == Gather::All ? "MPI_Allgatherv" : "MPI_Gatherv");
    if (stats) {
      const std::uint64_t own = static_cast<std::uint64_t>(count) * 12, others = static_cast<std::uint64_t>(n_ - count) * 12;
      stats->bytes_moved += gather == Gather::All ? own * static_cast<std::uint64_t>(ranks_ - 1) + others
                                                  : (rank_ == 0 ? others : own);
    }
    if (all) {
      result.forces.resize(static_cast<std::size_t>(n_) * 3);
      for (int r = 0; r < ranks_; ++r)
        tbb::parallel_for(std::size_t{0}, ids_[static_cast<std::size_t>(r)].size(), [&](std::size_t i) {
          const index_t id = ids_[static_cast<std::size_t>(r)][i];
          std::copy_n(by_rank.begin() + (at[static_cast<std::size_t>(r)] + static_cast<index_t>(i)) * 3, 3,
                      result.forces.begin() + id * 3);
        });
    } else {
      result.forces = std::move(forces);
    }
  }
  finish_stats(comm_, stats, start);
  return result;
}

}  // namespace distributed
}  // namespace canopy
