// SpatialOrder (scheduler/spatial_order.hpp): the order against a plain stable sort of each
// query's cell found by walking the tree itself, rows gathered and scattered by it, and the GPU's
// order and moves against the host's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/device.hpp"
#include "layouts/kdtree.hpp"
#include "scheduler/spatial_order.hpp"
#include "tests/require_gpu.hpp"
#include "tests/spatial_reference.hpp"
#include "tests/stream_probe.hpp"

namespace canopy {
namespace {

std::vector<float> clustered(index_t n, int dims, unsigned seed) { return test::blob_points(n, dims, seed, 0.03f, 50); }

TEST(SpatialOrder, IsTheStableSortOfTheTreesTopCells) {
  const int dims = 3;
  const std::vector<float> p = clustered(5000, dims, 3);
  const KdTree tree = KdTree::build(p.data(), 5000, dims);
  // Queries elsewhere than the points, some on the split planes themselves (ties go left).
  std::vector<float> q = clustered(4000, dims, 9);
  std::copy(p.begin(), p.begin() + 300 * dims, q.begin());
  const index_t n = 4000;
  SpatialOrder order;
  for (int depth : {1, 3, 8, tree.height() - 1, SpatialOrder::kMaxDepth}) {
    SCOPED_TRACE(depth);
    order.compute(tree, depth, q.data(), n);
    EXPECT_FALSE(order.on_device());
    EXPECT_EQ(order.host_order(), test::stable_by_cell(tree, q.data(), n, depth));
    for (index_t i = 0; i < n; i += 37) EXPECT_EQ(order.cell(q.data() + i * dims), test::cell_by_walk(tree.view(), q.data() + i * dims, depth));
  }
  // Past the tree's height every branch has ended: the deepest cells are the leaves' runs.
  EXPECT_GT(SpatialOrder::kMaxDepth, tree.height());
}

TEST(SpatialOrder, CountingSortBlocksKeepInputOrder) {
  // More queries than one counting block (65,536), all in few cells: stability across blocks.
  const int dims = 2;
  const std::vector<float> p = clustered(2000, dims, 5);
  const KdTree tree = KdTree::build(p.data(), 2000, dims);
  std::vector<float> q = clustered(200000, dims, 6);
  SpatialOrder order;
  order.compute(tree, 2, q.data(), 200000);
  EXPECT_EQ(order.host_order(), test::stable_by_cell(tree, q.data(), 200000, 2));
}

TEST(SpatialOrder, GatherAndScatterMoveRowsByPosition) {
  const int dims = 3;
  const std::vector<float> p = clustered(3000, dims, 7);
  const KdTree tree = KdTree::build(p.data(), 3000, dims);
  SpatialOrder order;
  order.compute(tree, 6, p.data(), 3000);
  const std::vector<index_t>& ids = order.host_order();
  std::vector<float> rows(300 * dims);
  order.gather(p.data(), dims * sizeof(float), 1000, 300, rows.data());
  for (index_t j = 0; j < 300; ++j)
    for (int d = 0; d < dims; ++d)
      ASSERT_EQ(rows[static_cast<std::size_t>(j * dims + d)], p[static_cast<std::size_t>(ids[1000 + j] * dims + d)]);
  std::vector<index_t> back(3000, -1), mine(300);
  std::iota(mine.begin(), mine.end(), 1000);
  order.scatter(mine.data(), sizeof(index_t), 1000, 300, back.data());
  for (index_t j = 0; j < 300; ++j) EXPECT_EQ(back[static_cast<std::size_t>(ids[1000 + j])], 1000 + j);
  EXPECT_EQ(std::count(back.begin(), back.end(), -1), 2700);
}

TEST(SpatialOrder, RefusesBadArguments) {
  const std::vector<float> p = clustered(100, 2, 1);
  const KdTree tree = KdTree::build(p.data(), 100, 2);
  SpatialOrder order;
  EXPECT_THROW(order.compute(tree, 0, p.data(), 100), Error);
  EXPECT_THROW(order.compute(tree, SpatialOrder::kMaxDepth + 1, p.data(), 100), Error);
  order.compute(tree, 3, p.data(), 100);
  std::vector<float> out(200);
  EXPECT_THROW(order.gather(p.data(), 8, 90, 20, out.data()), Error);  // past the end
  EXPECT_THROW(order.gather(p.data(), 6, 0, 10, out.data()), Error);   // not whole words
  order.compute(tree, 3, p.data(), 0);
  EXPECT_TRUE(order.host_order().empty());
}

TEST(SpatialOrderGpu, EqualsTheHostOrderAndMovesRowsBetweenEveryMemoryKind) {
  CANOPY_REQUIRE_GPU();
  const int dims = 3;
  const std::vector<float> p = clustered(20000, dims, 11);
  const KdTree tree = KdTree::build(p.data(), 20000, dims);
  const std::vector<float> q = clustered(150000, dims, 12);
  const index_t n = 150000;
  SpatialOrder host, dev;
  host.compute(tree, 10, q.data(), n);
  const std::size_t qbytes = q.size() * sizeof(float);
  float* dq = static_cast<float*>(test::device_alloc(qbytes));
  copy_memory(dq, q.data(), qbytes);
  dev.compute(tree, 10, dq, n);
  EXPECT_TRUE(dev.on_device());
  EXPECT_EQ(dev.host_order(), host.host_order());
  // Gather positions [5000, 65000) from device queries into host and device rows; both orders.
  const index_t begin = 5000, count = 60000;
  const std::size_t rb = dims * sizeof(float), cbytes = static_cast<std::size_t>(count) * rb;
  std::vector<float> want(static_cast<std::size_t>(count) * dims), got(want.size());
  host.gather(q.data(), rb, begin, count, want.data());
  float* drows = static_cast<float*>(test::device_alloc(cbytes));
  for (SpatialOrder* o : {&host, &dev}) {
    o->gather(dq, rb, begin, count, got.data());
    EXPECT_EQ(got, want);
    o->gather(dq, rb, begin, count, drows);
    std::fill(got.begin(), got.end(), 0.0f);
    copy_memory(got.data(), drows, cbytes);
    EXPECT_EQ(got, want);
    // Host queries into device rows.
    o->gather(q.data(), rb, begin, count, drows);
    copy_memory(got.data(), drows, cbytes);
    EXPECT_EQ(got, want);
  }
  // Scatter back into a full device array from host and device rows.
  float* dfull = static_cast<float*>(test::device_alloc(qbytes));
  std::vector<float> full(q.size());
  for (SpatialOrder* o : {&host, &dev})
    for (bool rows_on_device : {false, true}) {
      std::vector<float> zero(q.size(), 0.0f);
      copy_memory(dfull, zero.data(), qbytes);
      copy_memory(drows, want.data(), cbytes);
      o->scatter(rows_on_device ? static_cast<const void*>(drows) : want.data(), rb, begin, count, dfull);
      copy_memory(full.data(), dfull, qbytes);
      const std::vector<index_t>& ids = host.host_order();
      std::vector<char> moved(static_cast<std::size_t>(n), 0);
      for (index_t j = begin; j < begin + count; ++j) moved[static_cast<std::size_t>(ids[static_cast<std::size_t>(j)])] = 1;
      for (index_t i = 0; i < n; ++i)
        for (int d = 0; d < dims; ++d)
          ASSERT_EQ(full[static_cast<std::size_t>(i * dims + d)],
                    moved[static_cast<std::size_t>(i)] ? q[static_cast<std::size_t>(i * dims + d)] : 0.0f)
              << i << " " << rows_on_device;
    }
  test::device_free(dfull);
  test::device_free(drows);
  test::device_free(dq);
}

}  // namespace
}  // namespace canopy
