"""canopy.Forest against the training libraries themselves: XGBoost's XGBClassifier,
XGBRegressor and Booster, scikit-learn's random forests and extra trees, trained here on small
data (a few seconds in all). scikit-learn's outputs must be equal to the bit (float64), XGBoost's
margins and leaves to the bit, XGBoost's probabilities to the bit but where glibc's expf,
which XGBoost calls, is misrounded (assert_xgboost_probs checks that this explains each one). Runs on the CPU here and on the GPU where there is one;
the CUDA-array tests need cupy (torch: its tensors too)."""
import ctypes
import ctypes.util
import gzip
import pathlib
import pickle
import re
import warnings

import numpy as np
import pytest
from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor

import canopy
from canopy import _canopy

STATS = {"device", "layout", "kernel", "schedule", "tuning", "graph",
         "upload_ms", "kernel_ms", "download_ms", "tuning_ms", "wall_ms"}
DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"


def rows(n=1200, d=6, seed=0, missing=0.0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d)).astype(np.float32)
    if missing:
        X[rng.random(X.shape) < missing] = np.nan
    return X


def label(X, k):
    v = np.nan_to_num(X[:, 0] + X[:, 1] * X[:, 2] - 0.5 * X[:, 3], nan=0.3)
    return np.clip((v * k).astype(int), 0, k - 1)


def _expf_rn(x):
    # e^x correctly rounded to float32 (from float64), as Canopy computes it.
    return np.exp(x.astype(np.float64)).astype(np.float32)


def _expf_glibc():
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    except (OSError, AttributeError):
        return None
    return lambda x: np.array([libm.expf(float(v)) for v in x.ravel()], np.float32).reshape(x.shape)


def xgboost_proba(margins, expf):
    """XGBClassifier.predict_proba from XGBoost's margins in XGBoost 1.7's float32 arithmetic,
    with the expf given: binary: p = 1 / (expf(min(-m, 88.7)) + 1 + 1e-16), [1 - p, p];
    softprob: expf(m - max) in float32, their float64 sum in class order, each divided by it."""
    if margins.ndim == 1:
        p = np.float32(1) / ((expf(np.minimum(-margins, np.float32(88.7))) + np.float32(1)) + np.float32(1e-16))
        return np.stack([1.0 - p, p], axis=1)
    top = margins[:, :1].copy()
    for k in range(1, margins.shape[1]):
        top = np.fmax(margins[:, k:k + 1], top)
    e = expf(margins - top)
    total = np.zeros(len(margins))
    for k in range(margins.shape[1]):
        total = total + e[:, k].astype(np.float64)
    return e / total.astype(np.float32)[:, None]


def assert_xgboost_probs(got, want, margins):
    """XGBoost's float32 probabilities (want), from its margins (which Canopy's equal to the bit).
    Canopy evaluates XGBoost 1.7's sigmoid and softmax in the same float32 operations, but with
    e^x correctly rounded, where XGBoost calls glibc's expf, misrounded for about 1 float in
    10^4; there alone may the two differ (by an ulp). So: Canopy's values are the formula's with
    a correctly rounded exp, to the bit, and XGBoost's the formula's with glibc's expf, to the
    bit. (Without glibc's expf at hand: at most 0.1% of the values differ, by one ulp.)"""
    want = np.ascontiguousarray(want)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    if np.array_equal(got, want):
        return
    same(got, xgboost_proba(margins, _expf_rn))
    glibc = _expf_glibc()
    if glibc is not None:
        same(want, xgboost_proba(margins, glibc))
        return
    diff = got != want
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps[diff].max() == 1 and diff.sum() <= max(1, got.size // 1000)


def same(got, want):
    """Equal to the bit, dtype and shape included."""
    assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, \
        (type(got), getattr(got, "dtype", None), getattr(got, "shape", None), want.dtype, want.shape)
    assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f")


@pytest.fixture(scope="module")
def xgb():
    return pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def data():
    return rows(missing=0.05), rows(n=400, seed=1, missing=0.05)


@pytest.fixture(scope="module")
def binary(xgb, data):
    X, _ = data
    return xgb.XGBClassifier(n_estimators=30, max_depth=4, learning_rate=0.3).fit(X, label(X, 2))


@pytest.fixture(scope="module")
def softprob(xgb, data):
    X, _ = data
    return xgb.XGBClassifier(n_estimators=12, max_depth=4).fit(X, label(X, 4))


# --- XGBoost ------------------------------------------------------------------------------------

def test_xgboost_binary(binary, data):
    _, T = data
    f = canopy.Forest.load(binary)
    assert f.objective == "binary:logistic" and f.n_trees == 30 and f.n_features_in_ == 6
    same(f.classes_, binary.classes_)
    assert f.n_classes_ == 2
    assert_xgboost_probs(f.predict_proba(T), binary.predict_proba(T), binary.predict(T, output_margin=True))
    same(f.predict(T), binary.predict(T))
    same(f.predict(T, output_margin=True), binary.predict(T, output_margin=True))
    same(f.apply(T), binary.apply(T))
    assert set(vars(f.last_stats)) == STATS


def test_xgboost_multiclass_softprob(softprob, data):
    _, T = data
    f = canopy.Forest.load(softprob)
    assert f.objective == "multi:softprob" and f.n_trees == 12 * 4
    same(f.classes_, softprob.classes_)
    assert_xgboost_probs(f.predict_proba(T), softprob.predict_proba(T), softprob.predict(T, output_margin=True))
    same(f.predict(T), softprob.predict(T))
    same(f.predict(T, output_margin=True), softprob.predict(T, output_margin=True))
    same(f.apply(T), softprob.apply(T))


def test_xgboost_multiclass_softmax(xgb, data):
    X, T = data
    m = xgb.XGBClassifier(n_estimators=8, max_depth=3, objective="multi:softmax").fit(X, label(X, 3))
    f = canopy.Forest.load(m)
    assert f.objective == "multi:softmax"
    # XGBClassifier: scipy's softmax of the margins (float32); the margins are equal to the bit,
    # so are these.
    same(f.predict_proba(T), m.predict_proba(T))
    same(f.predict(T), m.predict(T))  # int32, XGBoost's own class output
    same(f.predict(T, output_margin=True), m.predict(T, output_margin=True))
    same(f.apply(T), m.apply(T))


def test_xgboost_regressor(xgb, data):
    X, T = data
    m = xgb.XGBRegressor(n_estimators=20, max_depth=5).fit(X, np.nan_to_num(X[:, 0] * 3 - X[:, 4]))
    f = canopy.Forest.load(m)
    same(f.predict(T), m.predict(T))
    same(f.predict(T, output_margin=True), m.predict(T, output_margin=True))
    same(f.apply(T), m.apply(T))
    # A regressor has no predict_proba and no classes, as in scikit-learn.
    assert not hasattr(f, "predict_proba") and not hasattr(f, "classes_") and not hasattr(f, "n_classes_")
    with pytest.raises(AttributeError, match="regressor"):
        f.predict_proba(T)
    one = xgb.XGBRegressor(n_estimators=1, max_depth=3).fit(X, np.nan_to_num(X[:, 1]))
    same(canopy.Forest.load(one).apply(T), one.apply(T))  # one tree: (n,), as XGBoost


def test_booster_and_model_files(xgb, data, tmp_path):
    X, T = data
    d = xgb.DMatrix(X, label=label(X, 3))
    booster = xgb.train({"objective": "multi:softprob", "num_class": 3, "max_depth": 4}, d, num_boost_round=10)
    dt = xgb.DMatrix(T)
    want_margin = booster.predict(dt, output_margin=True)
    want_prob = booster.predict(dt)
    want_leaf = booster.predict(dt, pred_leaf=True)
    booster.save_model(str(tmp_path / "m.json"))
    booster.save_model(str(tmp_path / "m.ubj"))
    (tmp_path / "m.json.gz").write_bytes(gzip.compress((tmp_path / "m.json").read_bytes()))
    for src in (booster, tmp_path / "m.json", str(tmp_path / "m.ubj"), tmp_path / "m.json.gz"):
        f = canopy.Forest.load(src)
        same(f.predict(T, output_margin=True), want_margin)
        assert_xgboost_probs(f.predict_proba(T), want_prob, want_margin)
        same(f.predict(T), want_prob.argmax(axis=1))
        same(f.apply(T), want_leaf)
        same(f.classes_, np.arange(3))
    with pytest.raises(ValueError, match="neither a path"):
        canopy.Forest.load(42)
    with pytest.raises(OSError):
        canopy.Forest.load(tmp_path / "missing.json")


# --- scikit-learn -------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [RandomForestClassifier, ExtraTreesClassifier])
def test_sklearn_classifiers(cls):
    X, T = rows(), rows(n=400, seed=1)
    m = cls(n_estimators=15, max_depth=8, random_state=0).fit(X, label(X, 3))
    f = canopy.Forest.load(m)
    same(f.predict_proba(T), m.predict_proba(T))  # float64, to the bit
    same(f.predict(T), m.predict(T))
    same(f.predict(T, output_margin=True), m.predict_proba(T))
    same(f.apply(T), m.apply(T))  # int64 node ids
    same(f.classes_, m.classes_)
    assert f.n_classes_ == 3 and f.n_trees == 15 and f.objective == "forest classifier"


@pytest.mark.parametrize("cls", [RandomForestRegressor, ExtraTreesRegressor])
def test_sklearn_regressors(cls):
    X, T = rows(), rows(n=400, seed=1)
    m = cls(n_estimators=12, max_depth=10, random_state=0).fit(X, X[:, 0] * 2 + X[:, 1] ** 2)
    f = canopy.Forest.load(m)
    same(f.predict(T), m.predict(T))  # float64, to the bit
    same(f.predict(T, output_margin=True), m.predict(T))
    same(f.apply(T), m.apply(T))
    assert not hasattr(f, "predict_proba") and f.objective == "forest regressor"


def test_string_labels(tmp_path):
    X, T = rows(), rows(n=400, seed=1)
    names = np.array(["ant", "bee", "cat"])
    m = RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(X, names[label(X, 3)])
    f = canopy.Forest.load(m)
    same(f.classes_, m.classes_)
    same(f.predict(T), m.predict(T))
    same(f.predict_proba(T), m.predict_proba(T))
    assert f.predict(T[0]) == m.predict(T[:1])[0]  # one 1-d row: one label
    # The same forest as a Canopy JSON file (scripts/export_sklearn.py): its class names are the labels.
    from canopy.sklearn_export import export_forest
    export_forest(m, tmp_path / "rf.json")
    g = canopy.Forest.load(tmp_path / "rf.json")
    assert list(g.classes_) == list(m.classes_) and list(g.predict(T)) == list(m.predict(T))
    same(g.predict_proba(T), m.predict_proba(T))


# --- early stopping and iteration ranges -------------------------------------------------------

@pytest.fixture(scope="module")
def early(xgb):
    X, V = rows(n=1500, seed=3), rows(n=500, seed=4)
    rng = np.random.default_rng(5)
    y, yv = label(X, 2), label(V, 2)
    y = np.where(rng.random(len(y)) < 0.2, 1 - y, y)  # noisy labels: the validation loss turns
    m = xgb.XGBClassifier(n_estimators=200, max_depth=6, learning_rate=0.5, early_stopping_rounds=5)
    m.fit(X, y, eval_set=[(V, yv)], verbose=False)
    assert m.best_iteration < 199
    return m


def test_early_stopping_uses_best_iteration_as_the_wrapper(xgb, early, tmp_path):
    T = rows(n=400, seed=6)
    f = canopy.Forest.load(early)
    assert f.best_iteration == early.best_iteration and f.n_trees == early.get_booster().num_boosted_rounds()
    assert_xgboost_probs(f.predict_proba(T), early.predict_proba(T), early.predict(T, output_margin=True))
    same(f.predict(T), early.predict(T))
    same(f.predict(T, output_margin=True), early.predict(T, output_margin=True))
    same(f.apply(T), early.apply(T))
    # A Booster (and a file) predicts with every tree, as Booster.predict does in 1.7.
    booster = early.get_booster()
    whole = booster.predict(xgb.DMatrix(T), output_margin=True)
    assert not np.array_equal(whole, early.predict(T, output_margin=True))
    same(canopy.Forest.load(booster).predict(T, output_margin=True), whole)
    early.save_model(str(tmp_path / "early.json"))
    g = canopy.Forest.load(tmp_path / "early.json")
    assert g.best_iteration is None
    same(g.predict(T, output_margin=True), whole)
    # The wrapper loaded from that file takes best_iteration from it again.
    w = xgb.XGBClassifier()
    w.load_model(str(tmp_path / "early.json"))
    same(canopy.Forest.load(w).predict(T, output_margin=True), early.predict(T, output_margin=True))


def test_iteration_range(xgb, binary, softprob, data):
    _, T = data
    for m in (binary, softprob):
        f = canopy.Forest.load(m)
        for r in [(0, 5), (3, 9), (2, 0), (0, 12), (11, 12)]:
            assert_xgboost_probs(f.predict_proba(T, iteration_range=r), m.predict_proba(T, iteration_range=r),
                                 m.predict(T, output_margin=True, iteration_range=r))
            same(f.predict(T, output_margin=True, iteration_range=r),
                 m.predict(T, output_margin=True, iteration_range=r))
        same(f.apply(T, iteration_range=(0, 4)), m.apply(T, iteration_range=(0, 4)))
        # XGBoost's pred_leaf takes ranges from 0 only; a sliced model gives the others' leaves.
        same(f.apply(T, iteration_range=(3, 7)), m.get_booster()[3:7].predict(xgb.DMatrix(T), pred_leaf=True))
        # A Booster's (a, 0) runs to the last round; the wrapper's means its default range.
        b = m.get_booster()
        same(canopy.Forest.load(b).predict(T, output_margin=True, iteration_range=(2, 0)),
             b.predict(xgb.DMatrix(T), output_margin=True, iteration_range=(2, 0)))
        for bad in [(5, 3), (0, 1000), (-1, 2)]:
            with pytest.raises(ValueError, match="iteration_range"):
                f.predict(T, iteration_range=bad)
        with pytest.raises(ValueError, match="selects no trees"):
            f.predict(T, iteration_range=(3, 3))
        with pytest.raises(TypeError, match="iteration_range"):
            f.predict(T, iteration_range=(1, 2, 3))
    with pytest.raises(ValueError, match="iteration_range"):
        R = np.nan_to_num(T)
        canopy.Forest.load(RandomForestRegressor(n_estimators=2).fit(R, R[:, 0])).predict(R, iteration_range=(0, 1))


def test_iteration_range_with_parallel_trees(xgb, data):
    X, T = data
    params = {"objective": "multi:softprob", "num_class": 3, "num_parallel_tree": 3, "max_depth": 3,
              "subsample": 0.8, "colsample_bynode": 0.8}
    b = xgb.train(params, xgb.DMatrix(X, label=label(X, 3)), num_boost_round=4)
    f = canopy.Forest.load(b)
    assert f.n_trees == 4 * 3 * 3
    dt = xgb.DMatrix(T)
    for r in [(0, 2), (1, 3), (3, 4)]:
        same(f.predict(T, output_margin=True, iteration_range=r), b.predict(dt, output_margin=True, iteration_range=r))
    same(f.apply(T, iteration_range=(0, 2)), b.predict(dt, pred_leaf=True, iteration_range=(0, 2)))


# --- DataFrames and other inputs ----------------------------------------------------------------

def test_dataframes(xgb, data):
    pd = pytest.importorskip("pandas")
    X, T = data
    cols = ["age", "bmi", "cells", "dose", "eta", "flow"]
    df, tf = pd.DataFrame(X, columns=cols), pd.DataFrame(T, columns=cols)
    cases = [(xgb.XGBClassifier(n_estimators=10, max_depth=3).fit(df, label(X, 2)), tf,
              lambda got, m: assert_xgboost_probs(got, m.predict_proba(tf), m.predict(tf, output_margin=True))),
             (RandomForestClassifier(n_estimators=5, max_depth=5, random_state=0).fit(df.fillna(0), label(X, 2)),
              tf.fillna(0), lambda got, m: same(got, m.predict_proba(tf.fillna(0))))]  # (no NaN in 1.2's forests)
    for m, frame, check in cases:
        f = canopy.Forest.load(m)
        same(f.feature_names_in_, m.feature_names_in_)
        check(f.predict_proba(frame), m)
        same(f.predict(frame), m.predict(frame))
        with pytest.raises(ValueError, match=r"another order.*'bmi', 'age'"):
            f.predict(frame[["bmi", "age", "cells", "dose", "eta", "flow"]])
        with pytest.raises(ValueError, match=r"missing \['flow'\].*not in the model \['speed'\]"):
            f.predict(frame.rename(columns={"flow": "speed"}))
        # validate_features=False: the columns are taken in the order given, as numpy rows.
        swapped = frame[["bmi", "age", "cells", "dose", "eta", "flow"]]
        same(f.predict(swapped, validate_features=False), f.predict(swapped.to_numpy()))
    # A model without feature names takes any column names.
    m = RandomForestRegressor(n_estimators=3, random_state=0).fit(np.nan_to_num(X), X[:, 0] > 0.5)
    same(canopy.Forest.load(m).predict(tf.fillna(0)), m.predict(np.nan_to_num(T)))
    assert not hasattr(canopy.Forest.load(m), "feature_names_in_")


def test_integer_and_nullable_dataframes(xgb):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(7)
    Xi = rng.integers(0, 20, size=(800, 4))
    m = xgb.XGBClassifier(n_estimators=10, max_depth=4).fit(Xi.astype(np.float32), (Xi[:, 0] + Xi[:, 1] > 19).astype(int))
    f = canopy.Forest.load(m)
    want = f.predict_proba(Xi.astype(np.float32))
    assert_xgboost_probs(want, m.predict_proba(Xi.astype(np.float32)), m.predict(Xi.astype(np.float32), output_margin=True))
    same(f.predict_proba(pd.DataFrame(Xi)), want)  # int64 columns
    same(f.predict_proba(Xi), want)  # an int64 array
    # Nullable Int64 / Float64 / boolean columns, pd.NA as missing (NaN).
    Xn = Xi.astype(np.float32)
    Xn[rng.random(Xn.shape) < 0.1] = np.nan
    nd = pd.DataFrame({
        0: pd.array([None if np.isnan(v) else int(v) for v in Xn[:, 0]], dtype="Int64"),
        1: pd.array([None if np.isnan(v) else float(v) for v in Xn[:, 1]], dtype="Float64"),
        2: Xn[:, 2],
        3: pd.array([None if np.isnan(v) else int(v) for v in Xn[:, 3]], dtype="Int32"),
    })
    same(f.predict_proba(nd), f.predict_proba(Xn))
    assert_xgboost_probs(f.predict_proba(nd), m.predict_proba(Xn), m.predict(Xn, output_margin=True))
    with pytest.raises(ValueError, match="column 'name'"):
        f.predict(pd.DataFrame({"a": [1.0], "b": [2.0], "c": [3.0], "name": ["x"]}))


def test_categorical_dataframe(xgb):
    # XGBoost's categorical splits (enable_categorical) read a categorical column's codes.
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(8)
    n = 1000
    df = pd.DataFrame({"a": rng.random(n).astype(np.float32),
                       "c": pd.Categorical(rng.choice(["w", "x", "y", "z"], n)), "b": rng.random(n)})
    df.loc[rng.random(n) < 0.1, "c"] = np.nan
    y = ((df["c"].cat.codes.to_numpy() % 2 == 0) ^ (df["a"] > 0.5)).astype(int)
    m = xgb.XGBClassifier(n_estimators=10, max_depth=3, tree_method="hist", enable_categorical=True).fit(df, y)
    f = canopy.Forest.load(m)
    same(f.predict(df, output_margin=True), m.predict(df, output_margin=True))
    same(f.predict(df), m.predict(df))


def test_arrays_lists_and_rows(binary, data):
    _, T = data
    f = canopy.Forest.load(binary)
    want = f.predict_proba(T)
    same(f.predict_proba(np.asfortranarray(T.astype(np.float64))), want)
    same(f.predict_proba(T.tolist()), want)
    same(f.predict_proba(T[3]), want[3])  # a 1-d row
    assert f.predict(T[3]) == f.predict(T[3:4])[0]
    same(f.predict_proba((T > 0.5)), f.predict_proba((T > 0.5).astype(np.float32)))  # bool
    with pytest.raises(ValueError, match="5 columns, the model has 6"):
        f.predict(T[:, :5])
    with pytest.raises(ValueError, match="not a number type"):
        f.predict(np.array([["a"] * 6]))
    same(f.predict_proba(T[:0]), np.empty((0, 2), np.float32))


# --- pickling, options, the earlier spelling, optimize ------------------------------------------

def test_pickle_round_trip(xgb, early, data, tmp_path):
    _, T = data
    names = np.array(["ant", "bee", "cat"])
    X = rows()
    rf = RandomForestClassifier(n_estimators=6, max_depth=6, random_state=0).fit(X, names[label(X, 3)])
    early.get_booster().save_model(str(tmp_path / "early.ubj"))
    for f in (canopy.Forest.load(early), canopy.Forest.load(rf), canopy.Forest.load(tmp_path / "early.ubj")):
        g = pickle.loads(pickle.dumps(f))
        assert g.best_iteration == f.best_iteration and g.n_trees == f.n_trees
        same(g.classes_, f.classes_)
        same(g.predict(T), f.predict(T))
        same(g.predict_proba(T), f.predict_proba(T))
        same(g.apply(T), f.apply(T))
        if f.objective == "binary:logistic":
            same(g.predict(T, output_margin=True, iteration_range=(1, 4)),
                 f.predict(T, output_margin=True, iteration_range=(1, 4)))


def test_run_options_and_stats(binary, data):
    _, T = data
    f = canopy.Forest.load(binary, device="cpu", cache_dir="none")
    want = f.predict_proba(T)
    same(f.predict_proba(T, kernel="direct", online_tuning=False, graph=False, schedule="auto"), want)
    same(f.predict_proba(T, device="cpu", schedule={"block_threads": 128}), want)
    s = f.last_stats
    assert set(vars(s)) == STATS and s.device == "cpu" and s.wall_ms >= 0 and s.total_ms == s.wall_ms and isinstance(s.graph, bool)
    assert s.tuning in ("fixed", "prior", "refining", "tuned")
    with pytest.raises(TypeError, match="'colour'"):
        f.predict(T, colour="red")
    with pytest.raises(TypeError, match="kernel"):
        f.predict(T, kernel=3)
    with pytest.raises(ValueError, match="kernel = 'fast'"):
        f.predict(T, kernel="fast")
    with pytest.raises(TypeError, match="online_tuning"):
        f.predict(T, online_tuning="yes")
    with pytest.raises(ValueError, match="device"):
        f.predict(T, device="tpu")
    with pytest.raises(ValueError, match="bogus"):
        f.predict(T, schedule={"bogus": 1})
    with pytest.raises(TypeError, match="block_threads"):
        f.predict(T, schedule={"block_threads": "many"})
    with pytest.raises(TypeError, match="output_margin"):
        f.predict(T, output_margin="yes")
    with pytest.raises(ValueError, match="layout"):
        canopy.Forest.load(binary, layout="fancy")


def test_docs_list_the_stats_fields():
    # docs/python.md names last_stats' fields on one line: exactly those the code sets.
    line = next(l for l in DOCS.read_text().splitlines() if l.startswith("`forest.last_stats`"))
    assert set(re.findall(r"`([a-z_]+)`", line)) - {"forest.last_stats"} == STATS


def test_the_earlier_output_spelling(binary, data):
    _, T = data
    f = canopy.Forest.load(binary)
    p = f.predict(T, output="prob")
    assert p.dtype == np.float32 and p.shape == (len(T),)  # the positive class's column
    same(p, f.predict_proba(T)[:, 1])
    same(f.predict(T, output="margin"), f.predict(T, output_margin=True))
    same(f.predict(T, output="class"), f.predict(T).astype(np.float32))
    same(f.predict(T, output="leaf"), f.apply(T))
    with pytest.raises(TypeError, match="output"):
        f.predict(T, output="prob", output_margin=True)
    with pytest.raises(ValueError, match="output = 'proba'"):
        f.predict(T, output="proba")


def test_optimize(binary, data):
    _, T = data
    f = canopy.Forest.load(binary, cache_dir="none")
    got = f.optimize(T, batch_sizes=[100, 400])
    assert isinstance(got, list)
    if f.device == "cpu":
        assert got == []  # nothing to tune on the CPU
    for t in got:
        assert set(t) == {"batch_size", "kernel", "schedule", "kernel_ms", "trials"}
    with pytest.raises(ValueError, match="batch_sizes"):
        f.optimize(T, batch_sizes=[0])
    with pytest.raises(TypeError, match="batch_sizes"):
        f.optimize(T, batch_sizes=["big"])


def test_warnings_become_python_warnings():
    # canopy::warn from C++, the GIL released as in a forest call.
    with pytest.warns(RuntimeWarning, match="a cache file is damaged"):
        _canopy._warn("a cache file is damaged")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="turned into an error"):
            _canopy._warn("turned into an error")


def _shared_forest_from_threads(f, T, convert=lambda x: x, back=lambda y: y):
    """8 threads x 50 calls of mixed sizes on one Forest: every result equals the serial call's."""
    import threading
    sizes = [1, 37, 500, len(T)]
    want = {n: f.predict_proba(T[:n]) for n in sizes}
    bad, errors = [], []

    def work(t):
        try:
            for i in range(50):
                n = sizes[(t + i) % len(sizes)]
                x = convert(T[:n]) if i % 2 else T[:n]
                if not np.array_equal(back(f.predict_proba(x)), want[n]):
                    bad.append((t, i, n))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not bad, (errors[:3], bad[:5])


def test_one_forest_shared_by_threads():
    X, T = rows(), rows(n=2000, seed=1)
    m = RandomForestClassifier(n_estimators=10, max_depth=8, random_state=0).fit(X, label(X, 3))
    _shared_forest_from_threads(canopy.Forest.load(m, device="cpu"), T)


# --- on the GPU ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu():
    if not canopy.gpu_available():
        pytest.skip("no GPU: " + canopy.gpu_description())


def test_gpu_equals_cpu_and_the_libraries(gpu, data):
    # Every test above runs on the GPU here (device "auto"); these add Auto's successive choices
    # (prior, refinement, tuned) and the CPU beside it: the same bits throughout.
    X, T = rows(), rows(n=3000, seed=1)
    r = RandomForestRegressor(n_estimators=20, max_depth=10, random_state=0).fit(X, X[:, 0] - X[:, 5] ** 2)
    c = RandomForestClassifier(n_estimators=20, max_depth=10, random_state=0).fit(X, label(X, 3))
    fr, fc = canopy.Forest.load(r), canopy.Forest.load(c)
    assert fr.device == "gpu" and fc.layout == "adaptive"
    cpu = canopy.Forest.load(c, device="cpu").predict_proba(T)
    for _ in range(4):
        same(fr.predict(T), r.predict(T))
        same(fc.predict_proba(T), cpu)
    assert fc.last_stats.device == "gpu"
    same(fc.predict_proba(T, device="cpu"), cpu)
    assert fc.last_stats.device == "cpu"
    same(fc.apply(T), c.apply(T))
    same(fr.apply(T), r.apply(T))


def test_cuda_arrays_stay_on_the_device(gpu, data):
    cp = pytest.importorskip("cupy")
    X, T = rows(), rows(n=500, seed=1)
    names = np.array(["ant", "bee", "cat"])
    m = RandomForestClassifier(n_estimators=8, max_depth=8, random_state=0).fit(X, label(X, 3))
    f = canopy.Forest.load(m)
    want = f.predict_proba(T)
    got = f.predict_proba(cp.asarray(T))
    assert isinstance(got, cp.ndarray) and got.dtype == np.float64
    same(cp.asnumpy(got), want)
    lab = f.predict(cp.asarray(T))
    assert isinstance(lab, cp.ndarray)
    same(cp.asnumpy(lab), f.predict(T))
    same(cp.asnumpy(f.apply(cp.asarray(T))), m.apply(T))
    same(cp.asnumpy(f.predict_proba(cp.asarray(T, dtype=cp.float64, order="F"))), want)
    s = RandomForestClassifier(n_estimators=4, max_depth=6, random_state=0).fit(X, names[label(X, 3)])
    g = canopy.Forest.load(s)
    same(g.predict(cp.asarray(T)), g.predict(T))  # string labels come back as numpy
    try:
        import torch
    except ImportError:
        return
    t = torch.as_tensor(T, device="cuda")
    got = f.predict_proba(t)
    assert isinstance(got, torch.Tensor) and got.is_cuda
    same(got.cpu().numpy(), want)
    lab = f.predict(t)
    assert isinstance(lab, torch.Tensor) and lab.is_cuda
    same(lab.cpu().numpy(), f.predict(T))


def test_gpu_options_optimize_and_cache_warnings(gpu, tmp_path):
    X, T = rows(), rows(n=2000, seed=1)
    m = RandomForestClassifier(n_estimators=20, max_depth=8, random_state=0).fit(X, label(X, 3))
    f = canopy.Forest.load(m, cache_dir=tmp_path)
    want = canopy.Forest.load(m, device="cpu").predict_proba(T)
    for k in ("direct", "shared-data", "shared-forest", "split-shared-forest"):
        same(f.predict_proba(T, kernel=k), want)
        assert f.last_stats.kernel == k and f.last_stats.tuning == "fixed" and f.last_stats.layout == "adaptive"
    same(f.predict_proba(T, online_tuning=False), want)
    tuned = f.optimize(T, batch_sizes=[100, 2000])
    assert [t["batch_size"] for t in tuned] == [100, 2000]
    same(f.predict_proba(T), want)
    assert f.last_stats.tuning == "tuned"
    # A damaged choices file: a RuntimeWarning, and the predictions go on.
    files = list((tmp_path / "forest_choices").glob("*.json"))
    assert files
    for p in files:
        p.write_text("not json {")
    with pytest.warns(RuntimeWarning, match="not JSON"):
        same(canopy.Forest.load(m, cache_dir=tmp_path).predict_proba(T), want)


def test_one_forest_shared_by_threads_on_the_gpu(gpu):
    X, T = rows(), rows(n=40000, seed=1)
    m = RandomForestClassifier(n_estimators=10, max_depth=8, random_state=0).fit(X, label(X, 3))
    f = canopy.Forest.load(m)
    try:
        import cupy as cp
        _shared_forest_from_threads(f, T, cp.asarray, lambda y: cp.asnumpy(y) if isinstance(y, cp.ndarray) else y)
    except ImportError:
        _shared_forest_from_threads(f, T)
