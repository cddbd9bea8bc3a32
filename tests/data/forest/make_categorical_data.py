#!/usr/bin/python3
"""Test data for categorical splits (XGBoost's enable_categorical), self-contained:

    /usr/bin/python3 tests/data/forest/make_categorical_data.py

Needs python3-xgboost 1.7 (no pandas: feature_types marks the categorical columns).
Deterministic: fixed seeds, single-threaded training.

Written files:
  xgb_cat.json/.ubj        binary:logistic, 30 trees of depth 5 over 4 features: f0 and f3
                           numerical, f1 categorical with 20 categories and f2 with 5, partition
                           splits (max_cat_to_onehot 1), 10% missing values in every column
  xgb_cat_multi.json/.ubj  multi:softprob, 3 classes, 8 rounds (24 trees) of depth 4 on the same
                           features, XGBoost's default max_cat_to_onehot (4): f2 splits one-hot
  cat_rows.csv             400 rows: training-range values, categories never seen in training
                           (20..40, 1000, 1e6), negative (-1, -0.5), fractional (2.5, 7.9),
                           -0.0 and missing values (empty fields); label last
  <model>.margin.txt       predict(output_margin=True) on cat_rows.csv, one line per row
  <model>.prob.txt         predict(); <model>.class.txt: prob > 0.5, or the largest margin
  <model>.leaf.txt         predict(pred_leaf=True) on cat_rows.csv
"""
import os

import json

import numpy as np
import xgboost as xgb

from make_test_data import HERE, write_pred

TYPES = ["q", "c", "c", "q"]


def features(rng, n):
    f0 = rng.normal(size=n)
    f1 = rng.integers(0, 20, size=n).astype(float)
    f2 = rng.integers(0, 5, size=n).astype(float)
    f3 = rng.uniform(-2, 2, size=n)
    return np.stack([f0, f1, f2, f3], axis=1).astype(np.float32)


def target(X, rng):
    # Categories that matter in no order (so partition splits pay), and an interaction.
    good = np.isin(X[:, 1], [1, 4, 6, 11, 13, 17, 18]).astype(float)
    score = 1.2 * good + 0.8 * (X[:, 2] == 3) - 0.6 * (X[:, 2] == 0) + 0.5 * X[:, 0] * (X[:, 3] > 0)
    return score + rng.normal(scale=0.3, size=len(X))


def with_missing(X, rng, frac):
    X = X.copy()
    X[rng.random(X.shape) < frac] = np.nan
    return X


def rows(rng):
    X = features(rng, 400)
    # Categories XGBoost never saw, out-of-range and odd values, in both categorical columns.
    odd = np.array([20, 21, 31, 32, 33, 40, 63, 64, 1000, 1e6, -1, -0.5, -0.0, 2.5, 7.9, 0.999], dtype=np.float32)
    pick = rng.random(400) < 0.3
    X[pick, 1] = rng.choice(odd, size=pick.sum())
    pick = rng.random(400) < 0.3
    X[pick, 2] = rng.choice(odd, size=pick.sum())
    return with_missing(X, rng, 0.08)


def write_rows(path, X, y):
    with open(path, "w") as f:
        f.write("f0,f1,f2,f3,label\n")
        for row, label in zip(X, y):
            cells = ["" if np.isnan(v) else ("-0.0" if v == 0 and np.signbit(v) else "%.9g" % v) for v in row]
            f.write(",".join(cells) + ",%.9g\n" % label)


def train(name, params, rounds, X, y, Xte):
    params = dict(params, tree_method="hist", nthread=1, seed=7)
    d = xgb.DMatrix(X, label=y, missing=np.nan, feature_types=TYPES, enable_categorical=True)
    bst = xgb.train(params, d, rounds)
    for ext in ("json", "ubj"):
        bst.save_model(os.path.join(HERE, name + "." + ext))
    dte = xgb.DMatrix(Xte, missing=np.nan, feature_types=TYPES, enable_categorical=True)
    margin = bst.predict(dte, output_margin=True)
    prob = bst.predict(dte)
    write_pred(os.path.join(HERE, name + ".margin.txt"), margin, "%.9g")
    write_pred(os.path.join(HERE, name + ".prob.txt"), prob, "%.9g")
    cls = (prob > 0.5).astype(int) if margin.ndim == 1 else np.argmax(margin, axis=1)
    write_pred(os.path.join(HERE, name + ".class.txt"), cls, "%d")
    write_pred(os.path.join(HERE, name + ".leaf.txt"), bst.predict(dte, pred_leaf=True).astype(np.int64), "%d")
    trees = json.load(open(os.path.join(HERE, name + ".json")))["learner"]["gradient_booster"]["model"]["trees"]
    cat = sum(sum(t["split_type"]) for t in trees)
    assert cat > 0, "no categorical split was learned"
    print(f"{name}: {len(trees)} trees, {cat} categorical splits, "
          f"{os.path.getsize(os.path.join(HERE, name + '.json')) // 1024} KiB JSON")


def main():
    rng = np.random.default_rng(2026)
    X = with_missing(features(rng, 6000), rng, 0.1)
    s = target(np.nan_to_num(X, nan=-1), rng)
    Xte = rows(rng)
    y = (s > np.median(s)).astype(int)
    write_rows(os.path.join(HERE, "cat_rows.csv"), Xte, (target(np.nan_to_num(Xte, nan=-1), rng) > np.median(s)).astype(int))
    train("xgb_cat", dict(objective="binary:logistic", max_depth=5, eta=0.3, max_cat_to_onehot=1), 30, X, y, Xte)
    y3 = np.digitize(s, np.quantile(s, [1 / 3, 2 / 3]))
    train("xgb_cat_multi", dict(objective="multi:softprob", num_class=3, max_depth=4, eta=0.3), 8, X, y3, Xte)


if __name__ == "__main__":
    main()
