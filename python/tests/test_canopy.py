"""The Python package against independent references: scipy's cKDTree for counts and neighbours,
a direct O(n^2) sum for Barnes-Hut, XGBoost's and scikit-learn's own predictions for forests.
Runs on the CPU here and on the GPU where there is one (the CUDA-array tests need cupy)."""
import os

import numpy as np
import pytest
from scipy.spatial import cKDTree

import canopy

DATA = os.environ.get("CANOPY_TEST_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"))


def clustered(n, dims, seed):
    rng = np.random.default_rng(seed)
    centres = rng.random((12, dims))
    return (centres[rng.integers(0, 12, n)] + rng.normal(0, 0.04, (n, dims))).astype(np.float32)


@pytest.fixture(scope="module")
def cloud():
    return clustered(6000, 3, 1), clustered(1500, 3, 2)


def scipy_knn(points, queries, k):
    # scipy in float64 over the same float32 values Canopy reads.
    return cKDTree(points.astype(np.float64)).query(queries.astype(np.float64), k=k)


@pytest.mark.parametrize("cls", [canopy.KDTree, canopy.BallTree, canopy.VPTree])
def test_query_equals_scipy(cloud, cls):
    points, queries = cloud
    d, i = cls(points, leafsize=8).query(queries, k=8)
    want_d, want_i = scipy_knn(points, queries, 8)
    assert d.shape == (1500, 8) and i.shape == (1500, 8) and i.dtype == np.int64 and d.dtype == np.float64
    np.testing.assert_allclose(d, want_d, rtol=2e-6, atol=1e-7)
    # The same neighbours; where two distances are within float32 rounding the order may differ.
    gaps = np.diff(want_d, axis=1)
    clear = np.ones_like(i, dtype=bool)
    clear[:, 1:] &= gaps > 1e-5
    clear[:, :-1] &= gaps > 1e-5
    assert np.array_equal(i[clear], want_i[clear])
    assert all(set(a) == set(b) for a, b in zip(i, want_i) if np.all(np.diff(b) != 0))


def test_query_shapes_as_scipy(cloud):
    points, queries = cloud
    tree = canopy.KDTree(points)
    d, i = tree.query(queries, k=1)
    assert d.shape == (1500,) and i.shape == (1500,)
    d0, i0 = tree.query(queries[0], k=1)
    assert np.isscalar(d0) or d0.shape == ()
    assert i0 == i[0]
    want_d, want_i = scipy_knn(points, queries[:1], 1)
    assert i0 == want_i[0]


def test_radius_counts_equal_scipy(cloud):
    points, queries = cloud
    r = 0.1
    counts = canopy.KDTree(points).query_ball_point(queries, r, return_length=True)
    assert counts.shape == (1500,) and counts.dtype == np.int64
    ref = cKDTree(points.astype(np.float64))
    # A point at exactly r counts; float32 against float64 may disagree only within rounding of r.
    lo = ref.query_ball_point(queries.astype(np.float64), r * (1 - 1e-5), return_length=True)
    hi = ref.query_ball_point(queries.astype(np.float64), r * (1 + 1e-5), return_length=True)
    assert np.all(lo <= counts) and np.all(counts <= hi)
    assert counts.sum() > 5 * len(queries) and (counts == 0).any()  # the test means something


def test_inputs_converted_once_and_checked(cloud):
    points, queries = cloud
    # float64 rows (any order) are kept as float64: their answers are exact in float64, the same
    # neighbours as the float32 tree over the same values, distances equal to float64 rounding.
    tree = canopy.KDTree(np.asfortranarray(points.astype(np.float64)))
    d, i = tree.query(np.asfortranarray(queries.astype(np.float64)), k=4)
    d2, i2 = canopy.KDTree(points).query(queries, k=4)
    want_d, want_i = scipy_knn(points, queries, 4)
    assert np.array_equal(i, want_i) and np.allclose(d, want_d, rtol=1e-12, atol=0)
    np.testing.assert_allclose(d, d2, rtol=2e-6)
    # Integer rows are converted (ints against a float32 tree: to float32).
    di, ii = canopy.KDTree(points).query(np.zeros((3, 3), dtype=np.int64), k=2)
    assert np.array_equal(ii, canopy.KDTree(points).query(np.zeros((3, 3), dtype=np.float32), k=2)[1])
    with pytest.raises(ValueError, match="2 columns, the tree has 3"):
        tree.query(np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="complex data"):
        tree.query(np.zeros((3, 3), dtype=complex))
    # k beyond n pads with (inf, n), a NaN row answers (inf, n): scipy's answers
    d, i = canopy.KDTree(points).query(queries[:2], k=7000)
    assert np.isinf(d[:, 6000:]).all() and (i[:, 6000:] == 6000).all() and np.isfinite(d[:, :6000]).all()
    d, i = canopy.KDTree(points).query(np.full((2, 3), np.nan, dtype=np.float32))
    assert np.isinf(d).all() and (i == 6000).all()


def test_options_and_stats(cloud):
    points, queries = cloud
    tree = canopy.KDTree(points)
    want = tree.query(queries, k=8)
    got = tree.query(queries, k=8, schedule="input-order", executor="independent")
    assert np.array_equal(got[1], want[1])
    s = tree.last_stats
    assert s.schedule == "input-order" and s.executor == "independent" and s.total_ms >= 0
    assert s.device == tree.device
    got = tree.query(queries, k=8, schedule="hybrid", depth=4)
    assert np.array_equal(got[1], want[1]) and tree.last_stats.depth == 4
    # A CPU tree is built on the CPU too, even at a size Auto would build on a GPU.
    assert canopy.KDTree(clustered(40000, 3, 9), device="cpu").built_on == "cpu"
    with pytest.raises(ValueError, match="unknown option"):
        tree.query(queries, k=2, warp_size=16)
    with pytest.raises(ValueError, match="schedule = 'fastest' is unknown"):
        tree.query(queries, k=2, schedule="fastest")
    with pytest.raises(ValueError, match="depth = 99"):
        tree.query(queries, k=2, schedule="hybrid", depth=99)


def test_barnes_hut_equals_direct_sum():
    rng = np.random.default_rng(3)
    pos = rng.normal(0, 1, (800, 3)).astype(np.float32)
    mass = np.full(800, 1 / 800, dtype=np.float32)
    eps = 0.05
    p = pos.astype(np.float64)
    diff = p[None, :, :] - p[:, None, :]
    inv = (np.sum(diff * diff, axis=2) + eps * eps) ** -1.5
    np.fill_diagonal(inv, 0)
    # F_i = m_i * sum_j m_j (x_j - x_i) / (|x_j - x_i|^2 + eps^2)^(3/2)
    direct = mass[:, None] * np.einsum("ij,ijk->ik", inv * mass[None, :], diff)
    exact = canopy.barnes_hut(pos, mass, theta=0.0, eps=eps)  # opens every cell: a direct sum
    assert exact.shape == (800, 3) and exact.dtype == np.float32
    np.testing.assert_allclose(exact, direct, rtol=1e-4, atol=1e-5)
    approx = canopy.barnes_hut(pos, mass, theta=0.5, eps=eps)
    err = np.linalg.norm(approx - direct, axis=1) / np.linalg.norm(direct, axis=1)
    assert np.median(err) < 1e-2
    with pytest.raises(ValueError, match="masses: 3 values for 800 bodies"):
        canopy.barnes_hut(pos, mass[:3])


def test_forest_from_a_file_equals_xgboost_margins():
    f = canopy.Forest.load(os.path.join(DATA, "forest", "xgb_higgs.json"))
    rows = np.genfromtxt(os.path.join(DATA, "forest", "higgs_rows.csv"), delimiter=",", names=True)
    names = [n for n in rows.dtype.names if n != "label"]
    X = np.stack([rows[n] for n in names], axis=1)
    want = np.loadtxt(os.path.join(DATA, "forest", "xgb_higgs.margin.txt"), ndmin=1)
    got = f.predict(X, output="margin")
    np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-6, atol=1e-6)


def test_forest_from_xgboost_and_sklearn_objects():
    xgb = pytest.importorskip("xgboost")
    from sklearn.ensemble import RandomForestClassifier
    rng = np.random.default_rng(5)
    X = rng.random((600, 6)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0.8).astype(int)
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values
    booster = xgb.train({"max_depth": 4, "objective": "binary:logistic", "base_score": 0.5},
                        xgb.DMatrix(X, label=y), num_boost_round=20)
    f = canopy.Forest.load(booster)
    np.testing.assert_allclose(f.predict(X, output="margin"),
                               booster.predict(xgb.DMatrix(X), output_margin=True), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(f.predict(X, output="prob"), booster.predict(xgb.DMatrix(X)), rtol=1e-6, atol=1e-7)

    Xf = np.nan_to_num(X)
    rf = RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(Xf, y)
    got = canopy.Forest.load(rf).predict(Xf, output="prob")
    assert np.array_equal(got, rf.predict_proba(Xf).astype(np.float32))
    with pytest.raises(ValueError, match="neither a path"):
        canopy.Forest.load(42)


def test_cuda_arrays_stay_on_the_device(cloud):
    if not canopy.gpu_available():
        pytest.skip("no GPU: " + canopy.gpu_description())
    cp = pytest.importorskip("cupy")
    points, queries = cloud
    tree = canopy.KDTree(cp.asarray(points))
    d, i = tree.query(cp.asarray(queries), k=8)
    assert isinstance(i, cp.ndarray) and isinstance(d, cp.ndarray)
    hd, hi = canopy.KDTree(points).query(queries, k=8)
    assert np.array_equal(cp.asnumpy(i), hi) and np.array_equal(cp.asnumpy(d), hd)
    counts = tree.query_ball_point(cp.asarray(queries, dtype=cp.float64), 0.05, return_length=True)
    assert isinstance(counts, cp.ndarray)
    assert np.array_equal(cp.asnumpy(counts), canopy.KDTree(points).query_ball_point(queries, 0.05, return_length=True))


def test_torch_tensors_come_back_as_torch_tensors(cloud):
    torch = pytest.importorskip("torch")
    points, queries = cloud
    hd, hi = canopy.KDTree(points).query(queries, k=8)
    hc = canopy.KDTree(points).query_ball_point(queries, 0.05, return_length=True)
    hf = canopy.barnes_hut(points, np.ones(len(points)), device="cpu")
    devices = ["cpu"]
    if canopy.gpu_available() and torch.cuda.is_available():
        pytest.importorskip("cupy")  # device results are made by cupy, handed over by DLPack
        devices.append("cuda")
    for dev in devices:
        tree = canopy.KDTree(torch.as_tensor(points, device=dev))
        d, i = tree.query(torch.as_tensor(queries, dtype=torch.float64, device=dev), k=8)
        assert isinstance(d, torch.Tensor) and isinstance(i, torch.Tensor)
        assert d.device.type == dev and i.device.type == dev and i.dtype == torch.int64
        assert np.array_equal(i.cpu().numpy(), hi) and np.array_equal(d.cpu().numpy(), hd)
        c = tree.query_ball_point(torch.as_tensor(queries, device=dev), 0.05, return_length=True)
        assert c.device.type == dev and np.array_equal(c.cpu().numpy(), hc)
        f = canopy.barnes_hut(torch.as_tensor(points, device=dev), torch.ones(len(points), device=dev))
        assert isinstance(f, torch.Tensor) and f.device.type == dev and tuple(f.shape) == (len(points), 3)
        np.testing.assert_allclose(f.cpu().numpy(), hf, rtol=1e-4, atol=1e-6)  # GPU and CPU sums round apart


def test_out_of_memory_is_memory_error(cloud):
    # OutOfMemory, typed in C++ (a memory budget smaller than the tree): MemoryError naming it.
    if not canopy.gpu_available():
        pytest.skip("no GPU: " + canopy.gpu_description())
    points, queries = cloud
    tree = canopy.KDTree(points)
    with pytest.raises(MemoryError, match="memory budget"):
        tree.query(queries, k=4, device="gpu", memory_budget=1024)
    with pytest.raises(ValueError):  # other errors stay ValueError
        tree.query(queries, k=4, device="gpu", schedule="hybrid", depth=99)
