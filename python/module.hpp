// What the C++ files of canopy._canopy share: the Address argument type (a numpy array or a
// device pointer) and the option and statistics conversions (defined in bindings.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>

#include "runtime/options.hpp"
#include "runtime/ragged_result.hpp"

namespace py = pybind11;

// An array's address as the Python side passes it: a numpy array (its data pointer, read here:
// numpy's ctypes.data costs a serving loop's call about 0.6 us each), or an int (a device pointer).
struct Address {
  void* p = nullptr;
};

namespace pybind11::detail {
template <>
struct type_caster<Address> {
  PYBIND11_TYPE_CASTER(Address, const_name("Address"));
  bool load(handle src, bool) {
    if (!PyLong_Check(src.ptr())) {
      // The buffer protocol, not pybind11's numpy API: any numpy version (the Python side passes
      // C-ordered arrays it keeps alive through the call).
      Py_buffer view;
      if (PyObject_GetBuffer(src.ptr(), &view, PyBUF_ANY_CONTIGUOUS) != 0) {
        PyErr_Clear();
        return false;
      }
      value.p = view.buf;
      PyBuffer_Release(&view);
      return true;
    }
    value.p = reinterpret_cast<void*>(static_cast<std::uintptr_t>(PyLong_AsUnsignedLongLong(src.ptr())));
    if (!PyErr_Occurred()) return true;
    PyErr_Clear();
    return false;
  }
  static handle cast(const Address&, return_value_policy, handle) { return none().release(); }
};
}  // namespace pybind11::detail

template <class T>
T* at(Address a) {
  return static_cast<T*>(a.p);
}

// TraversalOptions from the keyword arguments the Python side passes on (already defaulted).
canopy::TraversalOptions traversal_options(const py::dict& kw);
// A ragged call's statistics: the count pass's, and the lists' own.
py::dict ragged_stats_dict(const canopy::RaggedStats& st);

namespace canopy {
class ExactPairsGpu;
class PointCorrelation;
}  // namespace canopy
// PointIndex.ball_exact (exact_pairs.cpp); pc: the index's point correlation, asked for without the GIL.
py::tuple exact_pairs(canopy::ExactPairsGpu& run, const std::function<canopy::PointCorrelation&()>& pc, int dims,
                      Address queries, canopy::index_t n, float r, const py::object& radii, const py::object& rows,
                      canopy::index_t row0, const py::object& q, const py::object& rr, double r64, Address data,
                      bool data_f64, canopy::index_t n_data, const py::object& keep, canopy::index_t n_ids, double p,
                      bool upper, bool with_d, const py::dict& kw, const py::object& counts, bool queries_kept);

void register_exact_filter(py::module_& m);  // exact_filter.cpp
void register_lists(py::module_& m);          // lists.cpp
