// canopy._canopy: the C++ side of the Python package. It takes raw addresses (host or device
// memory, what numpy's and __cuda_array_interface__'s data pointers give) so that the Python
// side (python/canopy/__init__.py) decides conversions and output allocation once, for numpy and
// for CUDA arrays alike; the GIL is released while Canopy works.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.hpp"
#include "core/types.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/forest.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/forest_predictor.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"

namespace py = pybind11;
using namespace canopy;

namespace {

template <class T>
T* at(std::uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

// An enum from its to_string() name; the error lists the names.
template <class E>
E parse_kind(const std::string& s, E last, const char* what) {
  std::string known;
  for (int i = 0; i <= static_cast<int>(last); ++i) {
    const E e = static_cast<E>(i);
    if (s == to_string(e)) return e;
    known += (i ? ", " : "") + std::string(to_string(e));
  }
  throw Error(std::string(what) + " = '" + s + "' is unknown (known: " + known + ")");
}

Device parse_device(const std::string& s) { return parse_kind(s, Device::Gpu, "device"); }

// TraversalOptions from the keyword arguments the Python side passes on (already defaulted).
TraversalOptions traversal_options(const py::dict& kw) {
  TraversalOptions o;
  for (const auto& [key, value] : kw) {
    const std::string k = py::str(key);
    if (k == "device") o.device = parse_device(value.cast<std::string>());
    else if (k == "schedule") o.schedule = parse_kind(value.cast<std::string>(), ScheduleKind::Auto, "schedule");
    else if (k == "executor") o.executor = parse_kind(value.cast<std::string>(), ExecutorKind::Auto, "executor");
    else if (k == "depth") o.depth = py::isinstance<py::str>(value) && value.cast<std::string>() == "auto" ? kAutoDepth : value.cast<int>();
    else if (k == "pipeline") o.pipeline = value.cast<bool>();
    else if (k == "chunk") o.chunk = value.cast<index_t>();
    else if (k == "memory_budget") o.memory_budget = value.cast<std::size_t>();
    else throw Error("unknown option '" + k + "' (known: device, schedule, executor, depth, pipeline, chunk, memory_budget)");
  }
  return o;
}

py::dict stats_dict(const TraversalStats& st) {
  py::dict d;
  d["device"] = to_string(st.device);
  d["schedule"] = to_string(st.schedule_kind);
  d["executor"] = to_string(st.executor_kind);
  d["depth"] = st.depth;
  d["inspect_ms"] = st.times.inspect_ms;
  d["schedule_ms"] = st.times.schedule_ms;
  d["execute_ms"] = st.times.execute_ms;
  d["total_ms"] = st.times.total_ms();
  d["auto_trial_ms"] = st.auto_trial_ms;
  return d;
}

// A kd, ball or vp tree and the searches over it (point correlation: kd-tree only).
class PointIndex {
 public:
  PointIndex(const std::string& kind, std::uintptr_t points, index_t n, int dims, int leaf_size, const std::string& device)
      : device_(parse_device(device)) {
    py::gil_scoped_release free;
    if (kind == "kd") build<KdTreeOptions>(kd_, at<const float>(points), n, dims, leaf_size);
    else if (kind == "ball") build<BallTreeOptions>(ball_, at<const float>(points), n, dims, leaf_size);
    else if (kind == "vp") build<VpTreeOptions>(vp_, at<const float>(points), n, dims, leaf_size);
    else throw Error("tree kind '" + kind + "' is unknown (kd, ball, vp)");
  }
  int dims() const { return knn_->dims(); }
  index_t size() const { return knn_->size(); }
  int height() const { return knn_->height(); }
  std::string device() const { return to_string(knn_->device()); }
  std::string built_on() const {
    return to_string(kd_ ? kd_->built_on() : ball_ ? ball_->built_on() : vp_->built_on());
  }

  // The tree builds where the searches run (device "cpu" keeps the build off the GPU too).
  template <class Options, class Tree>
  void build(std::unique_ptr<Tree>& tree, const float* points, index_t n, int dims, int leaf_size) {
    Options o;
    o.leaf_size = leaf_size;
    o.device = device_;
    tree = std::make_unique<Tree>(Tree::build(points, n, dims, o));
    knn_ = std::make_unique<NearestNeighbors>(*tree, device_);
  }

  py::dict knn(std::uintptr_t queries, index_t n, int k, std::uintptr_t indices, std::uintptr_t distances,
               const py::dict& kw) {
    KnnOptions o;
    static_cast<TraversalOptions&>(o) = traversal_options(kw);
    o.k = k;
    TraversalStats st;
    {
      py::gil_scoped_release free;
      st = knn_->run(at<const float>(queries), n, o, at<index_t>(indices), at<float>(distances));
    }
    return stats_dict(st);
  }

  py::dict count(std::uintptr_t queries, index_t n, float r, std::uintptr_t counts, const py::dict& kw) {
    if (!kd_) throw Error("radius counts (query_ball_point) run over a KDTree; this tree is a ball or vp tree");
    PcOptions o;
    static_cast<TraversalOptions&>(o) = traversal_options(kw);
    o.radius = r;
    TraversalStats st;
    {
      py::gil_scoped_release free;
      if (!pc_) pc_ = std::make_unique<PointCorrelation>(*kd_, device_);
      st = pc_->run(at<const float>(queries), n, o, at<index_t>(counts));
    }
    return stats_dict(st);
  }

 private:
  Device device_;
  std::unique_ptr<KdTree> kd_;
  std::unique_ptr<BallTree> ball_;
  std::unique_ptr<VpTree> vp_;
  std::unique_ptr<NearestNeighbors> knn_;
  std::unique_ptr<PointCorrelation> pc_;
};

py::dict barnes_hut(std::uintptr_t positions, std::uintptr_t masses, index_t n, std::uintptr_t forces, float theta,
                    float softening, int leaf_size, const py::dict& kw) {
  BhOptions o;
  static_cast<TraversalOptions&>(o) = traversal_options(kw);
  o.theta = theta;
  o.softening = softening;
  TraversalStats st;
  {
    py::gil_scoped_release free;
    OctreeOptions oo;
    oo.leaf_size = leaf_size;
    const Octree tree = Octree::build(at<const float>(positions), at<const float>(masses), n, oo);
    BarnesHut bh(tree, o.device);
    st = bh.run(o, at<float>(forces));
  }
  return stats_dict(st);
}

// A forest and, made on first use per device, its predictor.
class PyForest {
 public:
  explicit PyForest(Forest f) : forest_(std::move(f)) {}
  static PyForest load(const std::string& path) { return PyForest(Forest::load(path)); }
  static PyForest parse(const std::string& text, const std::string& name) { return PyForest(Forest::parse(text, name)); }
  int n_features() const { return forest_.n_features(); }
  int n_trees() const { return static_cast<int>(forest_.n_trees()); }
  int width(const std::string& output, const std::string& device) { return predictor(device).output_width(parse_output(output)); }
  std::string device(const std::string& device) { return to_string(predictor(device).device()); }

  py::dict predict(std::uintptr_t rows, index_t n, std::uintptr_t out, const std::string& output,
                   const std::string& device) {
    ForestRunOptions o;
    o.output = parse_output(output);
    ForestPredictor& p = predictor(device);
    ForestTimes t;
    {
      py::gil_scoped_release free;
      t = p.predict(at<const float>(rows), n, at<float>(out), o);
    }
    py::dict d;
    d["device"] = to_string(p.device());
    d["kernel"] = to_string(t.kernel);
    d["kernel_ms"] = t.kernel_ms;
    d["total_ms"] = t.total_ms;
    return d;
  }

 private:
  static ForestOutput parse_output(const std::string& s) {
    if (s == "margin") return ForestOutput::Margin;
    if (s == "prob") return ForestOutput::Prob;
    if (s == "class") return ForestOutput::Class;
    if (s == "leaf") return ForestOutput::Leaf;
    throw Error("output = '" + s + "' is unknown (margin, prob, class, leaf)");
  }
  ForestPredictor& predictor(const std::string& device) {
    const Device d = resolve_device(parse_device(device));
    std::unique_ptr<ForestPredictor>& p = d == Device::Gpu ? gpu_ : cpu_;
    if (!p) {
      ForestConfig c;
      c.device = d;
      p = std::make_unique<ForestPredictor>(forest_, c);
    }
    return *p;
  }
  Forest forest_;
  std::unique_ptr<ForestPredictor> cpu_, gpu_;
};

}  // namespace

PYBIND11_MODULE(_canopy, m) {
  m.doc() = "Canopy's C++ core; use the canopy package, not this module";
  // Canopy's errors name the parameter, file or line: ValueError, and MemoryError when the GPU
  // lacks the memory (the message says so).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.find("not enough GPU memory") != std::string::npos || what.find("memory budget") != std::string::npos)
        PyErr_SetString(PyExc_MemoryError, e.what());
      else
        PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("gpu_available", &gpu_available);
  m.def("gpu_description", &gpu_description);

  py::class_<PointIndex>(m, "PointIndex")
      .def(py::init<const std::string&, std::uintptr_t, index_t, int, int, const std::string&>())
      .def_property_readonly("dims", &PointIndex::dims)
      .def_property_readonly("size", &PointIndex::size)
      .def_property_readonly("height", &PointIndex::height)
      .def_property_readonly("device", &PointIndex::device)
      .def_property_readonly("built_on", &PointIndex::built_on)
      .def("knn", &PointIndex::knn)
      .def("count", &PointIndex::count);
  m.def("barnes_hut", &barnes_hut);

  py::class_<PyForest>(m, "Forest")
      .def_static("load", &PyForest::load)
      .def_static("parse", &PyForest::parse)
      .def_property_readonly("n_features", &PyForest::n_features)
      .def_property_readonly("n_trees", &PyForest::n_trees)
      .def("width", &PyForest::width)
      .def("device", &PyForest::device)
      .def("predict", &PyForest::predict);
}
