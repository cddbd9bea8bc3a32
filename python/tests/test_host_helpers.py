"""The pair and tree helpers' host-side shortcuts against the whole-array numpy operations they
stand for."""
import numpy as np
import pytest

import canopy


def test_extents_are_numpys():
    # A tree's mins and maxes, by column for narrow rows: numpy's (and scipy's) np.amin and
    # np.amax along axis 0, NaN and -0 included; finite extents skip the per-row NaN scan.
    from canopy._tree_util import _extents
    rng = np.random.default_rng(9)
    for m in (1, 3, 16, 17, 40):
        for dtype in (np.float32, np.float64):
            a = (rng.random((500, m)) - 0.5).astype(dtype)
            a[7, 0] = -0.0
            if m > 1:
                a[3, 1] = np.nan
            lo, hi = _extents(a)
            assert lo.dtype == a.dtype and hi.dtype == a.dtype
            assert np.array_equal(lo, np.amin(a, axis=0), equal_nan=True)
            assert np.array_equal(hi, np.amax(a, axis=0), equal_nan=True)
            if m > 16:  # (the trees' limit: the helper alone)
                continue
            t = canopy.KDTree(a)
            assert np.array_equal(t.mins, np.amin(a, axis=0), equal_nan=True)
            assert np.array_equal(t.maxes, np.amax(a, axis=0), equal_nan=True)
            keep = np.flatnonzero(~np.isnan(a).any(axis=1))
            assert np.array_equal(t.query(a[keep[:5]], k=1)[1], keep[:5])


def test_count_scan_is_the_plain_one():
    # count_neighbors' one pass over row blocks: column sums and, per (hi, lo) column pair, the
    # rows whose counts differ (lo None: non-zero), as the whole-array operations give them.
    from canopy._pairs import _scan_counts
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 3, (1000, 6)).astype(np.int64)
    counts[:, 1] = counts[:, 0]
    counts[::37, 1] += 1
    pairs = [(1, 0), (3, 2), (5, None), (4, 4)]
    for block in (1, 7, 256, 1 << 13):
        sums, rows = _scan_counts(counts, pairs, block)
        assert np.array_equal(sums, counts.sum(axis=0))
        for (h, l), got in zip(pairs, rows):
            want = np.flatnonzero(counts[:, h] != (counts[:, l] if l is not None else 0))
            assert np.array_equal(got, want), (block, h, l)
    sums, rows = _scan_counts(np.zeros((0, 2), np.int64), [(1, 0)])
    assert np.array_equal(sums, [0, 0]) and len(rows[0]) == 0


def test_finite_rows_are_numpys():
    # Rows with only finite values: from the column extents when those are finite, else per row.
    from canopy._tree_util import _finite_rows
    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        a = rng.random((300, 3)).astype(dtype)
        assert np.array_equal(_finite_rows(a), np.ones(300, bool))
        for bad in (np.nan, np.inf, -np.inf):
            b = a.copy()
            b[[4, 200], [0, 2]] = bad
            assert np.array_equal(_finite_rows(b), np.isfinite(b).all(axis=1))
        assert len(_finite_rows(a[:0])) == 0


def test_own_rows_are_the_plain_ones():
    # A float64 tree's engine rows, made block by block at construction, are float32(x - centre)
    # of the whole array; the rows its calls with itself reuse are those, and eps_x bounds every
    # row's rounding (what the per-row bounds of any other query array would be).
    from canopy._tree_util import _U32, _centred32
    rng = np.random.default_rng(4)
    for n in (1, 5, 1000, 70000):
        x = 5e6 + rng.random((n, 3)) * 1000
        c = x.mean(axis=0)
        for block in (1, 7, 1 << 16):
            assert np.array_equal(_centred32(x, c, block), (x - c).astype(np.float32))
        t = canopy.KDTree(x)
        q, q32, eps_q, lead, single = t._rows(t.data, keep64=True)
        rel = x - t._center
        assert q is t.data and lead == (n,) and not single
        assert np.array_equal(q32, rel.astype(np.float32))
        per_row = _U32 * np.sqrt(np.einsum("ij,ij->i", rel, rel))
        assert (eps_q >= per_row).all() and eps_q.shape == (n,)
        copy = np.array(x)  # another array of the same values: the per-row path
        q2, q32b, eps_b, _, _ = t._rows(copy, keep64=True)
        assert np.array_equal(q32b, q32) and np.array_equal(q2, q) and (eps_q >= eps_b).all()


def test_lists_of_pairs():
    """_canopy.lists_of: the j of each i as lists (empty rows too), into a list or an object array,
    from strided columns of an (n, 2) pairs array; bad input is an error, not a crash."""
    from canopy import _canopy
    pairs = np.array([[0, 5], [0, 7], [2, 1], [2, 3], [2, 900], [4, 2 ** 40]], np.int64)
    want = [[5, 7], [], [1, 3, 900], [], [2 ** 40], []]
    assert _canopy.lists_of(pairs[:, 0], pairs[:, 1], 6) == want
    out = np.empty(6, dtype=object)
    assert _canopy.lists_of(pairs[:, 0].copy(), pairs[:, 1].copy(), 6, out) is out
    assert out.tolist() == want and all(type(v) is int for row in out for v in row)
    assert _canopy.lists_of(np.empty(0, np.int64), np.empty(0, np.int64), 3) == [[], [], []]
    assert _canopy.lists_of(np.empty(0, np.int64), np.empty(0, np.int64), 0) == []
    with pytest.raises(ValueError, match="ascending"):
        _canopy.lists_of(np.array([1, 0]), np.array([0, 0]), 2)
    with pytest.raises(ValueError, match="ascending"):
        _canopy.lists_of(np.array([0, 2]), np.array([0, 0]), 2)
    with pytest.raises(ValueError, match="int64"):
        _canopy.lists_of(np.array([0, 1], np.int32), np.array([0, 0]), 2)
    with pytest.raises(ValueError, match="differ in length"):
        _canopy.lists_of(np.array([0, 1]), np.array([0]), 2)
    with pytest.raises(ValueError, match="object array of n"):
        _canopy.lists_of(np.array([0, 1]), np.array([0, 0]), 2, np.empty(3, dtype=object))


def test_centred32_rounds_as_numpy():
    """_canopy.centred32: float32(x - center) as numpy's subtract then astype, to the bit (values
    at float32's limits and past them, subnormals, NaN, infinities), and the differences' 2-norms."""
    from canopy import _canopy
    rng = np.random.default_rng(4)
    big = np.float64(np.finfo(np.float32).max)
    edge = [big, np.nextafter(big, np.inf), big * (1 + 2.0 ** -24), big * (1 + 2.0 ** -25), -big * (1 + 2.0 ** -24),
            1e-45, 7e-46, -1e-40, np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300]
    x = np.concatenate([rng.normal(0, 1e3, (5000, 3)) + 5e6, np.reshape(edge[:12] + [1e300, 3.0], (-1, 2)).repeat(2, 1)[:, :3]])
    center = np.array([5e6, -0.5, 1e-300])
    norms = np.empty(len(x))
    got = _canopy.centred32(x, center, norms)
    with np.errstate(all="ignore"):
        rel = x - center
        want = rel.astype(np.float32)
        want_norms = np.sqrt(np.einsum("ij,ij->i", rel, rel))
    assert got.dtype == np.float32 and got.shape == x.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    np.testing.assert_allclose(norms, want_norms, rtol=1e-15)
    assert np.array_equal(_canopy.centred32(x[:0], center, None), np.empty((0, 3), np.float32))
    with pytest.raises(ValueError, match="centred32"):
        _canopy.centred32(x, center[:2], None)


def test_lists_of_shares_each_index_and_counts_its_references():
    """lists_of over many pairs (the threaded path: one int object per distinct index, its count
    raised once by its number of uses, the items written by several threads) equals a plain
    Python reference, leaves each int's reference count as it found it once the lists are gone,
    replaces (and releases) what out held, and leaves the lists to the cyclic collector untracked."""
    import gc
    import sys
    from canopy import _canopy
    rng = np.random.default_rng(8)
    n, m = 50000, 400000
    i = np.sort(rng.integers(0, n, m)).astype(np.int64)
    j = rng.integers(0, 3 * n, m).astype(np.int64)
    want = [[] for _ in range(n)]
    for a, b in zip(i.tolist(), j.tolist()):
        want[a].append(b)
    got = _canopy.lists_of(i, j, n)
    assert got == want
    row = next(r for r in range(n) if len(want[r]) > 1 and want[r][0] > 256)  # (not an immortal small int)
    v = got[row][0]
    assert all(got[r][k] is v for r in range(n) for k in range(len(got[r])) if want[r][k] == want[row][0])
    uses = int((j == want[row][0]).sum())
    before = sys.getrefcount(v)
    del got
    assert sys.getrefcount(v) == before - uses
    marker = object()
    out = np.empty(n, dtype=object)
    out[:] = [marker] * n
    held = sys.getrefcount(marker)
    _canopy.lists_of(i, j, n, out)
    assert out.tolist() == want and sys.getrefcount(marker) == held - n
    assert not gc.is_tracked(out[row])


def test_pair_array_takes_the_first_rows_of_the_pairs_array():
    """_pair_array returns (i, j) as the (n, 2) array whose columns they are, without a copy,
    also when they are its first rows only (the GPU's pairs: an array sized for every
    candidate); other columns (every other row, another array's) are stacked into a new one."""
    from canopy._tree_util import _pair_array
    b = np.arange(40, dtype=np.intp).reshape(20, 2).copy()  # (an array of its own, as numpy.empty makes)
    for n in (20, 7, 0):
        v = b[:n]
        got = _pair_array(v[:, 0], v[:, 1])
        assert got.shape == (n, 2) and (got == v).all() and (n == 0 or np.shares_memory(got, b))
    for i, j in ((b[::2, 0], b[::2, 1]), (b[:5, 1], b[:5, 0]), (b[:5, 0], b.copy()[:5, 1])):
        got = _pair_array(i, j)
        assert (got == np.stack([i, j], axis=1)).all() and not np.shares_memory(got, b)
