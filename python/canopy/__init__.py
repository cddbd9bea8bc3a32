"""Canopy from Python: GPU tree traversals (radius counts, k nearest neighbours, Barnes-Hut) and
decision-forest inference, in the shape scipy, scikit-learn and XGBoost users know.

    import numpy as np, canopy
    points = np.random.rand(100_000, 3)
    tree = canopy.KDTree(points)                        # built on the GPU when there is one
    counts = tree.query_ball_point(points, r=0.02)      # as scipy's return_length=True
    dist, idx = tree.query(points, k=8)                 # as scipy's cKDTree.query
    forest = canopy.Forest.load(model)                  # XGBoost, scikit-learn (canopy/forest.py)
    proba = forest.predict_proba(X)                     # as the model's predict_proba, to the bit

Inputs are numpy arrays (float32 or float64, C or Fortran order; converted once to C-ordered
float32) or CUDA arrays (__cuda_array_interface__ or DLPack: cupy, torch), which stay on the
device: their results come back as cupy arrays, or as torch tensors on the same device for torch
inputs (CPU tensors give CPU tensors). Options mirror canopy::TraversalOptions as
keyword arguments (device, schedule, executor, depth, pipeline, chunk, memory_budget); the
last call's statistics are in `.last_stats`. Forests also take DataFrames and integer arrays,
and their options are ForestRunOptions' (device, kernel, online_tuning, graph, schedule).
Canopy's errors are ValueError (MemoryError when the GPU lacks memory), with Canopy's message.
"""
import types

import numpy as np

from . import _canopy
from ._arrays import _Input
from .forest import Forest

__all__ = ["KDTree", "BallTree", "VPTree", "barnes_hut", "Forest", "gpu_available", "gpu_description"]

gpu_available = _canopy.gpu_available
gpu_description = _canopy.gpu_description

_OPTIONS = ("device", "schedule", "executor", "depth", "pipeline", "chunk", "memory_budget")


def _stats(d):
    return types.SimpleNamespace(**d)


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
