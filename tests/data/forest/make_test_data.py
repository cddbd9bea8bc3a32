#!/usr/bin/python3
"""Regenerates tests/data/forest: small models trained on the real data sets of ../shared/data,
row subsets, and the predictions of the training libraries themselves, so the C++ tests need
no Python at run time.

    /usr/bin/python3 tests/data/forest/make_test_data.py [--shared-data DIR]

Needs python3-xgboost 1.7 and python3-sklearn (Debian's /usr/bin/python3). Deterministic:
fixed seeds, single-threaded training.

Written files (all small):
  <set>_rows.csv         1000 held-out rows, features in the model's order, ~5% of the values
                         missing (empty field or "nan"), label last (column "label")
  <set>_rows_dense.csv   the same rows without missing values (scikit-learn 1.2 refuses NaN)
  xgb_*.json             Booster.save_model() output of python3-xgboost
  xgb_higgs_v2.json      xgb_higgs.json rewritten with the XGBoost 2.x field variants
  rf_*.json, et_*.json   scripts/export_sklearn.py output
  <model>.margin.txt     predict(output_margin=True)      one line per row, comma-separated
  <model>.prob.txt       predict() / predict_proba()      (float32: %.9g, float64: %.17g)
  <model>.class.txt      the class the library predicts   (xgboost: prob > 0.5 or argmax margin)
"""
import argparse
import copy
import csv
import gzip
import json
import os
import sys

import numpy as np
import sklearn.ensemble as ens
import xgboost as xgb

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from export_sklearn import export_forest  # noqa: E402

N_ROWS = 1000
MISSING = 0.05


def read_csv_gz(path):
    with gzip.open(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def load_covtype(d):
    header, rows = read_csv_gz(os.path.join(d, "covtype_labeled_168k.csv.gz"))
    wa = header.index("Wilderness_Area")
    names = sorted({r[wa] for r in rows})
    code = {n: i for i, n in enumerate(names)}
    X = np.array([[float(code[v]) if j == wa else float(v) for j, v in enumerate(r[:-1])] for r in rows])
    y = np.array([int(r[-1]) for r in rows])  # Cover_Type 1..7
    return header[:-1], X.astype(np.float32), y


def load_letter(d):
    header, rows = read_csv_gz(os.path.join(d, "letter_20k.csv.gz"))
    X = np.array([[float(v) for v in r[1:]] for r in rows], dtype=np.float32)
    y = np.array([ord(r[0]) - ord("A") for r in rows])  # 0..25
    return header[1:], X, y


def load_higgs(d):
    header, rows = read_csv_gz(os.path.join(d, "higgs_11k.csv.gz"))
    X = np.array([[float(v) for v in r[:-1]] for r in rows], dtype=np.float32)
    y = np.array([int(float(r[-1])) for r in rows])
    return header[:-1], X, y


def f32(v):
    return np.format_float_positional(np.float32(v), unique=True, trim="-") if np.isfinite(v) else repr(float(v))


def write_rows(path, names, X, y):
    """Float32 features in their shortest round-trip form; NaN as an empty field or 'nan'."""
    with open(path, "w") as f:
        f.write(",".join(names + ["label"]) + "\n")
        for i in range(X.shape[0]):
            fields = []
            for j in range(X.shape[1]):
                v = X[i, j]
                fields.append(("" if (i + j) % 2 else "nan") if np.isnan(v) else f32(v))
            f.write(",".join(fields) + "," + str(int(y[i])) + "\n")
    # The C++ reader parses each field to double and rounds to float: check that gives X back.
    with open(path) as f:
        back = list(csv.reader(f))[1:]
    Xb = np.array([[float(v) if v not in ("", "nan") else np.nan for v in r[:-1]] for r in back],
                  dtype=np.float64).astype(np.float32)
    assert np.array_equal(Xb, X, equal_nan=True), path


def write_pred(path, P, fmt):
    P = np.asarray(P)
    if P.ndim == 1:
        P = P[:, None]
    with open(path, "w") as f:
        for row in P:
            f.write(",".join(fmt % v for v in row) + "\n")


def split(X, y, n_train, rng):
    idx = rng.permutation(X.shape[0])
    return idx[N_ROWS:N_ROWS + n_train], idx[:N_ROWS]


def with_missing(X, rng, frac):
    X = X.copy()
    X[rng.random(X.shape) < frac] = np.nan
    return X


def xgb_model(name, params, rounds, Xtr, ytr, Xte):
    params = dict(params, tree_method="hist", nthread=1, seed=7)
    bst = xgb.train(params, xgb.DMatrix(Xtr, label=ytr, missing=np.nan), rounds)
    path = os.path.join(HERE, name + ".json")
    bst.save_model(path)
    d = xgb.DMatrix(Xte, missing=np.nan)
    margin = bst.predict(d, output_margin=True)
    pred = bst.predict(d)
    obj = params["objective"]
    write_pred(os.path.join(HERE, name + ".margin.txt"), margin, "%.9g")
    if obj == "multi:softmax":
        cls = pred
        # predict() of multi:softmax is the class; its probabilities are the softmax of the margins
        e = np.exp(margin.astype(np.float64) - margin.max(axis=1, keepdims=True))
        prob = e / e.sum(axis=1, keepdims=True)
        write_pred(os.path.join(HERE, name + ".prob.txt"), prob, "%.9g")
    else:
        write_pred(os.path.join(HERE, name + ".prob.txt"), pred, "%.9g")
        if obj == "binary:logistic":
            cls = (pred > 0.5).astype(int)
        elif obj == "multi:softprob":
            cls = np.argmax(margin, axis=1)
        else:
            cls = None
    if cls is not None:
        write_pred(os.path.join(HERE, name + ".class.txt"), np.asarray(cls).astype(int), "%d")
    print(f"{name}: {len(json.load(open(path))['learner']['gradient_booster']['model']['trees'])} trees, "
          f"{os.path.getsize(path) // 1024} KiB")
    return path


def sk_model(name, model, Xtr, ytr, Xte):
    model.fit(Xtr, ytr)
    export_forest(model, os.path.join(HERE, name + ".json"))
    if hasattr(model, "predict_proba"):
        write_pred(os.path.join(HERE, name + ".prob.txt"), model.predict_proba(Xte), "%.17g")
        write_pred(os.path.join(HERE, name + ".class.txt"), model.predict(Xte), "%.17g")
    else:
        write_pred(os.path.join(HERE, name + ".prob.txt"), model.predict(Xte), "%.17g")
    print(f"{name}: {len(model.estimators_)} trees, "
          f"{os.path.getsize(os.path.join(HERE, name + '.json')) // 1024} KiB")


def to_v2(src, dst):
    """The same model in the field variants of XGBoost 2.x: base_score as "[x]", booleans for
    default_left, iteration_indptr, size_leaf_vector "1", version 2.1.0."""
    j = json.load(open(src))
    j = copy.deepcopy(j)
    L = j["learner"]
    L["learner_model_param"]["base_score"] = "[" + L["learner_model_param"]["base_score"] + "]"
    m = L["gradient_booster"]["model"]
    m["gbtree_model_param"].pop("size_leaf_vector", None)
    m["iteration_indptr"] = list(range(len(m["trees"]) + 1))
    for t in m["trees"]:
        t["default_left"] = [bool(v) for v in t["default_left"]]
        t["tree_param"]["size_leaf_vector"] = "1"
    j["version"] = [2, 1, 0]
    with open(dst, "w") as f:
        json.dump(j, f, separators=(",", ":"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared-data", default=os.path.join(ROOT, "..", "shared", "data"))
    a = ap.parse_args()
    rng = np.random.default_rng(20240601)

    # covtype: 7 classes, XGBoost labels 0..6, scikit-learn keeps Cover_Type 1..7.
    names, X, y = load_covtype(a.shared_data)
    tr, te = split(X, y, 20000, rng)
    Xte = with_missing(X[te], rng, MISSING)
    write_rows(os.path.join(HERE, "covtype_rows.csv"), names, Xte, y[te] - 1)
    write_rows(os.path.join(HERE, "covtype_rows_dense.csv"), names, X[te], y[te] - 1)
    Xtr_nan = with_missing(X[tr], rng, 0.03)
    xgb_model("xgb_covtype", dict(objective="multi:softprob", num_class=7, max_depth=5, eta=0.3),
              6, Xtr_nan, y[tr] - 1, Xte)
    sk_model("rf_covtype", ens.RandomForestClassifier(n_estimators=20, max_depth=9, random_state=1),
             X[tr], y[tr], X[te])

    # letter: 26 classes.
    names, X, y = load_letter(a.shared_data)
    tr, te = split(X, y, 16000, rng)
    Xte = with_missing(X[te], rng, MISSING)
    write_rows(os.path.join(HERE, "letter_rows.csv"), names, Xte, y[te])
    write_rows(os.path.join(HERE, "letter_rows_dense.csv"), names, X[te], y[te])
    xgb_model("xgb_letter", dict(objective="multi:softmax", num_class=26, max_depth=4, eta=0.5),
              2, with_missing(X[tr], rng, 0.03), y[tr], Xte)
    sk_model("rf_letter", ens.RandomForestClassifier(n_estimators=20, max_depth=9, random_state=2),
             X[tr], y[tr], X[te])
    sk_model("et_letter_reg", ens.ExtraTreesRegressor(n_estimators=20, max_depth=8, random_state=3),
             X[tr], y[tr].astype(np.float64), X[te])

    # higgs: binary.
    names, X, y = load_higgs(a.shared_data)
    tr, te = split(X, y, 9000, rng)
    Xte = with_missing(X[te], rng, MISSING)
    write_rows(os.path.join(HERE, "higgs_rows.csv"), names, Xte, y[te])
    write_rows(os.path.join(HERE, "higgs_rows_dense.csv"), names, X[te], y[te])
    Xtr_nan = with_missing(X[tr], rng, 0.03)
    p = xgb_model("xgb_higgs", dict(objective="binary:logistic", max_depth=5, eta=0.3, base_score=0.4),
                  40, Xtr_nan, y[tr], Xte)
    to_v2(p, os.path.join(HERE, "xgb_higgs_v2.json"))
    xgb_model("xgb_higgs_reg", dict(objective="reg:squarederror", max_depth=4, eta=0.3, base_score=0.7),
              30, Xtr_nan, y[tr].astype(np.float32), Xte)
    sk_model("et_higgs", ens.ExtraTreesClassifier(n_estimators=20, max_depth=8, random_state=4),
             X[tr], y[tr], X[te])
    sk_model("rf_higgs_reg", ens.RandomForestRegressor(n_estimators=20, max_depth=8, random_state=5),
             X[tr], y[tr].astype(np.float64), X[te])


if __name__ == "__main__":
    main()
