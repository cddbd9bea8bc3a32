"""canopy._canopy.filter_pairs, the exact float64 test behind query_ball_point, query_ball_tree,
query_pairs and sparse_distance_matrix: against the p-distance computed in Python, one pair at a
time (the coordinates' differences summed in order), and its refusals of bad indices."""
import math

import numpy as np
import pytest

from canopy import _canopy


def reference(offsets, idx, rows, q, data, rr, p, upper, keep):
    out = []
    for k, row in enumerate(rows):
        for c in range(offsets[k], offsets[k + 1]):
            j = int(keep[idx[c]]) if keep is not None else int(idx[c])
            if upper and j <= row:
                continue
            diff = [float(data[j, d]) - float(q[row, d]) for d in range(q.shape[1])]
            # (scipy's test: the power sum s against r * r, or pow(r, p))
            if p == 2:
                s = 0.0
                for v in diff:
                    s += v * v
                dist, inside = math.sqrt(s), s <= rr[row] * rr[row]
            elif p == 1:
                dist = 0.0
                for v in diff:
                    dist += abs(v)
                inside = dist <= rr[row]
            elif p == np.inf:
                dist = max(abs(v) for v in diff)
                inside = dist <= rr[row]
            else:
                s = 0.0
                for v in diff:
                    s += math.pow(abs(v), p)
                dist, inside = math.pow(s, 1.0 / p), s <= math.pow(rr[row], p)
            if inside:
                out.append((row, j, dist))
    return out


@pytest.mark.parametrize("dims", [1, 3, 5, 8, 17])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_equals_the_pairwise_reference(dims, p, dtype):
    rng = np.random.default_rng(dims * 10 + int(min(p, 9)))
    n, nq = 300, 60
    data = rng.random((n, dims)).astype(dtype)
    q = rng.random((nq, dims))
    rr = rng.random(nq) * 0.6 * dims ** (1 / min(p, 9))
    keep = np.flatnonzero(rng.random(n) < 0.9)  # the engine's ids -> the data's rows
    rows = np.sort(rng.choice(nq, 40, replace=False)).astype(np.int64)
    counts = rng.integers(0, 30, len(rows))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    idx = rng.integers(0, len(keep), offsets[-1]).astype(np.int64)
    for upper in (False, True):
        for k in (keep, None):
            ids = idx if k is not None else keep[idx]
            i, j, d = _canopy.filter_pairs(offsets, ids, rows, q, data, rr, dims, float(p), upper, k)
            want = reference(offsets, ids, rows, q, data, rr, p, upper, k)
            assert list(zip(i.tolist(), j.tolist())) == [(a, b) for a, b, _ in want]
            assert d.tolist() == [c for _, _, c in want]  # bit for bit


def test_bad_indices_are_errors():
    data = np.zeros((5, 2))
    q = np.zeros((3, 2))
    rr = np.ones(3)
    offsets = np.array([0, 2], np.int64)
    rows = np.array([1], np.int64)
    with pytest.raises(ValueError, match="candidate index is out of range"):
        _canopy.filter_pairs(offsets, np.array([0, 5], np.int64), rows, q, data, rr, 2, 2.0, False, None)
    with pytest.raises(ValueError, match="keep maps a candidate out of the data"):
        _canopy.filter_pairs(offsets, np.array([0, 1], np.int64), rows, q, data, rr, 2, 2.0, False,
                             np.array([0, 7], np.int64))
    with pytest.raises(ValueError, match="rows or offsets out of range"):
        _canopy.filter_pairs(offsets, np.array([0, 1], np.int64), np.array([3], np.int64), q, data, rr, 2, 2.0, False,
                             None)
    with pytest.raises(ValueError, match="wrong element size or length"):
        _canopy.filter_pairs(offsets, np.array([0, 1], np.int32), rows, q, data, rr, 2, 2.0, False, None)
    with pytest.raises(ValueError, match="not a C-ordered array"):
        _canopy.filter_pairs(offsets, np.array([0, 1], np.int64), rows, q[:, :1], data, rr, 2, 2.0, False, None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_extents_equal_numpy(dtype):
    """_extents' C++ scan (blocks of 2^15 rows on the host's cores) against np.amin/np.amax:
    NaN propagating from any block, infinities, one column, one row, a non-contiguous array."""
    from canopy._tree_util import _extents
    rng = np.random.default_rng(9)
    for n, m in ((1, 3), (5, 1), (70001, 3), (40000, 7), (100, 20)):
        a = (rng.random((n, m)) * 200 - 100).astype(dtype)
        cases = [a]
        if n > 4:
            b = a.copy()
            b[n - 2, 0], b[1, m - 1], b[n // 2, m // 2] = np.nan, -np.inf, np.inf
            cases += [b, a[::2]]
        for x in cases:
            lo, hi = _extents(x)
            assert lo.dtype == dtype and hi.dtype == dtype
            np.testing.assert_array_equal(lo, np.amin(x, axis=0))
            np.testing.assert_array_equal(hi, np.amax(x, axis=0))
    with pytest.raises(ValueError, match="column_extents"):
        _canopy.column_extents(np.zeros((4, 3)), 3, np.zeros(2), np.zeros(3))


def test_widened_equals_astype():
    """_canopy.widened, the kNN distances' float32 -> float64 on the host's cores: astype's values
    and shape, NaN and infinities included, an empty array, more than one block of 2^16."""
    rng = np.random.default_rng(4)
    for shape in ((0, 8), (3,), (70000, 3)):
        a = (rng.standard_normal(shape) * 1e30).astype(np.float32)
        if a.size > 3:
            a.flat[[1, 5, a.size - 1]] = [np.nan, np.inf, -np.inf]
        w = _canopy.widened(a)
        assert w.dtype == np.float64 and w.shape == a.shape
        np.testing.assert_array_equal(w, a.astype(np.float64))


def test_joined_orders_every_mix_of_chunks():
    from canopy._tree_util import _joined
    rng = np.random.default_rng(3)
    n = 50
    pairs = sorted({(int(a), int(b)) for a, b in rng.integers(0, n, (400, 2))})
    i = np.array([a for a, _ in pairs], np.int64)
    j = np.array([b for _, b in pairs], np.int64)
    d = rng.random(len(i))
    cuts = [0, 90, 200, 200, len(i)]
    listed = [(i[a:b], j[a:b], d[a:b], True) for a, b in zip(cuts, cuts[1:])]
    for upper in (False, True):
        want = (i < j) if upper else np.ones(len(i), bool)
        for chunks in (listed, listed[::-1], [listed[0], (*listed[2][:3], False), listed[1], listed[3]],
                       [(c[0][::-1], c[1][::-1], c[2][::-1], False) for c in listed]):
            up = [c if not upper or not c[3] else (c[0][c[0] < c[1]], c[1][c[0] < c[1]], c[2][c[0] < c[1]], True)
                  for c in chunks]
            gi, gj, gd = _joined(iter(up), n, True, upper)
            np.testing.assert_array_equal(gi, i[want])
            np.testing.assert_array_equal(gj, j[want])
            np.testing.assert_array_equal(gd, d[want])
    assert _joined(iter([]), n, False)[2] is None


@pytest.mark.skipif(not _canopy.gpu_available(), reason="no GPU")
@pytest.mark.parametrize("p", [1.0, 2.0, np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_device_filter_equals_the_host_filter(p, dtype):
    """ball_exact (the lists kept on the GPU, filtered there) gives filter_pairs' pairs and
    distances bit for bit, over the same lists: one radius and a radius per row, upper or not,
    a tree with rows left out (NaN rows: keep maps its ids), without distances."""
    import canopy
    rng = np.random.default_rng(int(min(p, 9)) + (dtype == np.float64))
    data = (5e6 + rng.random((40000, 3)) * 1000).astype(dtype)
    data[rng.choice(len(data), 50, replace=False), 1] = np.nan
    t = canopy.cKDTree(data)
    assert t._index.device == "gpu" and t._keep is not None
    q64 = np.ascontiguousarray(data[::7][~np.isnan(data[::7]).any(axis=1)], np.float64)
    q, q32, _, _, _ = t._rows(q64, keep64=True)
    rows = np.arange(len(q), dtype=np.int64) * 3 + 1  # labels only
    rr = rng.random(len(q)) * 6
    hi = (rr * 1.001 + 1).astype(np.float32)
    for radii in (None, hi):
        r0 = float(hi.max()) if radii is None else 0.0
        offsets, idx, _ = t._index.ball(q32, len(q), r0, {}, radii=radii)
        for upper in (False, True):
            want_i, want_j, want_d = _canopy.filter_pairs(offsets, idx, np.arange(len(q), dtype=np.int64), q, t.data,
                                                          rr, 3, float(p), upper, t._keep)
            if upper:  # (the host filter compares j with the row's place; the labels here differ)
                continue
            for with_d in (True, False):
                ij, d, st = t._index.ball_exact(q32, len(q), r0, radii, rows, 0, q, rr, 0.0, t.data, dtype == np.float64,
                                                len(t.data), t._keep, len(t._keep), float(p), upper, with_d, {}, None, False)
                assert ij.shape == (len(want_i), 2) and st["total"] == offsets[-1]
                np.testing.assert_array_equal(ij[:, 0], rows[want_i])
                np.testing.assert_array_equal(ij[:, 1], want_j)
                if with_d:
                    assert d.tolist() == want_d.tolist()  # bit for bit
                else:
                    assert d is None
            c = np.full(len(q), -1, np.int64)  # counts alone: no pairs come back
            ij, d, st = t._index.ball_exact(q32, len(q), r0, radii, rows, 0, q, rr, 0.0, t.data, dtype == np.float64,
                                            len(t.data), t._keep, len(t._keep), float(p), upper, True, {}, c, False)
            assert ij is None and d is None and st["total"] == offsets[-1]
            np.testing.assert_array_equal(c, np.bincount(want_i, minlength=len(q)))
    # upper: pairs with j > its row's label only
    ij, _, _ = t._index.ball_exact(q32, len(q), float(hi.max()), None, rows, 0, q, rr, 0.0, t.data, dtype == np.float64,
                                   len(t.data), t._keep, len(t._keep), float(p), True, False, {}, None, False)
    full, _, _ = t._index.ball_exact(q32, len(q), float(hi.max()), None, rows, 0, q, rr, 0.0, t.data, dtype == np.float64,
                                     len(t.data), t._keep, len(t._keep), float(p), False, False, {}, None, False)
    np.testing.assert_array_equal(ij, full[full[:, 1] > full[:, 0]])
    with pytest.raises(ValueError, match="p = 3"):
        t._index.ball_exact(q32, len(q), 1.0, None, rows, 0, q, rr, 0.0, t.data, dtype == np.float64, len(t.data), t._keep,
                            len(t._keep), 3.0, False, True, {}, None, False)


@pytest.mark.skipif(not _canopy.gpu_available(), reason="no GPU")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_device_filter_reads_a_trees_own_points(dtype):
    """ball_exact's forms for a tree's pairs with itself: rows as a first row (row0 + a), the
    queries as the data's own rows (q None: read from the device's kept copy of the data), one
    radius as a number (rr None), the float32 queries kept on the device. Each equals the same
    call with the arrays written out, for a block of rows in the middle, across calls (the kept
    copies reused), after other queries and after a call over other data (the copies replaced);
    and query_pairs equals a brute-force list."""
    import canopy
    rng = np.random.default_rng(11 + (dtype == np.float64))
    data = (5e6 + rng.random((30000, 3)) * 1000).astype(dtype)
    data[rng.choice(len(data), 20, replace=False), 0] = np.nan
    t = canopy.cKDTree(data)
    assert t._index.device == "gpu" and t._keep is not None
    r, lo, hi_row = 9.0, 7000, 19000
    q64 = np.ascontiguousarray(data[lo:hi_row], np.float64)
    good = np.flatnonzero(np.isfinite(q64).all(axis=1))
    q64, rows = q64[good], (lo + good).astype(np.int64)
    q, q32, _, _, _ = t._rows(q64, keep64=True)
    hi = float(np.float32(r * 1.01 + 1))
    args = (t.data, dtype == np.float64, len(t.data), t._keep, len(t._keep), 2.0, True, True, {}, None)
    want, wd, _ = t._index.ball_exact(q32, len(q), hi, None, rows, 0, q, np.full(len(q), r), 0.0, *args, False)
    assert len(want) > 300
    for kept in (False, True, True):  # (queries kept on the device: copied once, then reused)
        got, gd, _ = t._index.ball_exact(q32, len(q), hi, None, rows, 0, None, None, r, *args, kept)
        np.testing.assert_array_equal(got, want)
        assert gd.tolist() == wd.tolist()
    first = np.flatnonzero(np.diff(rows) != 1)  # (rows skip the NaN rows: the first run of consecutive ones)
    n_run = int(first[0]) + 1 if len(first) else len(rows)
    got, _, _ = t._index.ball_exact(q32[:n_run].copy(), n_run, hi, None, None, int(rows[0]), None, None, r, *args, True)
    np.testing.assert_array_equal(got, want[want[:, 0] < rows[0] + n_run])
    # Other host data (each point moved by r / 2 along x): copied up again, then this data again.
    moved = t.data.copy()
    moved[:, 0] += r / 2
    offsets, idx, _ = t._index.ball(q32, len(q), hi, {})
    ri, rj, _ = _canopy.filter_pairs(offsets, idx, np.arange(len(q), dtype=np.int64), q, moved, np.full(len(q), r), 3,
                                     2.0, False, t._keep)
    got, _, _ = t._index.ball_exact(q32, len(q), hi, None, rows, 0, q, None, r, moved, *args[1:6], False, False, {},
                                    None, False)
    np.testing.assert_array_equal(got, np.stack([rows[ri], rj], axis=1))
    still = _canopy.filter_pairs(offsets, idx, np.arange(len(q), dtype=np.int64), q, t.data, np.full(len(q), r), 3,
                                 2.0, False, t._keep)[1]
    assert len(rj) != len(still) or (rj != still).any()  # (the move changes the answer)
    got, _, _ = t._index.ball_exact(q32, len(q), hi, None, rows, 0, None, None, r, *args, True)
    np.testing.assert_array_equal(got, want)
    x = rng.random((3000, 3)).astype(dtype)
    pairs = canopy.cKDTree(x).query_pairs(0.05, output_type="ndarray")
    d = np.sqrt(((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(axis=2))
    i, j = np.nonzero(np.triu(d <= 0.05, 1))
    np.testing.assert_array_equal(pairs, np.stack([i, j], axis=1))


@pytest.mark.skipif(not _canopy.gpu_available(), reason="no GPU")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_pair_results_are_made_while_the_device_works(dtype):
    """Past 2^20 candidates the binding makes the result early (arrays for every candidate, their
    pages faulted in while the device lists and filters; the result their first rows):
    query_pairs' ndarray is those first rows (its base larger), and it and
    sparse_distance_matrix (the distances' array made the same way) equal scipy's."""
    import canopy
    from scipy.spatial import cKDTree as Ref
    x = np.random.default_rng(21).random((200000, 3)).astype(dtype)
    r = float((12 * 3 / (4 * np.pi * len(x))) ** (1 / 3))  # (a mean of 12: 2.6 M candidates)
    t, ref = canopy.cKDTree(x), Ref(x)
    got = t.query_pairs(r, output_type="ndarray")
    want = ref.query_pairs(r, output_type="ndarray")
    np.testing.assert_array_equal(got, want[np.lexsort((want[:, 1], want[:, 0]))])
    assert got.base is not None and got.base.shape[0] >= len(got) > 1000000 and got.flags.c_contiguous
    assert t.query_pairs(r) == ref.query_pairs(r)
    got = t.sparse_distance_matrix(t, r, output_type="ndarray")
    want = ref.sparse_distance_matrix(ref, r, output_type="ndarray")
    want = want[np.lexsort((want["j"], want["i"]))]
    for f in ("i", "j"):
        np.testing.assert_array_equal(got[f], want[f])
    np.testing.assert_allclose(got["v"], want["v"], rtol=1e-14, atol=0)


@pytest.mark.skipif(not _canopy.gpu_available(), reason="no GPU")
def test_pairs_that_do_not_fit_one_device_call_come_in_chunks():
    """On the GPU every row is first tried in one call (no sample of counts); where that call
    is a MemoryError (the device's or the host's memory), the rows go in sampled chunks, whose
    pairs equal the one call's. A chunk's own MemoryError is the caller's."""
    import canopy

    class Tight:  # (the index, with ball_exact failing for more than `most` rows at once)
        def __init__(self, inner, most):
            self.inner, self.most, self.sizes = inner, most, []

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def ball_exact(self, sub, n, *a):
            self.sizes.append(n)
            if n > self.most:
                raise MemoryError(f"{n} rows")
            return self.inner.ball_exact(sub, n, *a)

    x = np.random.default_rng(5).random((60000, 3))
    t = canopy.cKDTree(x)
    want = t.query_pairs(0.03, output_type="ndarray")
    counts = t.query_ball_point(x, 0.03, return_length=True)
    t._index = Tight(t._index, 60000)
    np.testing.assert_array_equal(t.query_pairs(0.03, output_type="ndarray"), want)
    assert t._index.sizes == [60000]
    canopy._LIST_ITEMS, old = 1 << 12, canopy._LIST_ITEMS  # (chunks of about 2^15 candidates)
    try:
        t._index = Tight(t._index.inner, 59999)
        np.testing.assert_array_equal(t.query_pairs(0.03, output_type="ndarray"), want)
        np.testing.assert_array_equal(t.query_ball_point(x, 0.03, return_length=True), counts)
        sizes = t._index.sizes
        assert sizes[0] == 60000 and len(sizes) > 4 and max(sizes[1:]) < 60000, sizes
        t._index = Tight(t._index.inner, 10)
        with pytest.raises(MemoryError):
            t.query_pairs(0.03)
    finally:
        canopy._LIST_ITEMS = old


@pytest.mark.skipif(not _canopy.gpu_available(), reason="no GPU")
def test_float64_counts_on_a_lattice_on_the_gpu():
    """query_ball_point(return_length=True) over float64 lattice points on the GPU, r a lattice
    spacing: every row has points at exactly r, so every row takes the exact count (the device
    filter's counts alone); equal to a brute-force count of the float64 distances."""
    import canopy
    g = np.arange(34) * 0.25
    x = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    x = np.concatenate([x, x[::5]])  # duplicates
    t = canopy.cKDTree(x)
    assert t._index.device == "gpu"
    rows = np.random.default_rng(5).choice(len(x), 400, replace=False)
    for r in (0.25, 0.5, np.sqrt(2) * 0.25):
        got = t.query_ball_point(x, r, return_length=True)
        want = [int((np.sqrt(((x - x[i]) ** 2).sum(axis=1)) <= r).sum()) for i in rows]
        assert got[rows].tolist() == want


def one_distance(x, y, p):
    return reference(np.array([0, 1]), np.array([0]), [0], y[None, :], x[None, :], [np.inf], p, False, None)[0][2]


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5, np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_knn_settle_equals_the_rowwise_reference(p, dtype):
    """knn_settle, the float64 step of the exact k nearest: each row's kc nearest candidates by
    (distance, index) with distances computed one pair at a time in Python, (inf, n) from ub on,
    and the settled test from the kp-th engine distance, against a reference of the same rule."""
    rng = np.random.default_rng(int(min(p, 9)) * 3 + (dtype == np.float64))
    n, m, r, kp, kc = 500, 3, 80, 9, 5
    data = rng.random((n, m)).astype(dtype)
    q = rng.random((r, m))
    idx = np.stack([rng.choice(n, kp, replace=False) for _ in range(r)]).astype(np.int64)
    idx[3, 1] = idx[3, 0]  # a repeated candidate: equal distances, by index
    data[idx[5, 2]] = data[idx[5, 4]]  # two points at one distance
    eps_q = rng.random(r) * 1e-3
    last = (rng.random(r) * 1.2).astype(np.float32)
    last[7] = np.inf
    eps_x, rel, fac = 1e-4, 1 + 7 * 2.0 ** -23, 1.0 + 1e-9
    for ub in (np.inf, 0.5):
        for lp in (last, None):
            D, I, done = _canopy.knn_settle(idx, q, data, kc, float(p), ub, n, lp, eps_q, eps_x, rel, 1e-18, fac)
            for a in range(r):
                cand = sorted((one_distance(data[j], q[a], p), int(j)) for j in idx[a])[:kc]
                want = [(d, j) if d < ub else (np.inf, n) for d, j in cand]
                assert list(zip(D[a].tolist(), I[a].tolist())) == want  # bit for bit
                radius = min(cand[-1][0], ub)
                settled = lp is None or (np.isfinite(lp[a]) and ((float(lp[a]) - 1e-18) / rel - eps_x - eps_q[a]) > fac * radius)
                assert bool(done[a]) == bool(settled), a
    with pytest.raises(ValueError, match="out of range"):
        bad = idx.copy()
        bad[2, 2] = n
        _canopy.knn_settle(bad, q, data, kc, float(p), np.inf, n, None, eps_q, eps_x, rel, 1e-18, fac)
    with pytest.raises(ValueError, match="kc is outside"):
        _canopy.knn_settle(idx, q, data, kp + 1, float(p), np.inf, n, None, eps_q, eps_x, rel, 1e-18, fac)
