#!/usr/bin/env python3
"""Canopy from Python against scipy's cKDTree (all cores) and cupyx's KDTree on the same arrays:
build + query, k = 8 nearest neighbours and radius counts (mean count 32), the points querying
themselves; wall ms, median of --repeat after a warm-up. Canopy and cupyx get the points in
device memory (cupy) when there is a GPU; their results stay there.

--scipy-calls adds scipy's list and pair calls on numpy arrays (host results, as scipy gives
them), float32 and float64 points: query_ball_point's neighbour lists, count_neighbors over 8
radii (the two-point correlation), query_pairs; scipy's once (no warm-up: seconds each), cupyx's
where it has the call.

    python3 scripts/py_bench.py --n 1000000 [--repeat 3] [--scipy-calls] [--json out.json]
Needs the canopy package on PYTHONPATH (build/python) and numpy; scipy and cupy where present.
"""
import argparse
import json
import statistics
import sys
import time

import numpy as np

import canopy


def timed(fn, repeat, sync=lambda: None, warm=True):
    if warm:
        fn()
        sync()
    ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def scipy_calls(pts, r, repeat):
    """Neighbour lists, count_neighbors and query_pairs: canopy (float32 and float64 numpy
    points) against scipy (once: each call takes seconds) and cupyx where it has the call."""
    rows = {}
    radii = np.linspace(r / 4, r, 8)
    calls = {
        "lists": lambda T, x: T(x).query_ball_point(x, r, workers=-1),  # (canopy ignores workers)
        "count_neighbors": lambda T, x: (lambda t: t.count_neighbors(t, radii))(T(x)),
        "query_pairs": lambda T, x: T(x).query_pairs(r, output_type="ndarray"),
    }
    try:
        from scipy.spatial import cKDTree
    except ImportError:
        cKDTree = None
    cupyx_calls(pts, r, repeat, rows)
    for dtype in (np.float32, np.float64):
        x = pts.astype(dtype)
        name = np.dtype(dtype).name
        for call, fn in calls.items():
            rows[f"canopy {call} {name}"] = timed(lambda: fn(canopy.cKDTree, x), repeat)
            print(f"  canopy {call} {name}: {rows[f'canopy {call} {name}']:.1f} ms", flush=True)
            if cKDTree is not None:
                rows[f"scipy {call} {name}"] = timed(lambda: fn(cKDTree, x), 1, warm=False)
                rows[f"scipy / canopy {call} {name}"] = rows[f"scipy {call} {name}"] / rows[f"canopy {call} {name}"]
                print(f"  scipy {call} {name}: {rows[f'scipy {call} {name}']:.1f} ms", flush=True)
    return rows


def cupyx_calls(pts, r, repeat, rows):
    """cupyx's lists and pairs on the device's float32 points, where cupyx has the call and the
    memory: it fails or is absent for some (its error is the row)."""
    try:
        import cupy as cp
        from cupyx.scipy.spatial import KDTree as CuKDTree
    except ImportError:
        return
    x = cp.asarray(pts)
    sync = cp.cuda.Device().synchronize
    for call, fn in {"lists": lambda: CuKDTree(x).query_ball_point(x, r),
                     "query_pairs": lambda: CuKDTree(x).query_pairs(r, output_type="ndarray")}.items():
        try:
            rows[f"cupyx {call} float32"] = timed(fn, repeat, sync)
        except Exception as e:  # noqa: BLE001 - cupyx's limits are part of the answer
            rows[f"cupyx {call} float32"] = f"failed: {type(e).__name__}: {str(e)[:80]}"
        print(f"  cupyx {call} float32: {rows[f'cupyx {call} float32']}", flush=True)


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default="")
    ap.add_argument("--scipy-calls", action="store_true")
    a = ap.parse_args(argv)
    pts = np.random.default_rng(1).random((a.n, 3), dtype=np.float32)
    # The radius for a mean count of about 32 in the unit cube: 4/3 pi r^3 n = 32.
    r = float((32 * 3 / (4 * np.pi * a.n)) ** (1 / 3))
    rows = {}
    cp = None
    if canopy.gpu_available():
        try:
            import cupy as cp
        except ImportError:
            cp = None
    sync = (lambda: cp.cuda.Device().synchronize()) if cp is not None else (lambda: None)
    data = cp.asarray(pts) if cp is not None else pts

    def canopy_knn():
        canopy.KDTree(data).query(data, k=8)

    def canopy_pc():
        canopy.KDTree(data).query_ball_point(data, r, return_length=True)

    rows["canopy knn"] = timed(canopy_knn, a.repeat, sync)
    rows["canopy pc"] = timed(canopy_pc, a.repeat, sync)
    t = canopy.KDTree(data)
    t.query(data, k=8)
    rows["canopy knn pick"] = f"{t.last_stats.schedule} + {t.last_stats.executor} on the {t.last_stats.device}"
    try:
        from scipy.spatial import cKDTree
        rows["scipy knn"] = timed(lambda: cKDTree(pts).query(pts, k=8, workers=-1), a.repeat)
        rows["scipy pc"] = timed(lambda: cKDTree(pts).query_ball_point(pts, r, return_length=True, workers=-1),
                                 a.repeat)
    except ImportError:
        pass
    if cp is not None:
        try:
            from cupyx.scipy.spatial import KDTree as CuKDTree
            rows["cupyx knn"] = timed(lambda: CuKDTree(data).query(data, k=8), a.repeat, sync)
        except Exception as e:  # noqa: BLE001 - report and go on (cupyx's limits are part of the answer)
            rows["cupyx knn"] = f"failed: {type(e).__name__}"
        try:
            rows["cupyx pc"] = timed(lambda: CuKDTree(data).query_ball_point(data, r, return_length=True), a.repeat,
                                     sync)
        except Exception as e:  # noqa: BLE001
            rows["cupyx pc"] = f"failed: {type(e).__name__}: {str(e)[:80]}"
    if a.scipy_calls:
        rows.update(scipy_calls(pts, r, a.repeat))
    print(f"py_bench: uniform {a.n} x 3, radius {r:.6f}, k 8; {canopy.gpu_description()}")
    print("| call | ms (build + query, median) |\n| --- | ---: |")
    for k, v in rows.items():
        print(f"| {k} | {v:.1f} |" if isinstance(v, float) else f"| {k} | {v} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"n": a.n, "radius": r, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
