"""canopy.Forest: decision-forest inference (XGBoost and scikit-learn forests) with the API the
training libraries have: predict_proba, predict, apply, classes_, iteration_range.

    import canopy
    forest = canopy.Forest.load(model)        # a path, an xgboost Booster / XGBClassifier /
                                              # XGBRegressor, a scikit-learn random forest
    proba = forest.predict_proba(X)           # as the model's predict_proba, to the bit
    labels = forest.predict(X)                # classifiers: labels; regressors: values
    margins = forest.predict(X, output_margin=True)
    leaves = forest.apply(X)                  # each tree's leaf (XGBoost's pred_leaf)

The default call is the fast call: the C++ runtime's Auto layout and strategy (tuned per batch
size on the calls' own batches, or up front by forest.optimize(X)). docs/python.md, "Forests",
says what each call returns and where it differs from the training library.
"""
import gzip
import json
import os

import numpy as np

from . import _canopy
from . import _arrays
from ._arrays import _Input, _OutputSlots
from .sklearn_export import forest_to_dict as _sklearn_forest_to_dict

__all__ = ["Forest"]

_DEVICES = ("auto", "cpu", "gpu")
_DEFAULT_OPTIONS = {d: {"device": d} for d in _DEVICES}  # (read, never written, by the binding)
_LAYOUTS = ("auto", "csr", "reorg", "hier", "hierarchical", "adaptive")
_KERNELS = ("auto", "direct", "shared-data", "shared-forest", "split-shared-forest", "hybrid")
_OUTPUTS = ("margin", "prob", "class", "leaf")
_SCHEDULE_KNOBS = ("block_threads", "rows_per_thread", "tree_interleave", "cache_rows", "tree_sync",
                   "rows_per_block", "tree_group", "interleaved", "top_rows", "part_kib")
# The keyword arguments every prediction call takes: ForestRunOptions, and the device.
_RUN_OPTIONS = ("device", "kernel", "online_tuning", "graph", "schedule")
_PICKLE_VERSION = 1


def _choice(name, value, known):
    if not isinstance(value, str):
        raise TypeError(f"{name}: a string is needed ({', '.join(known)}), not {type(value).__name__}")
    if value not in known:
        raise ValueError(f"{name} = {value!r} is unknown (known: {', '.join(known)})")
    return value


def _flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: True or False is needed, not {type(value).__name__}")
    return bool(value)


def _integer(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: an int is needed, not {type(value).__name__}")
    return int(value)


def _run_options(call, options, device):
    """The C++ run options from a call's keyword arguments: a TypeError names unknown keywords
    and wrongly typed values, a ValueError unknown names."""
    if not options and device in _DEVICES:  # the default call: nothing to check
        return _DEFAULT_OPTIONS[device]
    unknown = sorted(set(options) - set(_RUN_OPTIONS))
    if unknown:
        raise TypeError(f"{call}() got unexpected keyword argument(s) {', '.join(map(repr, unknown))} "
                        f"(forest options: {', '.join(_RUN_OPTIONS)})")
    o = {"device": _choice("device", device if options.get("device") is None else options["device"], _DEVICES)}
    if options.get("kernel") is not None:
        o["kernel"] = _choice("kernel", options["kernel"], _KERNELS)
    for k in ("online_tuning", "graph"):
        if options.get(k) is not None:
            o[k] = _flag(k, options[k])
    s = options.get("schedule")
    if s is not None and not (isinstance(s, str) and s == "auto"):
        if not isinstance(s, dict):
            raise TypeError(f"schedule: 'auto' or a dict of knobs ({', '.join(_SCHEDULE_KNOBS)}) is needed, "
                            f"not {type(s).__name__}")
        bad = sorted(set(map(str, s)) - set(_SCHEDULE_KNOBS))
        if bad:
            raise ValueError(f"schedule: unknown knob(s) {', '.join(map(repr, bad))} "
                             f"(known: {', '.join(_SCHEDULE_KNOBS)})")
        o["schedule"] = {k: _integer(f"schedule['{k}']", v) for k, v in s.items()}
    return o


# --- model documents --------------------------------------------------------------------------

_UBJ_NUMBERS = {b"i": ">i1", b"U": ">u1", b"I": ">i2", b"l": ">i4", b"L": ">i8", b"d": ">f4", b"D": ">f8"}


class _Ubjson:
    """A small UBJSON reader (the format of XGBoost's .ubj models), for the few fields the Python
    side reads (feature names, num_parallel_tree); typed number arrays come back as numpy arrays.
    The C++ importer checks the document properly."""

    def __init__(self, data):
        self.b = memoryview(data)
        self.i = 0

    def byte(self):
        c = bytes(self.b[self.i:self.i + 1])
        if not c:
            raise ValueError("UBJSON: the document ends early")
        self.i += 1
        return c

    def number(self, marker):
        dt = np.dtype(_UBJ_NUMBERS[marker])
        v = np.frombuffer(self.b, dtype=dt, count=1, offset=self.i)[0]
        self.i += dt.itemsize
        return v.item()

    def length(self):
        m = self.byte()
        if m not in _UBJ_NUMBERS or m in (b"d", b"D"):
            raise ValueError(f"UBJSON: a length has marker {m!r}")
        return int(self.number(m))

    def text(self):
        n = self.length()
        s = bytes(self.b[self.i:self.i + n]).decode("utf-8")
        self.i += n
        return s

    def value(self, m=None):
        m = m or self.byte()
        while m == b"N":  # no-op
            m = self.byte()
        if m in _UBJ_NUMBERS:
            return self.number(m)
        if m in (b"S", b"H"):
            return self.text()
        if m == b"C":
            return self.byte().decode("latin-1")
        if m in (b"T", b"F", b"Z"):
            return {b"T": True, b"F": False, b"Z": None}[m]
        if m in (b"[", b"{"):
            return self.container(m == b"{")
        raise ValueError(f"UBJSON: unknown marker {m!r} at byte {self.i - 1}")

    def container(self, is_object):
        kind, count = None, None
        if bytes(self.b[self.i:self.i + 1]) == b"$":
            self.i += 1
            kind = self.byte()
            if self.byte() != b"#":
                raise ValueError("UBJSON: a typed container without a count")
            count = self.length()
        elif bytes(self.b[self.i:self.i + 1]) == b"#":
            self.i += 1
            count = self.length()
        if not is_object and kind in _UBJ_NUMBERS:
            dt = np.dtype(_UBJ_NUMBERS[kind])
            a = np.frombuffer(self.b, dtype=dt, count=count, offset=self.i)
            self.i += dt.itemsize * count
            return a
        end = b"}" if is_object else b"]"
        out = {} if is_object else []
        k = 0
        while count is None or k < count:
            if count is None:
                if bytes(self.b[self.i:self.i + 1]) == end:
                    self.i += 1
                    break
            if is_object:
                key = self.text()
                out[key] = self.value(kind)
            else:
                out.append(self.value(kind))
            k += 1
        return out


def _looks_like_ubjson(data):
    # The C++ importer's rule (io/detail/model_json.hpp): "{" and then a length marker.
    return isinstance(data, (bytes, bytearray)) and len(data) >= 2 and data[:1] == b"{" and \
        data[1:2] != b"\0" and data[1:2] in (b"i", b"U", b"I", b"l", b"L", b"$", b"#")


def _document(data):
    if _looks_like_ubjson(data):
        return _Ubjson(data).value()
    return json.loads(data)  # Python's json reads XGBoost's NaN / Infinity literals


def _xgboost_meta(doc):
    """What the Python side needs from an XGBoost model document (1.7 or 2.x)."""
    learner = doc.get("learner", {})
    gb = learner.get("gradient_booster", {})
    model = gb.get("model", {})
    names = learner.get("feature_names") or None
    param = model.get("gbtree_model_param", {})
    meta = {"feature_names": [str(n) for n in names] if names else None,
            "num_parallel_tree": int(param.get("num_parallel_tree", 1) or 1)}
    if "iteration_indptr" in model:  # XGBoost 2.x: the trees of each round
        meta["iteration_indptr"] = [int(v) for v in model["iteration_indptr"]]
    return meta


def _canopy_meta(doc):
    """Classes of a Canopy forest document (scikit-learn's classes_: class_names for labels that
    are not numbers) and its feature names, if it has them."""
    meta = {"feature_names": doc.get("feature_names") or None, "classes": None}
    if doc.get("task") == "classification":
        meta["classes"] = np.asarray(doc["class_names"] if "class_names" in doc else doc["classes"])
    return meta


def _is_dataframe(x):
    return type(x).__module__.split(".")[0] == "pandas" and hasattr(x, "columns") and hasattr(x, "dtypes")


def _frame_values(df):
    """A DataFrame as float32 rows: numpy columns (bool, int, float) converted; nullable ones
    (Int64, Float64, boolean) with pd.NA as NaN; categorical columns as their codes (a missing
    category: NaN), as XGBoost reads them. Any other column is a ValueError naming it."""
    import pandas as pd
    dtypes = list(df.dtypes)
    if all(isinstance(d, np.dtype) and d.kind in "biuf" for d in dtypes):
        return df.to_numpy(dtype=np.float32)
    out = np.empty(df.shape, dtype=np.float32)
    for j, (name, dt) in enumerate(zip(df.columns, dtypes)):
        col = df.iloc[:, j]
        if isinstance(dt, pd.CategoricalDtype):
            codes = col.cat.codes.to_numpy()
            v = codes.astype(np.float32)
            v[codes < 0] = np.nan
            out[:, j] = v
        elif isinstance(dt, np.dtype) and dt.kind in "biuf":
            out[:, j] = col.to_numpy()
        elif pd.api.types.is_numeric_dtype(dt) or pd.api.types.is_bool_dtype(dt):
            out[:, j] = col.to_numpy(dtype=np.float32, na_value=np.nan)
        else:
            raise ValueError(f"X: column {name!r} has dtype {dt}, not numbers")
    return out


def _names(values, limit=20):
    values = list(values)
    shown = ", ".join(map(repr, values[:limit]))
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


class ForestStats:
    """What a forest call ran (Forest.last_stats): device, layout, kernel, schedule, tuning, graph,
    upload_ms, kernel_ms, download_ms, tuning_ms, wall_ms (total_ms: its earlier name). The C++ values, named when read:
    a serving loop's call does not pay for fields it never looks at. vars() gives them all."""

    __slots__ = ("_c",)

    def __init__(self, c):
        self._c = c

    def __getattr__(self, name):
        return getattr(self._c, name)

    @property
    def __dict__(self):
        return self._c.as_dict()

    def __repr__(self):
        return "ForestStats(" + ", ".join(f"{k}={v!r}" for k, v in self._c.as_dict().items()) + ")"


class _ClassifierOnly:
    """A method or attribute classifiers have and regressors lack (hasattr is False there), as
    scikit-learn's predict_proba and classes_."""

    def __init__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__
        self.name = fn.__name__

    def __get__(self, obj, cls):
        if obj is None:
            return self
        if not obj._classifier:
            raise AttributeError(f"'{self.name}': this forest is a regressor ({obj.objective})")
        return self.fn.__get__(obj, cls)


class _ClassifierProperty(_ClassifierOnly):
    def __get__(self, obj, cls):
        got = super().__get__(obj, cls)
        return got if obj is None else got()


class Forest:
    """A decision forest (XGBoost or scikit-learn) and its predictions, as the training library
    makes them. Forest.load(x): a path to an XGBoost model (JSON or UBJSON, gzip or not) or a
    Canopy forest JSON file, an xgboost.Booster, an XGBClassifier / XGBRegressor, or a
    scikit-learn RandomForest / ExtraTrees classifier or regressor."""

    def __init__(self, *args, **kwargs):
        raise TypeError("make a Forest with canopy.Forest.load(model)")

    # --- loading -------------------------------------------------------------------------------

    @classmethod
    def load(cls, model, device="auto", layout="auto", cache_dir=None):
        """The forest of `model` (see the class). device: where predictions run by default
        ("auto": the GPU when there is one); layout: the C++ ForestConfig layout ("auto": the
        fastest); cache_dir: where Auto keeps its tuned choices (None: the default directory,
        "none": nowhere). A model trained with early stopping and loaded as an XGBClassifier /
        XGBRegressor predicts with its best_iteration's trees, as the wrapper does; a Booster or
        file predicts with every tree, as Booster.predict does."""
        _choice("device", device, _DEVICES)
        _choice("layout", layout, _LAYOUTS)
        if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir: a path is needed, not {type(cache_dir).__name__}")
        meta, default_rounds = {}, None
        if isinstance(model, (str, os.PathLike)):
            name = os.fspath(model)
            with open(name, "rb") as f:
                data = f.read()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            source = "file"
        elif hasattr(model, "get_booster"):  # xgboost's scikit-learn wrappers
            booster = model.get_booster()
            name, data, meta = cls._booster(booster, type(model).__name__)
            source = "wrapper"
            try:  # what XGBModel._get_iteration_range uses: early stopping's best iteration
                default_rounds = int(model.best_iteration) + 1
            except AttributeError:
                default_rounds = None
            if hasattr(model, "n_classes_"):
                meta["classes"] = np.asarray(model.classes_)
        elif hasattr(model, "save_raw") and hasattr(model, "get_dump"):  # xgboost.Booster
            name, data, meta = cls._booster(model, "xgboost.Booster")
            source = "booster"
        elif hasattr(model, "estimators_"):  # scikit-learn forests
            name = type(model).__name__
            data = json.dumps(_sklearn_forest_to_dict(model), separators=(",", ":"))
            source = "sklearn"
            names = getattr(model, "feature_names_in_", None)
            meta = {"feature_names": None if names is None else list(names),
                    "feature_names_in": None if names is None else np.array(names, copy=True),
                    "classes": np.array(model.classes_, copy=True) if hasattr(model, "classes_") else None}
        else:
            raise ValueError(f"Forest.load: {type(model).__name__} is neither a path, an XGBoost booster "
                             "nor a scikit-learn forest")
        f = object.__new__(cls)
        f._setup(data, name, source, meta, default_rounds, device, layout,
                 "" if cache_dir is None else os.fspath(cache_dir))
        return f

    @staticmethod
    def _booster(booster, name):
        data = bytes(booster.save_raw("json"))
        config = json.loads(booster.save_config())
        gb = config["learner"]["gradient_booster"]
        param = gb.get("gbtree_model_param") or gb.get("gbtree", {}).get("gbtree_model_param", {})
        names = booster.feature_names
        meta = {"feature_names": list(names) if names else None, "iteration_indptr": None,
                "num_parallel_tree": int(param.get("num_parallel_tree", 1) or 1)}
        return name, data, meta

    def _setup(self, data, name, source, meta, default_rounds, device, layout, cache_dir):
        self._data, self._name, self._source = data, name, source
        self._meta = dict(meta)
        self._default_rounds = default_rounds
        self._device, self._layout, self._cache_dir = device, layout, cache_dir
        self._core = _canopy.Forest.parse(data, name)
        # Read by every call: asked of the C++ forest once.
        self._n_features = self._core.n_features
        self._xgb, self._classifier = self._core.is_xgboost, self._core.is_classifier
        self._objective = self._core.objective
        self._core.configure(layout, cache_dir)
        self._subsets = {}
        self._widths = {}  # (C++ forest, output): columns of the output
        self._outs = _OutputSlots()  # a serving loop's small device results
        self._starts = None
        self._last = None  # the last call's C++ stats, wrapped when read

    @property
    def last_stats(self):
        """What the last call ran (a ForestStats), None before the first."""
        c = self._last
        return None if c is None else ForestStats(c)

    def _meta_get(self, key):
        """A field of the model document, read the first time one is needed (a file's feature
        names, classes, trees per round)."""
        if key not in self._meta:
            doc = _document(self._data)
            got = _xgboost_meta(doc) if self._core.is_xgboost else _canopy_meta(doc)
            for k, v in got.items():
                self._meta.setdefault(k, v)
            self._meta.setdefault(key, None)
        return self._meta[key]

    # --- pickling: the model document and what the Python side knows ----------------------------

    def __getstate__(self):
        return {"version": _PICKLE_VERSION, "data": self._data, "name": self._name, "source": self._source,
                "meta": self._meta, "default_rounds": self._default_rounds, "device": self._device,
                "layout": self._layout, "cache_dir": self._cache_dir}

    def __setstate__(self, state):
        if state.get("version") != _PICKLE_VERSION:
            raise ValueError(f"a pickled canopy.Forest of version {state.get('version')} "
                             f"(this canopy reads version {_PICKLE_VERSION})")
        self._setup(state["data"], state["name"], state["source"], state["meta"], state["default_rounds"],
                    state["device"], state["layout"], state["cache_dir"])

    def __repr__(self):
        return (f"canopy.Forest({self.objective}, {self.n_trees} trees, {self.n_features_in_} features, "
                f"from {self._name})")

    # --- what the model is ---------------------------------------------------------------------

    @property
    def objective(self):
        """XGBoost's objective ("binary:logistic", "multi:softprob", "multi:softmax",
        "reg:squarederror"), or "forest classifier" / "forest regressor" (scikit-learn)."""
        return self._objective

    @property
    def n_trees(self):
        """Trees in the model (all of them; predictions may use fewer: best_iteration,
        iteration_range)."""
        return self._core.n_trees

    @property
    def n_features_in_(self):
        return self._core.n_features

    n_features = n_features_in_  # the earlier name

    @property
    def feature_names_in_(self):
        """The model's feature names (scikit-learn's feature_names_in_, XGBoost's
        Booster.feature_names as an array); an AttributeError when it has none."""
        arr = self._meta.get("feature_names_in")
        if arr is None:
            names = self._meta_get("feature_names")
            if not names:
                raise AttributeError("'feature_names_in_': the model has no feature names")
            arr = np.array(names)
        return arr.copy()

    @property
    def best_iteration(self):
        """The rounds predictions use by default, less one (an early-stopped XGBClassifier /
        XGBRegressor's best_iteration); None: every round."""
        return None if self._default_rounds is None else self._default_rounds - 1

    @property
    def device(self):
        """Where predictions run by default: "gpu" or "cpu"."""
        return self._core.device(self._device)

    @property
    def layout(self):
        """The layout predictions run on by default (Auto resolved)."""
        return self._core.layout(self._device)

    @_ClassifierProperty
    def classes_(self):
        """The class labels, as the training library has them: scikit-learn's classes_ (numbers
        or strings), XGBoost's 0 .. n_classes - 1 (int64)."""
        c = self._meta_get("classes")
        if c is None:
            c = np.asarray(self._core.class_values).astype(np.int64)
            self._meta["classes"] = c
        return c

    @_ClassifierProperty
    def n_classes_(self):
        return len(self.classes_)

    # --- iteration ranges ------------------------------------------------------------------------

    def _round_starts(self):
        """XGBoost: the first tree of every round, and the end: rounds + 1 values."""
        if self._starts is None:
            indptr = self._meta_get("iteration_indptr")
            if indptr:
                self._starts = list(indptr)
            else:
                per_round = self._core.n_groups * max(1, self._meta_get("num_parallel_tree") or 1)
                n = self._core.n_trees
                if n % per_round:
                    raise ValueError(f"{self._name}: {n} trees are not whole rounds of {per_round}")
                self._starts = list(range(0, n + 1, per_round))
        return self._starts

    def _forest(self, iteration_range):
        """The C++ forest of a call: the whole model, or the trees of some rounds (cached)."""
        if not self._xgb:
            if iteration_range is not None:
                raise ValueError("iteration_range: scikit-learn forests have no boosting rounds "
                                 "(XGBoost models only)")
            return self._core
        starts = None
        if iteration_range is None:
            if self._default_rounds is None:
                return self._core
            starts = self._round_starts()
            a, b = 0, min(self._default_rounds, len(starts) - 1)
        else:
            if not isinstance(iteration_range, (tuple, list)) or len(iteration_range) != 2:
                raise TypeError(f"iteration_range: a pair (begin, end) of rounds is needed, not {iteration_range!r}")
            a, b = (_integer("iteration_range", v) for v in iteration_range)
            starts = self._round_starts()
            rounds = len(starts) - 1
            if b == 0:  # XGBoost's "to the end": the wrapper's default range, the Booster's last round
                if self._source == "wrapper":
                    a, b = 0, rounds if self._default_rounds is None else min(self._default_rounds, rounds)
                else:
                    b = rounds
            if not 0 <= a <= b <= rounds:
                raise ValueError(f"iteration_range ({a}, {b}): the model has {rounds} rounds "
                                 "(0 <= begin <= end <= rounds)")
        t0, t1 = starts[a], starts[b]
        if t0 == t1:  # XGBoost predicts the base score here; Canopy's forests have trees
            raise ValueError(f"iteration_range ({a}, {b}) selects no trees")
        if (t0, t1) == (0, self._core.n_trees):
            return self._core
        if (t0, t1) not in self._subsets:
            self._subsets[(t0, t1)] = self._core.subset(list(range(t0, t1)))
        return self._subsets[(t0, t1)]

    # --- inputs and the C++ call -------------------------------------------------------------

    def _check_columns(self, columns):
        model = self._meta_get("feature_names")
        if not model or not all(isinstance(c, str) for c in columns):
            return
        given = list(columns)
        if given == list(model):
            return
        missing = [c for c in model if c not in set(given)]
        extra = [c for c in given if c not in set(model)]
        if not missing and not extra:
            raise ValueError(f"X: the DataFrame's columns are the model's features in another order: "
                             f"{_names(given)}; the model's order: {_names(model)}")
        parts = []
        if missing:
            parts.append(f"missing {_names(missing)}")
        if extra:
            parts.append(f"not in the model {_names(extra)}")
        raise ValueError(f"X: the DataFrame's columns are not the model's features: {'; '.join(parts)} "
                         f"(the model's: {_names(model)})")

    def _rows(self, X, validate_features):
        t = type(X)
        if t is not np.ndarray and t is not _arrays._cupy_ndarray:  # (a serving loop's rows skip the pandas checks)
            if _is_dataframe(X):
                if validate_features:
                    self._check_columns(list(X.columns))
                X = _frame_values(X)
            elif type(X).__module__.split(".")[0] == "pandas" and hasattr(X, "to_numpy"):  # a Series: one row
                X = X.to_numpy(dtype=np.float32, na_value=np.nan)
        rows = _Input(X, "X", rows_ok_1d=True, numeric=True)
        if rows.dims != self._n_features:
            raise ValueError(f"X: {rows.dims} columns, the model has {self._n_features} features")
        return rows

    def _run(self, call, X, output, iteration_range, validate_features, options, f64=False):
        opts = _run_options(call, options, self._device)
        core = self._forest(iteration_range)
        rows = self._rows(X, validate_features)
        width = self._widths.get((core, output))
        if width is None:
            width = self._widths[(core, output)] = core.width(output)
        out, op = rows.empty((rows.n, width), np.float64 if f64 else np.float32, self._outs)
        self._last = core.predict(rows.ptr, rows.n, op, f64, output, opts)
        return rows, out

    @staticmethod
    def _finish(rows, out):
        if rows.torch:
            out = rows.result(out)
        return out[0] if rows.single else out

    def _labels(self, rows, index):
        """classes_[index]: on the device for device inputs when the labels are numbers."""
        classes = self.classes_
        if rows.device and classes.dtype.kind in "biuf":
            return rows.xp.asarray(classes)[index]
        if rows.device:
            index = rows.xp.asnumpy(index)
        return classes.take(index)

    # --- predictions -------------------------------------------------------------------------------

    @_ClassifierOnly
    def predict_proba(self, X, iteration_range=None, validate_features=True, **options):
        """Class probabilities (n, n_classes), as the model's predict_proba: XGBoost's float32
        (binary: [1 - p, p] as XGBClassifier forms them; multi:softmax: scipy's softmax of the
        margins, as XGBClassifier), scikit-learn's float64, bit for bit. Regressors have none."""
        xgb = self._xgb
        obj = self._objective
        if obj == "multi:softmax":
            rows, m = self._run("predict_proba", X, "margin", iteration_range, validate_features, options)
            xp = rows.xp  # scipy.special.softmax, the same operations
            e = xp.exp(m - xp.amax(m, axis=1, keepdims=True))
            p = e / xp.sum(e, axis=1, keepdims=True)
        else:  # (binary XGBoost: the C++ proba output writes [1 - p, p] in the call itself)
            rows, p = self._run("predict_proba", X, "proba", iteration_range, validate_features, options,
                                f64=not xgb)
        return self._finish(rows, p)

    def predict(self, X, output_margin=False, iteration_range=None, validate_features=True, output=None,
                **options):
        """scikit-learn's predict: a classifier's labels (classes_[argmax of predict_proba];
        XGBoost binary: p > 0.5; multi:softmax: int32 as XGBClassifier), a regressor's values
        (XGBoost float32, scikit-learn float64). output_margin=True: XGBoost's margins (float32;
        (n,) for binary and regression, (n, n_classes) for multi-class); a scikit-learn forest's
        margin is its predict_proba / predict value.

        output= is the earlier spelling: "margin", "prob" (a binary XGBoost model: one column,
        the positive class's), "class" (the class value as a float) or "leaf" (apply's values as
        floats), every one float32 and (n,) for one column, as before."""
        call = "predict"
        if output is not None:
            if output_margin:
                raise TypeError("predict: output= and output_margin= together; pass one")
            _choice("output", output, _OUTPUTS)
            rows, out = self._run(call, X, output, iteration_range, validate_features, options)
            if out.shape[1] == 1:
                out = out[:, 0]
            return self._finish(rows, out)
        if not isinstance(output_margin, (bool, np.bool_)):
            raise TypeError(f"output_margin: True or False is needed, not {type(output_margin).__name__}")
        xgb = self._xgb
        obj = self._objective
        if output_margin or not self._classifier:
            kind = "margin" if output_margin and xgb else "prob"
            rows, out = self._run(call, X, kind, iteration_range, validate_features, options, f64=not xgb)
            if out.shape[1] == 1:
                out = out[:, 0]
            return self._finish(rows, out)
        if obj == "multi:softmax":  # XGBoost's own class output: the first largest margin
            rows, out = self._run(call, X, "class", iteration_range, validate_features, options)
            labels = out[:, 0].astype(np.int32)
        elif obj == "binary:logistic":
            rows, p = self._run(call, X, "prob", iteration_range, validate_features, options)
            xp = rows.xp
            labels = (p[:, 0] > 0.5).astype(np.int64)
        else:
            rows, p = self._run(call, X, "prob", iteration_range, validate_features, options, f64=not xgb)
            xp = rows.xp
            labels = self._labels(rows, xp.argmax(p, axis=1)) if not xgb else xp.argmax(p, axis=1)
        if rows.single:
            return labels[0]
        return rows.result(labels) if labels.dtype.kind in "biuf" else labels  # strings stay numpy

    def apply(self, X, iteration_range=None, validate_features=True, **options):
        """The leaf each row reaches in each tree, (n, trees): scikit-learn's apply (node ids,
        int64) or XGBoost's pred_leaf (float32; one tree: (n,), as XGBoost)."""
        rows, out = self._run("apply", X, "leaf", iteration_range, validate_features, options)
        if not self._xgb:
            out = out.astype(np.int64)
        elif out.shape[1] == 1:
            out = out[:, 0]
        return self._finish(rows, out)

    def optimize(self, X, batch_sizes=None, **options):
        """Tunes Auto's choice (strategy and schedule) for these batch sizes now, on batches cut
        from X (None: X's row count), rather than on the first calls of each size; the choices
        are kept in the cache directory for later processes. Returns one dict per batch size:
        batch_size, kernel, schedule, kernel_ms, trials. On the CPU, or with a kernel named,
        there is nothing to tune: []."""
        opts = _run_options("optimize", options, self._device)
        rows = self._rows(X, True)
        if batch_sizes is None:
            batch_sizes = [rows.n]
        elif isinstance(batch_sizes, (int, np.integer)) and not isinstance(batch_sizes, (bool, np.bool_)):
            batch_sizes = [batch_sizes]
        sizes = [_integer("batch_sizes", b) for b in batch_sizes]
        if any(b < 1 for b in sizes):
            raise ValueError(f"batch_sizes: {sizes}: every batch size must be at least 1")
        if rows.n == 0:
            raise ValueError("X: no rows to tune on")
        return self._forest(None).optimize(rows.ptr, rows.n, sizes, opts)
