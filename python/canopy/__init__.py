"""Canopy from Python: GPU tree traversals (radius counts, k nearest neighbours, Barnes-Hut) and
decision-forest inference, in the shape scipy, scikit-learn and XGBoost users know.

    import numpy as np, canopy
    points = np.random.rand(100_000, 3)
    tree = canopy.KDTree(points)                        # built on the GPU when there is one
    counts = tree.query_ball_point(points, r=0.02, return_length=True)  # as scipy's cKDTree
    lists = tree.query_ball_point(points[:10], r=0.02)  # index lists, as scipy's
    dist, idx = tree.query(points, k=8)                 # as scipy's cKDTree.query
    forest = canopy.Forest.load(model)                  # XGBoost, scikit-learn (canopy/forest.py)
    proba = forest.predict_proba(X)                     # as the model's predict_proba, to the bit

Inputs are numpy arrays or array-likes (float32 trees search in float32; float64, integer and
bool data are kept as float64 and answered exactly in float64, docs/python.md) or CUDA arrays (__cuda_array_interface__ or DLPack: cupy, torch), which stay on the
device: their results come back as cupy arrays, or as torch tensors on the same device for torch
inputs (CPU tensors give CPU tensors). Options mirror canopy::TraversalOptions as
keyword arguments (device, schedule, executor, depth, pipeline, chunk, memory_budget); the
last call's statistics are in `.last_stats`. Forests also take DataFrames and integer arrays,
and their options are ForestRunOptions' (device, kernel, online_tuning, graph, schedule).
Canopy's errors are ValueError (MemoryError when the GPU lacks memory), with Canopy's message.
"""
import numpy as np

from . import _canopy, _nodes, _periodic
from ._arrays import _Input, _as_cupy, _cupy, _like, _on_device
from ._pairs import _PairQueries
from ._tree_util import (_ABS, _U32, _at, _ball_factor, _centred32, _count_radii, _extents, _finite_rows,
                         _host_rows, _int, _joined, _lists, _minkowski, _missing, _nearest, _number, _options, _rel,
                         _stats, _workers)
from ._nodes import cKDTreeNode
from .forest import Forest

__all__ = ["KDTree", "cKDTree", "BallTree", "VPTree", "cKDTreeNode", "barnes_hut", "Forest", "gpu_available", "gpu_description"]

_LIST_ITEMS = 1 << 24  # radius-list candidates per engine call (memory: _ball_chunks)

gpu_available = _canopy.gpu_available
gpu_description = _canopy.gpu_description


class _PointTree(_PairQueries):
    """A tree over points (n, dims), scipy.spatial.cKDTree's constructor: leafsize,
    compact_nodes, copy_data and balanced_tree are accepted (Canopy's trees are always balanced
    median-split trees, and compact: those two flags change nothing); boxsize: a periodic box
    (an m-d torus, as scipy's: one size or one per dimension, a size <= 0 leaves that dimension
    open; the data must lie in [0, size) along the periodic ones; every call then measures
    distances across the box's walls, exactly, see _periodic.py). device (keyword): "auto",
    "cpu" or "gpu".

    float32 data: the tree and its searches are float32 (the fast path). float64, integer and
    bool data: kept as float64 (.data); the tree is built over float32 coordinates relative to the
    data's centre and every answer is made exact in float64 (see docs/python.md). CUDA arrays of
    float32 stay on the device; other CUDA arrays are copied to the host and kept exact there."""
    _kind = None
    _scalar_index = int  # a single point's index: Python's int (cKDTree), numpy's (KDTree)

    def __init__(self, data, leafsize=8, compact_nodes=True, copy_data=False, balanced_tree=True, boxsize=None,
                 *, device="auto"):
        leafsize = _int(leafsize, "leafsize")
        if leafsize < 1:
            raise ValueError(f"leafsize = {leafsize}: must be >= 1")
        for name, v in (("compact_nodes", compact_nodes), ("copy_data", copy_data), ("balanced_tree", balanced_tree)):
            if not isinstance(v, (bool, np.bool_, int, np.integer)):
                raise TypeError(f"{name} = {v!r}: True or False is needed")
        if not isinstance(device, str):
            raise TypeError(f"device = {device!r}: a string is needed")
        self._device, self.leafsize = device, leafsize
        self._args = dict(leafsize=leafsize, compact_nodes=bool(compact_nodes), balanced_tree=bool(balanced_tree),
                          boxsize=boxsize, device=device)
        self.last_stats = None
        self._host = not _on_device(data)
        if not self._host:
            dev = _as_cupy(data)
            if dev.dtype != np.float32:
                # float64 (or integer) CUDA data: kept exact as float64 on the host, as numpy data
                # is; the results of CUDA queries go back to the device (see query).
                data, self._host = dev.get(), True
        self._center = None
        self._eps_x = 0.0
        self._own32 = self._own64 = None
        if not self._host or (isinstance(data, np.ndarray) and data.dtype == np.float32):
            pts = _Input(data, "data")  # float32 rows (a device float64 array converted on the device)
            self.data = pts.array if (pts.array is not data or not copy_data) else pts.array.copy()
            self._exact = False
        else:
            a = _host_rows(data, "data", None)
            if a.ndim != 2:
                raise ValueError(f"data: shape {a.shape} is not (n, dims)")
            self._exact = a.dtype != np.float32
            dtype = np.float64 if self._exact else np.float32
            # (numpy 2's copy=False raises where a copy is needed: ascontiguousarray copies only then)
            self.data = np.array(a, dtype=dtype, order="C") if copy_data else np.ascontiguousarray(a, dtype=dtype)
            pts = None if self._exact else _Input(self.data, "data")
        self.n, self.m = int(self.data.shape[0]), int(self.data.shape[1])
        self.boxsize, self._box = None, None  # (scipy's attribute; the box when a dimension is periodic)
        if boxsize is not None:
            if not self._host:
                raise ValueError("boxsize: periodic boxes need numpy data (CUDA arrays have the float32 fast path only)")
            box = _periodic._Box(boxsize, self.m)
            box.check(self.data)
            self.boxsize, self._box = box.boxsize, (box if box.any() else None)
            self._args["boxsize"] = box.boxsize
        xp = np if self._host else _cupy()
        if not self.n:
            self.mins, self.maxes = xp.full(self.m, np.inf), xp.full(self.m, -np.inf)
        elif self._host:
            self.mins, self.maxes = _extents(self.data)
        else:
            self.mins, self.maxes = xp.amin(self.data, axis=0), xp.amax(self.data, axis=0)
        self._index = None  # none for an empty tree: every search answers from its shapes
        # The points in the float32 engine's tree: all of them, or (host data) those without a NaN
        # coordinate, which are in no answer (scipy's searches never find them either); _keep maps
        # the engine's indices to the data's, _lo and _hi are those points' extents.
        self._keep, self._n_eng, self._lo, self._hi = None, self.n, self.mins, self.maxes
        if self.n == 0:
            return
        kept = self.data
        # Finite extents: no NaN (it would be a column's extent) and no infinity, unchecked per row.
        if self._host and not (np.isfinite(self.mins).all() and np.isfinite(self.maxes).all()):
            nan = np.isnan(self.data).any(axis=1)
            if nan.any():
                self._keep = np.flatnonzero(~nan)
                self._n_eng, kept = len(self._keep), self.data[self._keep]
                if not len(kept):
                    return
                self._lo, self._hi = _extents(kept)
                if not self._exact:
                    pts = _Input(kept, "data")
            if not np.isfinite(kept).all():  # (no NaN left: an infinite coordinate)
                bad = int(np.flatnonzero(~np.isfinite(self.data).all(axis=1) & ~nan)[0])
                raise ValueError(f"data: point {bad} has an infinite coordinate")
        if self._exact:
            self._center = (self._lo + self._hi) / 2
            # Every row lies within half the box of the centre in each column: the box's half
            # diagonal bounds the rows' distances from it (the rounding bound eps_x), and the
            # columns' extents say whether float32 holds the rows, without a pass over them.
            half = np.maximum(np.abs(self._lo - self._center), np.abs(self._hi - self._center))
            with np.errstate(over="ignore"):
                if not np.isfinite(np.float32(half.max() * (1 + 1e-12))):
                    raise ValueError("data: coordinates beyond float32's range from the data's centre")
            radius = float(np.sqrt(np.dot(half, half))) * (1 + 1e-12)
            self._eps_x = 1.0000001 * _U32 * radius + np.sqrt(self.m) * 2.0 ** -149
            f32 = _centred32(kept, self._center)
            if self._keep is None:
                self._own32 = f32  # the engine's rows of the data itself, which pair calls query
            pts = _Input(f32, "data")
        self._index = _canopy.PointIndex(self._kind, pts.ptr, pts.n, pts.dims, leafsize, device)

    def __reduce__(self):
        """Pickled as its data and constructor arguments; unpickling builds the tree again."""
        data = self.data if self._host else _cupy().asnumpy(self.data)
        return (_rebuild, (type(self), data, self._args))

    @property
    def size(self):
        """The number of points (scipy's cKDTree.size counts nodes; Canopy's node count is not
        exposed)."""
        return self.n

    @property
    def device(self):
        """Where the searches run: "gpu" or "cpu"."""
        return self._index.device if self._index is not None else "cpu"

    @property
    def built_on(self):
        """Where the tree was built: "gpu" or "cpu" (the same tree either way)."""
        return self._index.built_on if self._index is not None else "cpu"

    # -- queries as the engine reads them -------------------------------------------------------
    def _rows(self, x, keep64=False):
        """Host queries: (float64 rows (nq, m), their float32 engine rows, per-row rounding bound
        eps_q, leading shape, single 1-d point?). A float32 tree rounds its queries to float32 (as
        its fast path does) unless keep64: then float64 queries stay exact, as for a float64 tree."""
        if x is self.data and self._own32 is not None:
            # The tree's own points (pair and count calls of a tree with itself): their engine
            # rows were made at construction, and eps_x bounds each one's rounding.
            return self.data, self._own32, np.broadcast_to(self._eps_x, (self.n,)), (self.n,), False
        if x is self.data and self._host and not (self._exact or keep64) and self._keep is None:
            if self._own64 is None:  # (a float32 tree's own points in float64, made once, on the host's cores)
                self._own64 = _canopy.widened(self.data) if self.data.flags.c_contiguous else self.data.astype(np.float64)
            return self._own64, self.data, np.broadcast_to(0.0, (self.n,)), (self.n,), False
        a = _host_rows(x, "x", self.m)
        single, lead = a.ndim == 1, a.shape[:-1]
        q = a.reshape(-1, self.m)
        if self._exact or keep64:
            q = np.ascontiguousarray(q, np.float64)
            norms = np.empty(len(q))
            q32 = _canopy.centred32(q, self._center if self._center is not None else np.zeros(self.m), norms)
            eps_q = 1.0000001 * _U32 * norms + np.sqrt(self.m) * 2.0 ** -149
        else:  # a float32 tree: queries are rounded to float32, as on the fast path
            q32 = np.ascontiguousarray(q, dtype=np.float32)
            q = q32.astype(np.float64)
            eps_q = np.zeros(len(q))
        return q, np.ascontiguousarray(q32), eps_q, lead, single

    def _gather(self, idx):
        return self.data[idx].astype(np.float64, copy=False)

    def _row_diffs(self, q, rows, I, mask):
        """data[I[a, c]] - q[rows[a]] (float64, (n, m)) for the entries (a, c) where mask is set."""
        a, c = np.nonzero(mask)
        return self._gather(I[a, c]) - q[rows[a]]

    def _engine_knn(self, q32, k, options):
        idx = np.empty((len(q32), k), np.int64)
        dist = np.empty((len(q32), k), np.float32)
        self.last_stats = _stats(self._index.knn(q32, len(q32), k, idx, dist, options))
        return dist, (idx if self._keep is None else self._keep[idx])

    def _search(self, q, q32, eps_q, p, kp, radius, options, dist=None, top=None):
        """The exact search behind every call that is not the float32 fast path. For each row i
        of q yields (rows, D, I): candidate indices I (rows, kp) and their float64 p-distances D,
        where the candidates of row i hold every point whose p-distance is <= radius(rows, D)[i].
        dist(rows, I), when given, computes D instead (periodic boxes: the distance from the
        wrapped query, while row i is one of its images). top = (kc, ub): the k nearest instead
        (radius: the kc-th distance, at most ub), D and I the first kc by (distance, index), those
        not below ub as (inf, n); the distances, order and test on the host's cores in C++
        (_canopy.knn_settle: numpy's gather of the candidates' points was most of a 10^6-row call).

        Candidates come from the float32 tree's k nearest: a row is settled when its k-th
        engine distance d_k proves every other point farther than the radius (d_j >= d_k for the
        points not returned, and the rounding bound turns d_k into a lower bound on their float64
        2-norm, which bounds the p-norm through _ball_factor); otherwise k grows fourfold, up to
        every point. Rows with a non-finite engine coordinate, and trees with no index, are
        compared with every point."""
        n, m, n_eng = self.n, self.m, self._n_eng  # (the engine's tree holds n_eng of the n points)
        rel, fac = 1 + _rel(m), _ball_factor(m, p)
        finite = _finite_rows(q32)
        brute = np.flatnonzero(~finite) if self._index is not None else np.arange(len(q))
        if self._index is not None:
            pending = np.flatnonzero(finite)
            # (k rounded up to steps of 2^(1/4): rows of near k share one engine call; one k for
            # every row stays one number, one group)
            def rounded(k):
                return np.minimum(np.ceil(2.0 ** (np.ceil(4 * np.log2(np.maximum(k, 1))) / 4)).astype(np.int64), n_eng)
            kp = int(rounded(kp)) if np.ndim(kp) == 0 else rounded(np.broadcast_to(kp, (len(q),))[pending])
            while len(pending):
                again, again_k = [], []
                groups = [(kp, pending)] if np.ndim(kp) == 0 else [(k, pending[kp == k]) for k in np.unique(kp)]
                for k, group in groups:
                    # (the C++ step keeps no (rows, k, m) float64 arrays: larger chunks)
                    step = max(1, (1 << 22) // (int(k) * m) if top is None else (1 << 24) // int(k))
                    for s in range(0, len(group), step):
                        rows = group[s:s + step]
                        d32, idx = self._engine_knn(_at(q32, rows), int(k), options)
                        if top is not None:
                            last = None if k >= n_eng else np.ascontiguousarray(d32[:, -1])
                            eq = np.ascontiguousarray(_at(eps_q, rows), np.float64)
                            qa = np.ascontiguousarray(_at(q, rows), np.float64)
                            D, I, done = _canopy.knn_settle(idx, qa, self.data, top[0], float(p),
                                                            float(top[1]), n, last, eq, float(self._eps_x), rel, _ABS,
                                                            fac)
                            if done.all():  # (no copies of the whole call's arrays)
                                yield rows, D, I
                            elif done.any():
                                yield rows[done], D[done], I[done]
                            again.append(rows[~done])
                            again_k.append(np.full((~done).sum(), min(n_eng, 4 * int(k)), np.int64))
                            continue
                        D = dist(rows, idx) if dist else _minkowski(self._gather(idx) - q[rows, None, :], p)
                        if k >= n_eng:
                            yield rows, D, idx
                            continue
                        last = d32[:, -1].astype(np.float64)
                        with np.errstate(invalid="ignore"):
                            lower = (last - _ABS) / rel - self._eps_x - eps_q[rows]
                            done = np.isfinite(last) & (lower > fac * radius(rows, D))
                        if done.any():
                            yield rows[done], D[done], idx[done]
                        again.append(rows[~done])
                        again_k.append(np.full((~done).sum(), min(n_eng, 4 * int(k)), np.int64))
                pending = np.concatenate(again) if again else np.empty(0, np.int64)
                kp = np.concatenate(again_k) if again_k else np.empty(0, np.int64)
        if len(brute) and n:
            step = max(1, (1 << 22) // (n * m))
            for s in range(0, len(brute), step):
                rows = brute[s:s + step]
                idx = np.broadcast_to(np.arange(n), (len(rows), n))
                if dist:
                    yield rows, dist(rows, idx), idx
                    continue
                with np.errstate(invalid="ignore", over="ignore"):
                    D = _minkowski(self.data[None, :, :].astype(np.float64) - q[rows, None, :], p)
                if top is None:
                    yield rows, D, idx
                    continue
                yield (rows, *_nearest(D, idx, top[0], top[1], n, p, lambda near, Ik: self._row_diffs(q, rows, Ik, near)))

    def query(self, x, k=1, eps=0, p=2, distance_upper_bound=np.inf, workers=None, **options):
        """The k nearest points of each row of x, as scipy's cKDTree.query: (distances, indices),
        each of shape x.shape[:-1] + (k,), without the last axis for k = 1, and one row of
        scalars for a 1-d point. k may be a list of ints (the k-th neighbours named, as scipy).
        Missing neighbours (k > n, farther than distance_upper_bound, a NaN query) are distance
        inf and index n. Ascending by (distance, index): a tie goes to the lower index.

        A float32 tree with p = 2 answers from the tree (float32 distances, the same on CPU and
        GPU, returned as float64). A float64 tree, and any p >= 1 (1, 2, inf, or between), gives
        the exact float64 answer (see docs/python.md). eps >= 0 is accepted; the answers are exact
        (they meet any eps). workers is ignored (every core or the GPU is used)."""
        if isinstance(k, (list, tuple, np.ndarray)):
            ks, listed = list(np.asarray(k).ravel().tolist()), True
        else:
            ks, listed = [k], False
        if not ks or any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in ks):
            raise ValueError(f"k must be an integer or a sequence of integers (k = {k!r})")
        ks = [int(v) for v in ks]
        _workers(workers)
        if min(ks) < 1:
            raise ValueError(f"k = {k!r}: must be >= 1")
        _number(eps, "eps")
        p = _number(p, "p", 1.0)
        ub = _number(distance_upper_bound, "distance_upper_bound")
        kmax, n = max(ks), self.n
        kc = min(kmax, self._n_eng)  # the neighbours there are (points with a NaN coordinate are none)
        opts = _options(options)
        if not self._exact and p == 2 and kc > 0 and ub == np.inf and self._box is None or not self._host:
            return self._query_fast(x, ks, kmax, kc, listed, p, ub, opts)
        q, q32, eps_q, lead, single = self._rows(x)
        if not kc:
            found = iter(())
        elif self._box is not None:  # a periodic box: the query and its images (_periodic.py)
            found = iter([(slice(None), *_periodic.knn(self, self._box.wrap(q), kc, ub, p, opts))])
        else:
            found = self._search(q, q32, eps_q, p, kc + 4, None, opts, top=(kc, ub))
        dist = idx = None
        for rows, Dk, Ik in found:
            if dist is None and kc == kmax and len(Dk) == len(q):
                # every row at once (_search's rows ascend; _periodic.knn's are all): the arrays as they are
                dist, idx = Dk, Ik
                continue
            if dist is None:  # (64 MB each for 10^6 rows of 8: made only when rows come in parts)
                dist, idx = _missing((len(q), kmax), n)
            dist[rows, :kc], idx[rows, :kc] = Dk, Ik
        if dist is None:
            dist, idx = _missing((len(q), kmax), n)
        # (CUDA queries of a host tree: the arrays go back to the device)
        return tuple(_like(x, a) for a in self._shape_knn(dist, idx, ks, listed, lead, single, np))

    def _query_fast(self, x, ks, kmax, kc, listed, p, ub, opts):
        """The tree's own float32 answer (float32 trees, p = 2; any tree for CUDA arrays)."""
        if p != 2:
            raise ValueError(f"p = {p}: CUDA arrays are searched with p = 2 only (pass numpy arrays for other p)")
        xs = x
        lead, reshaped = None, False
        if isinstance(x, np.ndarray) and x.ndim > 2 or isinstance(x, (list, tuple)):
            a = _host_rows(x, "x", self.m)
            lead, xs, reshaped = a.shape[:-1], a.reshape(-1, self.m) if a.ndim > 1 else a, True
        q = _Input(xs, "x", self.m, rows_ok_1d=True, numeric=True)
        xp = q.xp
        if lead is None:
            lead = (q.n,) if not q.single else ()
        if kc == 0:
            dist, idx = _missing((q.n, kmax), self.n, xp)
        else:
            idx, ip = q.empty((q.n, kc), np.int64)
            dist, dp = q.empty((q.n, kc), np.float32)
            try:
                self.last_stats = _stats(self._index.knn(q.ptr, q.n, kc, ip, dp, opts))
            except ValueError:
                bad = ~xp.isfinite(q.array).all(axis=1)
                if not bool(bad.any()):
                    raise
                # A query with a NaN or infinite coordinate has no neighbours (inf, n), as scipy.
                good = xp.flatnonzero(~bad)
                dist[...], idx[...] = np.inf, self.n
                if len(good):
                    sub = xp.ascontiguousarray(q.array[good])
                    d2, i2 = xp.empty((len(good), kc), np.float32), xp.empty((len(good), kc), np.int64)
                    self.last_stats = _stats(self._index.knn(sub.data.ptr if q.device else sub, len(good), kc,
                                                             i2.data.ptr if q.device else i2,
                                                             d2.data.ptr if q.device else d2, opts))
                    dist[good], idx[good] = d2, i2
            if self._keep is not None:  # the engine's indices as the data's (a missing one stays n)
                keep = xp.asarray(self._keep)
                idx = xp.where(idx < self._n_eng, keep[xp.minimum(idx, self._n_eng - 1)], self.n)
            dist = _canopy.widened(dist) if xp is np else dist.astype(xp.float64)
            if kc < kmax or ub != np.inf:
                far = ~(dist < ub)
                dist[far], idx[far] = np.inf, self.n
                if kc < kmax:
                    pad_d, pad_i = _missing((q.n, kmax - kc), self.n, xp)
                    dist, idx = xp.concatenate([dist, pad_d], axis=1), xp.concatenate([idx, pad_i], axis=1)
        d, i = self._shape_knn(dist, idx, ks, listed, lead, q.single and not reshaped, xp)
        return q.result(d), q.result(i)

    def _shape_knn(self, dist, idx, ks, listed, lead, single, xp):
        if listed:
            cols = [v - 1 for v in ks]
            dist, idx = dist[:, cols], idx[:, cols]
        elif ks[0] == 1:
            dist, idx = dist[:, 0], idx[:, 0]
        if single:
            d, i = dist[0], idx[0]
            if xp is np and d.ndim == 0:  # one point, k = 1: scalars, of scipy's types
                return float(d), self._scalar_index(i)
            return d, i
        shape = tuple(lead) + dist.shape[1:]
        return dist.reshape(shape), idx.reshape(shape)

    def query_ball_point(self, x, r, p=2.0, eps=0, workers=None, return_sorted=None, return_length=False,
                         **options):
        """The tree points within distance r (a point at exactly r counts) of each row of x, as
        scipy's cKDTree.query_ball_point: a list of indices for one 1-d point, else an object
        array of lists of shape x.shape[:-1]; with return_length=True their counts (int64). r is
        one number or an array broadcast against x.shape[:-1]; p >= 1. The lists are sorted
        (whatever return_sorted says). eps >= 0 is accepted (the answers are exact).

        float32 tree, p = 2, one r, return_length=True (KDTree): counted by the tree in float32
        (the fast path; a point within float32 rounding of r may count either way). Otherwise
        exact in float64 (docs/python.md)."""
        _number(eps, "eps")
        p = _number(p, "p", 1.0)
        _workers(workers)
        if not isinstance(return_length, (bool, np.bool_)):
            raise TypeError(f"return_length = {return_length!r}: True or False is needed")
        opts = _options(options)
        scalar_r = np.ndim(r) == 0
        if scalar_r:
            _number(r, "r")
        if (return_length and p == 2 and scalar_r and not self._exact and self._kind == "kd"
                and self._index is not None and self._box is None) or not self._host:
            return self._count_fast(x, float(r), p, return_length, scalar_r, opts)
        q, q32, eps_q, lead, single = self._rows(x)
        rr = np.broadcast_to(np.asarray(r, dtype=np.float64), lead).reshape(-1)
        if rr.size and not (rr >= 0).all():
            raise ValueError("r: radii must be >= 0")
        if (return_length and p == 2 and scalar_r and self._box is not None and self._kind == "kd"
                and self._index is not None and len(q)):
            counter = _periodic.counts(self, q, np.array([float(r)]), opts, self)  # (kd-tree counts of images)
            if counter is not None:
                counts = next(counter).reshape(lead)
                return counts[()] if single else _like(x, counts)
        if return_length:
            if p == 2 and scalar_r and self._box is None and self._kind == "kd" and self._index is not None:
                counts = self._exact_counts(q, q32, eps_q, float(r), opts)
            else:
                counts = self._listed_counts(q, q32, eps_q, rr, p, opts)
            counts = counts.reshape(lead)
            return counts[()] if single else _like(x, counts)
        chunks = self._ball_flat(q, q32, eps_q, rr, p, opts, tag=True, with_d=False)
        i, j, _ = _joined(chunks, self.n, False)
        if single:
            return _lists(i, j, len(q))[0]
        out = np.empty(len(q), dtype=object)
        _lists(i, j, len(q), out)
        return out.reshape(lead)

    def _ball_flat(self, q, q32, eps_q, rr, p, opts, upper=False, tag=False, with_d=True, count_only=False):
        """The pairs (row of q, point) at p-distance <= rr[row], as flat arrays (rows, indices,
        distances) in chunks, each pair once: _ball's, or in a periodic box _periodic.ball's.
        upper: the kd-tree's lists may leave out pairs with index <= row (query_pairs filters).
        tag: each chunk has a fourth element, True for the kd-tree lists' chunks, which are
        ordered by (row, index), follow each other in that order and, with upper, hold index >
        row only (_joined reads it). with_d False: the lists' chunks may carry None for the
        distances. count_only: chunks (rows, their numbers of pairs) to be added up (rows distinct
        within a chunk), no tag; the kd-tree's lists then make no pairs (on the GPU only the
        counts cross)."""
        if self._box is not None:
            for c in _periodic.ball(self, self._box.wrap(q), rr, p, opts):
                if count_only:
                    yield np.arange(len(q)), np.bincount(c[0], minlength=len(q))
                else:
                    yield (*c, False) if tag else c
            return
        rest = np.arange(len(q))
        if self._kind == "kd" and self._index is not None and len(q):
            rest, chunks = self._ball_lists(q, q32, eps_q, rr, p, opts, upper, with_d, count_only)
            for c in chunks:
                yield (*c, True) if tag and not count_only else c
        if len(rest):
            for rows, D, I, inside in self._ball(q[rest], q32[rest], eps_q[rest], rr[rest], p, opts):
                if count_only:
                    yield rest[rows], inside.sum(axis=1)
                    continue
                c = np.repeat(rest[rows], inside.sum(axis=1)), I[inside], D[inside]
                yield (*c, False) if tag else c

    def _ball_lists(self, q, q32, eps_q, rr, p, opts, upper=False, with_d=True, count_only=False):
        """The kd-tree's radius lists as exact candidates: (rows left for _ball, a generator of
        chunks (rows, indices, distances) ordered by (row, index)). The engine lists every point
        whose float32 distance is within hi, a float32 radius past every rounding (_count_radii
        at rr * _ball_factor: a p-distance <= rr bounds the 2-norm by that factor, and the slack
        eps_x + eps_q bounds the float64 coordinates' distance from the float32 ones', as in
        _search); the candidates' float64 p-distances are then computed as _search computes them
        (_minkowski over data[j] - q[i]) and masked by <= rr. Rows with a non-finite float32
        coordinate or radius are left to _ball. count_only: chunks (rows, their numbers of pairs)."""
        one = len(rr) > 0 and rr.strides == (0,) and eps_q.strides == (0,)  # (broadcast: one radius and bound)
        r, slack = (rr[:1], eps_q[:1]) if one else (rr, eps_q)
        r, slack = r * _ball_factor(self.m, p), self._eps_x + slack
        with np.errstate(over="ignore", invalid="ignore"):
            if one or (len(r) > 1 and r.min() == r.max() and slack.min() == slack.max()):
                hi = np.broadcast_to(_count_radii(r[:1], slack[:1], self.m)[0], (len(rr),))
            else:
                hi = _count_radii(r, slack, self.m)[0]
            fast = _finite_rows(q32) & ((np.isfinite(hi[0]) & (hi[0] < 1e38)) if hi.strides == (0,) else
                                        (np.isfinite(hi) & (hi < 1e38)))
        rows_fast = np.flatnonzero(fast)
        return np.flatnonzero(~fast), self._ball_chunks(q, q32, hi, rr, p, rows_fast, opts, upper, with_d, count_only)

    def _ball_chunks(self, q, q32, hi, rr, p, rows_fast, opts, upper, with_d, count_only=False):
        if not len(rows_fast):
            return
        one = hi.strides == (0,) or bool((hi[rows_fast] == hi[rows_fast[0]]).all())
        # On the GPU the candidates stay there, filtered by the same float64 arithmetic
        # (ball_exact): only the kept pairs cross, as (n, 2) pairs, in larger chunks.
        on_gpu = self._index.device == "gpu" and opts.get("device") != "cpu" and (p in (1, 2) or np.isinf(p))
        limit = _LIST_ITEMS * (8 if on_gpu else 1)

        def sampled_step():  # (rows per chunk of about `limit` candidates, from a sample's counts)
            sample = rows_fast[::max(1, len(rows_fast) // 1024)]
            counts = np.empty(len(sample), np.int64)
            top = hi[0] if hi.strides == (0,) else hi[rows_fast].max()  # (broadcast: no gather)
            self._index.count(np.ascontiguousarray(q32[sample]), len(sample), float(top), counts, opts)
            return int(max(1, min(len(rows_fast), limit // (2 * counts.mean() + 1))))
        # Memory: rows in chunks of about _LIST_ITEMS candidates. One call where even every point
        # for every row would fit; else the mean count is estimated from the kd-tree's counts of
        # a sample of rows (at the largest radius), then from each chunk's total for the next. On
        # the GPU only the kept pairs cross: every row is tried in one call, and chunks follow
        # only where its candidates or pairs do not fit (a MemoryError).
        step = len(rows_fast)
        if not on_gpu and len(rows_fast) * self._n_eng > limit:
            step = sampled_step()
        # On the GPU a tree's own points (q is data) are read from its device copy, and one
        # radius (rr broadcast) and consecutive rows are passed as numbers.
        own, one_r = q is self.data or q is self._own64, rr.strides == (0,)
        if not on_gpu:
            q, rr = np.ascontiguousarray(q, np.float64), np.ascontiguousarray(rr, np.float64)
        elif not own:
            q = np.ascontiguousarray(q, np.float64)
        s, whole = 0, on_gpu
        while s < len(rows_fast):
            rows = rows_fast[s:s + step]
            s += len(rows)
            sub = np.ascontiguousarray(_at(q32, rows))
            r0, radii = (float(hi[rows[0]]), None) if one else (0.0, np.ascontiguousarray(hi[rows], dtype=np.float32))
            if on_gpu:
                rows64 = None if rows[-1] - rows[0] == len(rows) - 1 else np.ascontiguousarray(rows, np.int64)
                keep, data = self._keep, self.data
                c = np.empty(len(rows), np.int64) if count_only else None  # (then the counts alone cross)
                try:
                    ij, d, st = self._index.ball_exact(sub, len(rows), r0, radii, rows64, int(rows[0]),
                                                       None if own else _at(q, rows),
                                                       None if one_r else np.ascontiguousarray(_at(rr, rows), np.float64),
                                                       float(rr[0]), data, data.dtype == np.float64, len(data), keep,
                                                       0 if keep is None else len(keep), float(p), upper, with_d,
                                                       opts, c, own and sub is q32)
                except MemoryError:
                    if not whole or len(rows) == 1:
                        raise
                    whole, s, step = False, 0, min(sampled_step(), len(rows) // 2)  # (every row at once did not fit)
                    continue
                whole = False
                self.last_stats = _stats(st)
                step = int(max(1, min(len(rows_fast), limit * len(rows) // max(1, st["total"]))))
                yield (rows, c) if count_only else (ij[:, 0], ij[:, 1], d)
                continue
            # (a tree's consecutive own rows: the engine lists each pair of query_pairs once)
            self_join = upper and own and self._keep is None and rows[-1] - rows[0] == len(rows) - 1
            offsets, idx, st = self._index.ball(sub, len(rows), r0, opts, radii=radii,
                                                upper_from=int(rows[0]) if self_join else -1)
            self.last_stats = _stats(st)
            step = int(max(1, min(len(rows_fast), limit * len(rows) // max(1, len(idx)))))
            # float64 p-distances of the candidates, those within rr[row] kept (query_pairs: only
            # j > row), on the host's cores; the same arithmetic as _minkowski
            i, j, d = _canopy.filter_pairs(offsets, idx, np.ascontiguousarray(rows, np.int64), q, self.data, rr,
                                           self.m, float(p), upper, self._keep)
            yield (rows, np.bincount(np.searchsorted(rows, i), minlength=len(rows))) if count_only else (i, j, d)

    def _count_fast(self, x, r, p, return_length, scalar_r, opts):
        """The kd-tree's own float32 counts (float32 trees, p = 2, one r; any tree for CUDA
        arrays, which are counted only)."""
        if not (return_length and p == 2 and scalar_r):
            raise ValueError("CUDA arrays: query_ball_point gives counts (return_length=True) for p = 2 and one r "
                             "only; pass numpy arrays for index lists")
        if self._index is None:
            q = _Input(x, "x", self.m, rows_ok_1d=True, numeric=True)
            counts = q.xp.zeros((q.n,), np.int64)
            return q.result(counts)[0] if q.single else q.result(counts)
        if self._kind != "kd":
            raise ValueError("radius counts of CUDA arrays run over a KDTree; this tree is a ball or vp tree")
        lead = None
        if isinstance(x, np.ndarray) and x.ndim > 2 or isinstance(x, (list, tuple)):
            a = _host_rows(x, "x", self.m)
            lead, x = a.shape[:-1], (a.reshape(-1, self.m) if a.ndim > 1 else a)
        q = _Input(x, "x", self.m, rows_ok_1d=True, numeric=True)
        counts, cp = q.empty((q.n,), np.int64)
        try:
            self.last_stats = _stats(self._index.count(q.ptr, q.n, r, cp, opts))
        except ValueError:
            bad = ~q.xp.isfinite(q.array).all(axis=1)
            if not bool(bad.any()):
                raise
            good = q.xp.flatnonzero(~bad)
            counts[...] = 0  # a query with a NaN coordinate has no neighbours
            if len(good):
                sub = q.xp.ascontiguousarray(q.array[good])
                c2 = q.xp.empty(len(good), np.int64)
                self.last_stats = _stats(self._index.count(sub.data.ptr if q.device else sub, len(good), r,
                                                           c2.data.ptr if q.device else c2, opts))
                counts[good] = c2
        counts = q.result(counts)
        if q.single:
            return counts[0]
        return counts.reshape(lead) if lead is not None else counts

    # -- pairs between two trees: self's points are the queries of other's exact ball search ----


def _rebuild(cls, data, args):
    return cls(data, **args)


class cKDTree(_PointTree):
    """A kd-tree over points (n, dims): median splits on the widest dimension; scipy's
    cKDTree's calls (query, query_ball_point, query_ball_tree, query_pairs,
    count_neighbors, sparse_distance_matrix) and attributes (data, n, m, leafsize, maxes,
    mins, size, tree)."""
    _kind = "kd"

    @property
    def tree(self):
        """The root cKDTreeNode, as scipy's: a view of Canopy's nodes (canopy._nodes), made on
        first use."""
        return self._croot()

    def _croot(self):
        root = self.__dict__.get("_root")
        if root is None:
            root = self.__dict__["_root"] = _nodes.ckdtree_root(self)
        return root

    def _build_weights(self, weights):
        """Each node's sum of weights, nodes in preorder (scipy's helper of count_neighbors)."""
        w = np.asarray(weights, np.float64).reshape(-1)
        if len(w) != self.n:
            raise ValueError(f"weights: {len(w)} values for {self.n} points")
        root = self._croot()
        if root is None:
            return np.zeros(0)
        sums = np.concatenate([[0.0], np.cumsum(w[root._order])])
        out, stack = [], [root]
        while stack:
            nd = stack.pop()
            out.append(sums[nd.end_idx] - sums[nd.start_idx])
            if nd.lesser is not None:
                stack += [nd.greater, nd.lesser]
        return np.array(out)


class KDTree(cKDTree):
    """A kd-tree over points (n, dims): median splits on the widest dimension (scipy's KDTree,
    which is its cKDTree)."""
    _scalar_index = np.intp
    node, innernode, leafnode = _nodes.node, _nodes.innernode, _nodes.leafnode

    @property
    def tree(self):
        """The root as scipy's KDTree.innernode / leafnode (a view of Canopy's nodes)."""
        return _nodes.node._create(self._croot())


class BallTree(_PointTree):
    """A ball tree over points (n, dims); query(), query_ball_point() lists and the pair queries."""
    _kind = "ball"


class VPTree(_PointTree):
    """A vantage-point tree over points (n, dims); query(), query_ball_point() lists and the pair queries."""
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
