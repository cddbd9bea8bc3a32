// PointIndex.ball_exact: the exact pairs of _ball_chunks on the GPU (ExactPairsGpu). The float32
// queries' lists within r (or radii[a]) are filtered there by the float64 p-distance of query a
// (q[a], float64 [n][dims]; q None: data row rows[a], a tree's pairs with its own points) and
// data[keep[id]] against rr[a] (rr None: r64 for every query). Returns (ij int64 (total, 2) whose
// i are rows[a] (rows None: row0 + a), d float64 [total] or None, stats), ordered by (a,
// candidate); counts (int64 [n]) given: each query's number of kept pairs there, and (None, None,
// stats). queries_kept: the queries are the tree's own rows, kept on the device between calls.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "python/module.hpp"
#include "runtime/exact_filter.hpp"

using namespace canopy;

namespace {

template <class T>
T* optional_at(const py::object& a) {
  return a.is_none() ? nullptr : at<T>(a.cast<Address>());
}

// A large result's fresh host pages are most of what its copy down costs (258 MB: about 12 ms to
// fault in on 16 cores, where the copy into them takes as long again). So the pages are faulted
// in while the device still lists and filters: a thread per core writes a byte per page, 2 MiB
// blocks in order from the start of each region, up to a limit; stop() sets the final limit,
// waits, and gives back the pages faulted past it.
class PageToucher {
 public:
  struct Region {
    char* p = nullptr;
    std::size_t bytes = 0;
  };
  PageToucher(std::vector<Region> regions, double share) : regions_(std::move(regions)) {
    for (std::size_t i = 0; i < regions_.size(); ++i) {
      limit_[i] = static_cast<std::size_t>(static_cast<double>(regions_[i].bytes) * share);
      next_[i] = 0;
      reached_[i] = 0;
    }
    const unsigned cores = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    for (unsigned t = 0; t < cores; ++t) threads_.emplace_back([this] { work(); });
  }
  PageToucher(const PageToucher&) = delete;
  PageToucher& operator=(const PageToucher&) = delete;
  ~PageToucher() { stop({}); }
  // Ends the faulting at ends[i] bytes of region i (none: at once, nothing given back).
  void stop(const std::vector<std::size_t>& ends) {
    for (std::size_t i = 0; i < regions_.size(); ++i) limit_[i] = i < ends.size() ? ends[i] : 0;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    // madvise takes whole pages: from the first whole page past the end to the last whole page
    // faulted. (The kernel rounds a length up: an unaligned `to` had zeroed the rest of the
    // array's last page, the next heap block's header where numpy's array came from the heap.)
    for (std::size_t i = 0; i < ends.size() && i < regions_.size(); ++i) {
      const std::uintptr_t base = reinterpret_cast<std::uintptr_t>(regions_[i].p);
      const std::uintptr_t from = (base + ends[i] + kPage - 1) / kPage * kPage, to = (base + reached_[i]) / kPage * kPage;
      if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
    }
  }

 private:
  static constexpr std::size_t kPage = 4096, kBlock = std::size_t{2} << 20;
  void work() {
    for (std::size_t i = 0; i < regions_.size(); ++i) {
      for (;;) {
        const std::size_t at = next_[i].fetch_add(kBlock);
        const std::size_t end = std::min({at + kBlock, regions_[i].bytes, limit_[i].load()});
        if (at >= end) break;
        volatile char* p = regions_[i].p;
        for (std::size_t b = at; b < end; b += kPage) p[b] = 0;
        std::size_t seen = reached_[i].load();
        while (seen < end && !reached_[i].compare_exchange_weak(seen, end)) {
        }
      }
    }
  }
  std::vector<Region> regions_;
  std::atomic<std::size_t> limit_[2], next_[2], reached_[2];
  std::vector<std::thread> threads_;
};

}  // namespace

py::tuple exact_pairs(ExactPairsGpu& run, const std::function<PointCorrelation&()>& pc, int dims, Address queries,
                      index_t n, float r, const py::object& radii, const py::object& rows, index_t row0,
                      const py::object& q, const py::object& rr, double r64, Address data, bool data_f64,
                      index_t n_data, const py::object& keep, index_t n_ids, double p, bool upper, bool with_d,
                      const py::dict& kw, const py::object& counts, bool queries_kept) {
  PcListOptions o;
  static_cast<TraversalOptions&>(o) = traversal_options(kw);
  o.radius = r;
  o.radii = optional_at<const float>(radii);
  ExactFilter f;
  f.rows = optional_at<const index_t>(rows);
  f.row0 = row0;
  f.q = optional_at<const double>(q);
  f.rr = optional_at<const double>(rr);
  f.r = r64;
  f.data = data.p;
  f.data_f64 = data_f64;
  f.n_data = n_data;
  f.keep = optional_at<const index_t>(keep);
  f.n_ids = keep.is_none() ? n_data : n_ids;
  f.dims = dims;
  f.p = p;
  f.upper = upper;
  f.with_d = with_d;
  f.counts = optional_at<index_t>(counts);
  f.queries_kept = queries_kept;
  o.sorted = !f.counts;  // (a count needs no order: a 10^8-candidate sort is 30 ms)
  // A tree's pairs with its own consecutive points, its ids their rows: the engine lists each
  // pair once (query_pairs: half the candidates to list, sort and filter).
  if (upper && !f.q && !f.rows && !f.keep) o.upper_from = row0;
  const py::object empty = py::module_::import("numpy").attr("empty");
  py::object ij = py::none(), d = py::none();
  const auto make = [&](index_t rows) {  // (the GIL held)
    ij = empty(py::make_tuple(rows, 2), "int64");
    if (with_d) d = empty(rows, "float64");
  };
  // Early: arrays for every candidate kept (virtual memory until touched), their pages faulted in
  // while the device works (query_pairs keeps about half of its candidates); the result is then
  // their first `total` rows. Where they cannot be had (address space), the result is made at the end.
  std::unique_ptr<PageToucher> touch;
  const auto early = [&](index_t candidates) {
    if (candidates < (index_t{1} << 20)) return;  // (small results: threads cost more than they save)
    py::gil_scoped_acquire gil;
    try {
      make(candidates);
    } catch (const py::error_already_set&) {
      ij = d = py::none();
      return;
    }
    const std::size_t rows = static_cast<std::size_t>(candidates);
    std::vector<PageToucher::Region> regions{{at<char>(ij.cast<Address>()), rows * 2 * sizeof(index_t)}};
    if (with_d) regions.push_back({at<char>(d.cast<Address>()), rows * sizeof(double)});
    touch = std::make_unique<PageToucher>(std::move(regions), upper && o.upper_from < 0 ? 0.5 : 1.0);
  };
  RaggedStats st;
  {
    py::gil_scoped_release free;
    st = run(pc(), at<const float>(queries), n, o, f, [&](index_t total) {
      if (touch) touch->stop({std::size_t(total) * 2 * sizeof(index_t), std::size_t(total) * sizeof(double)});
      py::gil_scoped_acquire gil;
      ExactPairsOut out;
      try {
        if (touch) {  // (the early arrays' first rows: views)
          ij = ij[py::slice(0, total, 1)];
          if (with_d) d = d[py::slice(0, total, 1)];
        } else {
          make(total);
        }
      } catch (const py::error_already_set& e) {
        throw OutOfMemory("exact pairs: numpy.empty(" + std::to_string(total) + " pairs) failed: " + e.what());
      }
      out.ij = at<index_t>(ij.cast<Address>());
      if (with_d) out.d = at<double>(d.cast<Address>());
      return out;
    }, early);
  }
  return py::make_tuple(ij, d, ragged_stats_dict(st));  // (total: the candidates)
}
