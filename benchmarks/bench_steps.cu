// canopy-bench steps: a Barnes-Hut simulation's time steps on the GPU. Each step rebuilds the
// octree from the positions in device memory (one OctreeGpuBuilder, its buffers reused), computes
// the forces with the default call, and moves the bodies with a leapfrog kick-drift kernel; the
// table splits each step into build / API setup / schedule / forces / update.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "benchmarks/device_array.cuh"
#include "core/cuda.cuh"
#include "core/device.hpp"
#include "io/dataset.hpp"
#include "layouts/octree.hpp"
#include "runtime/barnes_hut.hpp"

namespace canopy {
namespace bench {

void add_steps_options(CLI::App& app, StepsConfig& c) {
  app.add_option("--generate", c.generate, "the initial positions: plummer:N or uniform:N:3 (masses 1/N, at rest)")
      ->capture_default_str();
  app.add_option("--seed", c.seed, "the generator's seed")->capture_default_str();
  app.add_option("--steps", c.steps, "time steps timed (after two untimed warm-up steps)")->capture_default_str();
  app.add_option("--dt", c.dt, "the time step")->capture_default_str();
  app.add_option("--theta", c.theta, "opening angle")->capture_default_str();
  app.add_option("--softening", c.softening, "softening length")->capture_default_str();
  app.add_option("--json", c.json, "write the per-step times to this file");
}

namespace {

// Leapfrog with staggered velocities: v(t + dt/2) = v(t - dt/2) + a(t) dt, x(t + dt) = x(t) +
// v(t + dt/2) dt; a = F / m (a massless body feels no force here).
__global__ void kick_drift_kernel(const float* force, const float* mass, index_t n, float dt, float* vel, float* xyz) {
  const index_t i = blockIdx.x * static_cast<index_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float m = mass[i];
  for (int a = 0; a < 3; ++a) {
    const float acc = m > 0.0f ? force[i * 3 + a] / m : 0.0f;
    vel[i * 3 + a] += acc * dt;
    xyz[i * 3 + a] += vel[i * 3 + a] * dt;
  }
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Step {
  double build = 0, download = 0, setup = 0, schedule = 0, forces = 0, update = 0, wall = 0;
  std::string schedule_kind, executor_kind;
};

}  // namespace

int run_steps(const StepsConfig& c) {
  if (!gpu_available()) throw Error("canopy-bench steps needs a GPU: " + gpu_description());
  if (c.steps < 1) throw Error("--steps " + std::to_string(c.steps) + " must be at least 1");
  if (!(c.dt > 0.0f)) throw Error("--dt must be positive");
  const PointSet ps = generate(c.generate, c.seed);
  if (ps.dims != 3) throw Error("--generate " + c.generate + ": the bodies need 3 coordinates");
  const index_t n = ps.size();
  const std::size_t un = static_cast<std::size_t>(n);
  std::printf("steps: %lld bodies (%s), dt %g, theta %g, softening %g; GPU: %s\n", static_cast<long long>(n),
              c.generate.c_str(), c.dt, c.theta, c.softening, gpu_description().c_str());

  DeviceArray<float> xyz(un * 3), vel(un * 3), mass(un), force(un * 3);
  const std::vector<float> masses(un, 1.0f / static_cast<float>(n));
  copy_memory(xyz.p, ps.data(), un * 3 * sizeof(float));
  copy_memory(mass.p, masses.data(), un * sizeof(float));
  CANOPY_CUDA_CHECK(cudaMemset(vel.p, 0, un * 3 * sizeof(float)));

  OctreeGpuBuilder builder;
  BhOptions opt;
  opt.theta = c.theta;
  opt.softening = c.softening;
  std::vector<Step> steps;
  // Steps -1 and 0 warm up: Auto's prior runs on the first, its one-time trial on the second.
  for (int k = -1; k <= c.steps; ++k) {
    Step st;
    CANOPY_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    GpuBuildStats bs;
    const Octree tree = builder.build(xyz.p, mass.p, n, {}, &bs);
    const auto t1 = std::chrono::steady_clock::now();
    BarnesHut bh(tree, Device::Gpu);
    const auto t2 = std::chrono::steady_clock::now();
    const TraversalStats ts = bh.run(opt, force.p);
    const auto t3 = std::chrono::steady_clock::now();
    kick_drift_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(force.p, mass.p, n, c.dt, vel.p, xyz.p);
    CANOPY_CUDA_CHECK_LAUNCH("kick_drift_kernel");
    CANOPY_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t4 = std::chrono::steady_clock::now();
    st.build = bs.build_ms;
    st.download = ms_between(t0, t1) - bs.build_ms;  // the host copy and the builder's host work
    st.setup = ms_between(t1, t2);
    st.schedule = ts.times.inspect_ms + ts.times.schedule_ms;
    st.forces = ts.times.execute_ms;
    st.update = ms_between(t3, t4);
    st.wall = ms_between(t0, t4);
    st.schedule_kind = to_string(ts.schedule_kind);
    st.executor_kind = to_string(ts.executor_kind);
    if (k > 0) steps.push_back(st);
  }

  std::printf("\n| step | build (GPU) | host copy | API setup | schedule | forces | update | wall ms | schedule + executor |\n"
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  nlohmann::json rows = nlohmann::json::array();
  Step sum;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    std::printf("| %zu | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s + %s |\n", i + 1, s.build, s.download,
                s.setup, s.schedule, s.forces, s.update, s.wall, s.schedule_kind.c_str(), s.executor_kind.c_str());
    rows.push_back({{"build_ms", s.build}, {"host_copy_ms", s.download}, {"setup_ms", s.setup},
                    {"schedule_ms", s.schedule}, {"forces_ms", s.forces}, {"update_ms", s.update},
                    {"wall_ms", s.wall}, {"schedule", s.schedule_kind}, {"executor", s.executor_kind}});
    sum.build += s.build;
    sum.download += s.download;
    sum.setup += s.setup;
    sum.schedule += s.schedule;
    sum.forces += s.forces;
    sum.update += s.update;
    sum.wall += s.wall;
  }
  const double m = static_cast<double>(steps.size());
  std::printf("| mean | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | |\n", sum.build / m, sum.download / m,
              sum.setup / m, sum.schedule / m, sum.forces / m, sum.update / m, sum.wall / m);
  if (!c.json.empty())
    write_json(c.json, {{"generate", c.generate}, {"n", n}, {"dt", c.dt}, {"theta", c.theta},
                        {"softening", c.softening}, {"steps", rows}});
  return 0;
}

}  // namespace bench
}  // namespace canopy
