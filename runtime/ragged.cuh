// Ragged results on the GPU (runtime/ragged.hpp has the contract and the CPU path): the count
// pass through the engine's GPU run (runtime/engine.cuh), CUB's exclusive scan of the counts into
// the offsets, the fill pass over the count pass's schedule and CUB's segmented sort, in batches
// of queries when the items do not fit the device beside what the call holds. Include from .cu
// files only.
//
//   canopy::RaggedTraverser t;                        // threads may share it (calls take turns)
//   canopy::RaggedOptions opt;                        // the traversal's options; opt.sort
//   canopy::RaggedResult<Item> r = t.run(tree.view(), dtree.view(), my_ragged_visitor, n, opt);
//   // r.offsets[n + 1], r.items: query q's items at r.items[r.offsets[q] .. r.offsets[q + 1])
#pragma once

#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <chrono>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda.cuh"
#include "core/device.hpp"
#include "runtime/engine.cuh"
#include "runtime/ragged.hpp"

namespace canopy {
namespace detail {

// out[i] = in[i] - shift: a batch's segment offsets, from its first item.
template <class T>
__global__ void ragged_shift_kernel(const T* in, T* out, index_t n, T shift) {
  const index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] - shift;
}

// The count pass's GPU side: the engine's GPU run over the caller's device tree, on the ragged
// call's stream (which the call syncs once, at its end). fixed: the device bytes the call's data
// holds beside the scheduling matrix.
template <class W>
class RaggedCountPart final : public GpuPart<W> {
 public:
  RaggedCountPart(GpuResources& g, const typename W::View& device, std::size_t fixed)
      : g_(g), device_(device), fixed_(fixed) {}
  std::size_t tree_bytes() const override { return fixed_; }
  stream_t stream() const override { return g_.stream.get(); }
  void run(const W& w, const typename W::View& host, const CallData& call, const TraversalOptions& opt,
           TraversalStats& st) override {
    run_on_gpu(g_, w, host, device_, call, opt, DeviceFootprint{fixed_, 0}, st);
  }

 private:
  GpuResources& g_;
  const typename W::View& device_;
  std::size_t fixed_;
};

// One ragged call on the GPU at a time, with the stream, the engine's state and the buffers it
// keeps from call to call (a call of the same sizes allocates nothing).
class RaggedGpu {
 public:
  cudaStream_t stream() const { return g_.stream.get(); }

  // host / device: the topology with host pointers (the top-tree is cut there) and device
  // pointers; v: the ragged visitor with device pointers. fixed_bytes: what the caller's data
  // holds on the device (counted against opt.memory_budget); fresh_tree: the caller may pass
  // another tree each call, so nothing cut from the last one is kept. offsets[n + 1] and the
  // items may be host or device memory.
  template <class Topology, class V>
  RaggedStats run(const Topology& host, const Topology& device, const V& v, index_t n, const RaggedOptions& opt,
                  const char* who, std::size_t fixed_bytes, bool fresh_tree, index_t* offsets,
                  const ItemBuffer<typename V::Item>& items) {
    using W = RaggedCountWorkload<Topology, V>;
    const auto start = std::chrono::steady_clock::now();
    check_gpu_call(who, n, offsets, opt);
    if (fresh_tree) {
      g_.forget_top_tree();
      state_.top_leaves.clear();
    }
    const cudaStream_t s = stream();
    RaggedStats st;
    {
      // Its destructor, at the end of this block or on an error, makes the caller's stream wait.
      const CallerStream caller(s, opt.stream, g_.caller_ready, g_.done);
      counts_.reserve(static_cast<std::size_t>(n) + 1, "the ragged counts", s);
      const W w{v, who, counts_.get()};
      RaggedCountPart<W> part(g_, device, fixed_bytes);
      CallData call;
      call.n = n;
      static_cast<TraversalStats&>(st) = run_call(w, host, Device::Gpu, &part, state_, call, count_pass_options(opt));
      const index_t* off = scan(n, offsets, st);
      typename V::Item* out = items(st.total);
      check_item_buffer(who, out, st.total);
      fill(device, v, n, opt, who, fixed_bytes, off, offsets, out, st);
    }
    g_.stream.sync();
    if (!opt.keep_schedule) st.schedule = Schedule{};
    st.wall_ms = ms_since(start);
    return st;
  }

 private:
  static void check_gpu_call(const char* who, index_t n, const index_t* offsets, const RaggedOptions& opt) {
    check_ragged_call(who, n, offsets);
    const std::string name(who);
    if (opt.device == Device::Cpu)
      throw Error(name + ": device cpu was requested of a GPU call; the visitor holds device pointers");
    if (opt.count_nodes)
      throw Error(name + ": count_nodes runs the CPU warp emulator, which needs host pointers; use gpu_count_nodes");
    if (n >= std::numeric_limits<std::int32_t>::max())
      throw Error(name + ": n_queries = " + std::to_string(n) + " is more than one GPU call takes (2^31 - 2); split it");
  }

  // counts_[0 .. n) -> offsets[0 .. n] on the device (the caller's when in device memory);
  // st.total from the last.
  const index_t* scan(index_t n, index_t* offsets, RaggedStats& st) {
    const cudaStream_t s = stream();
    index_t* off = offsets;
    if (!is_device_pointer(offsets)) {
      offsets_.reserve(static_cast<std::size_t>(n) + 1, "the ragged offsets", s);
      off = offsets_.get();
    }
    CANOPY_CUDA_CHECK(cudaMemsetAsync(counts_.get() + n, 0, sizeof(index_t), s));
    st.scan_ms = g_.time([&] {
      run_cub("cub::DeviceScan::ExclusiveSum (the ragged offsets)", temp_, "the ragged scan's scratch space", s,
              [&](void* t, std::size_t& bytes) {
                return cub::DeviceScan::ExclusiveSum(t, bytes, counts_.get(), off, static_cast<int>(n + 1), s);
              });
    });
    copy_to_host(&st.total, off + n, 1, s);
    g_.stream.sync();
    return off;
  }

  // The fill pass (and the sort, and the copies to host memory) in batches of queries whose
  // items fit beside what the call holds; caller_offsets gets the offsets when in host memory.
  template <class Topology, class V>
  void fill(const Topology& device, const V& v, index_t n, const RaggedOptions& opt, const char* who,
            std::size_t fixed_bytes, const index_t* off, index_t* caller_offsets, typename V::Item* out,
            RaggedStats& st) {
    using Item = typename V::Item;
    const cudaStream_t s = stream();
    const bool host_offsets = off != caller_offsets;
    const bool sort = opt.sort && st.total > 0;
    if (sort && !std::is_arithmetic_v<Item>) throw Error(std::string(who) + ": sort needs an arithmetic item type");
    Batches b;
    b.device_items = st.total > 0 && is_device_pointer(out);
    // Device bytes per item: the host items' staging, the sort's second buffer.
    const std::size_t item_bytes = (b.device_items ? 0 : sizeof(Item)) + (sort ? sizeof(Item) : 0);
    // Beside the items: the caller's data, and per query the counts, offsets, order and segments.
    const std::size_t used = fixed_bytes + (static_cast<std::size_t>(n) + 1) * 4 * sizeof(index_t);
    const index_t capacity = ragged_batch_capacity(opt.memory_budget, used,
                                                   opt.memory_budget ? 0 : gpu_free_memory(), item_bytes);
    std::vector<index_t> staged;
    const index_t* order = fill_order(st);
    b.bounds = {0, n};
    if (st.total > capacity) {
      if (host_offsets) {
        st.copy_ms += g_.time([&] { copy_to_host(caller_offsets, off, static_cast<std::size_t>(n) + 1, s); });
        b.offsets = caller_offsets;
      } else {
        staged.resize(static_cast<std::size_t>(n) + 1);
        copy_to_host(staged.data(), off, staged.size(), s);
        g_.stream.sync();
        b.offsets = staged.data();
      }
      b.bounds = ragged_batches(b.offsets, n, capacity, item_bytes, who);
      b.order = split_order(order, n, b.bounds);
      order = b.order.data();
    }
    mismatch_.reserve(1, "the ragged pass check", s);
    CANOPY_CUDA_CHECK(cudaMemsetAsync(mismatch_.get(), 0, sizeof(int), s));
    for (std::size_t i = 0; i + 1 < b.bounds.size(); ++i) {
      const index_t a = b.bounds[i], e = b.bounds[i + 1];
      if (a == e) continue;
      const index_t first = b.offsets ? b.offsets[a] : 0, last = b.offsets ? b.offsets[e] : st.total;
      fill_batch(device, v, a, e, first, last, order ? order + a : nullptr, off, out, b.device_items, sort, st);
    }
    st.fill_batches = n > 0 ? static_cast<index_t>(b.bounds.size()) - 1 : 0;
    int mismatch = 0;
    copy_to_host(&mismatch, mismatch_.get(), 1, s);
    g_.stream.sync();
    if (mismatch) throw_pass_mismatch(who);
    if (host_offsets && !b.offsets)
      st.copy_ms += g_.time([&] { copy_to_host(caller_offsets, off, static_cast<std::size_t>(n) + 1, s); });
  }

  struct Batches {
    std::vector<index_t> bounds;       // query boundaries of the batches
    std::vector<index_t> order;        // the order regrouped by batch (several batches)
    const index_t* offsets = nullptr;  // host offsets (several batches)
    bool device_items = false;
  };

  // Queries a .. e - 1 (their items first .. last - 1), run in `order` (host; null: a .. e - 1).
  template <class Topology, class V>
  void fill_batch(const Topology& device, const V& v, index_t a, index_t e, index_t first, index_t last,
                  const index_t* order, const index_t* off, typename V::Item* out, bool device_items, bool sort,
                  RaggedStats& st) {
    using Item = typename V::Item;
    const cudaStream_t s = stream();
    const index_t nb = e - a, m = last - first;
    const std::size_t items = static_cast<std::size_t>(m);
    Item* buf = out + first;
    if (!device_items) {
      staging_.reserve(items * sizeof(Item), "the ragged items' staging buffer", s);
      buf = reinterpret_cast<Item*>(staging_.get());
    }
    const index_t* d_order = nullptr;
    if (order) {
      order_.reserve(static_cast<std::size_t>(nb), "the ragged fill's order", s);
      copy_to_device(order_.get(), order, static_cast<std::size_t>(nb), s);
      d_order = order_.get();
    }
    RaggedFill<V> f;
    f.inner = v;
    f.offsets = off;
    f.items = buf;
    f.shift = first;
    f.first = order ? 0 : a;
    f.mismatch = mismatch_.get();
    st.fill_ms += g_.time([&] { gpu::launch_executor(st.executor_kind, device, f, d_order, nb, nullptr, s); });
    Item* result = buf;
    if constexpr (std::is_arithmetic_v<Item>) {
      if (sort && m > 0) result = sort_batch(buf, off + a, nb, first, m, st);
    }
    if (m == 0) return;  // (a null item buffer when the total is 0)
    if (!device_items)
      st.copy_ms += g_.time([&] { copy_to_host(out + first, result, items, s); });
    else if (result != buf)
      copy_device_to_device(buf, result, items, s);
  }

  // Each of the batch's nb queries' items sorted (CUB's segmented sort over two buffers);
  // returns the buffer that holds them.
  template <class Item>
  Item* sort_batch(Item* buf, const index_t* off, index_t nb, index_t first, index_t m, RaggedStats& st) {
    const cudaStream_t s = stream();
    local_.reserve(static_cast<std::size_t>(nb) + 1, "the ragged sort's segments", s);
    const unsigned blocks = static_cast<unsigned>((nb + 1 + 255) / 256);
    ragged_shift_kernel<<<blocks, 256, 0, s>>>(off, local_.get(), nb + 1, first);
    CANOPY_CUDA_CHECK_LAUNCH("ragged_shift_kernel");
    alt_.reserve(static_cast<std::size_t>(m) * sizeof(Item), "the ragged sort's second buffer", s);
    cub::DoubleBuffer<Item> keys(buf, reinterpret_cast<Item*>(alt_.get()));
    st.sort_ms += g_.time([&] {
      run_cub("cub::DeviceSegmentedSort::SortKeys (the ragged items)", temp_, "the ragged sort's scratch space", s,
              [&](void* t, std::size_t& bytes) {
                return cub::DeviceSegmentedSort::SortKeys(t, bytes, keys, static_cast<int>(m), static_cast<int>(nb),
                                                          local_.get(), local_.get() + 1, s);
              });
    });
    return keys.Current();
  }

  GpuResources g_;  // first: its stream frees the buffers below
  EngineState state_;
  DeviceBuffer<index_t> counts_, offsets_, order_, local_;
  DeviceBuffer<unsigned char> staging_, alt_, temp_;
  DeviceBuffer<int> mismatch_;
};

}  // namespace detail

// Runs ragged visitors (runtime/ragged.hpp) on the GPU, on its own non-blocking stream with
// buffers kept from run to run. Several host threads may call one RaggedTraverser at once: its
// calls take turns on its lock.
class RaggedTraverser {
 public:
  RaggedTraverser() {
    if (!gpu_available()) throw Error("canopy::RaggedTraverser needs a CUDA device: " + gpu_description());
  }
  cudaStream_t stream() const { return core_.stream(); }

  // host_tree: the topology with host pointers (the top-tree is cut on the host); device_tree:
  // the same tree with device pointers; v: the ragged visitor with device pointers. Every
  // schedule (LeafSort where the visitor has a sort key), the pipeline, depth auto and
  // opt.stream work as for Traverser::run; the count pass is re-runnable whatever the visitor,
  // so Auto and depth auto trial it. offsets[n_queries + 1] and the items (`items(total)`) may
  // be host or device memory. Items that do not fit the device (opt.memory_budget, else the
  // free memory) beside the call's data are filled in batches of queries; one query's items
  // that do not fit alone are an OutOfMemory naming their size. count_nodes is an error (the CPU
  // emulator needs host pointers).
  template <class Topology, class V>
  RaggedStats run(const Topology& host_tree, const Topology& device_tree, const V& v, index_t n_queries,
                  const RaggedOptions& opt, index_t* offsets, const ItemBuffer<typename V::Item>& items) {
    const std::lock_guard<std::mutex> lock(mutex_);
    return core_.run(host_tree, device_tree, v, n_queries, opt, "RaggedTraverser::run", 0, true, offsets, items);
  }
  // The same into host vectors.
  template <class Topology, class V>
  RaggedResult<typename V::Item> run(const Topology& host_tree, const Topology& device_tree, const V& v,
                                     index_t n_queries, const RaggedOptions& opt = {}) {
    return detail::into_vectors<typename V::Item>(n_queries, "RaggedTraverser::run", [&](index_t* offsets, const auto& items) {
      return run(host_tree, device_tree, v, n_queries, opt, offsets, items);
    });
  }

 private:
  detail::RaggedGpu core_;
  std::mutex mutex_;  // one run() at a time
};

}  // namespace canopy
