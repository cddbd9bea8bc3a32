// One list of a layout's arrays serves its host view, its device copy and its footprint: a
// layout (tree or forest) writes `template <class Map> View map_view(Map&& map) const`, in which
// map(vector, "what") returns the pointer its view holds for that vector. The host view maps each
// vector to its data, a device copy (layouts/device_copy.hpp) to an uploaded copy, and
// array_bytes() adds up the sizes.
#pragma once

#include <cstddef>
#include <vector>

namespace canopy {

// The host view: each array where it is.
struct HostArrays {
  template <class T>
  const T* operator()(const std::vector<T>& v, const char* /*what*/) const {
    return v.data();
  }
};

// Bytes of every array a layout lists.
template <class Layout>
std::size_t array_bytes(const Layout& layout) {
  std::size_t total = 0;
  layout.map_view([&total](const auto& v, const char* /*what*/) {
    total += v.size() * sizeof(v[0]);
    return v.data();
  });
  return total;
}

}  // namespace canopy
