#include "layouts/octree.hpp"
#include "core/checks.hpp"
#include "core/device.hpp"
#include "layouts/octree_build.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

namespace canopy {
namespace detail {

void check_octree_arguments(const float* xyz, const float* mass, index_t n, const OctreeOptions& options) {
  if (n <= 0) throw Error("octree: the body set is empty (" + std::to_string(n) + " bodies)");
  if (xyz == nullptr) throw Error("octree: xyz is a null pointer");
  if (mass == nullptr) throw Error("octree: mass is a null pointer");
  if (options.leaf_size < 1)
    throw Error("octree: leaf_size = " + std::to_string(options.leaf_size) + " must be at least 1");
  if (options.max_depth < 1 || options.max_depth > OctreeView::kMaxDepth)
    throw Error("octree: max_depth = " + std::to_string(options.max_depth) + " is outside 1.." +
                std::to_string(OctreeView::kMaxDepth) + " (the rope-stack bound)");
}

namespace {
// v[i] wherever v lives.
float value_at(const float* v, index_t i, bool on_device) {
  if (!on_device) return v[i];
  float value = 0;
  copy_memory(&value, v + i, sizeof value);
  return value;
}
}  // namespace

void check_bodies(const float* xyz, const float* mass, index_t n, const OctreeOptions& options, BodyMemory where) {
  check_octree_arguments(xyz, mass, n, options);
  const index_t bad = where.xyz_on_device ? first_non_finite_on_device(xyz, n * 3) : first_non_finite(xyz, n * 3);
  if (bad < n * 3)
    throw Error("octree: body " + std::to_string(bad / 3) + " has a non-finite " + "xyz"[bad % 3] + " coordinate (" +
                std::to_string(value_at(xyz, bad, where.xyz_on_device)) + ")");
  const index_t bad_mass = where.mass_on_device ? first_non_finite_on_device(mass, n) : first_non_finite(mass, n);
  if (bad_mass < n)
    throw Error("octree: body " + std::to_string(bad_mass) + " has a non-finite mass (" +
                std::to_string(value_at(mass, bad_mass, where.mass_on_device)) + ")");
  index_t negative = n;
  if (where.mass_on_device) {
    negative = first_negative_on_device(mass, n);
  } else {
    for (index_t i = 0; i < n && negative == n; ++i)
      if (mass[i] < 0.0f) negative = i;
  }
  if (negative < n)
    throw Error("octree: body " + std::to_string(negative) + " has a negative mass (" +
                std::to_string(value_at(mass, negative, where.mass_on_device)) + ")");
}

Error too_many_nodes(index_t nodes) {
  return Error("octree: " + std::to_string(nodes) + " nodes exceed the 2^31 node limit; raise leaf_size");
}

Error too_many_coincident_bodies(index_t count) {
  return Error("octree: a leaf at the maximum depth holds " + std::to_string(count) +
               " coincident bodies, more than 2^31 - 1");
}

}  // namespace detail

namespace {

// Subtrees over at least this many bodies build their children as parallel tasks.
constexpr index_t kTaskGrain = 1 << 12;
// The partition of a large cell runs in chunks of this fixed size; a fixed size (not one per
// thread) keeps the stable order, and so the tree, independent of the thread count.
constexpr index_t kChunk = 1 << 14;

// A body as the builder moves it: coordinates and mass travel with the original index, so the
// partitions read contiguous memory rather than gathering from the input.
struct Rec {
  float x, y, z, m;
  index_t id;
};

// The pointer-linked tree of the first pass; the second pass flattens it once every subtree's
// size is known.
struct Cell {
  index_t begin = 0, end = 0;  // bodies, tree order
  double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  int depth = 0;
  std::vector<Cell> kids;  // non-empty octants, octant order
  double sum[4] = {0, 0, 0, 0};  // m x, m y, m z, m
  index_t nodes = 1;  // nodes in the subtree
  index_t links = 0;  // child_ids entries in the subtree
  int height = 1;
};

inline int octant_of(const Rec& r, const double* mid) { return detail::octant_of(r.x, r.y, r.z, mid); }

struct Builder {
  Rec* final_buf;  // where the tree-ordered bodies end up
  int leaf_size;
  int max_depth;

  // Stable counting-sort partition of src[begin, end) by octant into dst; counts per octant.
  static void partition(const Rec* src, Rec* dst, index_t begin, index_t end, const double* mid,
                        index_t (&counts)[8]) {
    const index_t n = end - begin;
    if (n < 2 * kChunk) {
      index_t off[8] = {};
      for (index_t i = begin; i < end; ++i) ++off[octant_of(src[i], mid)];
      for (int o = 0; o < 8; ++o) counts[o] = off[o];
      index_t run = begin;
      for (int o = 0; o < 8; ++o) {
        const index_t c = off[o];
        off[o] = run;
        run += c;
      }
      for (index_t i = begin; i < end; ++i) dst[off[octant_of(src[i], mid)]++] = src[i];
      return;
    }
    const index_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<index_t> hist(static_cast<std::size_t>(chunks) * 8, 0);
    tbb::parallel_for(tbb::blocked_range<index_t>(0, chunks, 1), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t c = r.begin(); c < r.end(); ++c) {
        const index_t b = begin + c * kChunk, e = std::min(end, b + kChunk);
        for (index_t i = b; i < e; ++i) ++hist[c * 8 + octant_of(src[i], mid)];
      }
    });
    // Octant-major, chunk-minor offsets: the same stable order the serial loop produces.
    index_t run = begin;
    for (int o = 0; o < 8; ++o) {
      counts[o] = 0;
      for (index_t c = 0; c < chunks; ++c) {
        const index_t h = hist[c * 8 + o];
        hist[c * 8 + o] = run;
        run += h;
        counts[o] += h;
      }
    }
    tbb::parallel_for(tbb::blocked_range<index_t>(0, chunks, 1), [&](const tbb::blocked_range<index_t>& r) {
      for (index_t c = r.begin(); c < r.end(); ++c) {
        const index_t b = begin + c * kChunk, e = std::min(end, b + kChunk);
        index_t* off = &hist[c * 8];
        for (index_t i = b; i < e; ++i) dst[off[octant_of(src[i], mid)]++] = src[i];
      }
    });
  }

  // The bodies of `cell` are in cur[begin, end); `other` is the second buffer.
  void build(Cell& cell, Rec* cur, Rec* other) const {
    const index_t n = cell.end - cell.begin;
    if (n <= leaf_size || cell.depth >= max_depth) {
      if (cur != final_buf) std::copy(cur + cell.begin, cur + cell.end, final_buf + cell.begin);
      for (index_t i = cell.begin; i < cell.end; ++i) {
        const Rec& r = final_buf[i];
        detail::add_body(cell.sum, r.x, r.y, r.z, r.m);
      }
      return;
    }
    double mid[3];
    detail::cell_mid(cell.lo, cell.hi, mid);
    index_t counts[8];
    partition(cur, other, cell.begin, cell.end, mid, counts);
    index_t run = cell.begin;
    for (int o = 0; o < 8; ++o) {
      if (counts[o] == 0) continue;
      Cell k;
      k.begin = run;
      k.end = run + counts[o];
      run = k.end;
      k.depth = cell.depth + 1;
      detail::child_bounds(cell.lo, cell.hi, mid, o, k.lo, k.hi);
      cell.kids.push_back(std::move(k));
    }
    const std::size_t nk = cell.kids.size();
    if (n >= kTaskGrain && nk > 1) {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, nk, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) build(cell.kids[i], other, cur);
      });
    } else {
      for (Cell& k : cell.kids) build(k, other, cur);
    }
    cell.links = static_cast<index_t>(nk) - 1;
    for (const Cell& k : cell.kids) {
      detail::add_sums(cell.sum, k.sum);
      cell.nodes += k.nodes;
      cell.links += k.links;
      cell.height = std::max(cell.height, k.height + 1);
    }
  }
};

struct Writer {
  OctNode* nodes;
  node_id* child_ids;
  float* com;
  float* cubes;

  void write(const Cell& cell, node_id at, index_t link_at) const {
    const index_t n = cell.end - cell.begin;
    const bool leaf = cell.kids.empty();
    if (leaf && n > std::numeric_limits<std::int32_t>::max()) throw detail::too_many_coincident_bodies(n);
    OctNode& node = nodes[at];
    node.first = leaf ? cell.begin : link_at;
    node.count = leaf ? static_cast<std::int32_t>(n) : 0;
    node.n_children = static_cast<std::int16_t>(cell.kids.size());
    node.depth = static_cast<std::int16_t>(cell.depth);

    float* cube = cubes + static_cast<index_t>(at) * 4;
    detail::write_cube(cell.lo, cell.hi, cube);
    detail::write_com(cell.sum, cube, com + static_cast<index_t>(at) * 4);

    if (leaf) return;
    const std::size_t nk = cell.kids.size();
    node_id kid_at[8];
    index_t kid_link[8];
    index_t next_at = static_cast<index_t>(at) + 1;
    index_t next_link = link_at + static_cast<index_t>(nk) - 1;
    for (std::size_t i = 0; i < nk; ++i) {
      kid_at[i] = static_cast<node_id>(next_at);
      kid_link[i] = next_link;
      if (i > 0) child_ids[link_at + static_cast<index_t>(i) - 1] = kid_at[i];
      next_at += cell.kids[i].nodes;
      next_link += cell.kids[i].links;
    }
    if (n >= kTaskGrain && nk > 1) {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, nk, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i < r.end(); ++i) write(cell.kids[i], kid_at[i], kid_link[i]);
      });
    } else {
      for (std::size_t i = 0; i < nk; ++i) write(cell.kids[i], kid_at[i], kid_link[i]);
    }
  }
};

// The bodies' bounding box, reduced over blocks in parallel.
detail::BodyBox bounding_box(const float* xyz, index_t n) {
  return tbb::parallel_reduce(
      tbb::blocked_range<index_t>(0, n, 1 << 15), detail::empty_box(),
      [&](const tbb::blocked_range<index_t>& r, detail::BodyBox b) {
        for (index_t i = r.begin(); i < r.end(); ++i) detail::extend(b, xyz + i * 3);
        return b;
      },
      [](detail::BodyBox a, const detail::BodyBox& b) {
        detail::merge(a, b);
        return a;
      });
}

// The root cell of n bodies in `box` (detail::root_bounds).
Cell root_cell(const detail::BodyBox& box, index_t n) {
  Cell root;
  root.begin = 0;
  root.end = n;
  const detail::CellBounds b = detail::root_bounds(box);
  std::copy(b.lo, b.lo + 3, root.lo);
  std::copy(b.hi, b.hi + 3, root.hi);
  return root;
}

}  // namespace

Octree Octree::build(const float* xyz, const float* mass, index_t n, const OctreeOptions& options) {
  if (detail::build_on_gpu(options.device, is_device_pointer(xyz) || is_device_pointer(mass), n, "octree"))
    return build_on_gpu(xyz, mass, n, options);
  detail::check_bodies(xyz, mass, n, options);
  Octree tree;
  tree.leaf_size_ = options.leaf_size;
  tree.max_depth_ = options.max_depth;
  Cell root = root_cell(bounding_box(xyz, n), n);

  // Default-initialised: every element is written before it is read.
  std::unique_ptr<Rec[]> a(new Rec[static_cast<std::size_t>(n)]), b(new Rec[static_cast<std::size_t>(n)]);
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1 << 14), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) a[i] = Rec{xyz[i * 3], xyz[i * 3 + 1], xyz[i * 3 + 2], mass[i], i};
  });
  const Builder builder{a.get(), options.leaf_size, options.max_depth};
  builder.build(root, a.get(), b.get());
  b.reset();

  if (root.nodes > std::numeric_limits<node_id>::max()) throw detail::too_many_nodes(root.nodes);
  tree.height_ = root.height;
  tree.nodes_.resize(static_cast<std::size_t>(root.nodes));
  tree.child_ids_.resize(static_cast<std::size_t>(root.links));
  tree.com_.resize(static_cast<std::size_t>(root.nodes) * 4);
  tree.cubes_.resize(static_cast<std::size_t>(root.nodes) * 4);
  const Writer writer{tree.nodes_.data(), tree.child_ids_.data(), tree.com_.data(), tree.cubes_.data()};
  writer.write(root, 0, 0);

  tree.bodies_.resize(static_cast<std::size_t>(n) * 4);
  tree.body_ids_.resize(static_cast<std::size_t>(n));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, n, 1 << 14), [&](const tbb::blocked_range<index_t>& r) {
    for (index_t i = r.begin(); i < r.end(); ++i) {
      float* p = &tree.bodies_[i * 4];
      p[0] = a[i].x;
      p[1] = a[i].y;
      p[2] = a[i].z;
      p[3] = a[i].m;
      tree.body_ids_[i] = a[i].id;
    }
  });
  return tree;
}

}  // namespace canopy
