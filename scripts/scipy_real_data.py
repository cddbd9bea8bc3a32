#!/usr/bin/env python3
"""A scipy user's default calls on real data sets, canopy.cKDTree against scipy's cKDTree on the
same float64 numpy arrays (as numpy loads them): query (k = 1 and 8), query_ball_point
(return_length), count_neighbors, query_pairs (ndarray) and sparse_distance_matrix, at a radius
for a mean of about 10 neighbours. Every answer is compared (distances equal, indices equal where
the distance has no tie, counts and pairs equal) and both sides timed (build + call; Canopy's after a
warm-up, scipy's once, with workers=-1 where the call takes it). Exits 1 on a difference.

    python3 scripts/scipy_real_data.py [--data ../shared/data] [--json out.json]
Files: cities_171k (2-d, degrees), covtype_points_254k (the first 7 columns, metres and degrees).
"""
import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree as Ref

import canopy

SETS = {"cities_171k.csv.gz": None, "covtype_points_254k.csv.gz": 7}


def load(path, cols):
    with gzip.open(path, "rt") as f:
        x = np.loadtxt(f, delimiter=",", skiprows=1)
    return np.ascontiguousarray(x[:, :cols] if cols else x)


def timed(fn, warm=True):
    if warm:
        fn()
    t0 = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t0) * 1e3


def same_knn(a, b, x):
    """(d, i) of two kNN answers over points x: distances equal, and where the indices differ
    (a tie, which either side may break its way) the other index at the same distance."""
    (da, ia), (db, ib) = ([v.reshape(len(v), -1) for v in w] for w in (a, b))  # (k = 1: a column)
    if not np.array_equal(da, db):
        return False
    r, c = np.nonzero(ia != ib)
    d = np.sqrt(((x[ia[r, c]] - x[r]) ** 2).sum(axis=1))
    return bool(np.array_equal(d, da[r, c]))


def sorted_pairs(p):
    return p[np.lexsort((p[:, 1], p[:, 0]))]


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    ap.add_argument("--json")
    ap.add_argument("--rows", type=int, default=0, help="the first ROWS of each set (0: all)")
    a = ap.parse_args(argv)
    rows, bad = [], 0
    for name, cols in SETS.items():
        x = load(Path(a.data) / name, cols)
        x = x[:a.rows] if a.rows else x
        ref = Ref(x)
        r = float(np.median(ref.query(x[::97], k=11)[0][:, -1]))  # (about 10 neighbours each)
        calls = {
            "query k=1": (lambda T: T(x).query(x, workers=-1), lambda u, v: same_knn(u, v, x)),
            "query k=8": (lambda T: T(x).query(x, k=8, workers=-1), lambda u, v: same_knn(u, v, x)),
            "query_ball_point return_length": (lambda T: T(x).query_ball_point(x, r, return_length=True, workers=-1),
                                               np.array_equal),
            "count_neighbors": (lambda T: (lambda t: t.count_neighbors(t, r))(T(x)), lambda u, v: int(u) == int(v)),
            "query_pairs ndarray": (lambda T: T(x).query_pairs(r, output_type="ndarray"),
                                    lambda u, v: np.array_equal(sorted_pairs(u), sorted_pairs(v))),
            "sparse_distance_matrix coo": (lambda T: (lambda t: t.sparse_distance_matrix(t, r, output_type="coo_matrix"))(T(x)),
                                           lambda u, v: abs(u - v).max() == 0 and u.nnz == v.nnz),
        }
        t = canopy.cKDTree(x)
        print(f"{name}: {x.shape[0]} x {x.shape[1]} float64, r = {r:.6g}, canopy's tree on the {t.built_on}")
        for call, (fn, equal) in calls.items():
            got, ms = timed(lambda: fn(canopy.cKDTree))
            want, ref_ms = timed(lambda: fn(Ref), warm=False)  # (scipy once: seconds)
            ok = bool(equal(got, want))
            bad += not ok
            rows.append({"data": name, "call": call, "canopy_ms": ms, "scipy_ms": ref_ms, "equal": ok})
            print(f"  {call:34s} canopy {ms:9.1f} ms  scipy {ref_ms:9.1f} ms  {ref_ms / ms:6.1f}x  "
                  f"{'equal' if ok else 'DIFFERENT'}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print("every answer equal to scipy's" if not bad else f"{bad} calls differ from scipy's")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
