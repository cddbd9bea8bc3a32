#!/usr/bin/python3
"""Trains the forests of the forest benchmark and writes them, with their data, to
bench-data/forest/ (ignored by git: the directory carries its own .gitignore).

    /usr/bin/python3 scripts/make_forest_bench_models.py [--shared-data DIR] [--out DIR]
        [--only NAME[,NAME...]] [--rounds 500] [--bin-rounds 500] [--higgs-rounds 1000]
        [--letter-rounds 20]

--only builds just the named models (default: all): covtype_multi, covtype_bin, covtype_cat, covtype_rf,
higgs_rf, higgs_xgb, letter. Each data set is split 80/20 by one rng (seed 12345), its
permutations drawn in the order covtype, higgs, letter whatever --only says, so a file always
holds the same rows. Prints one line per model: trees, max depth reached, nodes, training
seconds, held-out accuracy (the training library's own predict), file size.

Writes (the GPU machine needs only the .json / .csv.gz files, no Python):
  covtype.csv.gz            the held-out 20% of covtype_labeled_168k (33,739 rows), numeric:
                            Wilderness_Area as its code (sorted names -> 0..5), label Cover_Type - 1
  covtype_xgb_d8.json       XGBoost multi:softprob, --rounds boosting rounds (500: 3500 trees, one per
                            class and round), max_depth 8, trained on the other 80%        [covtype_multi]
  covtype_xgb_d8.json.gz    the same, compressed (Canopy reads either)
  covtype_bin.csv.gz        the same rows and columns as covtype.csv.gz, label Cover_Type_2
                            (1 if Cover_Type == 2 else 0)
  covtype_xgb_bin_d8.json   XGBoost binary:logistic on Cover_Type == 2, --bin-rounds rounds (500 trees),
                            max_depth 8, eta 0.1, trained on the same 80%                  [covtype_bin]
  covtype_xgb_bin_d8.json.gz  the same, compressed
  covtype_cat.csv.gz        covtype_bin.csv.gz with Soil_Type's codes numbered 0..39
  covtype_xgb_cat_d8.json   as covtype_xgb_bin_d8 on those rows, Wilderness_Area and Soil_Type
                            categorical (enable_categorical, partition splits: max_cat_to_onehot 1)
                                                                                           [covtype_cat]
  covtype_rf_d12.json       scikit-learn RandomForestClassifier(n_estimators=100, max_depth=12) on
                            Cover_Type == 2 (rows: covtype_bin.csv.gz), exported with
                            scripts/export_sklearn.py                                      [covtype_rf]
  covtype_rf_d12.pkl        the same forest pickled
  higgs.csv.gz              the held-out 20% of higgs_11k (2,196 rows), label last
  higgs_rf_d20.json         scikit-learn RandomForestClassifier(n_estimators=100, max_depth=20),
                            exported with scripts/export_sklearn.py                        [higgs_rf]
  higgs_rf_d20.pkl          the same forest pickled, for scripts/time_forest_python.py
  higgs_xgb_d6.json         XGBoost binary:logistic, --higgs-rounds rounds (1000 trees), max_depth 6,
                            eta 0.1, trained on the same 80% as higgs_rf_d20               [higgs_xgb]
  higgs_xgb_d6.json.gz      the same, compressed
  letter.csv.gz             the held-out 20% of letter_20k (4,000 rows), 16 integer features,
                            label lettr as the letter's index 0..25 (sorted letters)
  letter_xgb_d4.json        XGBoost multi:softprob, 26 classes, --letter-rounds rounds (20: 520 trees),
                            max_depth 4, eta 0.3, trained on the other 80%; small enough for the
                            whole forest to fit in GPU shared memory                       [letter]
  letter_xgb_d4.json.gz     the same, compressed
All XGBoost models: tree_method hist, seed 1. All random forests: random_state 1, n_jobs -1.
Needs python3-xgboost and python3-sklearn (Debian's /usr/bin/python3).
"""
import argparse
import csv
import gzip
import json
import os
import pickle
import shutil
import sys
import time

import numpy as np
import sklearn.ensemble as ens
import xgboost as xgb

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "data", "forest"))
from export_sklearn import export_forest  # noqa: E402
from make_test_data import f32, load_covtype, load_higgs, load_letter  # noqa: E402

MODELS = ("covtype_multi", "covtype_bin", "covtype_cat", "covtype_rf", "higgs_rf", "higgs_xgb", "letter")
DATA = (("covtype", "covtype_labeled_168k.csv.gz"), ("higgs", "higgs_11k.csv.gz"),
        ("letter", "letter_20k.csv.gz"))


def write_csv_gz(path, names, label, X, y):
    with gzip.open(path, "wt", compresslevel=6) as f:
        f.write(",".join(names + [label]) + "\n")
        for i in range(X.shape[0]):
            f.write(",".join(f32(v) for v in X[i]) + "," + str(int(y[i])) + "\n")


def gzip_copy(path):
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)


def count_rows(path):
    """Data rows of a CSV file with a header, counted as make_test_data's loaders read them."""
    with gzip.open(path, "rt", newline="") as f:
        return sum(1 for _ in csv.reader(f)) - 1


def split(n, rng):
    """(held-out, training) row indices: the first fifth of a permutation is held out."""
    idx = rng.permutation(n)
    n_test = n // 5
    return idx[:n_test], idx[n_test:]


def size(path):
    b = os.path.getsize(path)
    return f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def report(name, trees, depth, nodes, secs, acc, path):
    gz = f" ({size(path + '.gz')} gzipped)" if os.path.exists(path + ".gz") else ""
    print(f"{name:<20} {trees:5d} trees, max depth {depth:2d}, {nodes:9,d} nodes, trained in {secs:6.1f} s, "
          f"held-out accuracy {acc:.4f}, {size(path)}{gz}", flush=True)


def xgb_shape(path):
    """(trees, max depth reached, nodes reachable from the roots) of a saved XGBoost JSON model."""
    with open(path) as f:
        trees = json.load(f)["learner"]["gradient_booster"]["model"]["trees"]
    depth = nodes = 0
    for t in trees:
        left, right = t["left_children"], t["right_children"]
        stack = [(0, 0)]
        while stack:
            i, d = stack.pop()
            nodes += 1
            depth = max(depth, d)
            if left[i] != -1:
                stack += [(left[i], d + 1), (right[i], d + 1)]
    return len(trees), depth, nodes


def xgb_model(name, params, rounds, Xtr, ytr, Xte, yte, out, types=None):
    params = dict(params, tree_method="hist", seed=1)
    t0 = time.time()
    cat = dict(feature_types=types, enable_categorical=True) if types else {}
    bst = xgb.train(params, xgb.DMatrix(Xtr, label=ytr, **cat), rounds)
    secs = time.time() - t0
    path = os.path.join(out, name + ".json")
    bst.save_model(path)
    gzip_copy(path)
    p = bst.predict(xgb.DMatrix(Xte, **cat))
    cls = np.argmax(p, axis=1) if p.ndim == 2 else (p > 0.5).astype(int)
    report(name, *xgb_shape(path), secs, float(np.mean(cls == yte)), path)


def rf_model(name, max_depth, Xtr, ytr, Xte, yte, out):
    t0 = time.time()
    rf = ens.RandomForestClassifier(n_estimators=100, max_depth=max_depth, random_state=1, n_jobs=-1)
    rf.fit(Xtr, ytr)
    secs = time.time() - t0
    path = os.path.join(out, name + ".json")
    export_forest(rf, path)
    with open(os.path.join(out, name + ".pkl"), "wb") as f:
        pickle.dump(rf, f)
    nodes = sum(e.tree_.node_count for e in rf.estimators_)
    depth = max(e.tree_.max_depth for e in rf.estimators_)
    report(name, len(rf.estimators_), depth, nodes, secs, rf.score(Xte, yte), path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared-data", default=os.path.join(ROOT, "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-data", "forest"))
    ap.add_argument("--only", default=",".join(MODELS), help="NAME[,NAME...] of " + ", ".join(MODELS))
    ap.add_argument("--rounds", type=int, default=500, help="covtype_multi boosting rounds")
    ap.add_argument("--bin-rounds", type=int, default=500, help="covtype_bin boosting rounds")
    ap.add_argument("--higgs-rounds", type=int, default=1000, help="higgs_xgb boosting rounds")
    ap.add_argument("--letter-rounds", type=int, default=20, help="letter boosting rounds")
    a = ap.parse_args()
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    if not only or only - set(MODELS):
        ap.error(f"--only: unknown model(s) {', '.join(sorted(only - set(MODELS))) or '(none given)'}; "
                 f"choose from {', '.join(MODELS)}")
    os.makedirs(a.out, exist_ok=True)
    top = os.path.join(ROOT, "bench-data")
    if os.path.abspath(a.out).startswith(top) and not os.path.exists(os.path.join(top, ".gitignore")):
        with open(os.path.join(top, ".gitignore"), "w") as f:
            f.write("# Generated by scripts/make_forest_bench_models.py; large, never committed.\n*\n")
    rng = np.random.default_rng(12345)
    # Every split is drawn, in this order, whatever --only says: the rows never depend on it.
    splits = {s: split(count_rows(os.path.join(a.shared_data, f)), rng) for s, f in DATA}

    if only & {"covtype_multi", "covtype_bin", "covtype_cat", "covtype_rf"}:
        names, X, y = load_covtype(a.shared_data)
        te, tr = splits["covtype"]
        assert len(te) + len(tr) == X.shape[0]
        y2 = (y == 2).astype(int)
        if "covtype_multi" in only:
            write_csv_gz(os.path.join(a.out, "covtype.csv.gz"), names, "Cover_Type", X[te], y[te] - 1)
            xgb_model("covtype_xgb_d8", dict(objective="multi:softprob", num_class=7, max_depth=8, eta=0.1),
                      a.rounds, X[tr], y[tr] - 1, X[te], y[te] - 1, a.out)
        if only & {"covtype_bin", "covtype_cat", "covtype_rf"}:
            write_csv_gz(os.path.join(a.out, "covtype_bin.csv.gz"), names, "Cover_Type_2", X[te], y2[te])
        if "covtype_bin" in only:
            xgb_model("covtype_xgb_bin_d8", dict(objective="binary:logistic", max_depth=8, eta=0.1),
                      a.bin_rounds, X[tr], y2[tr], X[te], y2[te], a.out)
        if "covtype_cat" in only:
            # Wilderness_Area and Soil_Type as categories, Soil_Type's ELU codes (2702..8776)
            # numbered 0..39 as a category dtype would (XGBoost's sets run up to the largest code).
            types = ["c" if n in ("Wilderness_Area", "Soil_Type") else "q" for n in names]
            Xc = X.copy()
            soil = names.index("Soil_Type")
            Xc[:, soil] = np.searchsorted(np.unique(X[:, soil]), X[:, soil])
            write_csv_gz(os.path.join(a.out, "covtype_cat.csv.gz"), names, "Cover_Type_2", Xc[te], y2[te])
            xgb_model("covtype_xgb_cat_d8", dict(objective="binary:logistic", max_depth=8, eta=0.1, max_cat_to_onehot=1),
                      a.bin_rounds, Xc[tr], y2[tr], Xc[te], y2[te], a.out, types)
        if "covtype_rf" in only:
            rf_model("covtype_rf_d12", 12, X[tr], y2[tr], X[te], y2[te], a.out)

    if only & {"higgs_rf", "higgs_xgb"}:
        names, X, y = load_higgs(a.shared_data)
        te, tr = splits["higgs"]
        assert len(te) + len(tr) == X.shape[0]
        write_csv_gz(os.path.join(a.out, "higgs.csv.gz"), names, "label", X[te], y[te])
        if "higgs_rf" in only:
            rf_model("higgs_rf_d20", 20, X[tr], y[tr], X[te], y[te], a.out)
        if "higgs_xgb" in only:
            xgb_model("higgs_xgb_d6", dict(objective="binary:logistic", max_depth=6, eta=0.1),
                      a.higgs_rounds, X[tr], y[tr], X[te], y[te], a.out)

    if "letter" in only:
        names, X, y = load_letter(a.shared_data)  # label: ord(letter) - ord("A")
        te, tr = splits["letter"]
        assert len(te) + len(tr) == X.shape[0]
        assert np.array_equal(np.unique(y), np.arange(26))  # all 26 letters: the index of the sorted letters
        write_csv_gz(os.path.join(a.out, "letter.csv.gz"), names, "lettr", X[te], y[te])
        xgb_model("letter_xgb_d4", dict(objective="multi:softprob", num_class=26, max_depth=4, eta=0.3),
                  a.letter_rounds, X[tr], y[tr], X[te], y[te], a.out)


if __name__ == "__main__":
    main()
