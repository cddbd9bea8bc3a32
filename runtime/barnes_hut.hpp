// Canopy's public API for Barnes-Hut gravity: the force on every body of an octree, on the GPU
// (inspector -> sandpile -> lockstep executor) or on the CPU. Compiles with a plain C++
// compiler.
//
//   canopy::Octree tree = canopy::Octree::build(xyz, mass, n);
//   canopy::BarnesHut bh(tree);                 // uploads the tree once
//   canopy::BhOptions opt;                      // theta 0.5, softening 0.01
//   canopy::BhResult r = bh.run(opt);           // r.forces[3 i .. 3 i + 2]: body i
#pragma once

#include <memory>
#include <vector>

#include "layouts/octree.hpp"
#include "runtime/options.hpp"

namespace canopy {

// The octree's default top-tree depth: up to 8^3 = 512 top-leaves, as many as a binary tree
// has at depth 10.
constexpr int kDefaultOctreeDepth = 4;

struct BhOptions : TraversalOptions {
  float theta = 0.5f;       // opening angle: a cell of side s at distance d is opened when s >= theta d
  float softening = 0.01f;  // epsilon, in the units of the positions: 1 / (d^2 + eps^2)^(3/2)
};

// G = 1. Each body's sum runs in the order its traversal meets the nodes, which no schedule,
// executor or device changes: the forces are bitwise identical across all of them.
struct BhResult : TraversalStats {
  std::vector<float> forces;  // [bodies][3], original body order
};

namespace detail {
struct BhData;
struct BhWorkload;
}

// Holds an octree (which must outlive it), the bodies in their original order and, on the GPU,
// the device copies. Several host threads may call run() at once: the calls take turns on the
// engine's lock (objects of their own, which may share the octree, run side by side).
class BarnesHut {
 public:
  explicit BarnesHut(const Octree& tree, Device device = Device::Auto);
  ~BarnesHut();

  // The forces on every body. Errors (canopy::Error): theta or softening negative or not
  // finite, a depth outside 1..height, device gpu on a machine without one.
  BhResult run(const BhOptions& options);
  // The same into the caller's buffer forces[bodies][3] (original body order), host or device
  // memory (the GPU writes device memory in place, after the work queued on options.stream).
  TraversalStats run(const BhOptions& options, float* forces);
  // The forces on bodies first .. first + count - 1 (original order) into forces[count][3]: the
  // same bits as those bodies' rows of a whole run (each body's walk is its own), so callers
  // can split the bodies among threads, streams or MPI ranks. A range outside 0..size() is an
  // Error.
  TraversalStats run(const BhOptions& options, index_t first, index_t count, float* forces);

  const Octree& tree() const { return tree_; }
  Device device() const;  // where runs go unless options.device says cpu

 private:
  const Octree& tree_;
  std::unique_ptr<detail::BhData> data_;  // the bodies in their original order: the queries
  std::unique_ptr<Engine<detail::BhWorkload>> engine_;
};

}  // namespace canopy
