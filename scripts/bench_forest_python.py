#!/usr/bin/env python3
"""The default forest call from Python on the GPU: canopy.Forest.load(path).predict_proba(X)
with X a cupy array (results stay on the device) and with X a numpy array (the whole call:
the copy in, the kernel, the copy out), against the C++ call inside it (last_stats.wall_ms,
the same default ForestPredictor with the same rows).

    python3 scripts/bench_forest_python.py MODEL.json[.gz] DATA.csv[.gz] LABEL [--batch 100,10000,1000000]
        [--json FILE]

Each batch: the data file's rows repeated to N (as canopy-bench builds them); the forest is
called until Auto has settled the batch's size class (at most 3000 calls), then timed: the
median of 200 calls (10 at a million rows) of wall-clock time around predict_proba, cupy's
stream synchronised after each.
"""
import argparse
import csv
import gzip
import json
import statistics
import sys
import time

import numpy as np

import canopy


def read_rows(path, label):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        r = csv.reader(f)
        header = next(r)
        keep = [i for i, h in enumerate(header) if h != label and str(i) != label]
        return np.array([[float(row[i]) if row[i] != "" else np.nan for i in keep] for row in r], dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("label")
    ap.add_argument("--batch", default="100,10000,1000000")
    ap.add_argument("--json")
    a = ap.parse_args()
    import cupy as cp

    rows = read_rows(a.data, a.label)
    forest = canopy.Forest.load(a.model)
    out = {"model": a.model, "device": canopy.gpu_description(), "batches": []}
    print(f"{a.model}: {forest.n_trees} trees, {forest.objective}; device {forest.device}")
    print(f"{'batch':>9} {'rows':>6} {'python ms':>10} {'C++ call ms':>12} {'kernel ms':>10} {'py / C++':>9} "
          f"{'rows/s':>12}  strategy")
    for n in [int(x) for x in a.batch.split(",")]:
        X = np.ascontiguousarray(np.resize(rows, (n, rows.shape[1])))
        for kind, x in (("cupy", cp.asarray(X)), ("numpy", X)):
            calls = 0
            while calls < 3000:
                forest.predict_proba(x)
                calls += 1
                if forest.last_stats.tuning not in ("prior", "refining"):
                    break
            cp.cuda.get_current_stream().synchronize()
            wall, inner, kern = [], [], []
            for _ in range(10 if n >= 1000000 else 200):
                t0 = time.perf_counter()
                p = forest.predict_proba(x)
                if kind == "cupy":
                    cp.cuda.get_current_stream().synchronize()
                wall.append((time.perf_counter() - t0) * 1e3)
                inner.append(forest.last_stats.wall_ms)
                kern.append(forest.last_stats.kernel_ms)
            w, c, k = statistics.median(wall), statistics.median(inner), statistics.median(kern)
            s = forest.last_stats
            print(f"{n:>9} {kind:>6} {w:>10.4f} {c:>12.4f} {k:>10.4f} {w / c:>9.2f} {n / (w / 1e3):>12.4g}  "
                  f"{s.kernel} ({s.tuning}, settled after {calls} calls)")
            out["batches"].append({"rows": n, "input": kind, "python_ms": w, "cpp_call_ms": c, "kernel_ms": k,
                                   "python_over_cpp": w / c, "rows_per_s": n / (w / 1e3), "kernel": s.kernel,
                                   "schedule": s.schedule, "tuning": s.tuning, "settle_calls": calls,
                                   "shape": list(p.shape), "dtype": str(p.dtype)})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
