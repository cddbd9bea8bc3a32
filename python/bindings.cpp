// canopy._canopy: the C++ side of the Python package. It takes raw addresses (host or device
// memory: a numpy array itself, or a CUDA array's data pointer as an int) so that the Python
// side (python/canopy/__init__.py, forest.py) decides conversions and output allocation once, for numpy and
// for CUDA arrays alike; the GIL is released while Canopy works.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <limits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.hpp"
#include "core/warnings.hpp"
#include "core/types.hpp"
#include "layouts/ball_tree.hpp"
#include "layouts/forest.hpp"
#include "layouts/forest_layouts.hpp"
#include "layouts/kdtree.hpp"
#include "layouts/octree.hpp"
#include "layouts/vp_tree.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/exact_filter.hpp"
#include "runtime/forest_predictor.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"
#include "python/module.hpp"

using namespace canopy;

// A vector's bytes, for numpy.frombuffer on the Python side (no numpy API here: see Address).
template <class T>
py::bytes as_bytes(const std::vector<T>& a) {
  return py::bytes(reinterpret_cast<const char*>(a.data()), a.size() * sizeof(T));
}

namespace {

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

}  // namespace

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
  d["wall_ms"] = st.wall_ms;
  d["auto_trial_ms"] = st.auto_trial_ms;
  return d;
}

py::dict ragged_stats_dict(const RaggedStats& st) {
  py::dict d = stats_dict(st);
  d["total"] = st.total;
  d["scan_ms"] = st.scan_ms;
  d["fill_ms"] = st.fill_ms;
  d["sort_ms"] = st.sort_ms;
  d["copy_ms"] = st.copy_ms;
  d["fill_batches"] = st.fill_batches;
  d["lists_ms"] = st.lists_ms();
  return d;
}

namespace {

// A kd, ball or vp tree and the searches over it (point correlation: kd-tree only). Several
// Python threads may call one index at once (the GIL is released while Canopy works): the
// searches take turns on their C++ object's lock (NearestNeighbors, PointCorrelation), and the
// point correlation object, made on first use, is made under the index's lock (taken without
// the GIL). The sizes never wait for a call.
class PointIndex {
 public:
  PointIndex(const std::string& kind, Address points, index_t n, int dims, int leaf_size, const std::string& device)
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

  // The kd-tree's nodes for scipy's node views, in preorder (node n's children: n + 1 and
  // first), as raw arrays (bytes: int64 first, int32 count, int16 split_dim, float32 split, int64
  // point ids) for numpy.frombuffer; split is the left child's upper bound in split_dim, the value
  // find_leaf compares with. A GPU-built tree's host copy is made once.
  py::tuple nodes() const {
    if (!kd_) throw Error("node views: a KDTree's (this tree is a ball or vp tree)");
    const KdTreeView v = kd_->view();
    const auto m = static_cast<std::size_t>(v.n_nodes);
    std::vector<index_t> first(m);
    std::vector<std::int32_t> count(m);
    std::vector<std::int16_t> dim(m);
    std::vector<float> split(m);
    for (std::size_t i = 0; i < m; ++i) {
      const KdNode& nd = v.nodes[i];
      first[i] = nd.first;
      count[i] = nd.count;
      dim[i] = nd.split_dim;
      split[i] = nd.split_dim >= 0 ? v.hi(static_cast<node_id>(i + 1))[nd.split_dim]
                                   : std::numeric_limits<float>::quiet_NaN();
    }
    const std::vector<index_t> ids(v.point_ids, v.point_ids + v.n_points);
    return py::make_tuple(as_bytes(first), as_bytes(count), as_bytes(dim), as_bytes(split), as_bytes(ids));
  }

  py::dict knn(Address queries, index_t n, int k, Address indices, Address distances,
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

  py::dict count(Address queries, index_t n, float r, Address counts, const py::dict& kw) {
    if (!kd_) throw Error("radius counts (query_ball_point) run over a KDTree; this tree is a ball or vp tree");
    PcOptions o;
    static_cast<TraversalOptions&>(o) = traversal_options(kw);
    o.radius = r;
    TraversalStats st;
    {
      py::gil_scoped_release free;
      st = point_correlation().run(at<const float>(queries), n, o, at<index_t>(counts));
    }
    return stats_dict(st);
  }

  // Counts at several radii in one walk (PointCorrelation::run_radii) into counts [n][len(radii)]
  // (int64); radii non-decreasing.
  py::dict count_radii(Address queries, index_t n, const std::vector<float>& radii, Address counts, const py::dict& kw) {
    if (!kd_) throw Error("radius counts (count_neighbors) run over a KDTree; this tree is a ball or vp tree");
    PcOptions o;
    static_cast<TraversalOptions&>(o) = traversal_options(kw);
    TraversalStats st;
    {
      py::gil_scoped_release free;
      st = point_correlation().run_radii(at<const float>(queries), n, radii.data(), static_cast<int>(radii.size()), o,
                                         at<index_t>(counts));
    }
    return stats_dict(st);
  }

  // count_radii summed on the device (PointCorrelation::run_radii_totals): (totals, rows, flags,
  // row_counts, stats), the arrays as bytes for numpy.frombuffer (int64, int64, uint32, int64
  // [rows][len(radii)]).
  py::tuple count_radii_totals(Address queries, index_t n, const std::vector<float>& radii,
                               const std::vector<std::pair<int, int>>& compare, const py::dict& kw) {
    if (!kd_) throw Error("radius counts (count_neighbors) run over a KDTree; this tree is a ball or vp tree");
    PcOptions o;
    static_cast<TraversalOptions&>(o) = traversal_options(kw);
    PcRadiiTotals t;
    {
      py::gil_scoped_release free;
      t = point_correlation().run_radii_totals(at<const float>(queries), n, radii.data(), static_cast<int>(radii.size()),
                                               o, compare);
    }
    return py::make_tuple(as_bytes(t.totals), as_bytes(t.rows), as_bytes(t.flags), as_bytes(t.row_counts), stats_dict(t));
  }

  // The exact pairs of _ball_chunks on the GPU: exact_pairs (exact_pairs.cpp).
  py::tuple ball_exact(Address queries, index_t n, float r, const py::object& radii, const py::object& rows, index_t row0,
                       const py::object& q, const py::object& rr, double r64, Address data, bool data_f64, index_t n_data,
                       const py::object& keep, index_t n_ids, double p, bool upper, bool with_d, const py::dict& kw,
                       const py::object& counts, bool queries_kept) {
    if (!kd_) throw Error("exact radius pairs run over a KDTree; this tree is a ball or vp tree");
    return exact_pairs(*exact_, [this]() -> PointCorrelation& { return point_correlation(); }, kd_->dims(), queries, n,
                       r, radii, rows, row0, q, rr, r64, data, data_f64, n_data, keep, n_ids, p, upper, with_d, kw, counts, queries_kept);
  }

  // Radius neighbour lists (PointCorrelation::run_lists): (offsets, indices, stats), offsets an
  // int64 numpy array [n + 1] and indices int64 [offsets[n]] (query i's at offsets[i] ..
  // offsets[i + 1]), made with numpy.empty once the count pass has given the total (the GIL
  // taken for it); queries in host or device memory. radii: None, or an address of n float32
  // radii (a numpy array or a device pointer); sorted: each list ascending (scipy's order).
  py::tuple ball(Address queries, index_t n, float r, const py::dict& kw, const py::object& radii, bool sorted,
                 index_t upper_from) {
    if (!kd_) throw Error("radius lists (query_ball_point) run over a KDTree; this tree is a ball or vp tree");
    PcListOptions o;
    static_cast<TraversalOptions&>(o) = traversal_options(kw);
    o.radius = r;
    o.sorted = sorted;
    o.upper_from = upper_from;
    if (!radii.is_none()) o.radii = at<const float>(radii.cast<Address>());
    const py::object empty = py::module_::import("numpy").attr("empty");
    const py::object offsets = empty(std::max<index_t>(n, 0) + 1, "int64");
    index_t* offsets_at = at<index_t>(offsets.cast<Address>());
    py::object indices;
    RaggedStats st;
    {
      py::gil_scoped_release free;
      st = point_correlation().run_lists(at<const float>(queries), n, o, offsets_at, [&](index_t total) -> index_t* {
        py::gil_scoped_acquire gil;
        try {
          indices = empty(total, "int64");
        } catch (const py::error_already_set& e) {
          throw OutOfMemory("radius lists: numpy.empty(" + std::to_string(total) + ", int64) failed: " + e.what());
        }
        return at<index_t>(indices.cast<Address>());
      });
    }
    return py::make_tuple(offsets, indices, ragged_stats_dict(st));
  }

 private:
  Device device_;
  std::unique_ptr<KdTree> kd_;
  std::unique_ptr<BallTree> ball_;
  std::unique_ptr<VpTree> vp_;
  // Called without the GIL: the first caller makes it (uploading the tree on the GPU), the
  // others wait for it.
  PointCorrelation& point_correlation() {
    const std::lock_guard<std::mutex> lock(*mutex_);
    if (!pc_) pc_ = std::make_unique<PointCorrelation>(*kd_, device_);
    return *pc_;
  }

  std::unique_ptr<NearestNeighbors> knn_;
  std::unique_ptr<PointCorrelation> pc_;  // made once, never replaced
  std::unique_ptr<ExactPairsGpu> exact_ = std::make_unique<ExactPairsGpu>();  // its device data kept between calls
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();
};

py::dict barnes_hut(Address positions, Address masses, index_t n, Address forces, float theta,
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

// Canopy's warnings (core/warnings.hpp) as Python RuntimeWarnings. C++ may warn from a call that
// released the GIL, so the handler takes it. A warning the filters turn into an error
// (warnings.simplefilter("error")) is kept and raised by the forest call it came from
// (WarningScope); elsewhere it is reported as unraisable (it cannot unwind C++ callers).
struct PendingWarning {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
};
thread_local int warning_scopes = 0;
thread_local PendingWarning pending_warning;

bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

void python_warning(const std::string& message) {
  if (!Py_IsInitialized() || python_finalizing()) {
    std::fprintf(stderr, "canopy: warning: %s\n", message.c_str());
    return;
  }
  py::gil_scoped_acquire gil;
  if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) == 0) return;
  if (warning_scopes > 0 && !pending_warning.type) {
    PyErr_Fetch(&pending_warning.type, &pending_warning.value, &pending_warning.traceback);
  } else {
    PyErr_WriteUnraisable(nullptr);
  }
}

// Around a forest call (GIL held at both ends): raises the warning-turned-error it kept.
class WarningScope {
 public:
  WarningScope() { ++warning_scopes; }
  ~WarningScope() {
    if (--warning_scopes == 0 && pending_warning.type) {  // the call failed otherwise: drop it
      Py_XDECREF(pending_warning.type);
      Py_XDECREF(pending_warning.value);
      Py_XDECREF(pending_warning.traceback);
      pending_warning = {};
    }
  }
  void raise_pending() {
    if (warning_scopes != 1 || !pending_warning.type) return;
    PyErr_Restore(pending_warning.type, pending_warning.value, pending_warning.traceback);
    pending_warning = {};
    throw py::error_already_set();
  }
};

// The run options the Python side passes on (its keyword arguments, types checked there).
struct PyRunOptions {
  std::string device = "auto";
  ForestRunOptions run;
};

int schedule_knob(const py::handle& v, const std::string& name) {
  if (!py::isinstance<py::int_>(v) || py::isinstance<py::bool_>(v))
    throw Error("schedule: '" + name + "' must be an int");
  return v.cast<int>();
}

ForestSchedule parse_schedule(const py::dict& d) {
  ForestSchedule s;
  for (const auto& [key, value] : d) {
    const std::string k = py::str(key);
    if (k == "block_threads") s.block_threads = schedule_knob(value, k);
    else if (k == "rows_per_thread") s.rows_per_thread = schedule_knob(value, k);
    else if (k == "tree_interleave") s.tree_interleave = schedule_knob(value, k);
    else if (k == "cache_rows") s.cache_rows = schedule_knob(value, k);
    else if (k == "tree_sync") s.tree_sync = schedule_knob(value, k);
    else if (k == "rows_per_block") s.rows_per_block = schedule_knob(value, k);
    else if (k == "tree_group") s.tree_group = schedule_knob(value, k);
    else if (k == "interleaved") s.interleaved = schedule_knob(value, k);
    else if (k == "top_rows") s.top_rows = schedule_knob(value, k);
    else if (k == "part_kib") s.part_kib = schedule_knob(value, k);
    else
      throw Error("schedule: '" + k + "' is unknown (known: block_threads, rows_per_thread, tree_interleave, "
                  "cache_rows, tree_sync, rows_per_block, tree_group, interleaved, top_rows, part_kib)");
  }
  return s;
}

PyRunOptions run_options(const std::string& output, const py::dict& kw) {
  PyRunOptions o;
  o.run.output = parse_kind(output, ForestOutput::Proba, "output");
  for (const auto& [key, value] : kw) {
    const std::string k = py::str(key);
    if (k == "device") o.device = value.cast<std::string>();
    else if (k == "kernel") o.run.kernel = parse_forest_kernel(value.cast<std::string>());
    else if (k == "online_tuning") o.run.online_tuning = value.cast<bool>();
    else if (k == "graph") o.run.graph = value.cast<bool>();
    else if (k == "schedule") o.run.schedule = parse_schedule(value.cast<py::dict>());
    else throw Error("unknown forest option '" + k + "' (known: device, kernel, online_tuning, graph, schedule)");
  }
  return o;
}

// What a forest call ran (Forest.last_stats): kept as the C++ values, the names made when read, so
// that a serving loop's call does not pay for a dict it never looks at.
struct ForestCallStats {
  ForestTimes times;
  Device device = Device::Cpu;
  py::dict as_dict() const {
    const py::object self = py::cast(*this);  // one copy, its properties read in turn
    py::dict d;
    for (const char* k : kFields) d[k] = self.attr(k);
    return d;
  }
  static constexpr const char* kFields[] = {"device",    "layout",      "kernel",    "schedule",  "tuning",  "graph",
                                            "upload_ms", "kernel_ms",   "download_ms", "tuning_ms", "wall_ms"};
};

// A forest and, made on first use per device, its predictor. The GIL is released while Canopy
// works, so calls from several Python threads take turns on the forest's lock (taken without
// the GIL: a warning raised inside a call needs the GIL back), which also guards the
// predictors' making and replacement (configure) and the configuration.
class PyForest {
 public:
  explicit PyForest(Forest f) : forest_(std::move(f)) {}
  // XGBoost JSON or UBJSON, or Canopy forest JSON: text or bytes (not compressed); `name`
  // stands for the file in messages.
  static PyForest parse(const std::string& data, const std::string& name) {
    py::gil_scoped_release free;
    return PyForest(Forest::parse(data, name));
  }
  // The layout (ForestConfig::layout) and cache directory (ForestConfig::cache_dir) of the
  // predictors made from now on.
  void configure(const std::string& layout, const std::string& cache_dir) {
    const ForestLayout l = parse_forest_layout(layout);
    py::gil_scoped_release free;
    const std::lock_guard<std::mutex> lock(*mutex_);
    config_.layout = l;
    config_.cache_dir = cache_dir;
    cpu_.reset();
    gpu_.reset();
  }
  int n_features() const { return forest_.n_features(); }
  int n_trees() const { return static_cast<int>(forest_.n_trees()); }
  int n_groups() const { return forest_.n_groups(); }
  int n_classes() const { return forest_.n_classes(); }
  std::vector<double> class_values() const { return forest_.class_values(); }
  std::string objective() const { return to_string(forest_.objective()); }
  bool is_classifier() const { return forest_.is_classifier(); }
  bool is_xgboost() const { return forest_.is_xgboost(); }
  int width(const std::string& output) const { return forest_.output_width(parse_kind(output, ForestOutput::Proba, "output")); }
  std::string device(const std::string& device) {
    return with_predictor(device, [](ForestPredictor& p) { return std::string(to_string(p.device())); });
  }
  std::string layout(const std::string& device) {
    return with_predictor(device, [](ForestPredictor& p) { return std::string(to_string(p.layout())); });
  }
  // The same model with the trees `ids` only, in that order, and this forest's configuration.
  PyForest subset(const std::vector<index_t>& ids) const {
    py::gil_scoped_release free;
    PyForest f(forest_.subset(ids));
    const std::lock_guard<std::mutex> lock(*mutex_);  // configure() may be writing config_
    f.config_ = config_;
    return f;
  }

  // out: [n][width(output)] float32, or float64 when `f64` (Margin, Prob, Class).
  ForestCallStats predict(Address rows, index_t n, Address out, bool f64, const std::string& output,
                          const py::dict& kw) {
    WarningScope warnings;
    const PyRunOptions o = run_options(output, kw);
    ForestCallStats stats;
    {
      py::gil_scoped_release free;
      const std::lock_guard<std::mutex> lock(*mutex_);
      ForestPredictor& p = predictor_locked(o.device);
      stats.times = f64 ? p.predict_f64(at<const float>(rows), n, o.run, at<double>(out))
                        : p.predict(at<const float>(rows), n, o.run, at<float>(out));
      stats.device = p.device();
    }
    warnings.raise_pending();
    return stats;
  }

  py::list optimize(Address rows, index_t n, const std::vector<index_t>& batch_sizes, const py::dict& kw) {
    WarningScope warnings;
    const PyRunOptions o = run_options("prob", kw);
    std::vector<ForestTuned> tuned;
    {
      py::gil_scoped_release free;
      const std::lock_guard<std::mutex> lock(*mutex_);
      tuned = predictor_locked(o.device).optimize(at<const float>(rows), n, batch_sizes, o.run);
    }
    warnings.raise_pending();
    py::list l;
    for (const ForestTuned& t : tuned) {
      py::dict d;
      d["batch_size"] = t.batch_size;
      d["kernel"] = to_string(t.kernel);
      d["schedule"] = t.schedule.describe();
      d["kernel_ms"] = t.kernel_ms;
      d["trials"] = t.trials;
      l.append(d);
    }
    return l;
  }

 private:
  // f(the predictor for `device`), under the lock: configure() may replace the predictor once
  // the lock is released.
  template <class F>
  std::invoke_result_t<F&, ForestPredictor&> with_predictor(const std::string& device, F&& f) {
    WarningScope warnings;
    std::invoke_result_t<F&, ForestPredictor&> r;
    {
      py::gil_scoped_release free;
      const std::lock_guard<std::mutex> lock(*mutex_);
      r = f(predictor_locked(device));
    }
    warnings.raise_pending();
    return r;
  }
  // Builds the layout (and uploads it) on first use; called without the GIL, with mutex_ held.
  ForestPredictor& predictor_locked(const std::string& device) {
    const Device d = resolve_device(parse_device(device));
    std::unique_ptr<ForestPredictor>& p = d == Device::Gpu ? gpu_ : cpu_;
    if (!p) {
      ForestConfig c = config_;
      c.device = d;
      p = std::make_unique<ForestPredictor>(forest_, c);
    }
    return *p;
  }
  Forest forest_;
  ForestConfig config_;
  std::unique_ptr<ForestPredictor> cpu_, gpu_;
  std::unique_ptr<std::mutex> mutex_ = std::make_unique<std::mutex>();  // (a PyForest moves)
};

}  // namespace

PYBIND11_MODULE(_canopy, m) {
  m.doc() = "Canopy's C++ core; use the canopy package, not this module";
  // Canopy's errors name the parameter, file or line: ValueError, and MemoryError for
  // OutOfMemory (the GPU, or the memory budget, lacks what a call needs).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  m.def("gpu_available", &gpu_available);
  register_exact_filter(m);
  register_lists(m);
  m.def("gpu_description", &gpu_description);

  py::class_<PointIndex>(m, "PointIndex")
      .def(py::init<const std::string&, Address, index_t, int, int, const std::string&>())
      .def_property_readonly("dims", &PointIndex::dims)
      .def_property_readonly("size", &PointIndex::size)
      .def_property_readonly("height", &PointIndex::height)
      .def_property_readonly("device", &PointIndex::device)
      .def_property_readonly("built_on", &PointIndex::built_on)
      .def("knn", &PointIndex::knn)
      .def("count", &PointIndex::count)
      .def("count_radii", &PointIndex::count_radii)
      .def("count_radii_totals", &PointIndex::count_radii_totals)
      .def("ball_exact", &PointIndex::ball_exact)
      .def("nodes", &PointIndex::nodes)
      .def("ball", &PointIndex::ball, py::arg("queries"), py::arg("n"), py::arg("r"), py::arg("kw"), py::kw_only(),
           py::arg("radii") = py::none(), py::arg("sorted") = true, py::arg("upper_from") = -1);
  m.def("barnes_hut", &barnes_hut);

  py::class_<ForestCallStats>(m, "ForestCallStats")
      .def_property_readonly("device", [](const ForestCallStats& s) { return to_string(s.device); })
      .def_property_readonly("layout", [](const ForestCallStats& s) { return to_string(s.times.layout); })
      .def_property_readonly("kernel", [](const ForestCallStats& s) { return to_string(s.times.kernel); })
      .def_property_readonly("schedule", [](const ForestCallStats& s) { return s.times.schedule.describe(); })
      .def_property_readonly("tuning", [](const ForestCallStats& s) { return to_string(s.times.tuning); })
      .def_property_readonly("graph", [](const ForestCallStats& s) { return s.times.graph; })
      .def_property_readonly("upload_ms", [](const ForestCallStats& s) { return s.times.upload_ms; })
      .def_property_readonly("kernel_ms", [](const ForestCallStats& s) { return s.times.kernel_ms; })
      .def_property_readonly("download_ms", [](const ForestCallStats& s) { return s.times.download_ms; })
      .def_property_readonly("tuning_ms", [](const ForestCallStats& s) { return s.times.tuning_ms; })
      .def_property_readonly("wall_ms", [](const ForestCallStats& s) { return s.times.wall_ms; })
      // The earlier name of wall_ms (total_ms is a sum of phases elsewhere); not in vars().
      .def_property_readonly("total_ms", [](const ForestCallStats& s) { return s.times.wall_ms; })
      .def("as_dict", &ForestCallStats::as_dict);

  py::class_<PyForest>(m, "Forest")
      .def_static("parse", &PyForest::parse)
      .def("configure", &PyForest::configure)
      .def_property_readonly("n_features", &PyForest::n_features)
      .def_property_readonly("n_trees", &PyForest::n_trees)
      .def_property_readonly("n_groups", &PyForest::n_groups)
      .def_property_readonly("n_classes", &PyForest::n_classes)
      .def_property_readonly("class_values", &PyForest::class_values)
      .def_property_readonly("objective", &PyForest::objective)
      .def_property_readonly("is_classifier", &PyForest::is_classifier)
      .def_property_readonly("is_xgboost", &PyForest::is_xgboost)
      .def("width", &PyForest::width)
      .def("device", &PyForest::device)
      .def("layout", &PyForest::layout)
      .def("subset", &PyForest::subset)
      .def("predict", &PyForest::predict)
      .def("optimize", &PyForest::optimize);

  // Canopy's warnings become Python RuntimeWarnings; stderr again once Python shuts down.
  set_warning_handler(python_warning);
  // For the tests: canopy::warn(message) from C++ without the GIL, as a forest call would.
  m.def("_warn", [](const std::string& message) {
    WarningScope warnings;
    {
      py::gil_scoped_release free;
      warn(message);
    }
    warnings.raise_pending();
  });
  py::module_::import("atexit").attr("register")(py::cpp_function([] { set_warning_handler({}); }));
}
