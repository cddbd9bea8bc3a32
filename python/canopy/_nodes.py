"""scipy's node views over Canopy's kd-tree: cKDTree.tree (cKDTreeNode) and KDTree.tree
(KDTree.innernode / KDTree.leafnode). Canopy's nodes are not scipy's (a median split of the widest
dimension, Canopy's leaf size), so the views show Canopy's tree; they are built on first use
from one copy of the node arrays."""
import numpy as np


class cKDTreeNode:
    """One node of the tree, as scipy's cKDTreeNode: level (depth), split_dim (-1 for a leaf),
    split (the lesser side's largest coordinate in split_dim, as the tree's float32 arithmetic
    holds it: to float32 rounding for float64 data), children (points below),
    start_idx/end_idx (its run of the tree's point order), indices and data_points (its points),
    lesser and greater (None for a leaf)."""

    __slots__ = ("level", "split_dim", "split", "children", "start_idx", "end_idx", "lesser", "greater",
                 "_order", "_data")

    def __init__(self):
        self.level, self.split_dim, self.split, self.children = 0, -1, 0.0, 0
        self.start_idx = self.end_idx = 0
        self.lesser = self.greater = None
        self._order, self._data = np.empty(0, np.intp), np.empty((0, 0))

    @property
    def indices(self):
        return self._order[self.start_idx:self.end_idx]

    @property
    def data_points(self):
        if isinstance(self._data, np.ndarray):
            return self._data[self.indices]
        from ._arrays import _cupy  # a tree over a CUDA array: its points stay there
        return self._data[_cupy().asarray(self.indices)]


def ckdtree_root(tree):
    """The root cKDTreeNode of a canopy cKDTree/KDTree (None for an empty tree)."""
    if tree._index is None:
        return None
    raw = tree._index.nodes()
    first, count, dim, split, ids = (np.frombuffer(b, t) for b, t in zip(raw, (np.int64, np.int32, np.int16,
                                                                              np.float32, np.int64)))
    order = ids if tree._keep is None else tree._keep[ids]  # the engine's indices as the data's
    order = np.asarray(order, np.intp)
    m = len(first)
    # An exact (float64) tree's engine holds coordinates re-centred on the data's box (float32).
    shift = np.asarray(tree._center, np.float64) if tree._exact else np.zeros(tree.m)
    nodes = [cKDTreeNode() for _ in range(m)]
    # Preorder: node i's children are i + 1 and first[i]; a subtree's points are one run of the
    # tree order, so a parent's run is its children's joined (children come after their parent).
    for i in range(m - 1, -1, -1):
        nd = nodes[i]
        nd._order, nd._data = order, tree.data
        nd.split_dim = int(dim[i])
        if nd.split_dim < 0:
            nd.start_idx, nd.end_idx = int(first[i]), int(first[i]) + int(count[i])
        else:
            nd.lesser, nd.greater = nodes[i + 1], nodes[int(first[i])]
            nd.split = float(split[i]) + shift[nd.split_dim]
            nd.start_idx, nd.end_idx = nd.lesser.start_idx, nd.greater.end_idx
        nd.children = nd.end_idx - nd.start_idx
    stack = [(nodes[0], 0)]
    while stack:
        nd, level = stack.pop()
        nd.level = level
        if nd.lesser is not None:
            stack += [(nd.lesser, level + 1), (nd.greater, level + 1)]
    return nodes[0]


class node:
    """KDTree.node, as scipy's: a view of one cKDTreeNode (_node); nodes order by identity."""

    def __init__(self, ckdtree_node=None):
        self._node = ckdtree_node if ckdtree_node is not None else cKDTreeNode()
        self.children = self._node.children

    @staticmethod
    def _create(ckdtree_node):
        if ckdtree_node is None:
            return None
        return innernode(ckdtree_node) if ckdtree_node.split_dim >= 0 else leafnode(ckdtree_node)

    def __lt__(self, other):
        return id(self) < id(other)

    def __gt__(self, other):
        return id(self) > id(other)

    def __le__(self, other):
        return id(self) <= id(other)

    def __ge__(self, other):
        return id(self) >= id(other)

    def __eq__(self, other):
        return id(self) == id(other)

    __hash__ = object.__hash__


class leafnode(node):
    @property
    def idx(self):
        return self._node.indices


class innernode(node):
    def __init__(self, ckdtreenode):
        super().__init__(ckdtreenode)
        self.split_dim = ckdtreenode.split_dim
        self.split = ckdtreenode.split
        self.less = node._create(ckdtreenode.lesser)
        self.greater = node._create(ckdtreenode.greater)
