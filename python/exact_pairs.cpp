// PointIndex.ball_exact: the exact pairs of _ball_chunks on the GPU (ExactPairsGpu). The float32
// queries' lists within r (or radii[a]) are filtered there by the float64 p-distance of query a
// (q[a], float64 [n][dims]; q None: data row rows[a], a tree's pairs with its own points) and
// data[keep[id]] against rr[a] (rr None: r64 for every query). Returns (ij int64 (total, 2) whose
// i are rows[a] (rows None: row0 + a), d float64 [total] or None, stats), ordered by (a,
// candidate); counts (int64 [n]) given: each query's number of kept pairs there, and (None, None,
// stats). queries_kept: the queries are the tree's own rows, kept on the device between calls.
#include <string>

#include "python/module.hpp"
#include "runtime/exact_filter.hpp"

using namespace canopy;

namespace {

template <class T>
T* optional_at(const py::object& a) {
  return a.is_none() ? nullptr : at<T>(a.cast<Address>());
}

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
  const py::object empty = py::module_::import("numpy").attr("empty");
  py::object ij = py::none(), d = py::none();
  RaggedStats st;
  {
    py::gil_scoped_release free;
    st = run(pc(), at<const float>(queries), n, o, f, [&](index_t total) {
      py::gil_scoped_acquire gil;
      ExactPairsOut out;
      try {
        ij = empty(py::make_tuple(total, 2), "int64");
        if (with_d) d = empty(total, "float64");
      } catch (const py::error_already_set& e) {
        throw OutOfMemory("exact pairs: numpy.empty(" + std::to_string(total) + " pairs) failed: " + e.what());
      }
      out.ij = at<index_t>(ij.cast<Address>());
      if (with_d) out.d = at<double>(d.cast<Address>());
      return out;
    });
  }
  return py::make_tuple(ij, d, ragged_stats_dict(st));  // (total: the candidates)
}
