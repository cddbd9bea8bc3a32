// Octree::build_on_gpu against Octree::build: every array bit for bit (Plummer and uniform
// bodies from 1 to a million, clustered bodies, thousands of coincident bodies per leaf, bodies
// on cell midpoints, small and large leaves, shallow and the deepest trees, zero masses, device
// and host input), the same error messages, and without a GPU an error naming the device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.hpp"
#include "io/dataset.hpp"
#include "layouts/octree.hpp"
#include "tests/stream_probe.hpp"
#include "tests/test_errors.hpp"
#include "tests/test_util.hpp"

namespace canopy {
namespace {

struct Bodies {
  std::vector<float> xyz, mass;  // [n][3], [n]
  index_t size() const { return static_cast<index_t>(mass.size()); }
};

// Equal masses 1/n as the Barnes-Hut workload gives them, or unequal ones with every seventh
// zero.
enum class Masses { Equal, Unequal };
Bodies with_masses(std::vector<float> xyz, Masses kind, std::uint64_t seed = 0) {
  const index_t n = static_cast<index_t>(xyz.size() / 3);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 2.0f);
  std::vector<float> mass(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i)
    mass[i] = kind == Masses::Equal ? 1.0f / static_cast<float>(n) : (i % 7 == 3 ? 0.0f : u(rng));
  return Bodies{std::move(xyz), std::move(mass)};
}

Bodies plummer(index_t n, std::uint64_t seed) { return with_masses(generate_plummer(n, seed).coords, Masses::Equal); }
Bodies uniform(index_t n, std::uint64_t seed) {
  return with_masses(generate_uniform(n, 3, seed).coords, Masses::Equal);
}

// n bodies on `sites` distinct positions: the leaves at the maximum depth hold ~n / sites each.
Bodies coincident(index_t n, int sites) {
  std::vector<float> xyz;
  for (index_t i = 0; i < n; ++i) {
    const float s = static_cast<float>(i % sites);
    xyz.insert(xyz.end(), {0.25f + 0.125f * s, 0.5f - 0.0625f * s, 0.75f});
  }
  return with_masses(std::move(xyz), Masses::Unequal, 17);
}

// An integer grid 0..side-1 per axis, every tenth body doubled.
Bodies integer_grid(int side) {
  std::vector<float> xyz;
  int i = 0;
  for (int x = 0; x < side; ++x)
    for (int y = 0; y < side; ++y)
      for (int z = 0; z < side; ++z) {
        for (int copy = 0; copy < (i++ % 10 == 0 ? 2 : 1); ++copy)
          xyz.insert(xyz.end(), {static_cast<float>(x), static_cast<float>(y), static_cast<float>(z)});
      }
  return with_masses(std::move(xyz), Masses::Unequal, 5);
}

// Bodies exactly on the cells' split planes of the first four levels: with corners at -1 and 1
// the root cell is [-h, h], h = 1 + 2^-12 (a float), so the splits are the multiples of h / 8.
Bodies on_midpoints() {
  const float h8 = (1.0f + 0x1p-12f) / 8;
  std::vector<float> xyz = {-1, -1, -1, 1, 1, 1};
  for (int x = -7; x <= 7; ++x)
    for (int y = -7; y <= 7; ++y)
      for (int z = -7; z <= 7; z += 2) xyz.insert(xyz.end(), {x * h8, y * h8, z * h8});
  return with_masses(std::move(xyz), Masses::Equal);
}

// The index of the first element whose bytes differ, or -1.
template <class T>
long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  static_assert(std::is_trivially_copyable<T>::value, "compared as bytes");
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  return a.size() == b.size() ? -1 : static_cast<long>(std::min(a.size(), b.size()));
}

std::string describe(const OctNode& n) {
  return "{first " + std::to_string(n.first) + ", count " + std::to_string(n.count) + ", n_children " +
         std::to_string(n.n_children) + ", depth " + std::to_string(n.depth) + "}";
}

void expect_same_tree(const Octree& gpu, const Octree& cpu, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(gpu.node_count(), cpu.node_count());
  EXPECT_EQ(gpu.size(), cpu.size());
  EXPECT_EQ(gpu.height(), cpu.height());
  EXPECT_EQ(gpu.leaf_size(), cpu.leaf_size());
  EXPECT_EQ(gpu.max_depth(), cpu.max_depth());
  const long node = first_difference(gpu.nodes(), cpu.nodes());
  EXPECT_EQ(node, -1) << "node " << node << ": gpu " << describe(gpu.nodes()[node]) << ", cpu "
                      << describe(cpu.nodes()[node]);
  const long link = first_difference(gpu.child_ids(), cpu.child_ids());
  EXPECT_EQ(link, -1) << "child_ids[" << link << "] (sizes " << gpu.child_ids().size() << ", "
                      << cpu.child_ids().size() << ")";
  const auto floats = [](const char* name, const std::vector<float>& g, const std::vector<float>& c) {
    const long at = first_difference(g, c);
    EXPECT_EQ(at, -1) << name << "[" << at << "]: gpu " << (at >= 0 && at < static_cast<long>(g.size()) ? g[at] : 0)
                      << ", cpu " << (at >= 0 && at < static_cast<long>(c.size()) ? c[at] : 0);
  };
  floats("com", gpu.com(), cpu.com());
  floats("cubes", gpu.cubes(), cpu.cubes());
  floats("bodies", gpu.bodies(), cpu.bodies());
  const long body = first_difference(gpu.body_ids(), cpu.body_ids());
  EXPECT_EQ(body, -1) << "body_ids[" << body << "]";
}

void expect_same_build(const Bodies& b, const OctreeOptions& opt, const std::string& what) {
  OctreeOptions on_cpu = opt;
  on_cpu.device = Device::Cpu;
  const Octree cpu = Octree::build(b.xyz.data(), b.mass.data(), b.size(), on_cpu);
  const Octree gpu = Octree::build_on_gpu(b.xyz.data(), b.mass.data(), b.size(), opt);
  expect_same_tree(gpu, cpu, what + " (leaf_size " + std::to_string(opt.leaf_size) + ", max_depth " +
                                 std::to_string(opt.max_depth) + ")");
}

// A device copy of a host array.
class DeviceCopy {
 public:
  explicit DeviceCopy(const std::vector<float>& v) : p_(static_cast<float*>(test::device_alloc(v.size() * sizeof(float)))) {
    copy_memory(p_, v.data(), v.size() * sizeof(float));
  }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
  ~DeviceCopy() { test::device_free(p_); }
  const float* get() const { return p_; }

 private:
  float* p_;
};

const OctreeOptions kOnCpu{8, 20, Device::Cpu};

constexpr index_t kSizes[] = {1, 2, 7, 8, 9, 1000, 100003, 1000003};

TEST(OctreeGpu, PlummerMatchesTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  for (index_t n : kSizes) expect_same_build(plummer(n, 3), {}, "plummer:" + std::to_string(n));
}

TEST(OctreeGpu, UniformMatchesTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  for (index_t n : kSizes) expect_same_build(uniform(n, 4), {}, "uniform:" + std::to_string(n) + ":3");
}

TEST(OctreeGpu, ClusteredWithZeroMassesMatchesTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  for (index_t n : {index_t{1000}, index_t{50000}}) {
    const Bodies b = with_masses(test::clustered_points(n, 3, 8), Masses::Unequal, 9);
    for (const OctreeOptions opt :
         {OctreeOptions{}, OctreeOptions{1, 20}, OctreeOptions{32, 20}, OctreeOptions{8, 3},
          OctreeOptions{1, OctreeView::kMaxDepth}, OctreeOptions{1, 1}})
      expect_same_build(b, opt, "clustered " + std::to_string(n));
  }
}

TEST(OctreeGpu, OptionsMatchTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  const Bodies p = plummer(20000, 10), u = uniform(20000, 11);
  for (const OctreeOptions opt : {OctreeOptions{1, 20}, OctreeOptions{32, 20}, OctreeOptions{8, 3},
                                  OctreeOptions{1, 3}, OctreeOptions{1000, 20}, OctreeOptions{1 << 30, 20},
                                  OctreeOptions{4, OctreeView::kMaxDepth}}) {
    expect_same_build(p, opt, "plummer:20000");
    expect_same_build(u, opt, "uniform:20000:3");
  }
}

TEST(OctreeGpu, CoincidentBodiesMatchTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  const Bodies b = coincident(5000, 3);
  for (const OctreeOptions opt : {OctreeOptions{}, OctreeOptions{1, 20}, OctreeOptions{8, 3},
                                  OctreeOptions{1, OctreeView::kMaxDepth}})
    expect_same_build(b, opt, "5000 bodies on 3 sites");
  // Every leaf at the maximum depth holds a third of the bodies.
  const Octree tree = Octree::build_on_gpu(b.xyz.data(), b.mass.data(), b.size());
  for (const OctNode& n : tree.nodes()) {
    if (n.n_children == 0) {
      EXPECT_GE(n.count, 1666);
    }
  }
  expect_same_build(coincident(1000, 1), {}, "1000 bodies on one site");
  expect_same_build(coincident(1, 1), {}, "one body");
}

TEST(OctreeGpu, BodiesOnCellMidpointsMatchTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  for (const OctreeOptions opt : {OctreeOptions{}, OctreeOptions{1, 20}, OctreeOptions{8, 3}}) {
    expect_same_build(integer_grid(10), opt, "integer grid");
    expect_same_build(on_midpoints(), opt, "split planes");
  }
}

TEST(OctreeGpu, ZeroMassesMatchTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  Bodies b = plummer(10000, 12);
  b.mass.assign(b.mass.size(), 0.0f);
  expect_same_build(b, {}, "massless plummer");
  b.mass.assign(b.mass.size(), -0.0f);  // negative zero is not negative
  expect_same_build(b, {}, "plummer with masses -0");
}

TEST(OctreeGpu, DeviceInputMatchesHostInput) {
  CANOPY_REQUIRE_GPU();
  const Bodies b = with_masses(test::clustered_points(30000, 3, 13), Masses::Unequal, 14);
  const Octree cpu = Octree::build(b.xyz.data(), b.mass.data(), b.size(), kOnCpu);
  const DeviceCopy xyz(b.xyz), mass(b.mass);
  GpuBuildStats stats;
  expect_same_tree(Octree::build_on_gpu(xyz.get(), mass.get(), b.size(), {}, &stats), cpu, "device input");
  EXPECT_EQ(stats.upload_ms, 0);
  expect_same_tree(Octree::build_on_gpu(xyz.get(), b.mass.data(), b.size()), cpu, "device xyz, host mass");
  expect_same_tree(Octree::build_on_gpu(b.xyz.data(), mass.get(), b.size()), cpu, "host xyz, device mass");
}

// A simulation's rebuilds: the bodies move a little each step; every tree is the CPU's, and a
// rebuild allocates no device or pinned memory.
TEST(OctreeGpu, ABuilderRebuildsMovingBodiesWithoutAllocating) {
  CANOPY_REQUIRE_GPU();
  Bodies b = plummer(50000, 31);
  OctreeGpuBuilder builder;
  expect_same_tree(builder.build(b.xyz.data(), b.mass.data(), b.size()),
                   Octree::build(b.xyz.data(), b.mass.data(), b.size(), kOnCpu), "step 0");
  for (int step = 1; step <= 3; ++step) {
    for (std::size_t i = 0; i < b.xyz.size(); ++i) b.xyz[i] += 1e-3f * std::sin(static_cast<float>(i * step));
    const Octree cpu = Octree::build(b.xyz.data(), b.mass.data(), b.size(), kOnCpu);
    // The rebuild alone is measured: the comparison reads the tree on the host, whose one host
    // copy (a CPU path's, with its own staging) is not the builder's.
    std::optional<Octree> got;
    test::expect_allocates_nothing([&] { got.emplace(builder.build(b.xyz.data(), b.mass.data(), b.size())); });
    expect_same_tree(*got, cpu, "step " + std::to_string(step));
  }
}

TEST(OctreeGpu, ReportsItsTimes) {
  CANOPY_REQUIRE_GPU();
  const Bodies b = plummer(1000000, 15);
  GpuBuildStats stats;
  Octree::build_on_gpu(b.xyz.data(), b.mass.data(), b.size(), {}, &stats);  // warm-up
  Octree::build_on_gpu(b.xyz.data(), b.mass.data(), b.size(), {}, &stats);
  EXPECT_GT(stats.build_ms, 0);
  EXPECT_GT(stats.upload_ms, 0);
  EXPECT_GT(stats.download_ms, 0);
  std::cout << "plummer:1000000 on " << gpu_description() << ": build " << stats.build_ms << " ms, upload "
            << stats.upload_ms << " ms, download " << stats.download_ms << " ms\n";
}

// The message of the CPU build's error, and the GPU build's for the same arguments.
void expect_same_error(const float* xyz, const float* mass, index_t n, const OctreeOptions& opt,
                       const float* device_xyz, const float* device_mass, const std::string& part) {
  const std::string cpu = test::error_of([&] { Octree::build(xyz, mass, n, opt); }, part);
  EXPECT_HAS(cpu, part);
  EXPECT_EQ(test::error_of([&] { Octree::build_on_gpu(xyz, mass, n, opt); }, part), cpu);
  EXPECT_EQ(test::error_of([&] { Octree::build_on_gpu(device_xyz, device_mass, n, opt); }, part), cpu)
      << "device input";
}

TEST(OctreeGpu, ErrorsMatchTheCpuBuild) {
  CANOPY_REQUIRE_GPU();
  const std::vector<float> xyz = {0, 0, 0, 1, 1, 1, 2, 2, 2}, mass = {1, 1, 1};
  const DeviceCopy d_xyz(xyz), d_mass(mass);
  expect_same_error(xyz.data(), mass.data(), 0, {}, d_xyz.get(), d_mass.get(), "empty");
  expect_same_error(nullptr, mass.data(), 3, {}, nullptr, d_mass.get(), "xyz is a null pointer");
  expect_same_error(xyz.data(), nullptr, 3, {}, d_xyz.get(), nullptr, "mass is a null pointer");
  expect_same_error(xyz.data(), mass.data(), 3, {0, 20}, d_xyz.get(), d_mass.get(), "leaf_size = 0");
  expect_same_error(xyz.data(), mass.data(), 3, {8, 0}, d_xyz.get(), d_mass.get(), "max_depth = 0");
  expect_same_error(xyz.data(), mass.data(), 3, {8, OctreeView::kMaxDepth + 1}, d_xyz.get(), d_mass.get(),
                    "max_depth = 22");

  std::vector<float> bad = xyz;
  bad[7] = std::nanf("");
  bad[8] = INFINITY;  // a later bad value is not the one named
  const DeviceCopy d_bad(bad);
  expect_same_error(bad.data(), mass.data(), 3, {}, d_bad.get(), d_mass.get(), "body 2 has a non-finite y");

  std::vector<float> inf_mass = mass;
  inf_mass[1] = INFINITY;
  const DeviceCopy d_inf_mass(inf_mass);
  expect_same_error(xyz.data(), inf_mass.data(), 3, {}, d_xyz.get(), d_inf_mass.get(), "body 1 has a non-finite mass");

  std::vector<float> negative = {1, -0.5f, -2};
  const DeviceCopy d_negative(negative);
  expect_same_error(xyz.data(), negative.data(), 3, {}, d_xyz.get(), d_negative.get(), "body 1 has a negative mass");
  // A non-finite mass is named before an earlier negative one, as on the CPU.
  negative[2] = std::nanf("");
  const DeviceCopy d_negative_nan(negative);
  expect_same_error(xyz.data(), negative.data(), 3, {}, d_xyz.get(), d_negative_nan.get(),
                    "body 2 has a non-finite mass");
}

TEST(OctreeGpu, NeedsADevice) {
  if (gpu_available()) GTEST_SKIP() << "a CUDA device is present: " << gpu_description();
  const Bodies b = plummer(100, 16);
  const std::string message =
      test::error_of([&] { Octree::build_on_gpu(b.xyz.data(), b.mass.data(), b.size()); }, "no device");
  EXPECT_HAS(message, "CUDA device");
  EXPECT_HAS(message, "build_on_gpu");
}

}  // namespace
}  // namespace canopy
