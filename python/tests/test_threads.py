"""One object, many threads (issue 35): 8 threads x 50 calls on ONE canopy.KDTree (every query
method; BallTree and VPTree too) and ONE canopy.Forest (every prediction method) give what the
same calls give one after another. The package releases the GIL around every call, so the
calls really run at once in C++. On the CPU, and on the GPU (numpy and cupy inputs) where there
is one."""
import threading

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

import canopy

THREADS, CALLS = 8, 50


def _equal(a, b):
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def threads_equal_serial(calls, back=lambda r: r):
    """calls: functions of no argument. Each runs once serially, then THREADS threads started
    together run CALLS calls each, thread t's i-th call being calls[(t + i) % len(calls)]: every
    result must equal that call's serial one (back() brings a device result to the host)."""
    want = [back(c()) for c in calls]
    bad, errors = [], []
    start = threading.Barrier(THREADS)

    def work(t):
        try:
            start.wait()
            for i in range(CALLS):
                v = (t + i) % len(calls)
                if not _equal(back(calls[v]()), want[v]):
                    bad.append((t, i, v))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not bad, (errors[:3], bad[:5])


def points(n, d=3, seed=0):
    return np.random.default_rng(seed).random((n, d)).astype(np.float32)


def tree_calls(tree, queries, device):
    """Every query method of a point tree, with several sizes and options."""
    a, b = queries
    calls = [
        lambda: tree.query(a, k=1, device=device),
        lambda: tree.query(b, k=5, device=device),
        lambda: tree.query(a, k=8, schedule="hybrid", device=device),
        lambda: tree.query(b, k=3, depth="auto", schedule="hybrid", device=device),
        lambda: tree.query(a[3], k=2, device=device),  # one 1-d point: scalars
    ]
    if isinstance(tree, canopy.KDTree):
        calls += [
            lambda: tree.query_ball_point(a, r=0.1, return_length=True, device=device),
            lambda: tree.query_ball_point(b, r=0.05, return_length=True, schedule="leaf-sort", device=device),
            lambda: tree.query_ball_point(b[7], r=0.2, return_length=True, device=device),
            lambda: (tree.device, tree.built_on, tree.n, tree.m),
        ]
    return calls


@pytest.mark.parametrize("kind", [canopy.KDTree, canopy.BallTree, canopy.VPTree])
def test_one_tree_shared_by_threads(kind):
    tree = kind(points(3000), device="cpu")
    threads_equal_serial(tree_calls(tree, (points(400, seed=1), points(250, seed=2)), "cpu"))


def forest_calls(clf, reg, X, device):
    """Every prediction method of a classifier and a regressor, several batch sizes."""
    return [
        lambda: clf.predict_proba(X, device=device),
        lambda: clf.predict_proba(X[:37], device=device),
        lambda: clf.predict(X[:500], device=device),
        lambda: clf.apply(X[:101], device=device),
        lambda: clf.predict(X[5], device=device),  # one row
        lambda: clf.predict(X[:64], output_margin=True, device=device),
        lambda: reg.predict(X, device=device),
        lambda: reg.apply(X[:1], device=device),
        lambda: (clf.device, clf.layout, clf.n_features_in_),
    ]


def _forests(device):
    X = points(1500, d=6, seed=3)
    y = np.clip(((X[:, 0] + X[:, 1] * X[:, 2]) * 2).astype(int), 0, 2)
    c = RandomForestClassifier(n_estimators=10, max_depth=8, random_state=0).fit(X, y)
    r = RandomForestRegressor(n_estimators=8, max_depth=8, random_state=0).fit(X, X[:, 0] - X[:, 4] ** 2)
    T = points(1000, d=6, seed=4)
    return canopy.Forest.load(c, device=device), canopy.Forest.load(r, device=device), T


def test_one_forest_shared_by_threads_every_method():
    clf, reg, T = _forests("cpu")
    threads_equal_serial(forest_calls(clf, reg, T, "cpu"))


# --- on the GPU ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu():
    if not canopy.gpu_available():
        pytest.skip("no GPU: " + canopy.gpu_description())


def _host(r):
    if isinstance(r, tuple):
        return tuple(_host(x) for x in r)
    return r.get() if hasattr(r, "get") and not isinstance(r, (str, dict)) else r


@pytest.mark.parametrize("kind", [canopy.KDTree, canopy.BallTree, canopy.VPTree])
def test_one_tree_shared_by_threads_gpu(gpu, kind):
    tree = kind(points(3000), device="gpu")
    assert tree.device == "gpu"
    q = (points(400, seed=1), points(250, seed=2))
    calls = tree_calls(tree, q, "gpu")
    # cpu calls on the gpu object beside them: the tree's host copy is made by whichever comes first
    calls.append(lambda: tree.query(q[0], k=4, device="cpu"))
    threads_equal_serial(calls)


@pytest.mark.parametrize("kind", [canopy.KDTree, canopy.BallTree])
def test_one_tree_shared_by_threads_gpu_cupy(gpu, kind):
    cp = pytest.importorskip("cupy")
    tree = kind(points(3000), device="gpu")
    q = (cp.asarray(points(400, seed=1)), cp.asarray(points(250, seed=2)))
    threads_equal_serial(tree_calls(tree, q, "gpu"), back=_host)


def test_one_forest_shared_by_threads_every_method_gpu(gpu):
    clf, reg, T = _forests("gpu")
    assert clf.device == "gpu"
    calls = forest_calls(clf, reg, T, "gpu")
    calls.append(lambda: clf.predict_proba(T[:300], device="cpu"))
    threads_equal_serial(calls)


def test_one_forest_shared_by_threads_every_method_gpu_cupy(gpu):
    cp = pytest.importorskip("cupy")
    clf, reg, T = _forests("gpu")
    threads_equal_serial(forest_calls(clf, reg, cp.asarray(T), "gpu"), back=_host)
