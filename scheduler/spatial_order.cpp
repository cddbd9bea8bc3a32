#include "scheduler/spatial_order.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "core/device.hpp"
#include "scheduler/spatial_order_gpu.hpp"

namespace canopy {

SpatialOrder::SpatialOrder() = default;
SpatialOrder::~SpatialOrder() = default;

SpatialOrder::Gpu& SpatialOrder::gpu() const {
  if (!gpu_) gpu_ = std::make_unique<Gpu>();
  return *gpu_;
}

std::uint32_t SpatialOrder::cell(const float* q) const { return spatial_cell(dim_.data(), value_.data(), depth_, q); }

void SpatialOrder::compute(const KdTree& tree, int depth, const float* queries, index_t n, stream_t after) {
  if (depth < 1 || depth > kMaxDepth)
    throw Error("spatial order: depth " + std::to_string(depth) + " is outside 1.." + std::to_string(kMaxDepth));
  if (n < 0) throw Error("spatial order: " + std::to_string(n) + " queries");
  const KdTreeView v = tree.view();
  depth_ = depth;
  dims_ = v.dims;
  n_ = n;
  host_ready_ = false;
  // The heap's slots below a leaf stay dimension -1: their queries all go left.
  const std::size_t slots = std::size_t{1} << depth;
  dim_.assign(slots, -1);
  value_.assign(slots, 0.0f);
  std::vector<std::pair<std::uint32_t, node_id>> level{{1u, 0}};
  for (int l = 0; l < depth && !level.empty(); ++l) {
    std::vector<std::pair<std::uint32_t, node_id>> next;
    for (const auto& [h, node] : level) {
      if (v.is_leaf(node)) continue;
      const int d = v.nodes[node].split_dim;
      dim_[h] = d;
      value_[h] = v.hi(node + 1)[d];
      if (l + 1 < depth) {
        next.emplace_back(2 * h, v.child(node, 0));
        next.emplace_back(2 * h + 1, v.child(node, 1));
      }
    }
    level.swap(next);
  }
  device_ = n > 0 && is_device_pointer(queries);
  if (device_) {
    gpu().sort(dim_, value_, depth_, dims_, queries, n, after);
    return;
  }
  // A stable counting sort: per block of queries a count per cell, the blocks' offsets per cell
  // in block order, then each block files its queries in input order.
  const std::size_t cells = slots;
  std::vector<std::uint32_t> key(static_cast<std::size_t>(n));
  const index_t blocks = std::max<index_t>(1, std::min<index_t>(64, n / 65536));
  const index_t per = (n + blocks - 1) / std::max<index_t>(blocks, 1);
  std::vector<index_t> count(static_cast<std::size_t>(blocks) * cells, 0);
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    index_t* c = count.data() + b * cells;
    for (index_t i = b * per; i < std::min(n, (b + 1) * per); ++i) {
      key[static_cast<std::size_t>(i)] = cell(queries + i * dims_);
      ++c[key[static_cast<std::size_t>(i)]];
    }
  });
  index_t at = 0;
  for (std::size_t c = 0; c < cells; ++c)
    for (index_t b = 0; b < blocks; ++b) {
      const index_t k = count[b * cells + c];
      count[b * cells + c] = at;
      at += k;
    }
  host_order_.resize(static_cast<std::size_t>(n));
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    index_t* c = count.data() + b * cells;
    for (index_t i = b * per; i < std::min(n, (b + 1) * per); ++i)
      host_order_[static_cast<std::size_t>(c[key[static_cast<std::size_t>(i)]]++)] = i;
  });
  host_ready_ = true;
}

const std::vector<index_t>& SpatialOrder::host_order() const {
  if (!host_ready_) {
    host_order_.resize(static_cast<std::size_t>(n_));
    gpu_->download_order(host_order_.data(), n_);
    host_ready_ = true;
  }
  return host_order_;
}

void* SpatialOrder::buffer(int slot, std::size_t bytes, bool device) {
  if (slot < 0 || slot > 3) throw Error("spatial order: buffer slot " + std::to_string(slot));
  if (device) {
    return gpu().buffer(slot, bytes);
  }
  if (host_buffers_.size() < 4) host_buffers_.resize(4);
  std::vector<unsigned char>& b = host_buffers_[static_cast<std::size_t>(slot)];
  if (b.size() < bytes) b.resize(bytes);
  return b.data();
}

void SpatialOrder::gather(const void* full, std::size_t row_bytes, index_t begin, index_t count, void* compact,
                          stream_t after) const {
  move_rows(full, compact, row_bytes, begin, count, true, after);
}

void SpatialOrder::scatter(const void* compact, std::size_t row_bytes, index_t begin, index_t count, void* full,
                           stream_t after) const {
  move_rows(compact, full, row_bytes, begin, count, false, after);
}

void SpatialOrder::move_rows(const void* from, void* to, std::size_t row_bytes, index_t begin, index_t count,
                             bool gather, stream_t after) const {
  if (begin < 0 || count < 0 || begin + count > n_)
    throw Error("spatial order: positions " + std::to_string(begin) + ".." + std::to_string(begin + count - 1) +
                " of " + std::to_string(n_));
  if (row_bytes % 4 != 0) throw Error("spatial order: rows of " + std::to_string(row_bytes) + " bytes");
  if (count == 0 || row_bytes == 0) return;
  const void* full = gather ? from : to;
  const bool full_on_device = is_device_pointer(full);
  if (full_on_device) {
    // The permutation runs on the GPU; a compact array in host memory goes through the GPU's
    // scratch, and an order computed on the host goes up for the positions moved.
    const void* compact = gather ? to : from;
    gpu().move_rows(from, to, row_bytes, begin, count, gather, !is_device_pointer(compact),
                    device_ ? nullptr : host_order_.data() + begin, after);
    return;
  }
  const index_t* order = host_order().data() + begin;
  const std::size_t bytes = static_cast<std::size_t>(count) * row_bytes;
  const bool compact_on_device = is_device_pointer(gather ? to : from);
  // A compact array on the device is staged through host scratch, one copy.
  std::vector<unsigned char> staged(compact_on_device ? bytes : 0);
  if (compact_on_device && !gather) copy_memory(staged.data(), from, bytes, after);
  const unsigned char* src = static_cast<const unsigned char*>(compact_on_device && !gather ? staged.data() : from);
  unsigned char* dst = static_cast<unsigned char*>(compact_on_device && gather ? staged.data() : to);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, count, 4096), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t j = r.begin(); j < r.end(); ++j) {
      const std::size_t f = static_cast<std::size_t>(order[j]) * row_bytes, c = static_cast<std::size_t>(j) * row_bytes;
      if (gather)
        std::memcpy(dst + c, src + f, row_bytes);
      else
        std::memcpy(dst + f, src + c, row_bytes);
    }
  });
  if (compact_on_device && gather) copy_memory(to, staged.data(), bytes, after);
}

}  // namespace canopy
