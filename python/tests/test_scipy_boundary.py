"""Points exactly at the radius, as scipy's cKDTree decides them: it compares the p-th power sum of
the differences with r ** p (r * r for p = 2), so with integer coordinates and r = sqrt(k) a point
at squared distance k is outside where fl(sqrt(k)) ** 2 < k. Every radius call equals scipy's
there, on the CPU and (40,000 points: the tree built and searched on the GPU) on the GPU."""
import numpy as np
import pytest
from scipy.spatial import cKDTree as ScipyTree

import canopy


@pytest.fixture(scope="module")
def lattice():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 200, (40000, 3)).astype(np.float64)  # (about 10 neighbours within 10)
    # r = sqrt(k), k a squared distance that occurs: those with fl(r) ** 2 < k and one without
    ks = [k for k in range(40, 400) if np.sqrt(k) ** 2 < k and k % 4 != 0][:3]
    ks.append(next(k for k in range(40, 400) if np.sqrt(k) ** 2 == k and not float(np.sqrt(k)).is_integer()))
    return x, [float(np.sqrt(k)) for k in ks]


def test_the_lattice_has_points_at_the_radius(lattice):
    x, radii = lattice
    d = np.sqrt(((x[:2000, None, :] - x[None, :, :]) ** 2).sum(axis=2))
    for r in radii[:3]:  # (where sqrt(s) <= r and s <= r * r disagree)
        assert ((d == r).sum()) > 20, r


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_radius_calls_equal_scipy_at_the_radius(lattice, device):
    x, radii = lattice
    if device == "auto" and not canopy.gpu_available():
        pytest.skip("no GPU")
    t, ref = canopy.cKDTree(x, device=device), ScipyTree(x)
    q = x[:3000]
    for r in radii:
        assert t.query_ball_point(q, r, return_sorted=True).tolist() == \
            [sorted(v) for v in ref.query_ball_point(q, r)], r
        np.testing.assert_array_equal(t.query_ball_point(q, r, return_length=True),
                                      ref.query_ball_point(q, r, return_length=True))
        assert t.query_pairs(r) == ref.query_pairs(r), r
        got = t.sparse_distance_matrix(t, r, output_type="dict")
        assert got == ref.sparse_distance_matrix(ref, r, output_type="dict"), r
    small = canopy.cKDTree(q, device=device)
    assert small.query_ball_tree(small, radii[0]) == ScipyTree(q).query_ball_tree(ScipyTree(q), radii[0])
    rs = np.array(sorted(radii))
    np.testing.assert_array_equal(t.count_neighbors(t, rs), ref.count_neighbors(ref, rs))
    np.testing.assert_array_equal(t.count_neighbors(t, rs, cumulative=False), ref.count_neighbors(ref, rs, cumulative=False))


@pytest.mark.parametrize("p", [1, 3, 2.5, np.inf])
def test_other_p_equal_scipy_at_the_radius(lattice, p):
    x, _ = lattice
    x = x[:4000]
    t, ref = canopy.cKDTree(x), ScipyTree(x)
    base = float(ref.query(x[:200], k=4, p=p)[0][:, -1].max())  # (a distance that occurs: scipy's)
    radii = np.array(sorted({base, float(np.nextafter(base, 0)), float(np.nextafter(base, np.inf))}))
    for r in radii:
        assert t.query_ball_point(x[:50], r, p=p, return_sorted=True).tolist() == \
            [sorted(v) for v in ref.query_ball_point(x[:50], r, p=p)], (p, r)
        assert t.query_pairs(r, p=p) == ref.query_pairs(r, p=p), (p, r)
    np.testing.assert_array_equal(t.count_neighbors(t, radii, p=p), ref.count_neighbors(ref, radii, p=p))
