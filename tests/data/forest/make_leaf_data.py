#!/usr/bin/python3
"""Test data for the leaf output, UBJSON models and non-finite literals (run after
make_test_data.py, whose models and rows files it reads):

    /usr/bin/python3 tests/data/forest/make_leaf_data.py [--shared-data DIR]

Needs python3-xgboost 1.7. Deterministic: fixed seeds, single-threaded training.

Written files:
  xgb_higgs.leaf.txt, xgb_covtype.leaf.txt
                           predict(pred_leaf=True) of those models of make_test_data.py on
                           their <set>_rows.csv
  xgb_lossguide.json/.ubj  binary:logistic grown loss-guided (node ids are not breadth-first),
                           saved by save_model() as JSON and as UBJSON; trained on higgs rows
  xgb_lossguide_multi.json/.ubj  multi:softprob, 3 covtype classes, loss-guided, both formats
  xgb_nonfinite.json       xgb_lossguide.json with split conditions set to NaN, Infinity and
                           -Infinity (the bare literals XGBoost writes), saved by XGBoost itself
  xgb_categorical.json     a tiny binary model with a categorical split (enable_categorical=True,
                           feature 1), which Canopy refuses with a message naming it
  <model>.margin.txt       predict(output_margin=True) of the new models, one line per row
  <model>.leaf.txt         predict(pred_leaf=True) of the new models
"""
import argparse
import json
import os
import re

import numpy as np
import xgboost as xgb

from make_test_data import HERE, ROOT, load_covtype, load_higgs, with_missing, write_pred

# Models of make_test_data.py whose leaves the tests check (binary and multi-class).
SETS = {"xgb_higgs": "higgs", "xgb_covtype": "covtype"}


def read_rows(name):
    """<set>_rows.csv as float32, empty field or 'nan' = NaN (label column dropped)."""
    with open(os.path.join(HERE, name + "_rows.csv")) as f:
        lines = f.read().splitlines()[1:]
    return np.array([[float(v) if v not in ("", "nan") else np.nan for v in line.split(",")[:-1]] for line in lines],
                    dtype=np.float64).astype(np.float32)


def write_outputs(bst, name, X):
    d = xgb.DMatrix(X, missing=np.nan)
    write_pred(os.path.join(HERE, name + ".margin.txt"), bst.predict(d, output_margin=True), "%.9g")
    leaf = bst.predict(d, pred_leaf=True)
    n_trees = len(json.loads(bst.save_raw("json"))["learner"]["gradient_booster"]["model"]["trees"])
    assert leaf.shape == (X.shape[0], n_trees), leaf.shape  # one column per tree, in model order
    write_pred(os.path.join(HERE, name + ".leaf.txt"), leaf.astype(np.int64), "%d")


def train(name, params, rounds, X, y, Xte):
    params = dict(params, tree_method="hist", grow_policy="lossguide", max_depth=0, nthread=1, seed=11)
    bst = xgb.train(params, xgb.DMatrix(X, label=y, missing=np.nan), rounds)
    for ext in ("json", "ubj"):
        bst.save_model(os.path.join(HERE, name + "." + ext))
    with open(os.path.join(HERE, name + ".ubj"), "rb") as f:
        assert f.read(2) == b"{L", "save_model did not write UBJSON"
    write_outputs(bst, name, Xte)
    print(f"{name}: {os.path.getsize(os.path.join(HERE, name + '.json')) // 1024} KiB JSON, "
          f"{os.path.getsize(os.path.join(HERE, name + '.ubj')) // 1024} KiB UBJSON")
    return bst


def nonfinite(src, dst, Xte):
    """Root of tree 0 NaN (XGBoost: every present value goes right), an inner node of tree 1
    +Infinity (every finite value goes left), the root of tree 2 -Infinity (all go right)."""
    j = json.load(open(src))
    trees = j["learner"]["gradient_booster"]["model"]["trees"]
    trees[0]["split_conditions"][0] = float("nan")
    inner = [k for k, c in enumerate(trees[1]["left_children"]) if c != -1 and k > 0][0]
    trees[1]["split_conditions"][inner] = float("inf")
    trees[2]["split_conditions"][0] = float("-inf")
    tmp = dst + ".tmp"
    with open(tmp, "w") as f:
        json.dump(j, f, separators=(",", ":"))  # Python writes NaN, Infinity, -Infinity
    bst = xgb.Booster(model_file=tmp)
    os.remove(tmp)
    bst.save_model(dst)
    text = open(dst).read()
    assert {"NaN", "Infinity", "-Infinity"} <= set(re.findall(r"-?Infinity|NaN", text)), "XGBoost wrote no literals"
    write_outputs(bst, os.path.basename(dst)[:-5], Xte)


def categorical(dst):
    """Tree 0's root splits on the categorical feature 1 (categories 0..5, odd ones one way)."""
    rng = np.random.default_rng(5)
    X = np.stack([rng.normal(size=500), rng.integers(0, 6, size=500).astype(float)], axis=1)
    y = ((X[:, 1] % 2 == 0) | (X[:, 0] > 1)).astype(int)
    d = xgb.DMatrix(X, label=y, feature_types=["q", "c"], enable_categorical=True)
    bst = xgb.train(dict(objective="binary:logistic", tree_method="hist", max_depth=2, nthread=1, seed=3,
                         max_cat_to_onehot=1), d, 2)
    bst.save_model(dst)
    t = json.load(open(dst))["learner"]["gradient_booster"]["model"]["trees"][0]
    assert t["split_type"][0] == 1 and t["split_indices"][0] == 1, "tree 0's root is not the categorical split"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared-data", default=os.path.join(ROOT, "..", "shared", "data"))
    a = ap.parse_args()
    for model, rows in SETS.items():
        bst = xgb.Booster(model_file=os.path.join(HERE, model + ".json"))
        leaf = bst.predict(xgb.DMatrix(read_rows(rows), missing=np.nan), pred_leaf=True)
        write_pred(os.path.join(HERE, model + ".leaf.txt"), leaf.astype(np.int64), "%d")
        print(f"{model}.leaf.txt: {leaf.shape[1]} trees")

    rng = np.random.default_rng(20240607)
    _, X, y = load_higgs(a.shared_data)
    Xtr = with_missing(X[1000:7000], rng, 0.03)
    train("xgb_lossguide", dict(objective="binary:logistic", max_leaves=12, eta=0.3), 8, Xtr, y[1000:7000],
          read_rows("higgs"))
    nonfinite(os.path.join(HERE, "xgb_lossguide.json"), os.path.join(HERE, "xgb_nonfinite.json"), read_rows("higgs"))
    _, X, y = load_covtype(a.shared_data)
    keep = y <= 3  # classes 1..3 -> 0..2
    X, y = X[keep][1000:7000], y[keep][1000:7000] - 1
    train("xgb_lossguide_multi", dict(objective="multi:softprob", num_class=3, max_leaves=8, eta=0.3), 3,
          with_missing(X, rng, 0.03), y, read_rows("covtype"))
    categorical(os.path.join(HERE, "xgb_categorical.json"))


if __name__ == "__main__":
    main()
