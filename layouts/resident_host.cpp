// The host side of a tree's one host copy (layouts/resident.hpp): TBB here, so that the CUDA
// file and the header need none.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include "layouts/resident.hpp"

namespace canopy {
namespace detail {

void run_side_by_side(const std::vector<std::function<void()>>& tasks) {
  tbb::parallel_for(std::size_t{0}, tasks.size(), [&](std::size_t i) { tasks[i](); });
}

// Pieces of 1 MiB: a chunk of the staging spreads over the cores, which is what moves a
// freshly allocated array's pages (a single memcpy ran at about 2 GB/s there).
void copy_on_cores(void* dst, const void* src, std::size_t bytes) {
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  const std::size_t pieces = (bytes + kPiece - 1) / kPiece;
  tbb::parallel_for(std::size_t{0}, pieces, [&](std::size_t p) {
    const std::size_t at = p * kPiece;
    std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, std::min(kPiece, bytes - at));
  });
}

}  // namespace detail
}  // namespace canopy
