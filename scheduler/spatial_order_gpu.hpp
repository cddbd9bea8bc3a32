// SpatialOrder's device side (scheduler/spatial_order_gpu.cu): its scratch memory, its stream,
// and the kernels behind compute(), gather() and scatter() for device memory. CUDA-free.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "scheduler/spatial_order.hpp"

namespace canopy {

struct SpatialOrder::Gpu {
  Gpu();
  ~Gpu();
  // The stable order of the device queries by their cell under the heap (dim, value) into the
  // device order; returns when it is done.
  void sort(const std::vector<std::int32_t>& dim, const std::vector<float>& value, int depth, int dims,
            const float* queries, index_t n, stream_t after);
  void download_order(index_t* host, index_t n);
  void* buffer(int slot, std::size_t bytes);
  // As SpatialOrder::move_rows with the full array in device memory; compact_on_host: the compact
  // array is host memory; host_order: the positions' query ids on the host where the order was
  // computed there (null: the device order).
  void move_rows(const void* from, void* to, std::size_t row_bytes, index_t begin, index_t count, bool gather,
                 bool compact_on_host, const index_t* host_order, stream_t after);

  struct State;
  std::unique_ptr<State> s;
};

}  // namespace canopy
