// The partitioned kd-tree's device path (issue 39): queries and results in device memory, routed,
// moved and combined on the GPUs. Every rank checks its results against one process's (the CPU
// search over the whole tree) bit for bit, through each transport. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "distributed/distributed.hpp"
#include "layouts/kdtree.hpp"
#include "tests/spatial_reference.hpp"

namespace canopy {
namespace {

// Device memory holding a copy of v (or n zeroed values), freed at scope exit.
template <class T>
class Dev {
 public:
  explicit Dev(std::size_t n) : n_(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&p_), std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess)
      throw Error("cudaMalloc in a test");
    // (the legacy stream's memset would race the copies on Canopy's non-blocking streams)
    cudaMemset(p_, 0xff, std::max<std::size_t>(n, 1) * sizeof(T));
    cudaDeviceSynchronize();
  }
  explicit Dev(const std::vector<T>& v) : Dev(v.size()) { copy_memory(p_, v.data(), v.size() * sizeof(T)); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p_); }
  T* get() const { return p_; }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    copy_memory(v.data(), p_, n_ * sizeof(T));
    return v;
  }

 private:
  std::size_t n_;
  T* p_ = nullptr;
};

struct Place {
  int rank = 0, ranks = 1;
};
Place place() {
  Place p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.ranks);
  return p;
}

// One GPU per rank where there are several (ranks beyond the GPUs share them).
bool use_rank_gpu() {
  if (!gpu_available()) return false;
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  cudaSetDevice((local ? std::atoi(local) : place().rank) % std::max(gpus, 1));
  return true;
}

// CANOPY_DIST_TRANSPORT for the trees made in this scope (it is read when a tree first takes
// device queries).
class TransportCap {
 public:
  explicit TransportCap(const char* cap) {
    if (cap)
      setenv("CANOPY_DIST_TRANSPORT", cap, 1);
    else
      unsetenv("CANOPY_DIST_TRANSPORT");
  }
  ~TransportCap() { unsetenv("CANOPY_DIST_TRANSPORT"); }
};

// Rows [n][width] a call left, equal to one process's: every row with `all`, else this rank's
// share's rows.
template <class T>
void expect_rows(const std::vector<T>& got, const std::vector<T>& one, index_t n, index_t width, bool all,
                 const std::string& what) {
  const Place p = place();
  const distributed::Share s = distributed::share_of(n, p.rank, p.ranks);
  const index_t first = all ? 0 : s.begin, last = all ? n : s.begin + s.count;
  std::size_t wrong = 0;
  for (index_t i = first * width; i < last * width; ++i)
    wrong += std::memcmp(&got[static_cast<std::size_t>(i)], &one[static_cast<std::size_t>(i)], sizeof(T)) != 0;
  EXPECT_EQ(wrong, 0u) << what << " (rank " << p.rank << ")";
}

// Rows of an owner-shard kNN call: with `all` every row equals one process's; else the rows this
// rank wrote (the rest keep Dev's -1) equal one process's and are the `owned` ones (the call's
// local_items); and the ranks' owned rows together are every row once.
void expect_owned_rows(const std::vector<index_t>& idx, const std::vector<float>& dist, const KnnResult& one, index_t n,
                       int k, bool all, index_t owned, const std::string& what) {
  index_t total = 0;
  MPI_Allreduce(&owned, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, n) << what;
  if (all) {
    EXPECT_EQ(idx, one.indices) << what;
    EXPECT_EQ(dist, one.distances) << what;
    return;
  }
  index_t written = 0, wrong = 0;
  for (index_t i = 0; i < n; ++i) {
    if (idx[static_cast<std::size_t>(i * k)] == -1) continue;
    ++written;
    for (index_t c = i * k; c < (i + 1) * k; ++c)
      wrong += idx[static_cast<std::size_t>(c)] != one.indices[static_cast<std::size_t>(c)] ||
               std::memcmp(&dist[static_cast<std::size_t>(c)], &one.distances[static_cast<std::size_t>(c)], 4) != 0;
  }
  EXPECT_EQ(wrong, 0) << what << " (rank " << place().rank << ")";
  EXPECT_EQ(written, owned) << what;
}

// Queries: half near the points, a tenth far outside them (their balls and bounds reach every
// rank or none), the rest uniform over the points' box.
std::vector<float> queries(index_t m, int dims, unsigned seed) {
  std::vector<float> q = test::blob_points(m, dims, seed, 0.08f, 16);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.2f, 1.2f);
  for (index_t i = 0; i < m; ++i)
    if (i % 10 == 3)
      for (int d = 0; d < dims; ++d) q[static_cast<std::size_t>(i * dims + d)] = 3.0f + u(rng);
    else if (i % 3 == 1)
      for (int d = 0; d < dims; ++d) q[static_cast<std::size_t>(i * dims + d)] = u(rng);
  return q;
}

const char* const kCaps[] = {nullptr, "ipc", "host"};

// Clustered points and queries (queries() above), and one process's answers over them (the CPU
// search over the whole tree): what every rank checks against.
struct OneProcess {
  std::vector<float> p, q;
  std::vector<index_t> counts;
  KnnResult knn;
  OneProcess(index_t n, index_t m, int dims, unsigned seed, float radius, int k)
      : p(test::blob_points(n, dims, seed, 0.05f, 32)), q(queries(m, dims, seed + 1)) {
    KdTreeOptions cpu;
    cpu.device = Device::Cpu;
    const KdTree whole = KdTree::build(p.data(), n, dims, cpu);
    PcOptions po;
    po.radius = radius;
    po.device = Device::Cpu;
    counts = PointCorrelation(whole, Device::Cpu).run(q.data(), m, po).counts;
    KnnOptions ko;
    ko.k = k;
    ko.device = Device::Cpu;
    knn = NearestNeighbors(whole, Device::Cpu).run(q.data(), m, ko);
  }
};

TEST(PartitionedDevice, CountsAndNeighboursEqualOneProcessThroughEveryTransport) {
  if (!use_rank_gpu()) GTEST_SKIP() << "no GPU";
  struct Case {
    index_t n, m;
    int dims, depth;
  };
  for (const Case c : {Case{6000, 1500, 3, 3}, Case{4000, 900, 2, 5}, Case{3000, 700, 5, 2}}) {
    const std::vector<float> p = test::blob_points(c.n, c.dims, 17 + c.dims, 0.05f, 48);
    const std::vector<float> q = queries(c.m, c.dims, 5 + c.dims);
    KdTreeOptions cpu;
    cpu.device = Device::Cpu;
    const KdTree whole = KdTree::build(p.data(), c.n, c.dims, cpu);
    PcOptions po;
    po.radius = 0.06f;
    po.device = Device::Cpu;
    const std::vector<index_t> one_counts = PointCorrelation(whole, Device::Cpu).run(q.data(), c.m, po).counts;
    NearestNeighbors one_nn(whole, Device::Cpu);
    for (const char* cap : kCaps) {
      TransportCap env(cap);
      KdTreeOptions gpu;
      gpu.device = Device::Gpu;
      const distributed::PartitionedKdTree part(MPI_COMM_WORLD, p.data(), c.n, c.dims, c.depth, gpu);
      PointCorrelation pc(part.local(), Device::Gpu);
      NearestNeighbors nn(part.local(), Device::Gpu);
      const Dev<float> dq(q);
      const std::string where = std::string("n ") + std::to_string(c.n) + ", dims " + std::to_string(c.dims) +
                                ", transport cap " + (cap ? cap : "auto");
      for (distributed::Gather g : {distributed::Gather::Local, distributed::Gather::Root, distributed::Gather::All}) {
        const bool all = g == distributed::Gather::All || (g == distributed::Gather::Root && place().rank == 0);
        PcOptions o = po;
        o.device = Device::Gpu;
        Dev<index_t> counts(static_cast<std::size_t>(c.m));
        distributed::DistributedStats st;
        distributed::point_correlation_into(MPI_COMM_WORLD, part, pc, dq.get(), c.m, o, counts.get(), &st, g);
        expect_rows(counts.host(), one_counts, c.m, 1, all, "pc, " + where + ", gather " + distributed::to_string(g));
        if (cap && std::string(cap) == "host") {
          EXPECT_STREQ(st.transport, "host memory");
        } else if (!cap && place().ranks > 1) {
          EXPECT_STRNE(st.transport, "host memory") << "one host: IPC at least";
        }
        for (int k : {1, 8, 33}) {
          KnnOptions ko;
          ko.k = k;
          ko.device = Device::Cpu;
          const KnnResult one = one_nn.run(q.data(), c.m, ko);
          ko.device = Device::Gpu;
          for (distributed::Shard shard : {distributed::Shard::Input, distributed::Shard::Auto}) {
            Dev<index_t> idx(static_cast<std::size_t>(c.m * k));
            Dev<float> dist(static_cast<std::size_t>(c.m * k));
            distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, nn, dq.get(), c.m, ko, idx.get(), dist.get(), &st,
                                                g, shard);
            const std::string what = "knn k " + std::to_string(k) + ", " + where + ", gather " +
                                     distributed::to_string(g) + ", shard " + distributed::to_string(shard);
            if (shard == distributed::Shard::Input) {
              expect_rows(idx.host(), one.indices, c.m, k, all, what);
              expect_rows(dist.host(), one.distances, c.m, k, all, what);
            } else {
              expect_owned_rows(idx.host(), dist.host(), one, c.m, k, all, st.local_items, what);
            }
          }
        }
      }
    }
  }
}

// The replicated calls gather device results GPU to GPU, from input and spatial shards alike.
TEST(DeviceGather, ReplicatedCallsGatherDeviceResults) {
  if (!use_rank_gpu()) GTEST_SKIP() << "no GPU";
  const index_t n = 5000, m = 1200;
  const OneProcess one(n, m, 3, 21, 0.06f, 7);
  KdTreeOptions gpu;
  gpu.device = Device::Gpu;
  const KdTree whole = KdTree::build(one.p.data(), n, 3, gpu);
  PointCorrelation pc(whole, Device::Gpu);
  NearestNeighbors nn(whole, Device::Gpu);
  PcOptions po;
  po.radius = 0.06f;
  KnnOptions ko;
  ko.k = 7;
  po.device = ko.device = Device::Gpu;
  const Dev<float> dq(one.q);
  for (distributed::Shard shard : {distributed::Shard::Input, distributed::Shard::Spatial})
    for (distributed::Gather g : {distributed::Gather::Root, distributed::Gather::All}) {
      const bool all = g == distributed::Gather::All || place().rank == 0;
      const std::string what = std::string("shard ") + distributed::to_string(shard) + ", gather " + distributed::to_string(g);
      Dev<index_t> counts(static_cast<std::size_t>(m)), idx(static_cast<std::size_t>(m * ko.k));
      Dev<float> dist(static_cast<std::size_t>(m * ko.k));
      distributed::DistributedStats st;
      distributed::point_correlation_into(MPI_COMM_WORLD, pc, dq.get(), m, po, counts.get(), &st, g, shard);
      if (place().ranks > 1) {
        EXPECT_STRNE(st.transport, "host memory") << what;
      }
      distributed::nearest_neighbors_into(MPI_COMM_WORLD, nn, dq.get(), m, ko, idx.get(), dist.get(), &st, g, shard);
      if (shard == distributed::Shard::Input) {
        expect_rows(counts.host(), one.counts, m, 1, all, "pc, " + what);
        expect_rows(idx.host(), one.knn.indices, m, ko.k, all, "knn, " + what);
        expect_rows(dist.host(), one.knn.distances, m, ko.k, all, "knn, " + what);
      } else if (all) {  // a spatial shard's own rows lie anywhere: the rows every rank holds
        EXPECT_EQ(counts.host(), one.counts) << what;
        EXPECT_EQ(idx.host(), one.knn.indices) << what;
        EXPECT_EQ(dist.host(), one.knn.distances) << what;
      }
    }
}

// Host buffers take the host path: each rank's share at its places, Root and All filling the rest.
TEST(PartitionedDevice, HostBuffersTakeTheHostPath) {
  const index_t n = 3000, m = 500;
  const OneProcess one(n, m, 3, 11, 0.07f, 5);
  KdTreeOptions cpu;
  cpu.device = Device::Cpu;
  PcOptions po;
  po.radius = 0.07f;
  po.device = Device::Cpu;
  KnnOptions ko;
  ko.k = 5;
  ko.device = Device::Cpu;
  const distributed::PartitionedKdTree part(MPI_COMM_WORLD, one.p.data(), n, 3, 3, cpu);
  PointCorrelation pc(part.local(), Device::Cpu);
  NearestNeighbors nn(part.local(), Device::Cpu);
  for (distributed::Gather g : {distributed::Gather::Local, distributed::Gather::Root, distributed::Gather::All}) {
    const bool all = g == distributed::Gather::All || (g == distributed::Gather::Root && place().rank == 0);
    std::vector<index_t> counts(static_cast<std::size_t>(m), -1), idx(static_cast<std::size_t>(m * ko.k), -1);
    std::vector<float> dist(static_cast<std::size_t>(m * ko.k), -1.0f);
    distributed::DistributedStats st;
    distributed::point_correlation_into(MPI_COMM_WORLD, part, pc, one.q.data(), m, po, counts.data(), &st, g);
    EXPECT_STREQ(st.transport, "host memory");
    distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, nn, one.q.data(), m, ko, idx.data(), dist.data(), &st, g);
    const std::string what = std::string("gather ") + distributed::to_string(g);
    expect_rows(counts, one.counts, m, 1, all, "pc, " + what);
    expect_rows(idx, one.knn.indices, m, ko.k, all, "knn, " + what);
    expect_rows(dist, one.knn.distances, m, ko.k, all, "knn, " + what);
  }
  std::vector<index_t> idx(static_cast<std::size_t>(m * 5));
  std::vector<float> dist(idx.size());
  EXPECT_THROW(distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, nn, one.q.data(), m, ko, idx.data(), dist.data(),
                                                   nullptr, distributed::Gather::Local, distributed::Shard::Spatial),
               Error);  // owner shards need device queries
  EXPECT_STREQ(part.transport(), "");  // no device call: no device side
}

// k above a rank's own points (its answers padded, every rank asked in the second round), a
// single query (ranks with no share), and k = every point.
TEST(PartitionedDevice, SmallSharesAndLargeK) {
  if (!use_rank_gpu()) GTEST_SKIP() << "no GPU";
  const index_t n = 90;
  const std::vector<float> p = test::blob_points(n, 2, 31, 0.1f, 8);
  const std::vector<float> q = queries(40, 2, 32);
  KdTreeOptions cpu;
  cpu.device = Device::Cpu;
  const KdTree whole = KdTree::build(p.data(), n, 2, cpu);
  NearestNeighbors one_nn(whole, Device::Cpu);
  KdTreeOptions gpu;
  gpu.device = Device::Gpu;
  const distributed::PartitionedKdTree part(MPI_COMM_WORLD, p.data(), n, 2, 3, gpu);
  NearestNeighbors nn(part.local(), Device::Gpu);
  const Dev<float> dq(q);
  for (const index_t m : {index_t{1}, index_t{40}})
    for (int k : {60, static_cast<int>(n)}) {
      KnnOptions ko;
      ko.k = k;
      ko.device = Device::Cpu;
      const KnnResult one = one_nn.run(q.data(), m, ko);
      ko.device = Device::Gpu;
      Dev<index_t> idx(static_cast<std::size_t>(m * k));
      Dev<float> dist(static_cast<std::size_t>(m * k));
      distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, nn, dq.get(), m, ko, idx.get(), dist.get(), nullptr,
                                          distributed::Gather::All);
      EXPECT_EQ(idx.host(), one.indices) << m << " queries, k " << k;
      EXPECT_EQ(dist.host(), one.distances) << m << " queries, k " << k;
    }
}

// The device merge orders candidates by squared distance, then index, as one process does (the
// host path's case: (1, y) and (1, 0) at one float distance from the origin).
TEST(PartitionedDevice, NeighboursOrderBySquaredDistance) {
  if (!use_rank_gpu()) GTEST_SKIP() << "no GPU";
  const test::TieCase tie = test::squared_distance_tie();
  KdTreeOptions o;
  o.device = Device::Cpu;
  const KdTree whole = KdTree::build(tie.points.data(), tie.n, 2, o);
  KnnOptions ko;
  ko.k = 2;
  ko.device = Device::Cpu;
  const KnnResult one = NearestNeighbors(whole, Device::Cpu).run(tie.queries.data(), 3, ko);
  ASSERT_EQ(one.indices[0], 1);
  ASSERT_EQ(one.distances[0], one.distances[1]);
  ko.device = Device::Gpu;
  for (int depth : {2, 3}) {
    const distributed::PartitionedKdTree part(MPI_COMM_WORLD, tie.points.data(), tie.n, 2, depth, o);
    NearestNeighbors local(part.local(), Device::Gpu);
    const Dev<float> dq(tie.queries);
    Dev<index_t> idx(6);
    Dev<float> dist(6);
    distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, local, dq.get(), 3, ko, idx.get(), dist.get(), nullptr,
                                        distributed::Gather::All);
    EXPECT_EQ(idx.host(), one.indices) << "depth " << depth;
    EXPECT_EQ(dist.host(), one.distances) << "depth " << depth;
  }
}

// Bad calls fail on every rank with one message: a NaN query (named by its place in the share),
// k above the points, queries on the device with results on the host.
TEST(PartitionedDevice, BadCallsFailOnEveryRank) {
  if (!use_rank_gpu()) GTEST_SKIP() << "no GPU";
  const index_t n = 3000, m = 400;
  const std::vector<float> p = test::blob_points(n, 3, 3, 0.05f, 16);
  std::vector<float> q = queries(m, 3, 9);
  q[static_cast<std::size_t>(m - 1) * 3 + 1] = std::nanf("");
  KdTreeOptions o;
  o.device = Device::Gpu;
  const distributed::PartitionedKdTree part(MPI_COMM_WORLD, p.data(), n, 3, 3, o);
  PointCorrelation pc(part.local(), Device::Gpu);
  NearestNeighbors nn(part.local(), Device::Gpu);
  const Dev<float> dq(q);
  Dev<index_t> counts(static_cast<std::size_t>(m)), idx(static_cast<std::size_t>(m) * 4);
  Dev<float> dist(static_cast<std::size_t>(m) * 4);
  PcOptions po;
  po.radius = 0.05f;
  try {
    distributed::point_correlation_into(MPI_COMM_WORLD, part, pc, dq.get(), m, po, counts.get());
    ADD_FAILURE() << "a NaN query was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
  KnnOptions ko;
  ko.k = static_cast<int>(n) + 1;
  EXPECT_THROW(distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, nn, dq.get(), m - 1, ko, idx.get(), dist.get()),
               Error);
  ko.k = 4;
  std::vector<index_t> host_idx(static_cast<std::size_t>(m) * 4);
  EXPECT_THROW(distributed::nearest_neighbors_into(MPI_COMM_WORLD, part, nn, dq.get(), m - 1, ko, host_idx.data(),
                                                   dist.get()),
               Error);
  // The tree still answers after the failures.
  distributed::point_correlation_into(MPI_COMM_WORLD, part, pc, dq.get(), m - 1, po, counts.get(), nullptr,
                                      distributed::Gather::All);
  KdTreeOptions cpu;
  cpu.device = Device::Cpu;
  const KdTree whole = KdTree::build(p.data(), n, 3, cpu);
  po.device = Device::Cpu;
  std::vector<index_t> one = PointCorrelation(whole, Device::Cpu).run(q.data(), m - 1, po).counts;
  std::vector<index_t> got = counts.host();
  got.resize(one.size());
  EXPECT_EQ(got, one);
}

}  // namespace
}  // namespace canopy
