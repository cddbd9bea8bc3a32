// A tree's arrays left in device memory by its GPU build, so that the engines read them in place
// and the tree makes its host copies only when a CPU path asks for them (PointTree). Each array
// goes by the name the tree's map_view gives it. CUDA-free; layouts/resident.cu holds the CUDA.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/device_buffer.hpp"

namespace canopy {
namespace detail {

class ResidentArrays;
// Runs the tasks on TBB's threads, side by side (layouts/resident_host.cpp).
void run_side_by_side(const std::vector<std::function<void()>>& tasks);
// memcpy spread over TBB's threads.
void copy_on_cores(void* dst, const void* src, std::size_t bytes);
// Copies between pageable host memory and device memory on `stream` through two page-locked
// slots, the link filling (or emptying) one while the host's cores empty (or fill) the other: a
// copy into or out of pageable memory runs at a fraction of the link's speed. Return when the
// copy is complete. `keep`: slots to use and keep (a builder's, for its next copies: each
// allocation costs milliseconds); else they are made for the copy and freed after it.
//
// The slots' blocks come from, and go back to, a process-wide pool of freed slot blocks (up to 8,
// each at most a slot's 8 MiB): cudaMallocHost and cudaFreeHost of one took milliseconds, which
// every new tree's build, engine and exact-pairs object paid at its first large copy (7 ms of a
// new tree's 50 ms query_pairs at 10^6 points, H200). A block goes back only once its copies are
// complete: every use is a Staging copy, which synchronises its stream before it returns.
class StagingSlots {
 public:
  StagingSlots() = default;
  StagingSlots(const StagingSlots&) = delete;
  StagingSlots& operator=(const StagingSlots&) = delete;
  StagingSlots(StagingSlots&&) noexcept = default;  // (PinnedMemory moves by swapping)
  StagingSlots& operator=(StagingSlots&&) noexcept = default;
  ~StagingSlots();
  // Both slots hold at least `bytes`: their own blocks, else the pool's, else new ones.
  void reserve(std::size_t bytes, const char* what);
  PinnedMemory& operator[](int i) { return slots_[static_cast<std::size_t>(i)]; }

 private:
  std::array<PinnedMemory, 2> slots_;
};
void staged_to_host(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep = nullptr);
void staged_to_device(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep = nullptr);
// Below this many bytes a plain copy is as fast (the slots' allocation is not free).
constexpr std::size_t kStagedCopyMin = std::size_t{16} << 20;
// A build's copy of pageable host memory up (its points) or down (its nodes) on `stream`: staged
// from kStagedCopyMin bytes on (returning when it is complete), a plain copy below.
void copy_up(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep);
void copy_down(void* dst, const void* src, std::size_t bytes, stream_t stream, StagingSlots* keep);
// The arrays for a builder's next tree: `last`'s when no layout holds them any longer (a
// simulation's rebuilds then allocate nothing), else new ones.
std::shared_ptr<ResidentArrays> next_resident(std::shared_ptr<ResidentArrays>& last);

class ResidentArrays {
 public:
  ResidentArrays() = default;
  ResidentArrays(const ResidentArrays&) = delete;
  ResidentArrays& operator=(const ResidentArrays&) = delete;
  // Waits for the device before freeing: an engine's kernels may still read the arrays.
  ~ResidentArrays();

  // Makes arrays no layout holds any longer ready for a rebuild's add()s: waits for the device,
  // which may still be reading them.
  void reuse();
  // Device memory for `bytes` under `name`, ready for use on `stream` (the build's); an array of
  // that name already here is kept when large enough, else grown with a quarter to spare.
  void* add(const std::string& name, std::size_t bytes, stream_t stream);
  // The array named `name`; an error naming it if there is none.
  const void* find(const std::string& name) const;
  // One array's host copy: its first `bytes` into `dst`.
  struct Download {
    const char* name;
    void* dst;
    std::size_t bytes;
  };
  // Copies the arrays to host memory through page-locked staging, the device filling one chunk
  // while the host empties the one before (a copy into pageable memory runs at a fraction of
  // the link's speed); returns when all are there.
  void download(const std::vector<Download>& copies) const;
  std::size_t bytes(const std::string& name) const;
  std::size_t bytes() const { return bytes_; }

 private:
  struct Array {
    DeviceMemory memory;
    std::size_t bytes = 0;
  };
  std::map<std::string, Array> arrays_;
  std::size_t bytes_ = 0;
};

// What a layout left on the device by its GPU build shares (PointTree, Octree), as a base of the
// layout `Tree`, whose map_view lists its arrays: the resident arrays, and the host copies made
// on first use. The layout's host vectors are `mutable` for that one fill; it hands them out
// through host(), which fetches first. Copying such a layout makes the host copies first.
template <class Tree>
class DeviceResident {
 public:
  // Whether the arrays are in device memory (a GPU build's), and whether the host has them all.
  bool on_device() const { return resident_ != nullptr; }
  bool host_ready() const { return !resident_ || fetch_->done.load(std::memory_order_acquire); }
  // The device arrays (null unless on_device()), shared by the device copies the engines make.
  const std::shared_ptr<ResidentArrays>& resident() const { return resident_; }

 protected:
  DeviceResident() = default;
  DeviceResident(const DeviceResident& o) { adopt(o); }
  DeviceResident& operator=(const DeviceResident& o) {
    if (this != &o) adopt(o);
    return *this;
  }
  DeviceResident(DeviceResident&&) noexcept = default;
  DeviceResident& operator=(DeviceResident&&) noexcept = default;
  ~DeviceResident() = default;

  // Copies every array the host lacks from the device, once (thread-safe), in one download; or
  // (`only`) the one array of that name. Only CPU paths call it (a CPU call, count_nodes'
  // emulator, an accessor, a copy) and, for the nodes, a top-tree's cut: a GPU call reads the
  // arrays in place.
  void fetch_host(const char* only = nullptr) const {
    if (host_ready()) return;
    std::lock_guard<std::mutex> lock(fetch_->m);
    if (fetch_->done.load(std::memory_order_relaxed)) return;
    std::vector<ResidentArrays::Download> copies;
    std::vector<std::function<void()>> allocate;
    const Tree& tree = static_cast<const Tree&>(*this);
    tree.map_view([&](const auto& v, const char* what) {
      using T = std::decay_t<decltype(v[0])>;
      auto& out = const_cast<std::vector<T>&>(v);  // a mutable member
      if (out.empty() && (!only || std::strcmp(only, what) == 0)) {
        const std::size_t bytes = resident_->bytes(what);
        allocate.push_back([&out, bytes] { out.resize(bytes / sizeof(T)); });
        copies.push_back({what, nullptr, bytes});
      }
      return static_cast<const T*>(nullptr);
    });
    try {
      // A fresh array's first touch (its pages, zeroed) costs as much as the copy: the arrays
      // are allocated side by side.
      run_side_by_side(allocate);
      tree.map_view([&](const auto& v, const char* what) {
        for (auto& c : copies)
          if (std::strcmp(c.name, what) == 0) c.dst = const_cast<void*>(static_cast<const void*>(v.data()));
        return static_cast<const std::decay_t<decltype(v[0])>*>(nullptr);
      });
      resident_->download(copies);
    } catch (...) {
      // A later fetch copies only what is empty: leave nothing allocated or half copied.
      tree.map_view([&](const auto& v, const char* what) {
        using T = std::decay_t<decltype(v[0])>;
        auto& out = const_cast<std::vector<T>&>(v);
        for (const auto& c : copies)
          if (std::strcmp(c.name, what) == 0) std::vector<T>().swap(out);
        return static_cast<const T*>(nullptr);
      });
      throw;
    }
    if (!only) fetch_->done.store(true, std::memory_order_release);
  }
  // One of the layout's host arrays for an accessor: copied from the device first where needed.
  template <class T>
  const std::vector<T>& host(const std::vector<T>& array) const {
    fetch_host();
    return array;
  }
  // The layout's view of what is on the host now, copying nothing: null for the arrays of a
  // layout on the device that have not been copied yet. Under the fetch's lock: another thread's
  // fetch_host() may be filling those arrays.
  auto host_part_view() const {
    auto part = [this] {
      return static_cast<const Tree&>(*this).map_view(
          [](const auto& v, const char*) { return v.empty() ? nullptr : v.data(); });
    };
    if (!fetch_) return part();
    std::lock_guard<std::mutex> lock(fetch_->m);
    return part();
  }
  // After a GPU build has filled `resident` (and the arrays the host gets at once): the layout
  // is on the device; `count` is its number of points or bodies.
  void keep_on_device(std::shared_ptr<ResidentArrays> resident, index_t count) {
    resident_ = std::move(resident);
    count_ = count;
    fetch_ = std::make_shared<HostFetch>();
  }
  index_t resident_count() const { return count_; }

 private:
  struct HostFetch {
    std::mutex m;
    std::atomic<bool> done{false};
  };
  // A copy: the source's host arrays first (the layout copies them after this base).
  void adopt(const DeviceResident& o) {
    o.fetch_host();
    resident_ = o.resident_;
    count_ = o.count_;
    fetch_ = resident_ ? std::make_shared<HostFetch>() : nullptr;
    if (fetch_) fetch_->done = true;
  }

  std::shared_ptr<ResidentArrays> resident_;
  index_t count_ = 0;
  std::shared_ptr<HostFetch> fetch_;
};

}  // namespace detail
}  // namespace canopy
