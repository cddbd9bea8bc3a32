// A layout's arrays copied to device memory, with the view that points at them: what kernels
// walk. Built from any layout with map_view (layouts/arrays.hpp): the kd, ball and vp trees,
// the octree, the forest layouts. CUDA-free. The copies are made and, when it is destroyed,
// freed on `stream`, which must outlive this object.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/device.hpp"
#include "core/device_buffer.hpp"
#include "layouts/arrays.hpp"

namespace canopy {

template <class Layout>
class DeviceCopy {
 public:
  using View = decltype(std::declval<const Layout&>().view());

  DeviceCopy(const Layout& layout, stream_t stream) {
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
  View view_;
  std::size_t bytes_ = 0;
};

}  // namespace canopy
