// The exact float64 test of the kd-tree's float32 radius candidates (canopy._canopy.filter_pairs),
// on the host's cores: the Python side did it with numpy (a gather of the candidates' points,
// their p-distances, a mask), which cost more than the GPU's search itself at 10^6 points. Beside
// it, the other host-side array work of the exact calls: kNN's settle step, column extents, the
// distances widened to float64.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace py = pybind11;

namespace {

// A C-ordered numpy array's buffer, checked for its element size and length.
struct View {
  const void* p = nullptr;
  std::int64_t n = 0;
  int itemsize = 0;
};

View view_of(const char* who, const py::handle& a, const char* name, std::int64_t at_least, std::initializer_list<int> sizes) {
  Py_buffer b;
  if (PyObject_GetBuffer(a.ptr(), &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    throw canopy::Error(std::string(who) + ": " + name + " is not a C-ordered array");
  }
  View v{b.buf, static_cast<std::int64_t>(b.len / std::max<Py_ssize_t>(b.itemsize, 1)), static_cast<int>(b.itemsize)};
  PyBuffer_Release(&b);
  if (std::find(sizes.begin(), sizes.end(), v.itemsize) == sizes.end() || v.n < at_least)
    throw canopy::Error(std::string(who) + ": " + name + " has the wrong element size or length");
  return v;
}

// What scipy's cKDTree compares with a radius r: the p-th power sum of x - q in float64 (p = 1:
// the 1-norm, infinity: the largest difference), the differences summed in order (scipy's order
// below 8 dimensions), against r * r for p = 2 and pow(r, p) for another finite p. A point at
// sqrt(s) == r whose s is past r * r is outside (integer coordinates, r a distance between two).
template <class T>
double power_sum(const double* q, const T* x, int m, double p) {
  double s = 0;
  if (p == 2) {
    for (int d = 0; d < m; ++d) {
      const double v = static_cast<double>(x[d]) - q[d];
      s += v * v;
    }
    return s;
  }
  if (p == 1) {
    for (int d = 0; d < m; ++d) s += std::fabs(static_cast<double>(x[d]) - q[d]);
    return s;
  }
  if (std::isinf(p)) {
    for (int d = 0; d < m; ++d) {
      const double v = std::fabs(static_cast<double>(x[d]) - q[d]);
      s = (v > s || std::isnan(v)) ? v : s;  // (a NaN coordinate: NaN, as numpy's max)
    }
    return s;
  }
  for (int d = 0; d < m; ++d) s += std::pow(std::fabs(static_cast<double>(x[d]) - q[d]), p);
  return s;
}

double from_power_sum(double s, double p) { return p == 2 ? std::sqrt(s) : (p == 1 || std::isinf(p)) ? s : std::pow(s, 1.0 / p); }
double power_bound(double r, double p) { return p == 2 ? r * r : (p == 1 || std::isinf(p)) ? r : std::pow(r, p); }

struct Kept {
  std::vector<std::int64_t> i, j;
  std::vector<double> d;
};

// rows[k]'s candidates idx[offsets[k] .. offsets[k + 1]) (engine ids; keep maps them to data
// rows when given) kept where q[rows[k]] and data[j] are within rr[rows[k]] (power_sum against
// power_bound, as scipy) and, with upper, j >
// rows[k]: (i, j, d) int64, int64, float64 arrays ordered by k, then by the candidates' order.
template <class T>
py::tuple filter(const std::int64_t* offsets, const std::int64_t* idx, const std::int64_t* rows, std::int64_t nrows,
                 const double* q, const T* data, std::int64_t n_data, const double* rr, int m, double p, bool upper,
                 const std::int64_t* keep, std::int64_t n_ids) {
  constexpr std::int64_t kRowsPerBlock = 2048;
  const std::int64_t blocks = (nrows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<Kept> kept(static_cast<std::size_t>(blocks));
  std::vector<std::int64_t> start(static_cast<std::size_t>(blocks) + 1, 0);
  // (no exception may cross TBB's tasks: the module's own C++ runtime is not libtbb's)
  std::atomic<int> bad{0};
  {
    py::gil_scoped_release free;
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, blocks), [&](const tbb::blocked_range<std::int64_t>& r) {
      for (std::int64_t b = r.begin(); b != r.end(); ++b) {
        Kept& k = kept[static_cast<std::size_t>(b)];
        for (std::int64_t a = b * kRowsPerBlock; a < std::min(nrows, (b + 1) * kRowsPerBlock); ++a) {
          const std::int64_t row = rows[a];
          const double* qr = q + row * m;
          const double bound = power_bound(rr[row], p);
          for (std::int64_t c = offsets[a]; c < offsets[a + 1]; ++c) {
            if (idx[c] < 0 || idx[c] >= n_ids) {
              bad = 1;
              return;
            }
            const std::int64_t j = keep ? keep[idx[c]] : idx[c];
            if (j < 0 || j >= n_data) {
              bad = 2;
              return;
            }
            if (upper && j <= row) continue;
            const double ps = power_sum(qr, data + j * m, m, p);
            if (ps <= bound) {
              k.i.push_back(row);
              k.j.push_back(j);
              k.d.push_back(from_power_sum(ps, p));
            }
          }
        }
      }
    });
    if (bad == 1) throw canopy::Error("filter_pairs: a candidate index is out of range");
    if (bad == 2) throw canopy::Error("filter_pairs: keep maps a candidate out of the data");
    for (std::int64_t b = 0; b < blocks; ++b)
      start[static_cast<std::size_t>(b) + 1] = start[static_cast<std::size_t>(b)] + static_cast<std::int64_t>(kept[b].i.size());
  }
  const py::object empty = py::module_::import("numpy").attr("empty");
  const std::int64_t total = start.back();
  py::object oi = empty(total, "int64"), oj = empty(total, "int64"), od = empty(total, "float64");
  auto* pi = static_cast<std::int64_t*>(const_cast<void*>(view_of("filter_pairs", oi, "i", total, {8}).p));
  auto* pj = static_cast<std::int64_t*>(const_cast<void*>(view_of("filter_pairs", oj, "j", total, {8}).p));
  auto* pd = static_cast<double*>(const_cast<void*>(view_of("filter_pairs", od, "d", total, {8}).p));
  {
    py::gil_scoped_release free;
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, blocks), [&](const tbb::blocked_range<std::int64_t>& r) {
      for (std::int64_t b = r.begin(); b != r.end(); ++b) {
        const Kept& k = kept[static_cast<std::size_t>(b)];
        const std::int64_t s = start[static_cast<std::size_t>(b)];
        std::copy(k.i.begin(), k.i.end(), pi + s);
        std::copy(k.j.begin(), k.j.end(), pj + s);
        std::copy(k.d.begin(), k.d.end(), pd + s);
      }
    });
  }
  return py::make_tuple(oi, oj, od);
}

// (a, b) by (distance, index), a NaN distance after every number (numpy's lexsort order).
struct ByDistance {
  const double* d;
  const std::int64_t* j;
  bool operator()(int a, int b) const {
    const bool na = std::isnan(d[a]), nb = std::isnan(d[b]);
    if (na != nb) return nb;
    if (!na && d[a] != d[b]) return d[a] < d[b];
    return j[a] < j[b];
  }
};

// The float64 step of the exact kNN (canopy's _search with a top-k, float64 trees and any p):
// rows' engine candidates idx [r][kp] (data rows) get their float64 p-distances to q [r][m];
// the first kc by (power sum, index) are returned (scipy's order: the distance's, but for two
// sums a rounding apart), those whose power sum is not below ub's (scipy's test) as (inf, n); a row is
// settled (done) when no point beyond the kp can be nearer than its kc-th distance: its kp-th
// engine distance last[a] is finite and ((last - abs) / rel - eps_x - eps_q[a]) > fac * min(the
// kc-th distance, ub) (last None: the kp are every point).
template <class T>
py::tuple settle(const std::int64_t* idx, std::int64_t r, int kp, const double* q, const T* data, std::int64_t n_data,
                 int m, int kc, double p, double ub, std::int64_t n, const float* last, const double* eps_q,
                 double eps_x, double rel, double abs_err, double fac) {
  const py::object empty = py::module_::import("numpy").attr("empty");
  py::object od = empty(py::make_tuple(r, kc), "float64"), oi = empty(py::make_tuple(r, kc), "int64");
  py::object done = empty(r, "bool");
  auto* pd = static_cast<double*>(const_cast<void*>(view_of("knn_settle", od, "distances", r * kc, {8}).p));
  auto* pi = static_cast<std::int64_t*>(const_cast<void*>(view_of("knn_settle", oi, "indices", r * kc, {8}).p));
  auto* pdone = static_cast<bool*>(const_cast<void*>(view_of("knn_settle", done, "done", r, {1}).p));
  std::atomic<int> bad{0};
  {
    py::gil_scoped_release free;
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, r, 256), [&](const tbb::blocked_range<std::int64_t>& range) {
      std::vector<double> ps(static_cast<std::size_t>(kp));
      std::vector<int> order(static_cast<std::size_t>(kp));
      const double bound = power_bound(ub, p);
      for (std::int64_t a = range.begin(); a != range.end(); ++a) {
        const std::int64_t* ja = idx + a * kp;
        for (int c = 0; c < kp; ++c) {
          if (ja[c] < 0 || ja[c] >= n_data) {
            bad = 1;
            return;
          }
          ps[c] = power_sum(q + a * m, data + ja[c] * m, m, p);
          order[c] = c;
        }
        std::partial_sort(order.begin(), order.begin() + kc, order.end(), ByDistance{ps.data(), ja});
        // (a NaN k-th stays NaN: not settled)
        const double radius = std::min(from_power_sum(ps[order[kc - 1]], p), ub);
        if (last) {
          const double l = static_cast<double>(last[a]);
          pdone[a] = std::isfinite(l) && ((l - abs_err) / rel - eps_x - eps_q[a]) > fac * radius;
        } else {
          pdone[a] = true;
        }
        for (int t = 0; t < kc; ++t) {
          const double v = ps[order[t]];
          const bool far = !(v < bound);
          pd[a * kc + t] = far ? std::numeric_limits<double>::infinity() : from_power_sum(v, p);
          pi[a * kc + t] = far ? n : ja[order[t]];
        }
      }
    });
  }
  if (bad) throw canopy::Error("knn_settle: a candidate index is out of range");
  return py::make_tuple(od, oi, done);
}

// The columns' (mins, maxes) of a C-ordered (n, m) array, NaN propagating as numpy's amin/amax:
// _extents on the host's cores (numpy reduces (n, 3) rows over axis 0 one row at a time, and a
// column at a time still took 12-26 ms at 10^6 float64 rows on the H200's host).
template <class T>
void column_extents(const T* a, std::int64_t n, int m, T* lo, T* hi) {
  const std::int64_t grain = std::int64_t{1} << 15, parts = (n + grain - 1) / grain;
  std::vector<T> part_lo(static_cast<std::size_t>(parts * m)), part_hi(part_lo.size());
  const auto take = [](T v, T& l, T& h) {  // (a NaN, once in, stays: no compare replaces it)
    if (v < l || std::isnan(v)) l = v;
    if (v > h || std::isnan(v)) h = v;
  };
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, parts), [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t b = r.begin(); b < r.end(); ++b) {
      T* l = &part_lo[static_cast<std::size_t>(b * m)];
      T* h = &part_hi[static_cast<std::size_t>(b * m)];
      std::copy(a + b * grain * m, a + (b * grain + 1) * m, l);
      std::copy(l, l + m, h);
      for (std::int64_t i = b * grain + 1; i < std::min(n, (b + 1) * grain); ++i)
        for (int d = 0; d < m; ++d) take(a[i * m + d], l[d], h[d]);
    }
  });
  std::copy(part_lo.begin(), part_lo.begin() + m, lo);
  std::copy(part_hi.begin(), part_hi.begin() + m, hi);
  for (std::int64_t b = 1; b < parts; ++b)
    for (int d = 0; d < m; ++d) {
      take(part_lo[static_cast<std::size_t>(b * m + d)], lo[d], hi[d]);
      take(part_hi[static_cast<std::size_t>(b * m + d)], lo[d], hi[d]);
    }
}

}  // namespace

void register_exact_filter(py::module_& m) {
  // float32 -> a new float64 array of the same shape, on the host's cores: the kNN distances
  // scipy returns as float64 (numpy's astype faults the 8-byte array's fresh pages in on one core).
  m.def(
      "widened",
      [](const py::array_t<float, py::array::c_style>& a) {
        py::array_t<double> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
        const float* src = a.data();
        double* dst = out.mutable_data();
        const std::int64_t n = static_cast<std::int64_t>(a.size());
        py::gil_scoped_release free;
        tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, std::int64_t{1} << 16),
                          [&](const tbb::blocked_range<std::int64_t>& r) {
                            for (std::int64_t i = r.begin(); i != r.end(); ++i) dst[i] = static_cast<double>(src[i]);
                          });
        return out;
      },
      py::arg("a"));
  // float32(x - center) for C-ordered float64 rows x (n, m) and center (m,): the difference in
  // float64, rounded once, as numpy's subtract then astype (beyond float32's range: +-inf, NaN
  // stays NaN); norms (n,), if given, get each difference's float64 2-norm. A float64 tree's rows
  // and queries (_centred32: 13 ms in numpy at 10^6 rows on one core, most of a float64 tree's
  // build beyond a float32 one's).
  m.def(
      "centred32",
      [](const py::array_t<double, py::array::c_style>& x, const py::array_t<double, py::array::c_style>& center,
         const py::object& norms) {
        if (x.ndim() != 2 || center.ndim() != 1 || center.shape(0) != x.shape(1))
          throw canopy::Error("centred32: x must be (n, m) and center (m,)");
        double* nrm = norms.is_none() ? nullptr
                                      : static_cast<double*>(const_cast<void*>(view_of("centred32", norms, "norms", x.shape(0), {8}).p));
        py::array_t<float> out(std::vector<py::ssize_t>{x.shape(0), x.shape(1)});
        const double* src = x.data();
        const double* c = center.data();
        float* dst = out.mutable_data();
        const std::int64_t m = x.shape(1);
        py::gil_scoped_release free;
        tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, x.shape(0), std::int64_t{1} << 14),
                          [&](const tbb::blocked_range<std::int64_t>& r) {
                            for (std::int64_t i = r.begin(); i != r.end(); ++i) {
                              double sq = 0;
                              for (std::int64_t d = 0; d < m; ++d) {
                                const double v = src[i * m + d] - c[d];
                                sq += v * v;
                                // (from FLT_MAX + half an ulp on, rounding gives infinity)
                                dst[i * m + d] = std::fabs(v) >= 0x1.ffffffp+127 ? std::copysign(INFINITY, v)
                                                                                 : static_cast<float>(v);
                              }
                              if (nrm) nrm[i] = std::sqrt(sq);
                            }
                          });
        return out;
      },
      py::arg("x"), py::arg("center"), py::arg("norms") = py::none());
  m.def(
      "column_extents",
      [](const py::object& a, int m, const py::object& lo, const py::object& hi) {
        const View va = view_of("column_extents", a, "a", 1, {4, 8});
        if (m < 1 || va.n % m != 0) throw canopy::Error("column_extents: a is not (n, m) with m = " + std::to_string(m));
        const View vl = view_of("column_extents", lo, "lo", m, {va.itemsize});
        const View vh = view_of("column_extents", hi, "hi", m, {va.itemsize});
        py::gil_scoped_release free;
        if (va.itemsize == 4)
          column_extents(static_cast<const float*>(va.p), va.n / m, m, static_cast<float*>(const_cast<void*>(vl.p)),
                         static_cast<float*>(const_cast<void*>(vh.p)));
        else
          column_extents(static_cast<const double*>(va.p), va.n / m, m, static_cast<double*>(const_cast<void*>(vl.p)),
                         static_cast<double*>(const_cast<void*>(vh.p)));
      },
      py::arg("a"), py::arg("m"), py::arg("lo"), py::arg("hi"));
  m.def(
      "filter_pairs",
      [](const py::object& offsets, const py::object& idx, const py::object& rows, const py::object& q,
         const py::object& data, const py::object& rr, int dims, double p, bool upper, const py::object& keep) {
        if (dims < 1) throw canopy::Error("filter_pairs: dims = " + std::to_string(dims) + " must be >= 1");
        const View vr = view_of("filter_pairs", rows, "rows", 0, {8});
        const View vo = view_of("filter_pairs", offsets, "offsets", vr.n + 1, {8});
        const auto* o = static_cast<const std::int64_t*>(vo.p);
        const View vi = view_of("filter_pairs", idx, "idx", o[vr.n], {8});
        const View vq = view_of("filter_pairs", q, "q", 0, {8});
        const View vd = view_of("filter_pairs", data, "data", 0, {4, 8});
        const View vrr = view_of("filter_pairs", rr, "rr", vq.n / dims, {8});
        const auto* rws = static_cast<const std::int64_t*>(vr.p);
        const std::int64_t nq = vq.n / dims, nd = vd.n / dims;
        const View vk = keep.is_none() ? View{nullptr, nd, 8} : view_of("filter_pairs", keep, "keep", 0, {8});
        const auto* kp = static_cast<const std::int64_t*>(vk.p);  // (null: engine ids are data rows)
        const std::int64_t nk = vk.n;
        // Every index is checked before it is read (the candidates' in the loop): an error, not a
        // read past an array.
        for (std::int64_t a = 0; a < vr.n; ++a)
          if (rws[a] < 0 || rws[a] >= nq || o[a] > o[a + 1]) throw canopy::Error("filter_pairs: rows or offsets out of range");
        if (vr.n && o[0] < 0) throw canopy::Error("filter_pairs: rows or offsets out of range");
        const auto* ix = static_cast<const std::int64_t*>(vi.p);
        const auto* qd = static_cast<const double*>(vq.p);
        const auto* r = static_cast<const double*>(vrr.p);
        if (vd.itemsize == 4)
          return filter(o, ix, rws, vr.n, qd, static_cast<const float*>(vd.p), nd, r, dims, p, upper, kp, nk);
        return filter(o, ix, rws, vr.n, qd, static_cast<const double*>(vd.p), nd, r, dims, p, upper, kp, nk);
      },
      py::arg("offsets"), py::arg("idx"), py::arg("rows"), py::arg("q"), py::arg("data"), py::arg("rr"),
      py::arg("dims"), py::arg("p"), py::arg("upper"), py::arg("keep"));
  m.def(
      "knn_settle",
      [](const py::object& idx, const py::object& q, const py::object& data, int kc, double p, double ub,
         std::int64_t n, const py::object& last, const py::object& eps_q, double eps_x, double rel, double abs_err,
         double fac) {
        const View vq = view_of("knn_settle", q, "q", 0, {8});
        const View vd = view_of("knn_settle", data, "data", 0, {4, 8});
        const View vi = view_of("knn_settle", idx, "idx", 0, {8});
        const View ve = view_of("knn_settle", eps_q, "eps_q", 0, {8});
        const std::int64_t r = ve.n;
        if (r < 1 || vi.n % r != 0 || vi.n / r < kc || kc < 1 || vq.n % r != 0 || vq.n / r < 1)
          throw canopy::Error("knn_settle: idx, q and eps_q disagree on the rows, or kc is outside 1..kp");
        const int kp = static_cast<int>(vi.n / r), m = static_cast<int>(vq.n / r);
        if (vd.n % m != 0) throw canopy::Error("knn_settle: data's width is not q's");
        const float* lp = last.is_none() ? nullptr : static_cast<const float*>(view_of("knn_settle", last, "last", r, {4}).p);
        const auto* ix = static_cast<const std::int64_t*>(vi.p);
        const auto* qd = static_cast<const double*>(vq.p);
        const auto* ep = static_cast<const double*>(ve.p);
        if (vd.itemsize == 4)
          return settle(ix, r, kp, qd, static_cast<const float*>(vd.p), vd.n / m, m, kc, p, ub, n, lp, ep, eps_x, rel,
                        abs_err, fac);
        return settle(ix, r, kp, qd, static_cast<const double*>(vd.p), vd.n / m, m, kc, p, ub, n, lp, ep, eps_x, rel,
                      abs_err, fac);
      },
      py::arg("idx"), py::arg("q"), py::arg("data"), py::arg("kc"), py::arg("p"), py::arg("ub"), py::arg("n"),
      py::arg("last"), py::arg("eps_q"), py::arg("eps_x"), py::arg("rel"), py::arg("abs_err"), py::arg("fac"));
}
