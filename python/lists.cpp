// canopy._canopy.lists_of: the neighbour lists scipy's query_ball_point and query_ball_tree
// return, made from flat pairs in C++. Python's own way (j.tolist(), a slice per row, an object
// array filled row by row) took about 2.4 s for 10^6 lists of 33 (H200 host). Here each list is
// made once, and each distinct index is one int object shared by every list that holds it: its
// reference count is raised once by the number of lists that hold it, and the lists' items are
// written by a thread per core (plain pointer stores into lists no other code can see yet).
// Making the 10^6 lists themselves (one allocation each, under the GIL) is what is left.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/types.hpp"

namespace py = pybind11;

namespace {

// A 1-d int64 array of any stride (the columns of an (n, 2) pairs array), read in place.
class Column {
 public:
  Column(const py::handle& a, const char* name) {
    Py_buffer b;
    if (PyObject_GetBuffer(a.ptr(), &b, PyBUF_STRIDED_RO | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      throw canopy::Error(std::string("lists_of: ") + name + " is not an array");
    }
    const bool ok = b.ndim == 1 && b.itemsize == 8 && b.format && (b.format[0] == 'l' || b.format[0] == 'q');
    if (ok) {
      at_ = static_cast<const char*>(b.buf);
      size_ = static_cast<std::int64_t>(b.shape[0]);
      stride_ = b.strides[0];
    }
    PyBuffer_Release(&b);
    if (!ok) throw canopy::Error(std::string("lists_of: ") + name + " must be a 1-d int64 array");
  }
  std::int64_t size() const { return size_; }
  std::int64_t operator[](std::int64_t k) const { return *reinterpret_cast<const std::int64_t*>(at_ + k * stride_); }

 private:
  const char* at_ = nullptr;
  std::int64_t size_ = 0;
  Py_ssize_t stride_ = 8;
};

// f(t, begin, end) over [0, size) in one block per thread t, a thread per `grain` items up to
// one per core (inline for one: threads cost more than they save on small inputs).
template <class F>
void in_blocks(std::int64_t size, std::int64_t grain, F&& f) {
  const std::int64_t threads =
      std::max<std::int64_t>(1, std::min<std::int64_t>(std::thread::hardware_concurrency(), size / grain));
  if (threads == 1) return f(std::int64_t{0}, std::int64_t{0}, size);
  std::vector<std::thread> pool;
  for (std::int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&f, t, threads, size] { f(t, size * t / threads, size * (t + 1) / threads); });
  for (std::thread& t : pool) t.join();
}

constexpr std::int64_t kGrain = std::int64_t{1} << 16;

// The checks, each row's first pair (start[row], start[n] = size) and how often each index occurs
// in j (uses; empty where an index is negative or j's range is far wider than j: then every item
// gets its own int, as Python would make them).
struct Layout {
  std::vector<std::int64_t> start, uses;
};

Layout layout_of(const Column& ci, const Column& cj, std::int64_t n) {
  const std::int64_t size = ci.size();
  const std::int64_t cores = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  std::vector<std::int64_t> lows(cores, INT64_MAX), highs(cores, -1);
  std::vector<char> bad(cores, 0);
  in_blocks(size, kGrain, [&](std::int64_t t, std::int64_t k0, std::int64_t k1) {
    bool wrong = false;
    std::int64_t l = INT64_MAX, h = -1, last = k0 > 0 ? ci[k0 - 1] : 0;
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t row = ci[k], v = cj[k];
      wrong |= row < last || row >= n;  // (row >= last >= 0: rows ascend from 0 up)
      last = row;
      l = std::min(l, v);
      h = std::max(h, v);
    }
    bad[t] = wrong, lows[t] = l, highs[t] = h;
  });
  if (std::find(bad.begin(), bad.end(), 1) != bad.end())
    throw canopy::Error("lists_of: i must be ascending, in 0.." + std::to_string(n - 1));
  const std::int64_t lo = *std::min_element(lows.begin(), lows.end());
  const std::int64_t hi = *std::max_element(highs.begin(), highs.end());
  Layout out;
  out.start.assign(n + 1, size);
  in_blocks(n, kGrain, [&](std::int64_t, std::int64_t r0, std::int64_t r1) {
    std::int64_t k = 0, end = size;  // from the first k with ci[k] >= r0 (i ascends)
    while (k < end) {
      const std::int64_t mid = k + (end - k) / 2;
      if (ci[mid] < r0) k = mid + 1; else end = mid;
    }
    for (std::int64_t r = r0; r < r1; ++r) {
      while (k < size && ci[k] < r) ++k;
      out.start[r] = k;
    }
  });
  if (size == 0 || lo < 0 || hi >= 2 * size + 1024) return out;
  out.uses.assign(hi + 1, 0);
  // A range of indices per thread, each reading all of j (no atomics: a locked add per item
  // stalls on its cache line), on up to 4 threads (16 read 16 times j: 0.25 s for 33 M items).
  in_blocks(hi + 1, std::max(kGrain, (hi + 4) / 4), [&](std::int64_t, std::int64_t v0, std::int64_t v1) {
    std::int64_t* uses = out.uses.data();
    std::int64_t elsewhere = 0;  // (where the others' indices are counted: no branch to mispredict)
    for (std::int64_t k = 0; k < size; ++k) {
      const std::int64_t v = cj[k];
      ++*(v >= v0 && v < v1 ? uses + v : &elsewhere);
    }
  });
  return out;
}

// The shared ints: value v's object, its count already raised by uses[v] (null where unused).
// Undone by release(false) when a list cannot be made, so nothing leaks.
class SharedInts {
 public:
  explicit SharedInts(const std::vector<std::int64_t>& uses) : uses_(uses), ints_(uses.size(), nullptr) {
    for (std::size_t v = 0; v < uses.size(); ++v) {
      if (uses[v] == 0) continue;
      PyObject* o = PyLong_FromLongLong(static_cast<long long>(v));
      if (!o) {
        release(false);
        throw py::error_already_set();
      }
      Py_SET_REFCNT(o, Py_REFCNT(o) + uses[v]);  // (a no-op for Python 3.12's immortal small ints)
      ints_[v] = o;
    }
  }
  PyObject* operator[](std::int64_t v) const { return ints_[v]; }
  // Drops this object's own references; with placed = false also the counts the lists never took.
  void release(bool placed) {
    for (std::size_t v = 0; v < ints_.size(); ++v) {
      if (!ints_[v]) continue;
      if (!placed) Py_SET_REFCNT(ints_[v], Py_REFCNT(ints_[v]) - uses_[v]);
      Py_DECREF(ints_[v]);
      ints_[v] = nullptr;
    }
  }

 private:
  const std::vector<std::int64_t>& uses_;
  std::vector<PyObject*> ints_;
};

// Lists of ints cannot be part of a reference cycle, so the cyclic collector need not follow
// them, as CPython itself leaves tuples and dicts of atomic values untracked: its first pass
// after 10^6 new lists (each item's type read, twice) took 1.1 s on the H200 host, longer than
// making them. (A list later made part of a cycle by its user would not be collected.)
void untracked(PyObject* list) { PyObject_GC_UnTrack(list); }

// Drops lists made so far (their items null or owned: list_dealloc releases both), then raises
// Python's error.
[[noreturn]] void fail(std::vector<PyObject*>& lists) {
  for (PyObject* l : lists) Py_XDECREF(l);
  throw py::error_already_set();
}

// The n lists, items filled: with shared ints where layout.uses says so, else an int per item.
std::vector<PyObject*> made_lists(const Column& cj, std::int64_t n, const Layout& layout) {
  std::vector<PyObject*> lists(n, nullptr);
  const std::vector<std::int64_t>& start = layout.start;
  if (layout.uses.empty()) {
    for (std::int64_t row = 0; row < n; ++row) {
      if (!(lists[row] = PyList_New(start[row + 1] - start[row]))) fail(lists);
      untracked(lists[row]);
      for (std::int64_t c = start[row]; c < start[row + 1]; ++c) {
        PyObject* v = PyLong_FromLongLong(cj[c]);
        if (!v) fail(lists);
        PyList_SET_ITEM(lists[row], c - start[row], v);
      }
    }
    return lists;
  }
  SharedInts ints(layout.uses);
  for (std::int64_t row = 0; row < n; ++row) {
    if (!(lists[row] = PyList_New(start[row + 1] - start[row]))) {
      ints.release(false);
      fail(lists);
    }
    untracked(lists[row]);
  }
  in_blocks(n, kGrain / 32, [&](std::int64_t, std::int64_t r0, std::int64_t r1) {
    for (std::int64_t row = r0; row < r1; ++row)
      for (std::int64_t c = start[row]; c < start[row + 1]; ++c) PyList_SET_ITEM(lists[row], c - start[row], ints[cj[c]]);
  });
  ints.release(true);
  return lists;
}

}  // namespace

void register_lists(py::module_& m) {
  m.def(
      "lists_of",
      [](const py::object& i, const py::object& j, std::int64_t n, const py::object& out) -> py::object {
        const Column ci(i, "i"), cj(j, "j");
        if (ci.size() != cj.size()) throw canopy::Error("lists_of: i and j differ in length");
        if (n < 0) throw canopy::Error("lists_of: n = " + std::to_string(n) + " must be >= 0");
        if (out.is_none()) {
          std::vector<PyObject*> lists = made_lists(cj, n, layout_of(ci, cj, n));
          PyObject* result = PyList_New(n);
          if (!result) fail(lists);
          for (std::int64_t row = 0; row < n; ++row) PyList_SET_ITEM(result, row, lists[row]);
          return py::reinterpret_steal<py::object>(result);
        }
        Py_buffer b{};
        if (PyObject_GetBuffer(out.ptr(), &b, PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) != 0) {
          PyErr_Clear();
          throw canopy::Error("lists_of: out must be a writable object array");
        }
        std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> held(&b, PyBuffer_Release);
        if (!(b.format && b.format[0] == 'O' && b.itemsize == sizeof(PyObject*) &&
              b.len / static_cast<Py_ssize_t>(sizeof(PyObject*)) == n))
          throw canopy::Error("lists_of: out must be an object array of n elements");
        std::vector<PyObject*> lists = made_lists(cj, n, layout_of(ci, cj, n));
        PyObject** slots = static_cast<PyObject**>(b.buf);
        for (std::int64_t row = 0; row < n; ++row) {
          PyObject* old = slots[row];
          slots[row] = lists[row];
          Py_XDECREF(old);
        }
        return out;
      },
      py::arg("i"), py::arg("j"), py::arg("n"), py::arg("out") = py::none());
}
