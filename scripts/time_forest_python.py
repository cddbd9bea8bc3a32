#!/usr/bin/python3
"""Times the training libraries' own CPU predict on the forest benchmark's models and data
(scripts/make_forest_bench_models.py), for comparison with `canopy-bench forest --device cpu`
on the same machine. Batches are built as canopy-bench builds them: the data file's first N
rows, repeated from the top when the file is shorter.

    /usr/bin/python3 scripts/time_forest_python.py [--batch 1000,100000] [--repeat 5] [--json FILE]

Times, median of --repeat runs after a warm-up:
  python3-xgboost  Booster.predict(DMatrix(X)) (probabilities), DMatrix construction included,
                   nthread = every core
  scikit-learn     RandomForestClassifier.predict_proba(X) with n_jobs = -1 (every core)
"""
import argparse
import gzip
import json
import os
import pickle

import numpy as np
import xgboost as xgb

from bench_timing import timed  # scripts/ is on sys.path when a script here runs

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def read_rows(path):
    with gzip.open(path, "rt") as f:
        lines = f.read().splitlines()[1:]
    return np.array([[float(v) for v in ln.split(",")[:-1]] for ln in lines], dtype=np.float32)


def batch(X, n):
    reps = -(-n // X.shape[0])
    return np.ascontiguousarray(np.tile(X, (reps, 1))[:n])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(ROOT, "bench-data", "forest"))
    ap.add_argument("--batch", default="1000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    sizes = [int(s) for s in a.batch.split(",")]
    results = []

    X = read_rows(os.path.join(a.dir, "covtype.csv.gz"))
    bst = xgb.Booster(model_file=os.path.join(a.dir, "covtype_xgb_d8.json"))
    bst.set_param({"nthread": os.cpu_count()})
    for n in sizes:
        B = batch(X, n)
        ms = timed(lambda: bst.predict(xgb.DMatrix(B, missing=np.nan)), a.repeat)
        results.append({"library": f"xgboost {xgb.__version__}", "model": "covtype_xgb_d8", "batch": n,
                        "ms_per_batch": ms, "rows_per_s": n / (ms / 1000.0)})
        print(f"xgboost  covtype_xgb_d8  batch {n:>7}: {ms:10.3f} ms  {n / (ms / 1000.0):12.0f} rows/s", flush=True)

    import sklearn
    X = read_rows(os.path.join(a.dir, "higgs.csv.gz"))
    with open(os.path.join(a.dir, "higgs_rf_d20.pkl"), "rb") as f:
        rf = pickle.load(f)
    rf.n_jobs = -1
    for n in sizes:
        B = batch(X, n)
        ms = timed(lambda: rf.predict_proba(B), a.repeat)
        results.append({"library": f"scikit-learn {sklearn.__version__}", "model": "higgs_rf_d20", "batch": n,
                        "ms_per_batch": ms, "rows_per_s": n / (ms / 1000.0)})
        print(f"sklearn  higgs_rf_d20    batch {n:>7}: {ms:10.3f} ms  {n / (ms / 1000.0):12.0f} rows/s", flush=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpus": os.cpu_count(), "repeat": a.repeat, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
