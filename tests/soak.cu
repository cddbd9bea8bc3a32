// canopy_soak: what a simulation or a service does to the library for hours, compressed. Several
// host threads, each with its own API objects over shared trees, call point correlation, kNN,
// Barnes-Hut, a custom traversal and forest prediction over and over with varying sizes; every
// result must equal the one the first (single-threaded) pass gave for that workload and size, and
// the device and host memory in use must not grow between the warm-up and the end.
//   canopy_soak [--calls 10000] [--threads 4] [--device auto|cpu|gpu]
// Exit 0: every result equal and memory flat; 1: a mismatch or growth (printed); 2: bad arguments.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "executor/visitor.hpp"
#include "io/forest_data.hpp"
#include "layouts/device_copy.hpp"
#include "layouts/forest.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/custom.cuh"
#include "runtime/forest_predictor.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"

namespace {

using canopy::index_t;
using canopy::node_id;

// Custom traversal: the kd-tree points inside an axis-aligned box around each query.
struct BoxCount {
  canopy::KdTreeView tree;
  const float* queries;  // [queries][3]
  float half;            // the box's half side
  index_t* counts;
  struct State {
    float lo[3], hi[3];
    index_t count;
  };
  CANOPY_HD State init(index_t q) const {
    State s{};
    for (int d = 0; d < 3; ++d) {
      s.lo[d] = queries[3 * q + d] - half;
      s.hi[d] = queries[3 * q + d] + half;
    }
    return s;
  }
  CANOPY_HD bool descend(State& s, node_id n) const {
    for (int d = 0; d < 3; ++d)
      if (tree.hi(n)[d] < s.lo[d] || tree.lo(n)[d] > s.hi[d]) return false;
    return true;
  }
  CANOPY_HD void leaf(State& s, node_id n) const {
    const canopy::KdNode node = tree.nodes[n];
    for (index_t i = node.first; i < node.first + node.count; ++i) {
      const float* p = tree.point(i);
      bool in = true;
      for (int d = 0; d < 3; ++d) in = in && p[d] >= s.lo[d] && p[d] <= s.hi[d];
      s.count += in;
    }
  }
  CANOPY_HD void finish(State& s, index_t q) const { counts[q] = s.count; }
};

std::vector<float> clustered(index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> centres(16 * 3);
  for (float& c : centres) c = u(rng);
  std::vector<float> p(static_cast<std::size_t>(n) * 3);
  for (index_t i = 0; i < n; ++i) {
    const std::size_t c = rng() % 16;
    for (int d = 0; d < 3; ++d) p[3 * i + d] = centres[3 * c + d] + g(rng);
  }
  return p;
}

std::size_t host_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::size_t pages = 0, rss = 0;
  f >> pages >> rss;
  return rss * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// The whole device's memory in use (cudaMemGetInfo): other processes on the GPU count too.
std::size_t device_used_bytes() {
  if (!canopy::gpu_available()) return 0;
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return total_b - free_b;
}

// This process's: the stream-ordered pool Canopy allocates from, in use and reserved.
std::size_t pool_bytes(cudaMemPoolAttr what) {
  if (!canopy::gpu_available()) return 0;
  cudaMemPool_t pool;
  std::uint64_t v = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess || cudaMemPoolGetAttribute(pool, what, &v) != cudaSuccess)
    return 0;
  return static_cast<std::size_t>(v);
}

// Canopy's device buffers alive now (allocations less frees, core/device_buffer.hpp).
std::int64_t live_buffers() {
  const canopy::MemoryEvents e = canopy::memory_events();
  return e.device_allocations - e.device_frees;
}

double mib(std::size_t b) { return static_cast<double>(b) / 1048576.0; }

// What every thread shares, read-only: the trees, the queries, the forest and its rows.
struct Shared {
  canopy::Device device;
  std::vector<float> points, queries;
  std::unique_ptr<canopy::KdTree> tree;
  std::vector<std::unique_ptr<canopy::Octree>> octrees;  // one per body count
  std::vector<std::vector<float>> bodies, masses;
  std::unique_ptr<canopy::Forest> forest;
  canopy::ForestData rows;
  float radius = 0;
};

const index_t kSizes[] = {1, 7, 100, 1000, 4096, 20000};  // queries (and forest rows, capped)
constexpr int kWorkloads = 5;                             // pc, knn, bh, custom, forest
constexpr int kSizeCount = 6;
const char* kNames[kWorkloads] = {"pc", "knn", "bh", "custom", "forest"};

// One host thread's API objects, and what one call of (workload, size) returns, as raw bytes.
class Worker {
 public:
  explicit Worker(const Shared& s) : s_(s), pc_(*s.tree, s.device), knn_(*s.tree, s.device) {
    for (const auto& o : s.octrees) bh_.push_back(std::make_unique<canopy::BarnesHut>(*o, s.device));
    canopy::ForestConfig fc;
    fc.device = s.device;
    forest_ = std::make_unique<canopy::ForestPredictor>(*s.forest, fc);
    if (gpu()) {
      traverser_ = std::make_unique<canopy::Traverser>();
      dtree_ = std::make_unique<canopy::DeviceCopy<canopy::KdTree>>(*s.tree, traverser_->stream());
      dqueries_.reserve(s.queries.size(), "the soak's queries", traverser_->stream());
      dcounts_.reserve(s.queries.size() / 3, "the soak's counts", traverser_->stream());
      canopy::copy_n_async(dqueries_.get(), s.queries.data(), s.queries.size(), traverser_->stream());
      cudaStreamSynchronize(traverser_->stream());
    }
  }
  bool gpu() const { return canopy::resolve_device(s_.device) == canopy::Device::Gpu; }

  std::vector<unsigned char> call(int workload, int size) {
    const index_t n = kSizes[size];
    switch (workload) {
      case 0: {
        canopy::PcOptions o;
        o.radius = s_.radius;
        return bytes(pc_.run(s_.queries.data(), n, o).counts);
      }
      case 1: {
        canopy::KnnOptions o;
        o.k = 8;
        const canopy::KnnResult r = knn_.run(s_.queries.data(), n, o);
        std::vector<unsigned char> b = bytes(r.indices), d = bytes(r.distances);
        b.insert(b.end(), d.begin(), d.end());
        return b;
      }
      case 2: {
        canopy::BhOptions o;
        return bytes(bh_[size % bh_.size()]->run(o).forces);
      }
      case 3: {
        std::vector<index_t> counts(static_cast<std::size_t>(n));
        canopy::TraversalOptions o;
        if (gpu()) {
          const BoxCount v{dtree_->view(), dqueries_.get(), 0.03f, dcounts_.get()};
          traverser_->run(s_.tree->view(), dtree_->view(), v, n, o);
          canopy::copy_memory(counts.data(), dcounts_.get(), counts.size() * sizeof(index_t));
        } else {
          const BoxCount v{s_.tree->view(), s_.queries.data(), 0.03f, counts.data()};
          canopy::traverse_cpu(s_.tree->view(), v, n, o);
        }
        return bytes(counts);
      }
      default: {
        const index_t m = std::min<index_t>(n, s_.rows.n_rows);
        canopy::ForestRunOptions o;
        o.output = canopy::ForestOutput::Prob;
        std::vector<float> out(static_cast<std::size_t>(m) * forest_->output_width(o.output));
        forest_->predict(s_.rows.values.data(), m, o, out.data());
        return bytes(out);
      }
    }
  }

 private:
  template <class T>
  static std::vector<unsigned char> bytes(const std::vector<T>& v) {
    std::vector<unsigned char> b(v.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  }
  const Shared& s_;
  canopy::PointCorrelation pc_;
  canopy::NearestNeighbors knn_;
  std::vector<std::unique_ptr<canopy::BarnesHut>> bh_;
  std::unique_ptr<canopy::ForestPredictor> forest_;
  std::unique_ptr<canopy::Traverser> traverser_;  // before the buffers freed on its stream
  std::unique_ptr<canopy::DeviceCopy<canopy::KdTree>> dtree_;
  canopy::DeviceBuffer<float> dqueries_;
  canopy::DeviceBuffer<index_t> dcounts_;
};

int soak(long calls, int threads, canopy::Device device) {
  Shared s;
  s.device = device;
  s.points = clustered(40000, 1);
  s.queries = clustered(20000, 2);
  s.tree = std::make_unique<canopy::KdTree>(canopy::KdTree::build(s.points.data(), 40000, 3));
  s.radius = canopy::estimate_radius(*s.tree, s.queries.data(), 20000, 32);
  for (index_t n : {index_t{1000}, index_t{10000}, index_t{30000}}) {
    s.bodies.push_back(clustered(n, 10 + n));
    s.masses.emplace_back(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
    s.octrees.push_back(std::make_unique<canopy::Octree>(
        canopy::Octree::build(s.bodies.back().data(), s.masses.back().data(), n)));
  }
  const std::string data = CANOPY_TEST_DATA;
  s.forest = std::make_unique<canopy::Forest>(canopy::Forest::load(data + "/forest/xgb_higgs.json"));
  s.rows = canopy::read_forest_csv(data + "/forest/higgs_rows.csv", "label");
  std::printf("soak: %ld calls from %d threads on %s (%s)\n", calls, threads,
              canopy::to_string(canopy::resolve_device(device)), canopy::gpu_description().c_str());

  // The reference: one pass, one thread.
  std::vector<std::vector<unsigned char>> want(kWorkloads * kSizeCount);
  {
    Worker w(s);
    for (int k = 0; k < kWorkloads; ++k)
      for (int z = 0; z < kSizeCount; ++z) want[k * kSizeCount + z] = w.call(k, z);
  }

  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < threads; ++t) workers.push_back(std::make_unique<Worker>(s));
  std::atomic<long> next{0}, mismatches{0};
  std::mutex print;
  auto run = [&](int t, long upto) {
    try {
      for (long i; (i = next.fetch_add(1)) < upto;) {
        // Workload and size vary from call to call and thread to thread.
        const int k = static_cast<int>(i % kWorkloads), z = static_cast<int>((i / kWorkloads + t) % kSizeCount);
        if (workers[t]->call(k, z) != want[k * kSizeCount + z] && mismatches.fetch_add(1) < 10) {
          std::lock_guard<std::mutex> lock(print);
          std::printf("MISMATCH: call %ld, thread %d, %s of %lld\n", i, t, kNames[k], static_cast<long long>(kSizes[z]));
        }
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(print);
      std::printf("ERROR on thread %d: %s\n", t, e.what());
      mismatches.fetch_add(1);
    }
  };
  auto round = [&](long upto) {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(run, t, upto);
    for (std::thread& th : pool) th.join();
  };
  // Warm-up: every workload and size on every thread (Auto's prior and trial, buffers sized).
  const long warm = static_cast<long>(kWorkloads) * kSizeCount * 2 * threads;
  round(warm);
  if (canopy::gpu_available()) cudaDeviceSynchronize();
  const std::size_t dev0 = device_used_bytes(), host0 = host_rss_bytes();
  const std::size_t used0 = pool_bytes(cudaMemPoolAttrUsedMemCurrent), held0 = pool_bytes(cudaMemPoolAttrReservedMemCurrent);
  const std::int64_t live0 = live_buffers();
  const auto t0 = std::chrono::steady_clock::now();
  round(warm + calls);
  if (canopy::gpu_available()) cudaDeviceSynchronize();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::size_t dev1 = device_used_bytes(), host1 = host_rss_bytes();
  const std::size_t used1 = pool_bytes(cudaMemPoolAttrUsedMemCurrent), held1 = pool_bytes(cudaMemPoolAttrReservedMemCurrent);
  const std::int64_t live1 = live_buffers();
  std::printf("calls: %ld after %ld warm-up calls, %.1f s (%.0f calls/s); mismatches: %ld\n", calls, warm, secs,
              static_cast<double>(calls) / secs, mismatches.load());
  std::printf("device memory of this process (pool in use / reserved): %.1f / %.1f MiB at the start, %.1f / %.1f MiB "
              "at the end; Canopy's live device buffers: %lld, then %lld\n",
              mib(used0), mib(held0), mib(used1), mib(held1), static_cast<long long>(live0), static_cast<long long>(live1));
  std::printf("device memory in use, whole GPU (other processes included): %.1f MiB at the start, %.1f MiB at the end\n",
              mib(dev0), mib(dev1));
  std::printf("host memory (resident): %.1f MiB at the start, %.1f MiB at the end\n", mib(host0), mib(host1));
  // Judged on this process's own figures (another process may share the GPU). A steady state
  // allocates nothing; the allocators round up, so a few MiB of slack, never a trend.
  const bool flat = used1 <= used0 + (8u << 20) && held1 <= held0 + (8u << 20) && live1 <= live0 &&
                    host1 <= host0 + (32u << 20);
  std::printf("%s\n", mismatches == 0 && flat ? "soak ok: every result equal, memory flat"
                                              : "soak FAILED");
  return mismatches == 0 && flat ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  long calls = 10000;
  int threads = 4;
  canopy::Device device = canopy::Device::Auto;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--calls" && has) {
      calls = std::atol(argv[++i]);
    } else if (a == "--threads" && has) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--device" && has) {
      const std::string d = argv[++i];
      if (d == "cpu") device = canopy::Device::Cpu;
      else if (d == "gpu") device = canopy::Device::Gpu;
      else if (d != "auto") return std::fprintf(stderr, "--device %s: auto, cpu or gpu\n", d.c_str()), 2;
    } else {
      std::fprintf(stderr, "unknown argument '%s'; usage: canopy_soak [--calls N] [--threads T] [--device D]\n",
                   a.c_str());
      return 2;
    }
  }
  if (calls < 1 || threads < 1) return std::fprintf(stderr, "--calls and --threads must be at least 1\n"), 2;
  try {
    return soak(calls, threads, device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak: %s\n", e.what());
    return 1;
  }
}
