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
namespace detail {

TopCut cut_top_tree(const float* points, index_t n, int dims, int depth, int ranks, const char* what) {
  if (depth < 1 || depth > 30) throw Error(std::string(what) + ": depth " + std::to_string(depth) + " is outside 1..30");
  const index_t wanted = index_t{1} << depth;
  if (n < ranks) throw Error(std::string(what) + ": " + std::to_string(n) + " points for " + std::to_string(ranks) + " ranks");
  TopCut cut;
  KdTreeOptions top;
  top.leaf_size = static_cast<int>(std::max<index_t>(1, (n + wanted - 1) / wanted));
  top.device = Device::Cpu;
  cut.top = std::make_unique<KdTree>(KdTree::build(points, n, dims, top));
  const KdTreeView v = cut.top->view();
  for (node_id k = 0; k < v.n_nodes; ++k)
    if (v.is_leaf(k)) cut.leaf_node.push_back(k);  // depth-first ids: left to right
  const index_t L = static_cast<index_t>(cut.leaf_node.size());
  if (L < ranks)
    throw Error(std::string(what) + ": the top-tree of depth " + std::to_string(depth) + " has " + std::to_string(L) +
                " leaves for " + std::to_string(ranks) + " ranks (each rank owns at least one: a deeper top-tree)");
  // A leaf goes to the rank its middle point falls in, with no rank left out.
  cut.owner.resize(static_cast<std::size_t>(L));
  cut.boxes.resize(static_cast<std::size_t>(L) * 2 * dims);
  cut.ids.resize(static_cast<std::size_t>(ranks));
  index_t before = 0;
  int prev = -1;
  for (index_t i = 0; i < L; ++i) {
    const node_id k = cut.leaf_node[static_cast<std::size_t>(i)];
    const KdNode& node = v.nodes[k];
    const double middle = static_cast<double>(before) + node.count / 2.0;
    int r = static_cast<int>(middle * ranks / static_cast<double>(n));
    r = std::min(std::max(r, prev), prev + 1);
    r = std::min(std::max(r, ranks - static_cast<int>(L - i)), ranks - 1);
    cut.owner[static_cast<std::size_t>(i)] = prev = r;
    before += node.count;
    std::copy(v.lo(k), v.lo(k) + dims, cut.boxes.begin() + i * 2 * dims);
    std::copy(v.hi(k), v.hi(k) + dims, cut.boxes.begin() + i * 2 * dims + dims);
    std::vector<index_t>& mine = cut.ids[static_cast<std::size_t>(r)];
    mine.insert(mine.end(), v.point_ids + node.first, v.point_ids + node.first + node.count);
  }
  // Original order: kNN ties break as in one process; Barnes-Hut's own bodies come first.
  tbb::parallel_for(std::size_t{0}, cut.ids.size(), [&](std::size_t r) { std::sort(cut.ids[r].begin(), cut.ids[r].end()); });
  return cut;
}

std::vector<std::vector<char>> exchange(MPI_Comm comm, const std::vector<std::vector<char>>& out, DistributedStats* st) {
  const int ranks = static_cast<int>(out.size());
  std::vector<int> send(static_cast<std::size_t>(ranks)), recv(send), sat(send), rat(send);
  std::uint64_t total = 0, in = 0;
  for (int r = 0; r < ranks; ++r) {
    total += out[static_cast<std::size_t>(r)].size();
    send[static_cast<std::size_t>(r)] = static_cast<int>(std::min<std::size_t>(out[static_cast<std::size_t>(r)].size(), INT_MAX));
  }
  check_mpi(MPI_Alltoall(send.data(), 1, MPI_INT, recv.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  for (int r = 0; r < ranks; ++r) in += static_cast<std::uint64_t>(recv[static_cast<std::size_t>(r)]);
  // MPI counts are ints: a rank over the limit stops every rank, not only itself (the others
  // would wait in MPI_Alltoallv for ever).
  const int over = total > static_cast<std::uint64_t>(INT_MAX) || in > static_cast<std::uint64_t>(INT_MAX);
  int any = 0;
  check_mpi(MPI_Allreduce(&over, &any, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce");
  if (any)
    throw Error("a rank's routed queries or results exceed one MPI message's " + std::to_string(INT_MAX) +
                " bytes (split the queries into several calls)");
  std::vector<char> flat(static_cast<std::size_t>(total));
  int at = 0;
  for (int r = 0; r < ranks; ++r) {
    sat[static_cast<std::size_t>(r)] = at;
    std::copy(out[static_cast<std::size_t>(r)].begin(), out[static_cast<std::size_t>(r)].end(), flat.begin() + at);
    at += send[static_cast<std::size_t>(r)];
  }
  at = 0;
  for (int r = 0; r < ranks; ++r) {
    rat[static_cast<std::size_t>(r)] = at;
    at += recv[static_cast<std::size_t>(r)];
  }
  std::vector<char> got(static_cast<std::size_t>(in));
  check_mpi(MPI_Alltoallv(flat.data(), send.data(), sat.data(), MPI_BYTE, got.data(), recv.data(), rat.data(), MPI_BYTE, comm),
            "MPI_Alltoallv");
  if (st) {
    st->bytes_moved += total + in;
    st->transport = "host memory";
  }
  std::vector<std::vector<char>> from(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    from[static_cast<std::size_t>(r)].assign(got.begin() + rat[static_cast<std::size_t>(r)],
                                             got.begin() + rat[static_cast<std::size_t>(r)] + recv[static_cast<std::size_t>(r)]);
  return from;
}

}  // namespace detail
}  // namespace distributed
}  // namespace canopy
