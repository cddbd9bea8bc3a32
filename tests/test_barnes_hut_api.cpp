// Barnes-Hut through the public API (canopy::BarnesHut): forces bitwise identical across every
// schedule, executor and device and close to the direct sum; on the GPU, every body visits the
// same nodes in the same order as on the CPU under every schedule; bad options.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

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
namespace api_tests {
namespace {

struct Bodies {
  std::vector<float> xyz, mass;
  index_t n = 0;
};

Bodies plummer(index_t n, std::uint64_t seed) {
  Bodies b;
  b.xyz = generate("plummer:" + std::to_string(n), seed).coords;
  b.n = n;
  b.mass.assign(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
  return b;
}

// Masses vary so that a wrong pairing of mass and body shows.
Bodies uniform_bodies(index_t n, std::uint64_t seed) {
  Bodies b;
  b.xyz = test::random_points(n, 3, seed);
  b.n = n;
  std::mt19937_64 rng(seed + 1);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (index_t i = 0; i < n; ++i) b.mass.push_back(u(rng) / static_cast<float>(n));
  return b;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

constexpr ExecutorKind kExecutors[] = {ExecutorKind::Independent, ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep};
constexpr ScheduleKind kSchedules[] = {ScheduleKind::InputOrder, ScheduleKind::Hybrid, ScheduleKind::HybridDevice,
                                       ScheduleKind::LeafSort, ScheduleKind::HybridKey};

void every_variant_bitwise_identical(Device device) {
  for (const Bodies& b : {plummer(3000, 1), uniform_bodies(3000, 2)}) {
    OctreeOptions oo;
    const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.n, oo);
    BarnesHut bh(tree, device);
    BhOptions opt;
    opt.device = device;
    opt.softening = 0.01f;
    opt.executor = ExecutorKind::Independent;
    opt.schedule = ScheduleKind::InputOrder;
    const std::vector<float> reference = bh.run(opt).forces;
    // Against the direct O(N^2) sum: the RMS relative error of theta = 0.5 is about 1e-3.
    const std::vector<float> direct = direct_forces(b.xyz.data(), b.mass.data(), b.n, opt.softening * opt.softening);
    double err2 = 0;
    for (index_t i = 0; i < b.n; ++i) {
      double num = 0, den = 0;
      for (int k = 0; k < 3; ++k) {
        num += std::pow(reference[i * 3 + k] - direct[i * 3 + k], 2);
        den += std::pow(direct[i * 3 + k], 2);
      }
      err2 += num / std::max(den, 1e-30);
    }
    EXPECT_LT(std::sqrt(err2 / b.n), 1e-2);
    for (ExecutorKind e : kExecutors)
      for (ScheduleKind s : kSchedules)
        for (int depth : {0, 2, 5}) {
          opt.executor = e;
          opt.schedule = s;
          opt.depth = std::min(depth, tree.height());
          opt.keep_schedule = true;
          const BhResult r = bh.run(opt);
          EXPECT_TRUE(bitwise_equal(r.forces, reference)) << to_string(e) << " " << to_string(s) << " depth " << depth;
          std::vector<index_t> sorted = r.schedule.order;
          std::sort(sorted.begin(), sorted.end());
          for (index_t i = 0; i < b.n; ++i) ASSERT_EQ(sorted[i], i) << "the schedule is not a permutation";
        }
  }
}

TEST(BhApi, EveryVariantIsBitwiseIdenticalCpu) { every_variant_bitwise_identical(Device::Cpu); }

TEST(BhApi, EveryVariantIsBitwiseIdenticalGpuAndEqualsTheCpu) {
  CANOPY_REQUIRE_GPU();
  every_variant_bitwise_identical(Device::Gpu);
  const Bodies b = plummer(5000, 3);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.n);
  BarnesHut cpu(tree, Device::Cpu), gpu(tree, Device::Gpu);
  BhOptions opt;
  opt.executor = ExecutorKind::Independent;
  opt.schedule = ScheduleKind::InputOrder;
  const std::vector<float> c = cpu.run(opt).forces;
  for (ScheduleKind s : kSchedules) {
    opt.schedule = s;
    opt.executor = ExecutorKind::FsmLockstep;
    EXPECT_TRUE(bitwise_equal(gpu.run(opt).forces, c)) << to_string(s);
  }
}

// A range of bodies gets exactly those bodies' rows of a whole run, under every schedule
// (the key schedules sort the range's own Morton codes), on either device; bad ranges are
// errors naming the bodies.
void ranges_equal_the_whole_run(Device device) {
  const Bodies b = uniform_bodies(3001, 9);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.n);
  BarnesHut bh(tree, device);
  BhOptions opt;
  opt.device = device;
  const std::vector<float> whole = bh.run(opt).forces;
  for (ScheduleKind s : kSchedules) {
    opt.schedule = s;
    std::vector<float> pieced(whole.size(), -1.0f);
    const index_t cuts[] = {0, 1, 700, 700, 2950, 3001};  // one body, an empty range, uneven ones
    for (std::size_t c = 0; c + 1 < std::size(cuts); ++c)
      bh.run(opt, cuts[c], cuts[c + 1] - cuts[c], pieced.data() + cuts[c] * 3);
    EXPECT_TRUE(bitwise_equal(pieced, whole)) << to_string(s);
  }
  std::vector<float> out(30);
  EXPECT_HAS(test::error_of([&] { bh.run(opt, 2995, 10, out.data()); }, "a range past the last body"), "2995 .. 3004");
  EXPECT_HAS(test::error_of([&] { bh.run(opt, -1, 2, out.data()); }, "a negative first body"), "outside");
  EXPECT_HAS(test::error_of([&] { bh.run(opt, 0, 5, nullptr); }, "no buffer"), "null");
}

CANOPY_TEST_ON_CPU_AND_GPU(BhApi, BodyRangesEqualTheWholeRun, ranges_equal_the_whole_run)

// The warp emulator's node counts equal the instrumented GPU kernels'.
TEST(BhApi, GpuWarpNodeCountsEqualTheEmulator) {
  CANOPY_REQUIRE_GPU();
  const Bodies b = plummer(4000, 4);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.n);
  BarnesHut bh(tree, Device::Gpu);
  for (ExecutorKind e : {ExecutorKind::MaskLockstep, ExecutorKind::FsmLockstep})
    for (ScheduleKind s : kSchedules) {
      BhOptions opt = test::options_on<BhOptions>(Device::Auto, s, e);  // the default device
      opt.count_nodes = true;
      opt.gpu_count_nodes = true;
      const BhResult r = bh.run(opt);
      EXPECT_EQ(r.warp_nodes, r.gpu_warp_nodes) << to_string(e) << " " << to_string(s);
    }
}

// Soundness: every body visits the same nodes in the same order under every schedule and
// executor, on the CPU and the GPU.
TEST(BhSoundness, SameVisitsUnderEveryScheduleExecutorAndDevice) {
  const Bodies b = plummer(2000, 5);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.n);
  const index_t n = b.n;
  constexpr int kCapacity = 1024;
  BarnesHut api(tree, Device::Cpu);
  std::vector<std::vector<index_t>> orders;
  orders.push_back({});
  for (ScheduleKind s : {ScheduleKind::Hybrid, ScheduleKind::LeafSort}) {
    BhOptions opt;
    opt.schedule = s;
    opt.keep_schedule = true;
    orders.push_back(api.run(opt).schedule.order);
  }
  std::vector<index_t> shuffled(n);
  std::iota(shuffled.begin(), shuffled.end(), 0);
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(6));
  orders.push_back(shuffled);

  // The original-order positions and masses are what BarnesHut uses as its queries.
  std::vector<float> xyz = b.xyz, mass = b.mass;
  auto traced_cpu = [&](const std::vector<index_t>& order, bool lockstep, LockstepMode mode) {
    std::vector<node_id> trace(static_cast<std::size_t>(n) * kCapacity);
    std::vector<std::int32_t> lengths(n);
    std::vector<float> forces(static_cast<std::size_t>(n) * 3);
    TracingVisitor<BarnesHutVisitor> v;
    v.inner.tree = tree.view();
    v.inner.bodies_xyz = xyz.data();
    v.inner.masses = mass.data();
    v.inner.forces = forces.data();
    v.inner.theta2 = 0.25f;
    v.inner.eps2 = 1e-4f;
    v.trace = trace.data();
    v.lengths = lengths.data();
    v.capacity = kCapacity;
    const index_t* o = order.empty() ? nullptr : order.data();
    if (lockstep)
      emulate_lockstep(tree.view(), v, o, n, mode);
    else
      execute_cpu(tree.view(), v, o, n);
    return std::make_pair(trace, forces);
  };
  const auto base = traced_cpu({}, false, LockstepMode::Fsm);
  for (const auto& order : orders) {
    for (bool lockstep : {false, true})
      for (LockstepMode mode : {LockstepMode::Mask, LockstepMode::Fsm}) {
        const auto t = traced_cpu(order, lockstep, mode);
        EXPECT_EQ(t.first, base.first);
        EXPECT_TRUE(bitwise_equal(t.second, base.second));
      }
    if (!gpu_available()) continue;
    for (ExecutorKind e : kExecutors) {
      const test::BhTraced g = test::run_traced_bh_gpu(tree, xyz, mass, 0.5f, 0.01f, order, e, kCapacity);
      EXPECT_EQ(g.trace, base.first) << to_string(e);
      EXPECT_TRUE(bitwise_equal(g.forces, base.second)) << to_string(e);
    }
  }
}

TEST(BhApi, DegenerateBodiesKeepForcesFinite) {
  const Device devices[] = {Device::Cpu, Device::Gpu};
  for (Device dev : devices) {
    if (dev == Device::Gpu && !gpu_available()) continue;
    // Every body at one position: softening keeps the forces finite (and zero by symmetry).
    Bodies same;
    same.n = 500;
    same.xyz.assign(1500, 0.5f);
    same.mass.assign(500, 0.002f);
    const Octree t1 = Octree::build(same.xyz.data(), same.mass.data(), same.n);
    BarnesHut bh(t1, dev);
    BhOptions opt;
    for (ScheduleKind s : kSchedules) {
      opt.schedule = s;
      const BhResult r = bh.run(opt);
      for (float f : r.forces) ASSERT_TRUE(std::isfinite(f));
    }
    // One body: no force.
    const float one[3] = {0.1f, 0.2f, 0.3f};
    const float m1 = 1.0f;
    const Octree t2 = Octree::build(one, &m1, 1);
    BarnesHut bh1(t2, dev);
    const BhResult r1 = bh1.run(BhOptions{});
    EXPECT_EQ(r1.forces, std::vector<float>(3, 0.0f));
  }
}

TEST(BhApi, BadOptionsAreErrors) {
  const Bodies b = plummer(100, 7);
  const Octree tree = Octree::build(b.xyz.data(), b.mass.data(), b.n);
  BarnesHut bh(tree, Device::Cpu);
  BhOptions opt;
  opt.theta = -1;
  try {
    bh.run(opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("theta = -1"), std::string::npos) << e.what();
  }
  opt.theta = 0.5f;
  opt.softening = NAN;
  EXPECT_THROW(bh.run(opt), Error);
  opt.softening = 0.01f;
  opt.depth = tree.height() + 1;
  try {
    bh.run(opt);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is deeper than the tree"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace api_tests
}  // namespace canopy
