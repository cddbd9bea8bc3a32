"""canopy._canopy.PointIndex.ball (PointCorrelation::run_lists, the ragged engine) against numpy
brute force on the CPU: each query's list of point indices within r, as offsets and indices."""
import numpy as np
import pytest

from canopy import _canopy


def index(points, kind="kd", leaf_size=8):
    points = np.ascontiguousarray(points, dtype=np.float32)
    return _canopy.PointIndex(kind, points, len(points), points.shape[1], leaf_size, "cpu")


def brute(points, queries, r):
    """For each query, the indices of the points within r (float64 distances), ascending; and the
    points near the boundary, where float32 arithmetic may decide either way."""
    d = np.sqrt(((queries[:, None, :].astype(np.float64) - points[None, :, :].astype(np.float64)) ** 2).sum(-1))
    r = np.broadcast_to(np.asarray(r, np.float64), (len(queries),))[:, None]
    near = np.abs(d - r) <= 1e-5 * np.maximum(r, 1e-30)
    return [np.flatnonzero(row) for row in d <= r], near


def lists(offsets, indices):
    return [indices[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def expect_equal(got, want, near):
    for i, (g, w) in enumerate(zip(got, want)):
        certain = ~near[i]
        assert np.array_equal(np.intersect1d(g, np.flatnonzero(certain)), np.intersect1d(w, np.flatnonzero(certain))), i
        assert set(np.setxor1d(g, w)) <= set(np.flatnonzero(near[i])), i


@pytest.fixture(scope="module")
def cloud():
    rng = np.random.default_rng(7)
    points = rng.random((3000, 3)).astype(np.float32)
    queries = rng.random((500, 3)).astype(np.float32)
    return points, queries


def test_lists_equal_brute_force(cloud):
    points, queries = cloud
    offsets, indices, stats = index(points).ball(queries, len(queries), 0.08, {})
    assert offsets.dtype == np.int64 and indices.dtype == np.int64
    assert offsets.shape == (501,) and offsets[0] == 0 and offsets[-1] == len(indices) == stats["total"]
    got = lists(offsets, indices)
    assert all(np.all(np.diff(g) > 0) for g in got)  # sorted, no repeats
    want, near = brute(points, queries, 0.08)
    expect_equal(got, want, near)
    assert sum(len(w) for w in want) > 2000  # not a trivial case
    for key in ("device", "schedule", "executor", "scan_ms", "fill_ms", "sort_ms", "lists_ms", "fill_batches"):
        assert key in stats
    assert stats["device"] == "cpu"


def test_integer_grid_is_exact_at_the_radius():
    g = np.arange(12, dtype=np.float32)
    points = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    tree = index(points, leaf_size=4)
    for r in (0.0, 1.0, np.float32(np.sqrt(2)), 3.0):
        offsets, indices, _ = tree.ball(points, len(points), float(r), {})
        d2 = ((points[:, None, :] - points[None, :, :]) ** 2).sum(-1)  # exact in float32
        want = [np.flatnonzero(row) for row in d2 <= np.float32(r) * np.float32(r)]
        got = lists(offsets, indices)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), r


def test_unsorted_lists_hold_the_same_points(cloud):
    points, queries = cloud
    tree = index(points)
    o1, i1, _ = tree.ball(queries, len(queries), 0.08, {}, sorted=False)
    o2, i2, _ = tree.ball(queries, len(queries), 0.08, {"schedule": "hybrid", "executor": "independent"}, sorted=False)
    o3, i3, _ = tree.ball(queries, len(queries), 0.08, {})
    assert np.array_equal(o1, o3) and np.array_equal(o1, o2)
    assert np.array_equal(i1, i2)  # the kd-tree's leaf order, whatever the schedule
    assert all(np.array_equal(np.sort(a), b) for a, b in zip(lists(o1, i1), lists(o3, i3)))


def test_per_query_radii(cloud):
    points, queries = cloud
    radii = np.random.default_rng(8).uniform(0.0, 0.15, len(queries)).astype(np.float32)
    offsets, indices, _ = index(points).ball(queries, len(queries), 0.0, {}, radii=radii)
    want, near = brute(points, queries, radii)
    expect_equal(lists(offsets, indices), want, near)


def test_counts_match_the_count_call(cloud):
    points, queries = cloud
    tree = index(points)
    counts = np.empty(len(queries), np.int64)
    tree.count(queries, len(queries), 0.08, counts, {})
    offsets, _, _ = tree.ball(queries, len(queries), 0.08, {})
    assert np.array_equal(np.diff(offsets), counts)


def test_edge_cases(cloud):
    points, _ = cloud
    tree = index(points)
    offsets, indices, stats = tree.ball(np.empty((0, 3), np.float32), 0, 0.1, {})
    assert offsets.tolist() == [0] and len(indices) == 0 and stats["total"] == 0
    far = np.full((4, 3), 9.0, np.float32)
    offsets, indices, _ = tree.ball(far, 4, 0.5, {})
    assert offsets.tolist() == [0] * 5 and len(indices) == 0
    offsets, indices, _ = tree.ball(points[:2], 2, 10.0, {})
    assert np.array_equal(indices, np.concatenate([np.arange(3000), np.arange(3000)]))


def test_errors(cloud):
    points, queries = cloud
    tree = index(points)
    bad = queries.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="query 3"):
        tree.ball(bad, len(bad), 0.1, {})
    with pytest.raises(ValueError, match="radius"):
        tree.ball(queries, len(queries), -1.0, {})
    radii = np.full(len(queries), 0.1, np.float32)
    radii[9] = np.nan
    with pytest.raises(ValueError, match=r"radii\[9\]"):
        tree.ball(queries, len(queries), 0.0, {}, radii=radii)
    with pytest.raises(ValueError, match="KDTree"):
        index(points, "ball").ball(queries, len(queries), 0.1, {})
