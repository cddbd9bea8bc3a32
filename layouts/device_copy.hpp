// A layout's arrays copied to device memory, with the view that points at them: what kernels
// walk. Built from any layout with map_view (layouts/arrays.hpp): the kd, ball and vp trees,
// the octree, the forest layouts. CUDA-free. The copies are made and, when it is destroyed,
// freed on `stream`, which must outlive this object.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "layouts/arrays.hpp"
#include "layouts/resident.hpp"

namespace canopy {

namespace detail {
// A layout's arrays already in device memory (a tree its GPU build left there), or null.
template <class Layout>
auto resident_arrays(const Layout& layout, int) -> decltype(layout.resident()) {
  return layout.resident();
}
template <class Layout>
std::shared_ptr<ResidentArrays> resident_arrays(const Layout&, long) {
  return nullptr;
}
}  // namespace detail

template <class Layout>
class DeviceCopy {
 public:
  using View = decltype(std::declval<const Layout&>().view());

  // A layout already on the device is not copied: the view points at its arrays, which this
  // object shares.
  DeviceCopy(const Layout& layout, stream_t stream) {
    resident_ = detail::resident_arrays(layout, 0);
    if (resident_) {
      view_ = layout.map_view([&](const auto& v, const char* what) {
        using T = std::decay_t<decltype(v[0])>;
        return static_cast<const T*>(resident_->find(what));
      });
      bytes_ = resident_->bytes();
      return;
    }
    view_ = layout.map_view([&](const auto& v, const char* what) {
      using T = std::decay_t<decltype(v[0])>;
      detail::DeviceMemory& m = arrays_.emplace_back();
      m.reserve(v.size() * sizeof(T), what, stream);
      copy_async(m.get(), v.data(), v.size() * sizeof(T), stream);
      bytes_ += v.size() * sizeof(T);
      return static_cast<const T*>(m.get());
    });
  }
  const View& view() const { return view_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::vector<detail::DeviceMemory> arrays_;
  std::shared_ptr<detail::ResidentArrays> resident_;
  View view_;
  std::size_t bytes_ = 0;
};

}  // namespace canopy
