"""Canopy from Python: GPU tree traversals (radius counts, k nearest neighbours, Barnes-Hut) and
decision-forest inference, in the shape scipy, scikit-learn and XGBoost users know.

    import numpy as np, canopy
    points = np.random.rand(100_000, 3)
    tree = canopy.KDTree(points)                        # built on the GPU when there is one
    counts = tree.query_ball_point(points, r=0.02)      # as scipy's return_length=True
    dist, idx = tree.query(points, k=8)                 # as scipy's cKDTree.query

Inputs are numpy arrays (float32 or float64, C or Fortran order; converted once to C-ordered
float32) or CUDA arrays (__cuda_array_interface__ or DLPack: cupy, torch), which stay on the
device: their results come back as cupy arrays, or as torch tensors on the same device for torch
inputs (CPU tensors give CPU tensors). Options mirror canopy::TraversalOptions as
keyword arguments (device, schedule, executor, depth, pipeline, chunk, memory_budget); the
last call's statistics are in `.last_stats`. Canopy's errors are ValueError (MemoryError when
the GPU lacks memory), with Canopy's message.
"""
import json
import os
import types

import numpy as np

from . import _canopy
from .sklearn_export import forest_to_dict as _sklearn_forest_to_dict

__all__ = ["KDTree", "BallTree", "VPTree", "barnes_hut", "Forest", "gpu_available", "gpu_description"]

gpu_available = _canopy.gpu_available
gpu_description = _canopy.gpu_description

_OPTIONS = ("device", "schedule", "executor", "depth", "pipeline", "chunk", "memory_budget")


def _stats(d):
    return types.SimpleNamespace(**d)


def _on_device(x):
    if hasattr(x, "__cuda_array_interface__"):
        return True
    if hasattr(x, "__dlpack_device__") and not isinstance(x, np.ndarray):
        return x.__dlpack_device__()[0] in (2, 13)  # kDLCUDA, kDLCUDAManaged
    return False


def _cupy():
    try:
        import cupy
    except ImportError as e:  # a CUDA array without cupy: say what is needed
        raise ValueError("CUDA arrays need cupy to hold Canopy's results on the device "
                         "(pass a numpy array instead)") from e
    return cupy


class _Input:
    """One input array as Canopy reads it: C-ordered float32 rows, on the host or the device."""

    def __init__(self, x, name, width=None, rows_ok_1d=False):
        self.device = _on_device(x)
        self.torch = type(x).__module__.split(".")[0] == "torch"
        xp = _cupy() if self.device else np
        if self.device and not hasattr(x, "__cuda_array_interface__"):
            x = xp.from_dlpack(x)
        a = xp.asarray(x)
        if a.dtype not in (xp.float32, xp.float64):
            raise ValueError(f"{name}: dtype {a.dtype} is not float32 or float64")
        self.single = rows_ok_1d and a.ndim == 1
        if self.single:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise ValueError(f"{name}: shape {a.shape} is not (n, dims)")
        if width is not None and a.shape[1] != width:
            raise ValueError(f"{name}: {a.shape[1]} columns, the tree has {width}")
        self.array = xp.ascontiguousarray(a, dtype=xp.float32)  # no copy when already so
        self.xp = xp
        self.n, self.dims = self.array.shape
        self.ptr = self.array.data.ptr if self.device else self.array.ctypes.data

    def empty(self, shape, dtype):
        out = self.xp.empty(shape, dtype=dtype)
        return out, (out.data.ptr if self.device else out.ctypes.data)

    def result(self, a):
        """A result in the input's kind of array: torch in, torch out (no copy, DLPack)."""
        if not self.torch:
            return a
        import torch
        return torch.from_dlpack(a) if self.device else torch.from_numpy(np.ascontiguousarray(a))


def _options(options):
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
    return {k: v for k, v in options.items() if v is not None}


class _PointTree:
    _kind = None

    def __init__(self, data, leafsize=8, device="auto"):
        pts = _Input(data, "data")
        if pts.n == 0:
            raise ValueError("data: no points")
        self._device = device
        self._index = _canopy.PointIndex(self._kind, pts.ptr, pts.n, pts.dims, int(leafsize), device)
        self.n, self.m = pts.n, pts.dims
        self.last_stats = None

    @property
    def device(self):
        """Where the searches run: "gpu" or "cpu"."""
        return self._index.device

    @property
    def built_on(self):
        """Where the tree was built: "gpu" or "cpu" (the same tree either way)."""
        return self._index.built_on

    def query(self, x, k=1, eps=0, p=2, distance_upper_bound=np.inf, workers=None, **options):
        """The k nearest points of each row of x, as scipy's cKDTree.query: (distances, indices),
        each of shape (n, k), or (n,) for k = 1, or scalars for one 1-d point. Ascending by
        (distance, index): a tie in distance goes to the lower index. Distances are computed in
        float32 (the same on CPU and GPU) and returned as float64. workers is ignored (every
        core or the GPU is used)."""
        if eps != 0 or p != 2 or distance_upper_bound != np.inf:
            raise ValueError("query supports eps=0, p=2 and no distance_upper_bound only")
        if not isinstance(k, (int, np.integer)):
            raise ValueError(f"k = {k!r}: an integer is needed (a list of k is not supported)")
        q = _Input(x, "x", self.m, rows_ok_1d=True)
        idx, ip = q.empty((q.n, int(k)), np.int64)
        dist, dp = q.empty((q.n, int(k)), np.float32)
        self.last_stats = _stats(self._index.knn(q.ptr, q.n, int(k), ip, dp, _options(options)))
        dist, idx = q.result(dist.astype(q.xp.float64)), q.result(idx)
        if k == 1:
            dist, idx = dist[:, 0], idx[:, 0]
        if q.single:
            return dist[0], idx[0]
        return dist, idx

    def query_ball_point(self, x, r, p=2.0, eps=0, workers=None, return_sorted=None, return_length=False, **options):
        """For each row of x, how many tree points lie within distance r (a point at exactly r
        counts), as scipy's query_ball_point(..., return_length=True); the index lists are not
        returned (return_length=False is an error). KDTree only."""
        if not return_length:
            raise ValueError("query_ball_point returns counts only: pass return_length=True")
        if p != 2 or eps != 0:
            raise ValueError("query_ball_point supports p=2 and eps=0 only")
        if not np.isscalar(r):
            raise ValueError("r must be one number for every query")
        q = _Input(x, "x", self.m, rows_ok_1d=True)
        counts, cp = q.empty((q.n,), np.int64)
        self.last_stats = _stats(self._index.count(q.ptr, q.n, float(r), cp, _options(options)))
        counts = q.result(counts)
        return counts[0] if q.single else counts


class KDTree(_PointTree):
    """A kd-tree over points (n, dims): median splits on the widest dimension."""
    _kind = "kd"


class BallTree(_PointTree):
    """A ball tree over points (n, dims); query() only."""
    _kind = "ball"


class VPTree(_PointTree):
    """A vantage-point tree over points (n, dims); query() only."""
    _kind = "vp"


def barnes_hut(positions, masses, theta=0.5, eps=0.01, leafsize=8, **options):
    """Gravitational forces (G = 1) on every body by Barnes-Hut over an octree: positions (n, 3),
    masses (n,); a cell of side s at distance d is opened when s >= theta * d; softening eps.
    Returns forces (n, 3), float32, in the bodies' order; on the device for device inputs."""
    pos = _Input(positions, "positions", 3)
    xp = pos.xp
    m = xp.ascontiguousarray(xp.asarray(masses), dtype=xp.float32).reshape(-1)
    if m.shape[0] != pos.n:
        raise ValueError(f"masses: {m.shape[0]} values for {pos.n} bodies")
    forces, fp = pos.empty((pos.n, 3), np.float32)
    mp = m.data.ptr if pos.device else m.ctypes.data
    barnes_hut.last_stats = _stats(_canopy.barnes_hut(pos.ptr, mp, pos.n, fp, float(theta), float(eps), int(leafsize),
                                                      _options(options)))
    return pos.result(forces)


class Forest:
    """A decision forest (XGBoost or scikit-learn) and its predictions.

    Forest.load(x): a path to XGBoost JSON or Canopy forest JSON, an xgboost.Booster or
    XGBModel, or a scikit-learn RandomForest/ExtraTrees classifier or regressor."""

    def __init__(self, core, device="auto"):
        self._core = core
        self._device = device
        self.last_stats = None

    @classmethod
    def load(cls, model, device="auto"):
        if isinstance(model, (str, os.PathLike)):
            return cls(_canopy.Forest.load(os.fspath(model)), device)
        if hasattr(model, "get_booster"):  # xgboost's scikit-learn wrappers
            model = model.get_booster()
        if hasattr(model, "save_raw") and hasattr(model, "get_dump"):  # xgboost.Booster
            text = bytes(model.save_raw("json")).decode()
            return cls(_canopy.Forest.parse(text, "xgboost.Booster"), device)
        if hasattr(model, "estimators_"):  # scikit-learn forests
            doc = json.dumps(_sklearn_forest_to_dict(model), separators=(",", ":"))
            return cls(_canopy.Forest.parse(doc, type(model).__name__), device)
        raise ValueError(f"Forest.load: {type(model).__name__} is neither a path, an XGBoost booster "
                         "nor a scikit-learn forest")

    @property
    def n_features(self):
        return self._core.n_features

    @property
    def n_trees(self):
        return self._core.n_trees

    def predict(self, X, output="prob", device=None):
        """Predictions for rows X (n, n_features); NaN is a missing value. output: "margin"
        (XGBoost's output_margin), "prob" (predict_proba's probabilities; a binary XGBoost model
        gives one column, the positive class's), "class" or "leaf" (XGBoost's pred_leaf: each
        tree's leaf id, as float). One column comes back as (n,)."""
        rows = _Input(X, "X", self.n_features, rows_ok_1d=True)
        where = device or self._device
        width = self._core.width(output, where)
        out, op = rows.empty((rows.n, width), np.float32)
        self.last_stats = _stats(self._core.predict(rows.ptr, rows.n, op, output, where))
        out = rows.result(out)
        if width == 1:
            out = out[:, 0]
        return out[0] if rows.single else out
