// Barnes-Hut: the octree's invariants, forces against the O(N^2) sum, bitwise identical forces
// under every schedule, executor and device (the visitor, then the public API: on the GPU every
// body visits the same nodes in the same order as on the CPU), degenerate inputs, errors, and
// the Plummer generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <tbb/task_arena.h>

#include "executor/cpu_executor.hpp"
#include "io/dataset.hpp"
#include "layouts/octree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/bh_visitor.hpp"
#include "tests/gpu_trace.hpp"
#include "tests/test_errors.hpp"
#include "tests/test_util.hpp"
#include "tests/tree_walk.hpp"

namespace canopy {
namespace {

struct Bodies {
  std::vector<float> xyz, mass;
  index_t size() const { return static_cast<index_t>(mass.size()); }
};

// Equal masses 1/N, as the workload gives them.
Bodies with_equal_masses(std::vector<float> xyz) {
  Bodies b;
  b.xyz = std::move(xyz);
  b.mass.assign(b.xyz.size() / 3, 1.0f / static_cast<float>(b.xyz.size() / 3));
  return b;
}

Bodies plummer(index_t n, std::uint64_t seed) { return with_equal_masses(generate_plummer(n, seed).coords); }
Bodies uniform(index_t n, std::uint64_t seed) { return with_equal_masses(generate_uniform(n, 3, seed).coords); }

// Gaussian blobs with exact duplicates and unequal masses (some zero).
Bodies clustered(index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.02f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Bodies b;
  for (index_t i = 0; i < n; ++i) {
    if (i > 0 && i % 13 == 0) {
      const index_t j = static_cast<index_t>(u(rng) * static_cast<float>(i)) % i;
      for (int a = 0; a < 3; ++a) b.xyz.push_back(b.xyz[j * 3 + a]);
    } else {
      const float c = std::floor(u(rng) * 4.0f) * 0.25f;
      for (int a = 0; a < 3; ++a) b.xyz.push_back(c + g(rng));
    }
    b.mass.push_back(i % 29 == 0 ? 0.0f : u(rng));
  }
  return b;
}

// [begin, end) of the tree-order bodies under every node.
struct Range {
  index_t begin, end;
};
std::vector<Range> node_ranges(const OctreeView& v) {
  std::vector<Range> out(static_cast<std::size_t>(v.n_nodes), Range{0, 0});
  std::function<Range(node_id)> walk = [&](node_id nd) -> Range {
    Range r;
    if (v.is_leaf(nd)) {
      r = {v.nodes[nd].first, v.nodes[nd].first + v.nodes[nd].count};
    } else {
      r = walk(v.child(nd, 0));
      for (int i = 1; i < v.child_count(nd); ++i) r.end = walk(v.child(nd, i)).end;
    }
    out[nd] = r;
    return r;
  };
  walk(0);
  return out;
}

void check_invariants(const Octree& tree, const Bodies& b, const OctreeOptions& opt) {
  const OctreeView v = tree.view();
  const index_t n = b.size();
  ASSERT_EQ(v.n_bodies, n);
  ASSERT_EQ(tree.leaf_size(), opt.leaf_size);
  ASSERT_EQ(tree.max_depth(), opt.max_depth);

  // Every body appears exactly once in tree order, with its own coordinates and mass.
  ASSERT_NO_FATAL_FAILURE(test::expect_each_input_once(v.body_ids, n, "body", [&](index_t i, index_t id) {
    for (int a = 0; a < 3; ++a) ASSERT_EQ(v.body(i)[a], b.xyz[id * 3 + a]);
    ASSERT_EQ(v.body(i)[3], b.mass[id]);
  }));

  // Depth-first walk: every node once, child 0 is n + 1, later children follow in increasing
  // id and octant order, leaves tile the tree order left to right, cubes hold their bodies and
  // halve at each level, centres of mass match a double recomputation.
  const float root_half = v.cube(0)[3];
  double largest = 0;
  for (float x : b.xyz) largest = std::max(largest, std::fabs(static_cast<double>(x)));
  std::vector<int> visited(static_cast<std::size_t>(v.n_nodes), 0);
  index_t next_body = 0, links = 0;
  int deepest = 0;
  std::function<Range(node_id, int)> walk = [&](node_id nd, int depth) -> Range {
    EXPECT_GE(nd, 0);
    EXPECT_LT(nd, v.n_nodes);
    ++visited[nd];
    const OctNode node = v.nodes[nd];
    EXPECT_EQ(node.depth, depth);
    deepest = std::max(deepest, depth);
    const float* cube = v.cube(nd);
    Range r;
    if (v.is_leaf(nd)) {
      EXPECT_EQ(v.child_count(nd), 0);
      EXPECT_EQ(node.first, next_body) << "leaves must tile the bodies left to right";
      EXPECT_GE(node.count, 1);
      EXPECT_TRUE(node.count <= opt.leaf_size || depth == opt.max_depth) << "node " << nd;
      r = {node.first, node.first + node.count};
      next_body = r.end;
    } else {
      const int k = v.child_count(nd);
      EXPECT_GE(k, 1);
      EXPECT_LE(k, 8);
      EXPECT_LT(depth, opt.max_depth);
      links += k - 1;
      EXPECT_EQ(v.child(nd, 0), nd + 1);
      int last_octant = -1;
      r = {next_body, next_body};
      for (int i = 0; i < k; ++i) {
        const node_id c = v.child(nd, i);
        if (i > 0) {
          EXPECT_GT(c, v.child(nd, i - 1));
        }
        // The child is the octant's cell, up to the outward rounding of small cells to float
        // (cells may shrink below the float spacing of their coordinates: coincident bodies).
        const float* cc = v.cube(c);
        int octant = 0;
        for (int a = 0; a < 3; ++a) {
          const double off = static_cast<double>(cc[a]) - cube[a];
          const double tol = 1e-6 * root_half + 0x1p-22 * std::fabs(cube[a]);
          if (off > tol) octant |= 1 << a;
          EXPECT_NEAR(std::fabs(off), 0.5 * cube[3], tol) << "node " << c;
          EXPECT_NEAR(cc[3], 0.5 * cube[3], tol) << "node " << c;
        }
        EXPECT_GT(octant, last_octant) << "children of " << nd << " out of octant order";
        last_octant = octant;
        const Range cr = walk(c, depth + 1);
        EXPECT_EQ(cr.begin, r.end);
        r.end = cr.end;
      }
      EXPECT_GT(r.end - r.begin, opt.leaf_size) << "node " << nd;
    }
    double sum[4] = {0, 0, 0, 0};
    for (index_t i = r.begin; i < r.end; ++i) {
      const float* p = v.body(i);
      for (int a = 0; a < 3; ++a) {
        // Both the exact test and the visitor's float test must see the body inside.
        EXPECT_LE(std::fabs(static_cast<double>(p[a]) - cube[a]), static_cast<double>(cube[3]))
            << "node " << nd << " body " << i;
        EXPECT_LE(std::fabs(sub_rn(p[a], cube[a])), cube[3]);
        sum[a] += static_cast<double>(p[3]) * p[a];
      }
      sum[3] += p[3];
    }
    const float* com = v.node_com(nd);
    EXPECT_NEAR(com[3], sum[3], 0x1p-23 * sum[3] + 1e-300) << "node " << nd;
    if (sum[3] > 0)
      for (int a = 0; a < 3; ++a) {
        const double c = sum[a] / sum[3];
        EXPECT_NEAR(com[a], c, 0x1p-23 * std::fabs(c) + 1e-9 * largest) << "node " << nd << " axis " << a;
      }
    return r;
  };
  const Range all = walk(0, 0);
  EXPECT_EQ(all.begin, 0);
  EXPECT_EQ(all.end, n);
  for (node_id nd = 0; nd < v.n_nodes; ++nd) EXPECT_EQ(visited[nd], 1) << "node " << nd;
  EXPECT_EQ(static_cast<index_t>(tree.child_ids().size()), links);
  EXPECT_EQ(tree.height(), deepest + 1);
  EXPECT_EQ(v.height, tree.height());
  EXPECT_LE(tree.height(), opt.max_depth + 1);
  // The root is the bounding cube: its side is the largest extent, enlarged only slightly.
  double extent = 0;
  for (int a = 0; a < 3; ++a) {
    double lo = b.xyz[a], hi = b.xyz[a];
    for (index_t i = 0; i < n; ++i) {
      lo = std::min(lo, static_cast<double>(b.xyz[i * 3 + a]));
      hi = std::max(hi, static_cast<double>(b.xyz[i * 3 + a]));
    }
    extent = std::max(extent, hi - lo);
  }
  if (extent > 0) {
    EXPECT_GE(2.0 * root_half, extent);
    EXPECT_LE(2.0 * root_half, extent * (1 + 1e-3));
  }
}

// A named body set of the checks below and what its check takes besides (options, softening).
template <class Param>
struct BodyCase {
  const char* name;
  Bodies b;
  Param param;
};

TEST(Octree, Invariants) {
  std::vector<BodyCase<OctreeOptions>> cases;
  cases.push_back({"plummer", plummer(5000, 1), {}});
  cases.push_back({"uniform", uniform(5000, 2), {}});
  cases.push_back({"clustered", clustered(4000, 3), {}});
  cases.push_back({"plummer leaf 1", plummer(3000, 4), {1, 20}});
  cases.push_back({"clustered leaf 1", clustered(2000, 5), {1, 20}});  // duplicates reach max_depth
  cases.push_back({"uniform leaf 32", uniform(3000, 6), {32, 20}});
  cases.push_back({"plummer depth 3", plummer(3000, 7), {8, 3}});
  cases.push_back({"uniform depth 1", uniform(100, 8), {8, 1}});
  cases.push_back({"max depth 21", clustered(1000, 9), {1, OctreeView::kMaxDepth}});
  // Far from the origin, deep cells fall below the float spacing of their coordinates.
  Bodies offset = clustered(1000, 10);
  for (float& x : offset.xyz) x += 1000.0f;
  cases.push_back({"offset leaf 1", offset, {1, 20}});
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const Octree tree = Octree::build(c.b.xyz.data(), c.b.mass.data(), c.b.size(), c.param);
    check_invariants(tree, c.b, c.param);
  }
}

TEST(Octree, DoesNotDependOnTheThreadCount) {
  // Large enough for the chunked parallel partition and the parallel subtree tasks.
  const Bodies b = plummer(200000, 11);
  auto build_with = [&](int threads) {
    tbb::task_arena arena(threads);
    return arena.execute([&] { return Octree::build(b.xyz.data(), b.mass.data(), b.size()); });
  };
  const Octree one = build_with(1), four = build_with(4);
  ASSERT_EQ(one.node_count(), four.node_count());
  EXPECT_EQ(one.height(), four.height());
  EXPECT_EQ(0, std::memcmp(one.nodes().data(), four.nodes().data(), one.nodes().size() * sizeof(OctNode)));
  EXPECT_EQ(one.child_ids(), four.child_ids());
  EXPECT_EQ(one.body_ids(), four.body_ids());
  EXPECT_EQ(0, std::memcmp(one.com().data(), four.com().data(), one.com().size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(one.cubes().data(), four.cubes().data(), one.cubes().size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(one.bodies().data(), four.bodies().data(), one.bodies().size() * sizeof(float)));
}

TEST(Octree, KMaxStackBoundsTheLockstepStack) {
  // The emulator pushes all children of each inner node on a root-to-leaf path: 7 pending per
  // inner level plus the 8 of the deepest, at the deepest tree the options allow.
  EXPECT_GE(OctreeView::kMaxStack, 7 * (OctreeView::kMaxDepth - 1) + 8);
}

BarnesHutVisitor make_visitor(const Octree& tree, const Bodies& b, std::vector<float>& forces, float theta,
                              float eps2) {
  forces.assign(static_cast<std::size_t>(b.size()) * 3, std::nanf(""));
  BarnesHutVisitor v;
  v.tree = tree.view();
  v.bodies_xyz = b.xyz.data();
  v.forces = forces.data();
  v.masses = b.mass.data();
  v.theta2 = theta * theta;
  v.eps2 = eps2;
  return v;
}

std::vector<float> bh_forces(const Octree& tree, const Bodies& b, float theta, float eps2,
                             const index_t* order = nullptr) {
  std::vector<float> f;
  execute_cpu(tree.view(), make_visitor(tree, b, f, theta, eps2), order, b.size());
  return f;
}

struct Errors {
  double rms = 0, max = 0;  // of |F - F_direct| / |F_direct| over bodies
  double norm = 0;          // sqrt(sum |F - F_direct|^2 / sum |F_direct|^2)
};
Errors relative_errors(const std::vector<float>& f, const std::vector<float>& ref) {
  Errors e;
  double total = 0;
  std::size_t counted = 0;
  const std::size_t n = ref.size() / 3;
  for (std::size_t i = 0; i < n; ++i) {
    double d2 = 0, r2 = 0;
    for (int a = 0; a < 3; ++a) {
      const double d = static_cast<double>(f[i * 3 + a]) - ref[i * 3 + a];
      d2 += d * d;
      r2 += static_cast<double>(ref[i * 3 + a]) * ref[i * 3 + a];
    }
    if (r2 == 0) {  // a massless body feels no force: it must get none
      EXPECT_EQ(d2, 0.0) << "body " << i;
      continue;
    }
    ++counted;
    const double rel = std::sqrt(d2 / r2);
    e.rms += rel * rel;
    e.max = std::max(e.max, rel);
    e.norm += d2;
    total += r2;
  }
  e.rms = std::sqrt(e.rms / static_cast<double>(counted));
  e.norm = std::sqrt(e.norm / total);
  return e;
}

TEST(BarnesHut, ForcesMatchTheDirectSum) {
  // Per-body relative error of monopole-only Barnes-Hut. Measured at theta 0.5: RMS 3.6e-3
  // (Plummer), 5.9e-3 (uniform), 6.3e-3 (clustered), max 3e-2..7e-2. Theta 0 opens every
  // cell, so only float summation separates it from the double direct sum: RMS 8e-7, max 8e-6.
  std::vector<BodyCase<float>> cases;  // the softening eps2
  cases.push_back({"plummer", plummer(2000, 21), 1e-4f});
  cases.push_back({"uniform", uniform(2000, 22), 1e-6f});
  cases.push_back({"clustered", clustered(2000, 23), 1e-4f});  // unequal and zero masses, duplicates
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> ref = direct_forces(c.b.xyz.data(), c.b.mass.data(), c.b.size(), c.param);
    const Octree tree = Octree::build(c.b.xyz.data(), c.b.mass.data(), c.b.size());
    const Errors half = relative_errors(bh_forces(tree, c.b, 0.5f, c.param), ref);
    EXPECT_LT(half.rms, 1e-2);
    EXPECT_LT(half.max, 1e-1);
    const Errors exact = relative_errors(bh_forces(tree, c.b, 0.0f, c.param), ref);
    EXPECT_LT(exact.rms, 1e-5);
    EXPECT_LT(exact.max, 1e-4);
    // A wider opening angle is coarser (measured RMS 3e-2..4.5e-2 at theta 1).
    const Errors wide = relative_errors(bh_forces(tree, c.b, 1.0f, c.param), ref);
    EXPECT_LT(half.rms, wide.rms);
    EXPECT_LT(wide.rms, 1e-1);
  }
}

// Schedules: input, reversed, a random permutation and the hand-tuned Morton sort.
std::vector<std::pair<std::string, std::vector<index_t>>> schedules(const Octree& tree, const Bodies& b) {
  const index_t n = b.size();
  std::vector<std::pair<std::string, std::vector<index_t>>> out;
  std::vector<index_t> in(static_cast<std::size_t>(n));
  std::iota(in.begin(), in.end(), index_t{0});
  out.emplace_back("input", in);
  out.emplace_back("reversed", std::vector<index_t>(in.rbegin(), in.rend()));
  std::vector<index_t> rnd = in;
  std::shuffle(rnd.begin(), rnd.end(), std::mt19937_64(5));
  out.emplace_back("random", rnd);
  const OctreeView v = tree.view();
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) keys[i] = morton_key(b.xyz[i * 3], b.xyz[i * 3 + 1], b.xyz[i * 3 + 2], v.cube(0));
  std::vector<index_t> morton = in;
  std::stable_sort(morton.begin(), morton.end(), [&](index_t x, index_t y) { return keys[x] < keys[y]; });
  out.emplace_back("morton", morton);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(BarnesHut, ForcesAreBitwiseIdenticalUnderEveryScheduleAndExecutor) {
  for (const Bodies& b : {plummer(3000, 31), clustered(2000, 32)}) {
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.size());
    for (float theta : {0.0f, 0.5f, 1.0f}) {
      const std::vector<float> base = bh_forces(tree, b, theta, 1e-4f);
      for (float x : base) ASSERT_TRUE(std::isfinite(x));
      for (const auto& [name, order] : schedules(tree, b)) {
        SCOPED_TRACE(name + ", theta " + std::to_string(theta));
        EXPECT_TRUE(same_bits(bh_forces(tree, b, theta, 1e-4f, order.data()), base)) << "execute_cpu";
        for (LockstepMode mode : {LockstepMode::Fsm, LockstepMode::Mask}) {
          std::vector<float> f;
          emulate_lockstep(tree.view(), make_visitor(tree, b, f, theta, 1e-4f), order.data(), b.size(), mode);
          EXPECT_TRUE(same_bits(f, base)) << (mode == LockstepMode::Fsm ? "fsm" : "mask") << " lockstep";
        }
      }
    }
  }
}

TEST(BarnesHut, NoCellHoldingTheBodyActsAsAMonopole) {
  // At wide opening angles the acceptance test alone would accept cells around the body; the
  // inside-the-cube test must keep the body's own mass out of every monopole.
  const Bodies b = clustered(1500, 41);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.size());
  const OctreeView v = tree.view();
  const std::vector<Range> ranges = node_ranges(v);
  std::vector<index_t> position(static_cast<std::size_t>(b.size()));
  for (index_t i = 0; i < b.size(); ++i) position[v.body_ids[i]] = i;
  constexpr int kCapacity = 4096;
  for (float theta : {1.0f, 2.0f, 8.0f}) {
    std::vector<float> f;
    std::vector<node_id> trace(static_cast<std::size_t>(b.size()) * kCapacity);
    std::vector<std::int32_t> lengths(static_cast<std::size_t>(b.size()));
    TracingVisitor<BarnesHutVisitor> tv;
    tv.inner = make_visitor(tree, b, f, theta, 1e-4f);
    tv.trace = trace.data();
    tv.lengths = lengths.data();
    tv.capacity = kCapacity;
    execute_cpu(v, tv, nullptr, b.size());
    index_t truncated = 0;
    for (index_t q = 0; q < b.size(); ++q) {
      ASSERT_LE(lengths[q], kCapacity);
      for (std::int32_t k = 0; k < lengths[q]; ++k) {
        const node_id t = trace[q * kCapacity + k];
        if (t >= 0) continue;
        ++truncated;
        const Range r = ranges[~t];
        EXPECT_FALSE(position[q] >= r.begin && position[q] < r.end) << "body " << q << " node " << ~t;
      }
    }
    EXPECT_GT(truncated, 0);
  }
}

TEST(BarnesHut, DegenerateInputs) {
  {  // One body: no force.
    const Bodies b{{0.3f, -2.0f, 7.0f}, {5.0f}};
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), 1);
    EXPECT_EQ(tree.node_count(), 1);
    for (float eps2 : {0.0f, 1e-3f}) EXPECT_EQ(bh_forces(tree, b, 0.5f, eps2), (std::vector<float>{0, 0, 0}));
  }
  {  // Two bodies: equal and opposite, m1 m2 / r^2 along the line.
    const Bodies b{{0, 0, 0, 3, 4, 0}, {2.0f, 5.0f}};
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), 2);
    const std::vector<float> f = bh_forces(tree, b, 0.5f, 0.0f);
    const float mag = 2.0f * 5.0f / 25.0f;
    EXPECT_FLOAT_EQ(f[0], mag * 0.6f);
    EXPECT_FLOAT_EQ(f[1], mag * 0.8f);
    EXPECT_EQ(f[2], 0.0f);
    for (int a = 0; a < 3; ++a) EXPECT_FLOAT_EQ(f[3 + a], -f[a]);
  }
  {  // Coincident bodies: one chain down to max_depth, a leaf holding all of them.
    Bodies b;
    for (int i = 0; i < 100; ++i) b.xyz.insert(b.xyz.end(), {0.25f, 0.5f, -1.0f});
    b.mass.assign(100, 0.01f);
    const OctreeOptions opt;
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.size(), opt);
    check_invariants(tree, b, opt);
    EXPECT_EQ(tree.height(), opt.max_depth + 1);
    // Softened or not, coincident bodies pull in no direction.
    for (float eps2 : {0.0f, 1e-4f})
      for (float x : bh_forces(tree, b, 0.5f, eps2)) EXPECT_EQ(x, 0.0f);
  }
  {  // Bodies on a line: no force off the line, and accurate forces along it. The net force
     // on some bodies nearly cancels, so the per-body relative error is larger than in 3-d
     // (measured: RMS 1.9e-2) while the error relative to the whole field is tiny (8e-7).
    Bodies b;
    std::mt19937_64 rng(51);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int i = 0; i < 1000; ++i) b.xyz.insert(b.xyz.end(), {u(rng), 2.0f, 2.0f});
    b.mass.assign(1000, 1e-3f);
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.size());
    check_invariants(tree, b, {});
    const std::vector<float> f = bh_forces(tree, b, 0.5f, 0.0f);
    const std::vector<float> ref = direct_forces(b.xyz.data(), b.mass.data(), b.size(), 0.0f);
    for (index_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(f[i * 3 + 1], 0.0f);
      EXPECT_EQ(f[i * 3 + 2], 0.0f);
    }
    const Errors e = relative_errors(f, ref);
    EXPECT_LT(e.rms, 5e-2);
    EXPECT_LT(e.norm, 1e-4);
  }
  {  // Massless bodies feel forces but exert none.
    const Bodies b{{0, 0, 0, 1, 0, 0, 0, 1, 0}, {1.0f, 0.0f, 1.0f}};
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), 3);
    const std::vector<float> f = bh_forces(tree, b, 0.5f, 0.0f);
    EXPECT_EQ(f[3], 0.0f);
    EXPECT_EQ(f[4], 0.0f);
    EXPECT_FLOAT_EQ(f[1], 1.0f);  // body 0 pulled towards body 2 only
    EXPECT_EQ(f[0], 0.0f);
  }
}

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Octree, Errors) {
  std::vector<float> xyz = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  std::vector<float> mass = {1, 1, 1};
  expect_error([&] { Octree::build(xyz.data(), mass.data(), 0); }, "empty");
  expect_error([&] { Octree::build(nullptr, mass.data(), 3); }, "xyz");
  expect_error([&] { Octree::build(xyz.data(), nullptr, 3); }, "mass");
  expect_error([&] { Octree::build(xyz.data(), mass.data(), 3, {0, 20}); }, "leaf_size");
  expect_error([&] { Octree::build(xyz.data(), mass.data(), 3, {8, 0}); }, "max_depth");
  expect_error([&] { Octree::build(xyz.data(), mass.data(), 3, {8, OctreeView::kMaxDepth + 1}); }, "max_depth");
  std::vector<float> bad = xyz;
  bad[7] = std::nanf("");
  expect_error([&] { Octree::build(bad.data(), mass.data(), 3); }, "body 2 has a non-finite y");
  bad = xyz;
  bad[3] = INFINITY;
  expect_error([&] { Octree::build(bad.data(), mass.data(), 3); }, "body 1 has a non-finite x");
  std::vector<float> bad_mass = mass;
  bad_mass[1] = INFINITY;
  expect_error([&] { Octree::build(xyz.data(), bad_mass.data(), 3); }, "body 1 has a non-finite mass");
  bad_mass = mass;
  bad_mass[2] = -0.5f;
  expect_error([&] { Octree::build(xyz.data(), bad_mass.data(), 3); }, "body 2 has a negative mass");
}

TEST(BarnesHut, MortonKey) {
  const float cube[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  // The interleave against a bit-by-bit one: x, y, z give bits 3i, 3i+1, 3i+2.
  std::mt19937_64 rng(61);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int t = 0; t < 1000; ++t) {
    const float p[3] = {u(rng), u(rng), u(rng)};
    std::uint64_t expect = 0;
    for (int a = 0; a < 3; ++a) {
      const std::uint32_t g = static_cast<std::uint32_t>(p[a] * 2097152.0f);
      for (int i = 0; i < 21; ++i) expect |= static_cast<std::uint64_t>((g >> i) & 1u) << (3 * i + a);
    }
    EXPECT_EQ(morton_key(p[0], p[1], p[2], cube), expect);
  }
  EXPECT_EQ(morton_key(0, 0, 0, cube), 0u);
  EXPECT_EQ(morton_key(1, 1, 1, cube), (std::uint64_t{1} << 63) - 1);
  EXPECT_EQ(morton_key(-5, 9, std::nanf(""), cube), 0x2492492492492492ull);  // clamped; NaN -> 0
  // The top triple is the root octant, in the octree's order.
  const Bodies b = plummer(2000, 62);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.size());
  const OctreeView v = tree.view();
  const std::vector<Range> ranges = node_ranges(v);
  for (int i = 0; i < v.child_count(0); ++i) {
    const node_id c = v.child(0, i);
    int octant = 0;
    for (int a = 0; a < 3; ++a)
      if (v.cube(c)[a] > v.cube(0)[a]) octant |= 1 << a;
    for (index_t j = ranges[c].begin; j < ranges[c].end; ++j)
      EXPECT_EQ(morton_key(v.body(j)[0], v.body(j)[1], v.body(j)[2], v.cube(0)) >> 60, static_cast<std::uint64_t>(octant));
  }
}

TEST(Plummer, GeneratorIsSeededAndHasThePlummerProfile) {
  const PointSet a = test::expect_seeded_set("plummer:20000", 20000, 3);
  EXPECT_EQ(a.coords, generate_plummer(20000, 3).coords);
  std::vector<double> r;
  for (index_t i = 0; i < a.size(); ++i) {
    const float* p = a.data() + i * 3;
    r.push_back(std::sqrt(static_cast<double>(p[0]) * p[0] + static_cast<double>(p[1]) * p[1] +
                          static_cast<double>(p[2]) * p[2]));
    EXPECT_LE(r.back(), 20.0 * (1 + 1e-6));
  }
  std::nth_element(r.begin(), r.begin() + r.size() / 2, r.end());
  // Half-mass radius 1/sqrt(2^(2/3) - 1) = 1.305 scale radii (1.300 after the cut-off at 20);
  // its sampling error at N = 20000 is about 0.008.
  EXPECT_NEAR(r[r.size() / 2], 1.305, 0.05);
  // The centre of the set is near the origin (isotropic directions).
  double mean[3] = {0, 0, 0};
  for (index_t i = 0; i < a.size(); ++i)
    for (int d = 0; d < 3; ++d) mean[d] += a.coords[i * 3 + d] / static_cast<double>(a.size());
  for (double m : mean) EXPECT_NEAR(m, 0.0, 0.1);

  expect_error([] { generate("plummer:0", 1); }, "N '0'");
  expect_error([] { generate("plummer:10:3", 1); }, "plummer:N");
  expect_error([] { generate("gauss:10", 1); }, "expected uniform:N:D or plummer:N");
  EXPECT_EQ(generate("uniform:100:3", 1).coords, generate_uniform(100, 3, 1).coords);
}

}  // namespace
}  // namespace canopy
