"""Shared pieces of canopy's trees: option checks, input rows, and the distance bounds that make
float64 and p-norm answers exact (docs/python.md, "scipy")."""
import contextlib
import gc
import os
import types

import numpy as np

from . import _canopy
from ._arrays import _as_cupy, _on_device

_OPTIONS = ("device", "schedule", "executor", "depth", "pipeline", "chunk", "memory_budget")


@contextlib.contextmanager
def _gc_paused():
    """Many small containers made at once (scipy's neighbour lists, pair sets and dicts), with
    Python's cyclic collector paused: it would rescan them over and over as they are made (10^6
    lists of 33 ints: 7.9 s with it, 1.4 s without). They hold numbers only: no cycles to miss."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _joined(chunks, n, with_d=True, upper=False):
    """The chunks (i, j, d, listed) of _ball_flat(tag=True) as arrays (i, j, d) ordered by (i, j)
    (d None unless with_d; j < n). upper: only i < j, which the listed chunks hold already. The
    kd-tree's lists come in order: joined without a sort, or the order check, where every chunk
    is listed and each starts past the one before."""
    parts, listed, last = [], True, -1
    for i, j, d, from_lists in chunks:
        if upper and not from_lists:
            keep = i < j
            i, j, d = i[keep], j[keep], d[keep]
        if len(i):
            first = int(i[0]) * (n + 1) + int(j[0])
            listed = listed and from_lists and first > last
            last = int(i[-1]) * (n + 1) + int(j[-1])
        parts.append((i, j, d if with_d else None))
    if not parts:
        return np.empty(0, np.int64), np.empty(0, np.int64), (np.empty(0) if with_d else None)
    join = (lambda k: parts[0][k]) if len(parts) == 1 else (lambda k: np.concatenate([c[k] for c in parts]))
    i, j = join(0).astype(np.int64, copy=False), join(1).astype(np.int64, copy=False)
    d = join(2).astype(np.float64, copy=False) if with_d else None
    if listed or _ordered(i, j, n):
        return i, j, d
    order = np.lexsort((j, i))
    return i[order], j[order], (d[order] if with_d else None)


def _at(a, rows):
    """a[rows] for rows ascending and distinct (flatnonzero's, a slice of them): a itself, no
    gather, where rows are all of a's."""
    return a if len(rows) == len(a) else a[rows]


def _widest(lo_a, hi_a, lo_b, hi_b, p, box=None):
    """An upper bound of the float64 p-distance between any point of box a and any of box b (the
    widest extent per dimension, with a 1e-10 margin for rounding; NaN for a NaN extent): a
    radius at least this holds every pair. box: a periodic box, across which no difference
    exceeds half its size."""
    with np.errstate(all="ignore"):
        ext = np.maximum(np.asarray(hi_a, np.float64) - np.asarray(lo_b, np.float64),
                         np.asarray(hi_b, np.float64) - np.asarray(lo_a, np.float64))
        if box is not None:
            ext = np.where(box.periodic, np.minimum(ext, box.half), ext)
        return float(_minkowski(ext, p)) * (1 + 1e-10)


def _missing(shape, n, xp=np):
    """kNN results for neighbours there are none of: distances inf and indices n (int64), of shape."""
    return xp.full(shape, np.inf), xp.full(shape, n, dtype=np.int64)


def _nearest(D, I, kc, ub, n, p=2, diff_of=None):
    """The first kc of each row's candidates (distances D, indices I, both (rows, c)) by
    (distance, index), those not below ub (NaN too: a NaN query has no neighbours) as (inf, n);
    with diff_of (as _within's, over (rows, kc)), those within rounding of ub tested as scipy
    tests them: the p-th power sum below ub ** p."""
    order = np.lexsort((I, D), axis=-1)[:, :kc]
    Dk, Ik = np.take_along_axis(D, order, 1), np.take_along_axis(I, order, 1)
    far = ~(Dk < ub)
    if diff_of is not None and not (p == 1 or np.isinf(p)):
        near = _near_radius(Dk, ub)
        if near.any():
            far[near] = ~(_power_sum(diff_of(near, Ik), p) < _power_bound(ub, p))
    Dk[far], Ik[far] = np.inf, n
    return Dk, Ik


def _pair_array(i, j):
    """(i, j) as one intp array (n, 2): the first rows of the array whose columns they are where
    they are one (the GPU's exact pairs come so, as the first rows of an array sized for every
    candidate: no copy of 10^7 pairs), else a new one."""
    b = i.base
    if (b is not None and b is j.base and b.dtype == np.intp and b.ndim == 2 and b.shape[1] == 2
            and len(i) <= b.shape[0] and b.flags.c_contiguous and i.strides == j.strides == (2 * b.itemsize,)
            and i.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and j.__array_interface__["data"][0] == b.__array_interface__["data"][0] + b.itemsize):
        return b if len(i) == b.shape[0] else b[:len(i)]
    return np.stack([i, j], axis=1).astype(np.intp, copy=False)


def _lists(i, j, n, out=None):
    """The j of each i = 0 .. n - 1 as a list of n lists of ints ((i, j) int64, ordered by i), or
    put into out, an object array of n (_canopy.lists_of: each int and list made once, in C++)."""
    with _gc_paused():
        return _canopy.lists_of(i, j, n, out)


def _stats(d):
    return types.SimpleNamespace(**d)


def _options(options):
    """The traversal options a search passes on, checked here so that a wrong type is a TypeError
    and a wrong value a ValueError, each naming the option (not pybind11's RuntimeError)."""
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)}; known: {', '.join(_OPTIONS)}")
    out = {}
    for k, v in options.items():
        if v is None:
            continue
        if k in ("device", "schedule", "executor"):
            if not isinstance(v, str):
                raise TypeError(f"{k} = {v!r}: a string is needed")
        elif k == "pipeline":
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"pipeline = {v!r}: True or False is needed")
            v = bool(v)
        elif k == "depth" and isinstance(v, str):
            if v != "auto":
                raise ValueError(f"depth = {v!r}: an int or 'auto' is needed")
        else:  # depth, chunk, memory_budget: non-negative ints
            v = _int(v, k)
            if v < 0:
                raise ValueError(f"{k} = {v}: must be >= 0")
        out[k] = v
    return out


def _int(v, name):
    """v as a Python int (bool and floats are a TypeError naming the argument)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} = {v!r}: an integer is needed")
    return int(v)


def _number(v, name, low=0.0):
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{name} = {v!r}: a number is needed") from None
    if not f >= low:  # NaN too
        raise ValueError(f"{name} = {v!r}: must be >= {low:g}")
    return f


def _workers(workers):
    """scipy's workers: None or an int (-1: every core); Canopy uses every core or the GPU anyway."""
    if workers is None:
        return
    w = _int(workers, "workers")
    if w == 0 or w < -1:
        raise ValueError(f"workers = {w}: a positive number, or -1 for every core")
    if w == -1 and os.cpu_count() is None:
        raise NotImplementedError("Cannot determine the number of cpus using os.cpu_count(), "
                                  "cannot use -1 for the number of workers")


def _extents(a):
    """(mins, maxes) of a host array's columns, NaN propagating as in np.amin/np.amax. float32 and
    float64 rows in C++ on the host's cores (numpy's reduction over axis 0 of (n, 3) rows steps
    row by row: 38 ms at 10^6 points; by column 12-26 ms for float64 on the H200's host);
    else a narrow array's columns one at a time."""
    if len(a) and a.dtype in (np.float32, np.float64) and a.flags.c_contiguous:  # (on the host's cores)
        lo, hi = np.empty(a.shape[1], a.dtype), np.empty(a.shape[1], a.dtype)
        _canopy.column_extents(a, a.shape[1], lo, hi)
        return lo, hi
    if a.shape[1] > 16:
        return np.amin(a, axis=0), np.amax(a, axis=0)
    return (np.array([a[:, j].min() for j in range(a.shape[1])], a.dtype),
            np.array([a[:, j].max() for j in range(a.shape[1])], a.dtype))


def _finite_rows(a):
    """Which rows of a 2-d host array hold only finite values (a bool array). Finite column
    extents answer for every row at once, with no per-row scan and its (n, m) temporary."""
    if len(a) and all(np.isfinite(e).all() for e in _extents(a)):
        return np.ones(len(a), bool)
    return np.isfinite(a).all(axis=1)


def _host_rows(x, name, m):
    """x as a numpy array (..., m) of host rows (lists, ints and bools converted; a CUDA array
    copied to the host)."""
    a = _as_cupy(x).get() if _on_device(x) else np.asarray(x)
    if a.dtype.kind == "c":
        raise TypeError(f"{name}: complex data (dtype {a.dtype}) are not points")
    if a.dtype.kind not in "biuf":
        try:
            a = a.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: dtype {a.dtype} is not a number type") from None
    if a.ndim == 0 or (m is not None and a.shape[-1] != m):
        raise ValueError(f"{name}: {a.shape[-1] if a.ndim else 0} columns, the tree has {m}" if m is not None
                         else f"{name}: shape {a.shape} is not (n, dims)")
    return a


# Exactness (see docs/python.md, "Exact results"). The engine's distance from query q~ to point x~
# (float32 coordinates) is sqrt_rn of a correctly rounded float32 sum of correctly rounded squares
# of correctly rounded differences, in one order (layouts/geometry.hpp), so it is within
# _REL * d + _ABS of the real distance d between those float32 coordinates (a sum of m squares
# carries at most (m + 2) float32 roundings of relative size 2^-24, the square root one more; the
# factor 2 and _ABS, which covers underflow, are margins). Coordinates rounded from float64 move by
# at most 2^-24 of their distance from the tree's centre (+ subnormals' 2^-149), so a point's real
# float64 distance D satisfies |d~ - D| <= _REL(m) d~ + _ABS + eps_point + eps_query.
_U32 = 2.0 ** -24
_ABS = 1e-18


def _centred32(x, center, block=1 << 16):
    """float32(x - center) for float64 rows x, the difference taken in float64 and rounded once:
    C-ordered (n, m) rows on the host's cores (_canopy.centred32), others block by block (no
    float64 copy of the whole array)."""
    if x.ndim == 2 and x.dtype == np.float64 and x.flags.c_contiguous and len(x):
        return _canopy.centred32(x, np.ascontiguousarray(center, np.float64), None)
    out = np.empty(x.shape, np.float32)
    tmp = np.empty((min(block, len(x)),) + x.shape[1:], np.float64)
    for s in range(0, len(x), block):
        t = tmp[:len(x) - s] if s + block > len(x) else tmp
        np.subtract(x[s:s + block], center, out=t)
        out[s:s + len(t)] = t
    return out


def _rel(m):
    return (m + 4) * 2.0 ** -23


def _minkowski(diff, p):
    """The p-norm of diff along the last axis, in float64 as scipy's minkowski_distance."""
    if p == 2:
        return np.sqrt(np.einsum("...i,...i->...", diff, diff))
    a = np.abs(diff)
    if p == 1:
        return a.sum(axis=-1)
    if p == np.inf:
        return a.max(axis=-1)
    # (np.float_power: libm's pow, as scipy's std::pow; numpy's ** may take a SIMD pow an ulp away)
    return np.float_power(np.float_power(a, p).sum(axis=-1), 1.0 / p)


def _power_sum(diff, p):
    """What scipy's cKDTree compares with r ** p: the sum of |diff| ** p along the last axis (p =
    1: the 1-norm, infinity: the largest), the columns added in order (scipy's order below 8
    dimensions), float64."""
    a = np.abs(np.asarray(diff, np.float64))
    if np.isinf(p):
        return a.max(axis=-1)
    a = a * a if p == 2 else (a if p == 1 else np.float_power(a, p))
    s = a[..., 0].copy()
    for c in range(1, a.shape[-1]):
        s += a[..., c]
    return s


def _power_bound(r, p):
    """r's bound for _power_sum, rounded as scipy's cKDTree rounds it (r * r for p = 2)."""
    return r * r if p == 2 else (r if p == 1 or np.isinf(p) else np.float_power(r, p))


def _near_radius(D, r):
    """Where a float64 p-distance D is within rounding of a finite radius r (broadcast): where
    the distance's test and scipy's power-sum test may differ."""
    with np.errstate(invalid="ignore"):
        return (np.abs(D - r) <= 1e-12 * r) & np.isfinite(r)  # (r = inf: every D would be near)


def _within(D, r, p, diff_of):
    """D <= r (D float64 p-distances, r broadcast to D) as scipy decides it: the p-th power sum
    against r ** p, which differs from the distances' test only where D is within rounding of r
    (a point at sqrt(s) == r with s past r * r is outside: integer coordinates, r a distance
    between two). diff_of(mask) gives those entries' coordinate differences (n, m)."""
    inside = D <= r
    if p == 1 or np.isinf(p):
        return inside
    r = np.broadcast_to(r, D.shape)
    near = _near_radius(D, r)
    if near.any():
        inside[near] = _power_sum(diff_of(near), p) <= _power_bound(r[near], p)
    return inside


def _ball_factor(m, p):
    """c with |v|_2 <= c |v|_p for v in R^m (p >= 1): 1 for p <= 2, m^(1/2 - 1/p) above; with a
    float64 rounding margin."""
    c = 1.0 if p <= 2 else (np.sqrt(m) if p == np.inf else m ** (0.5 - 1.0 / p))
    return c * (1 + 1e-9)


def _count_radii(r, slack, m):
    """float32 radii (hi, lo) of kd-tree counts that bracket the points within float64 2-norm
    distance r (r an array or one number; slack: the rounding bounds eps_x + eps_q of the rows): a
    count at hi holds every point within r, one at lo only points within r (|d~^2 - d^2| <=
    _rel(m) d^2 + 1e-36 for the engine's distance d~ between the float32 coordinates, and
    |d - D| <= slack + D 1e-12 for the float64 distance D). lo is 0 where r is within the slack
    of 0 (count nothing), hi inf beyond float32's range. Returned as float64 values."""
    rel = _rel(m)
    with np.errstate(over="ignore"):
        hi = np.float32((r * (1 + 1e-12) + slack) * np.sqrt(1 + rel) * (1 + 2.0 ** -22) + 1e-18)
        hi = np.nextafter(hi, np.float32(np.inf))
        lo = (r * (1 - 1e-12) - slack) * np.sqrt(1 - rel) * (1 - 2.0 ** -22) - 1e-18
        lo = np.where(lo > 0, np.nextafter(np.float32(np.maximum(lo, 0)), np.float32(0)), np.float32(0))
    return hi.astype(np.float64), lo.astype(np.float64)


def _ordered(i, j, n):
    """Whether the pairs (i, j) (j < n) are in ascending (i, j) order already (the kd-tree's lists
    are: no sort needed then)."""
    key = i * (n + 1) + j
    return bool((key[1:] > key[:-1]).all())
