"""scipy's node views over Canopy's kd-tree (cKDTree.tree, KDTree.tree, _build_weights), checked
against the data itself: every node's points, counts, split and weight sums."""
import numpy as np
import pytest

import canopy


def walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if n.lesser is not None:
            stack += [n.greater, n.lesser]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ckdtree_nodes_partition_the_points(dtype):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3000, 3)).astype(dtype)
    x[:300] = x[300:600]  # duplicated points
    t = canopy.cKDTree(x, leafsize=5)
    root = t.tree
    assert isinstance(root, canopy.cKDTreeNode) and root.level == 0 and root.children == len(x)
    assert np.array_equal(np.sort(root.indices), np.arange(len(x)))
    leaves = 0
    for n in walk(root):
        assert np.array_equal(n.data_points, x[n.indices])
        assert n.children == len(n.indices) == n.end_idx - n.start_idx
        if n.split_dim < 0:
            leaves += 1
            assert n.greater is None and 0 < n.children <= 5
            continue
        assert n.lesser.level == n.greater.level == n.level + 1
        assert n.children == n.lesser.children + n.greater.children
        assert np.array_equal(np.sort(n.indices), np.sort(np.concatenate([n.lesser.indices, n.greater.indices])))
        # the split: the lesser side's largest coordinate (float32 data: exactly; float64: to
        # float32 rounding of the re-centred value), the greater side's at least it
        lo, hi = n.lesser.data_points[:, n.split_dim], n.greater.data_points[:, n.split_dim]
        assert lo.max() <= hi.min()
        if dtype == np.float32:
            assert lo.max() == np.float32(n.split) and hi.min() >= np.float32(n.split)
        else:
            assert abs(n.split - lo.max()) <= 1e-6 * (1 + abs(lo.max()))
    assert leaves >= len(x) // 5


def test_kdtree_views_and_weights():
    rng = np.random.default_rng(4)
    x = rng.random((500, 2))
    w = rng.random(500)
    t = canopy.KDTree(x, leafsize=4)
    nodes = list(walk(t._croot()))
    sums = t._build_weights(w)
    assert len(sums) == len(nodes)
    np.testing.assert_allclose(sums, [w[n.indices].sum() for n in nodes], rtol=1e-12)
    with pytest.raises(ValueError, match="weights"):
        t._build_weights(w[:-1])
    root = t.tree
    assert isinstance(root, canopy.KDTree.innernode) and root.children == 500
    stack, seen = [root], []
    while stack:
        n = stack.pop()
        if isinstance(n, canopy.KDTree.leafnode):
            seen += list(n.idx)
        else:
            assert n.children == n.less.children + n.greater.children
            stack += [n.greater, n.less]
    assert sorted(seen) == list(range(500))
    a, b = canopy.KDTree.node(), canopy.KDTree.node()
    assert (a < b) != (b < a) and sorted([a, b]) == sorted([b, a])


def test_nan_points_and_other_trees():
    x = np.random.default_rng(5).random((200, 3))
    x[[7, 50]] = np.nan
    t = canopy.cKDTree(x)
    idx = np.sort(t.tree.indices)
    assert 7 not in idx and 50 not in idx and len(idx) == 198  # NaN points are in no node, as in no answer
    assert canopy.cKDTree(np.empty((0, 3))).tree is None
    with pytest.raises(AttributeError):
        canopy.BallTree(x[:5]).tree


def test_nodes_of_a_tree_over_a_cuda_array():
    if not canopy.gpu_available():
        pytest.skip("no GPU: " + canopy.gpu_description())
    cp = pytest.importorskip("cupy")
    x = np.random.default_rng(6).random((40000, 3)).astype(np.float32)  # built on the GPU
    t = canopy.cKDTree(cp.asarray(x), leafsize=8)
    root = t.tree
    assert np.array_equal(np.sort(root.indices), np.arange(len(x)))
    leaves = 0
    for i, n in enumerate(walk(root)):
        if i < 50:  # the points stay on the device, as the tree's data do
            got = n.data_points
            assert isinstance(got, cp.ndarray) and np.array_equal(cp.asnumpy(got), x[n.indices])
        if n.split_dim < 0:
            leaves += 1
            assert 0 < n.children <= 8
    assert leaves >= len(x) // 8
