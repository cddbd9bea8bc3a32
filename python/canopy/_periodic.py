"""Periodic boxes for canopy's trees (scipy's boxsize): an m-d torus of sides L_i over the
points, which lie in [0, L_i) along each periodic dimension (L_i > 0; L_i <= 0 leaves a dimension
open, as in scipy).

Distances are scipy's: a query is wrapped into the box (x - floor(x / L) L, then moved by L once
more if rounding left it outside), and along a periodic dimension the float64 difference d of two
coordinates in the box becomes d - L when d > L/2 and d + L when d < -L/2 (that subtraction is
exact: Sterbenz), so its size is min(|d|, L - |d|); the p-norm of those is the distance.

Searches run on the tree's own exact search (_PointTree._search: the float32 engine's kNN, on the
GPU when the tree is there), with images of each query: the query itself and its shifts
q + s L, s in {-1, 0, 1}^m (s_i = 0 on open dimensions). The distance above equals the smallest
plain distance from an image to the point, so every point within r of the query is within r
(up to float64 rounding, _Box.slack) of one image, and only the images whose distance to the
data's bounding box is at most r are searched. A query near no wall searches itself alone. Each
candidate's distance is then recomputed as scipy computes it, duplicates (a point found from two
images, possible when r >= L/2) removed, and the result taken by (distance, index). kNN: the
query's own k + 4 nearest give a bound R on its k-th distance (they are k real points), then the
images within R of the box are searched as balls of radius R. Rows that would need many images
(a radius near the box's size) are compared with every point instead."""
import numpy as np

from ._tree_util import _U32, _ball_factor, _count_radii, _finite_rows, _missing, _stats

_BLOCK = 1 << 22  # candidates a block of query rows aims at (memory: a few of these arrays)


class _Box:
    """A tree's periodic box: scipy's boxsize attribute and what the searches need of it."""

    def __init__(self, boxsize, m):
        try:
            a = np.array(boxsize, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"boxsize = {boxsize!r}: a number or an array of m numbers is needed") from None
        try:
            a = np.array(np.broadcast_to(a, (m,)))
        except ValueError:
            raise ValueError(f"boxsize: shape {a.shape} does not broadcast to ({m},), one size per "
                             "dimension") from None
        if not np.isfinite(a).all():
            raise ValueError(f"boxsize = {a.tolist()}: sizes must be finite (0 leaves a dimension open)")
        self.boxsize = a  # scipy's .boxsize, as given
        self.periodic = a > 0
        self.L = np.where(self.periodic, a, 0.0)  # 0 on open dimensions: the wrap changes nothing
        self.half = 0.5 * self.L
        self.m = m
        # Rounding between scipy's distance and an image's real distance: fl(q - x) vs q - x (2^-53
        # of |q - x| < L per coordinate) and the image's fl(q + s L) (2^-53 of |q + s L| < 2 L):
        # under sqrt(m) 2^-51 L in the 2-norm; the slack doubles it.
        self.slack = float(np.sqrt(m) * 2.0 ** -50 * self.L.max()) if m else 0.0

    def any(self):
        return bool(self.periodic.any())

    def check(self, data):
        """scipy's errors for data outside [0, L) along a periodic dimension."""
        if not len(data):
            return
        per = self.periodic
        with np.errstate(invalid="ignore"):
            if (data[:, per] >= self.L[per]).any():
                raise ValueError("Some input data are greater than the size of the periodic box.")
            if (data[:, per] < 0).any():
                raise ValueError("Negative input data are outside of the periodic box.")

    def wrap(self, q):
        """float64 rows q wrapped into the box along the periodic dimensions (a non-finite
        coordinate gives NaN: such a row has no neighbours)."""
        q = np.array(q, dtype=np.float64)
        per = self.periodic
        if not per.any() or not q.size:
            return q
        L = self.L[per]
        with np.errstate(invalid="ignore", over="ignore"):
            w = q[:, per]
            w = w - np.floor(w / L) * L
            for _ in range(4):  # rounding may leave w a little outside [0, L): as scipy, -L then +L
                hi = w >= L
                if not hi.any():
                    break
                w = np.where(hi, w - L, w)
            for _ in range(4):
                lo = w < 0
                if not lo.any():
                    break
                w = np.where(lo, w + L, w)
        q[:, per] = w
        return q

    def dist(self, tree, q, idx, p):
        """scipy's periodic p-distances from rows q (wrapped) to tree points idx (len(q), k), or
        to every point for idx None. scipy sums the terms one dimension after the other, with
        libm's pow for p other than 1, 2, inf: the same order, and np.float_power (libm's pow,
        where numpy's ** may take a SIMD pow an ulp away), give the same float64 distances."""
        X = tree._gather(idx) if idx is not None else None
        acc = None
        with np.errstate(invalid="ignore", over="ignore"):
            for j in range(self.m):
                x = X[..., j] if X is not None else tree.data[None, :, j]
                d = x - q[:, j, None]  # (the wrap below: d - L exactly, d unchanged where 0 L is added)
                if self.periodic[j]:
                    d -= self.L[j] * (d > self.half[j])
                    d += self.L[j] * (d < -self.half[j])
                if p == 2:
                    t = d * d
                elif p == 1 or p == np.inf:
                    t = np.abs(d)
                else:
                    t = np.float_power(np.abs(d), p)
                if acc is None:
                    acc = t
                elif p == np.inf:
                    np.maximum(acc, t, out=acc)
                else:
                    acc += t
        if acc is None:  # (m = 0)
            return np.zeros(np.shape(idx) if idx is not None else (len(q), tree.n))
        return np.sqrt(acc) if p == 2 else (acc if p in (1, np.inf) else np.float_power(acc, 1.0 / p))

    # -- images ----------------------------------------------------------------------------------
    def _gaps(self, tree, q):
        """Per dimension, the distance from image s_i = +1 and s_i = -1 of each row to the data's
        bounding box along that dimension (0 when inside)."""
        mins, maxes = np.asarray(tree._lo, np.float64), np.asarray(tree._hi, np.float64)
        up = np.maximum(q + self.L - maxes, 0.0)
        down = np.maximum(mins - q + self.L, 0.0)
        return up, down

    def _limit(self, radius):
        return radius * (1 + 1e-9) + 2 * self.slack

    def image_counts(self, tree, q, radius):
        """An upper bound on the number of images of each row (itself included) that _images
        keeps for these radii."""
        up, down = self._gaps(tree, q)
        lim = self._limit(radius)[:, None]
        with np.errstate(invalid="ignore"):
            per_dim = 1 + (up <= lim).astype(np.int64) + (down <= lim)
        return np.prod(np.where(self.periodic, per_dim, 1), axis=1)

    def images(self, tree, q, radius, p, itself):
        """The images of rows q whose p-distance to the data's bounding box is within radius (with
        the rounding slack): (owner row, shift s (images, m)), the rows themselves (s = 0) first
        when itself."""
        up, down = self._gaps(tree, q)
        lim = self._limit(radius)
        powered = p not in (1, np.inf)
        if powered:
            with np.errstate(over="ignore"):
                lim = lim ** p
        owner = np.arange(len(q))
        shift = np.zeros((len(q), self.m), np.int8)
        acc = np.zeros(len(q))
        for j in np.flatnonzero(self.periodic).tolist():
            parts_o, parts_s, parts_a = [owner], [shift], [acc]
            for sign, gap in ((1, up[:, j]), (-1, down[:, j])):
                g = gap[owner]
                with np.errstate(over="ignore", invalid="ignore"):
                    a = np.maximum(acc, g) if p == np.inf else acc + (g ** p if powered else g)
                    keep = a <= lim[owner]
                if keep.any():
                    s = shift[keep]
                    s[:, j] = sign
                    parts_o.append(owner[keep])
                    parts_s.append(s)
                    parts_a.append(a[keep])
            owner, shift, acc = (np.concatenate(c) for c in (parts_o, parts_s, parts_a))
        if not itself:
            moved = shift.any(axis=1)
            owner, shift = owner[moved], shift[moved]
        return owner, shift

    def image_rows(self, tree, q, owner, shift):
        """The images q[owner] + shift L as float64 rows, their engine rows and rounding bounds
        (with the slack between scipy's distance and an image's)."""
        img = q[owner] + shift * self.L
        q32, eps_q = _engine_rows(tree, img)
        return img, q32, eps_q + self.slack

    def search(self, tree, q, owner, rows64, kp, radius, p, opts):
        """tree._search over image rows (image_rows' three arrays, of the rows q[owner]): yields
        (owner rows, D, I) with D the periodic distances from the wrapped rows q; the candidates
        of an image hold every point within radius(image rows, D) of it (radius is called with
        indices into owner)."""
        if not len(owner):
            return

        def dist(rows, idx):
            return self.dist(tree, q[owner[rows]], idx, p)

        for rows, D, I in tree._search(*rows64, p, kp, radius, opts, dist=dist):
            yield owner[rows], D, I

    def occupied(self, tree, owner, rows64, radius, p, opts):
        """Image rows (owner, rows64 as image_rows gives them) that can hold a point within
        p-distance radius[image], and a first k for their search: the kd-tree's float32 count at
        a radius past radius (and every rounding: _count_radii's hi, rows of near radius sharing
        one count, rounded up to a step of 2^(1/4)) counts every such point, so an image counted 0
        has none and one counted c has its candidates settled by c + 1 neighbours. Ball and vp
        trees (no counts): every image, k = 16."""
        if tree._kind != "kd" or tree._index is None or not len(owner):
            return owner, rows64, 16
        img, q32, eps_q = rows64
        counts = np.full(len(owner), tree._n_eng, np.int64)
        hi = _count_radii(radius * _ball_factor(tree.m, p), tree._eps_x + eps_q, tree.m)[0]
        ok = np.flatnonzero((hi < 1e37) & _finite_rows(q32))
        step = np.ceil(4 * np.log2(hi[ok]))
        for v in np.unique(step).tolist():
            rows = ok[step == v]
            rad = float(np.nextafter(np.float32(2.0 ** (v / 4)), np.float32(np.inf)))
            c = np.empty(len(rows), np.int64)
            tree.last_stats = _stats(tree._index.count(np.ascontiguousarray(q32[rows]), len(rows), rad, c, opts))
            counts[rows] = c
        keep = counts > 0
        return owner[keep], tuple(a[keep] for a in rows64), counts[keep] + 1

    def brute(self, tree, q, rows, p):
        """(rows, D, I) of rows compared with every point, in chunks."""
        n = tree.n
        step = max(1, _BLOCK // (n * max(self.m, 1)))
        for s in range(0, len(rows), step):
            r = rows[s:s + step]
            yield r, self.dist(tree, q[r], None, p), np.broadcast_to(np.arange(n), (len(r), n))


def _engine_rows(tree, q):
    """Float64 rows q as the engine reads them: float32 coordinates relative to the tree's centre,
    and the rounding bound eps_q of each row (see _PointTree._rows)."""
    rel = q - tree._center if tree._center is not None else q
    with np.errstate(over="ignore", invalid="ignore"):
        q32 = np.ascontiguousarray(rel.astype(np.float32))
        eps_q = 1.0000001 * _U32 * np.sqrt(np.einsum("ij,ij->i", rel, rel)) + np.sqrt(tree.m) * 2.0 ** -149
    return q32, eps_q


def _flat(rows, D, I, keep):
    """The candidates kept, as flat (row, index, distance) arrays."""
    return np.repeat(rows, keep.sum(axis=1)), I[keep], D[keep]


def _merge(parts, by_distance):
    """Flat (row, index, distance) parts as one set ordered by (row, distance, index) or by (row,
    index), each (row, index) once (an index found from two images has one distance)."""
    if not parts:
        e = np.empty(0, np.int64)
        return e, e, np.empty(0)
    r, i, d = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((i, d, r) if by_distance else (i, r))
    r, i, d = r[order], i[order], d[order]
    if len(r) > 1:
        # duplicates are neighbours in either order (same row, index and distance)
        keep = np.ones(len(r), bool)
        keep[1:] = (r[1:] != r[:-1]) | (i[1:] != i[:-1])
        if not keep.all():
            r, i, d = r[keep], i[keep], d[keep]
    return r, i, d


def knn(tree, qw, kc, ub, p, opts):
    """The kc nearest points (kc <= n) of wrapped rows qw by periodic p-distance, nearer than ub:
    (dist (nq, kc), idx (nq, kc)), missing neighbours inf and n; by (distance, index)."""
    box, n = tree._box, tree.n
    dist, idx = _missing((len(qw), kc), n)
    good = np.flatnonzero(_finite_rows(qw))  # a NaN row has no neighbours
    step = max(1, _BLOCK // (2 * (kc + 4)))

    def kth(D):
        return np.minimum(np.partition(D, kc - 1, axis=1)[:, kc - 1], ub)

    for s in range(0, len(good), step):
        blk = good[s:s + step]
        q = qw[blk]
        B = len(q)
        parts, R = [], np.full(B, np.inf)
        # 1. each row itself: its k + 4 nearest bound its k-th distance by R
        zero = np.zeros((B, box.m), np.int8)
        rows64 = box.image_rows(tree, q, np.arange(B), zero)
        for rows, D, I in box.search(tree, q, np.arange(B), rows64, kc + 4, lambda rows, D: kth(D), p, opts):
            R[rows] = kth(D)
            parts.append(_flat(rows, D, I, D <= R[rows, None]))
        # 2. the images within R of the data's box, as balls of radius R; rows with many images
        # are compared with every point
        many = box.image_counts(tree, q, R) * (2 * (kc + 4)) >= n
        few = np.flatnonzero(~many)
        owner, shift = box.images(tree, q[few], R[few], p, itself=False)
        owner = few[owner]
        owner, rows64, kp = box.occupied(tree, owner, box.image_rows(tree, q, owner, shift), R[owner], p, opts)
        for rows, D, I in box.search(tree, q, owner, rows64, kp, lambda rows, D: R[owner[rows]], p, opts):
            parts.append(_flat(rows, D, I, D <= R[rows, None]))
        for rows, D, I in box.brute(tree, q, np.flatnonzero(many), p):
            parts.append(_flat(rows, D, I, D <= R[rows, None]))
        # 3. the k first by (distance, index)
        r, i, d = _merge(parts, by_distance=True)
        rank = np.arange(len(r)) - np.searchsorted(r, r, side="left")
        take = (rank < kc) & (d < ub)
        dist[blk[r[take]], rank[take]] = d[take]
        idx[blk[r[take]], rank[take]] = i[take]
    return dist, idx


def ball(tree, qw, rr, p, opts):
    """Every point within rr[row] (periodic p-distance <= rr) of wrapped rows qw: yields flat
    (rows, indices, distances) in blocks of rows, each (row, index) once, each row in one block,
    ordered by (row, index) within a block."""
    box, n = tree._box, tree.n
    if not n or not len(qw):
        return
    good = np.flatnonzero(_finite_rows(qw) & (rr >= 0))
    step, s = 1024, 0
    while s < len(good):
        blk = good[s:s + step]
        s += len(blk)
        q, r = qw[blk], rr[blk]
        many = box.image_counts(tree, q, r) * 16 >= n
        few = np.flatnonzero(~many)
        owner, shift = box.images(tree, q[few], r[few], p, itself=True)
        owner = few[owner]
        owner, rows64, kp = box.occupied(tree, owner, box.image_rows(tree, q, owner, shift), r[owner], p, opts)
        if np.ndim(kp):
            # a row whose images hold more than n / 16 candidates is compared with every point
            # (the engine's kNN for thousands of neighbours costs more than numpy's n distances)
            heavy = np.bincount(owner, weights=kp, minlength=len(q)) * 16 >= n
            if heavy.any():
                many |= heavy
                light = ~heavy[owner]
                owner, rows64, kp = owner[light], tuple(a[light] for a in rows64), kp[light]
        parts = []
        for rows, D, I in box.search(tree, q, owner, rows64, kp, lambda rows, D: r[owner[rows]], p, opts):
            parts.append(_flat(rows, D, I, D <= r[rows, None]))
        for rows, D, I in box.brute(tree, q, np.flatnonzero(many), p):
            parts.append(_flat(rows, D, I, D <= r[rows, None]))
        rows, i, d = _merge(parts, by_distance=False)
        if len(rows):
            yield blk[rows], i, d
        # the next block holds about _BLOCK candidates, as far as this one tells
        step = int(min(max(64, _BLOCK * len(blk) // max(len(rows), 1)), 1 << 16))




def counts(other, q, radii, opts, stats):
    """Periodic counts by other's kd-tree (p = 2), or None where its counts cannot give them: a
    generator of, for each radius, each row of q's count of other's points within it (the pair
    queries' _radii_totals, query_ball_point's counts). Each row and its images (for the largest
    radius) are counted at the float32 radii hi and lo of _count_radii; a row whose summed counts
    agree has its exact count, the others are counted by the exact periodic ball search. Needs hi
    under half of every periodic size: then no point lies within lo of two images of one row
    (summed lo counts count each point once, so never too many), and images fewer than n / 64 a
    row. stats: whose last_stats."""
    box, nq = other._box, len(q)
    q = box.wrap(q)
    good = np.flatnonzero(_finite_rows(q))
    rmax = np.full(len(good), float(radii.max()))
    if box.image_counts(other, q[good], rmax).sum() * 64 > nq * other.n:
        return None  # (images by the thousand, in many dimensions: comparing with every point is cheaper)
    owner, shift = box.images(other, q[good], rmax, 2.0, itself=True)
    owner = good[owner]
    _, q32, eps_q = box.image_rows(other, q, owner, shift)
    slack = other._eps_x + (float(eps_q.max()) if len(eps_q) else 0.0)
    if not 2 * float(_count_radii(float(radii.max()), slack, other.m)[0]) * (1 + 1e-6) < box.L[box.periodic].min():
        return None

    def each_radius():
        for r in radii.tolist():
            hi, lo = (float(v) for v in _count_radii(r, slack, other.m))
            values = [lo, hi] if lo > 0 else [hi]
            c = np.zeros((len(owner), len(values)), np.int64)
            if len(owner):  # (both radii from one walk)
                stats.last_stats = _stats(other._index.count_radii(q32, len(owner), values, c, opts))
            c_hi, c_lo = c[:, -1], (c[:, 0] if lo > 0 else np.zeros(len(owner), np.int64))
            out = np.bincount(owner, weights=c_lo, minlength=nq).astype(np.int64)
            todo = np.flatnonzero(np.bincount(owner, weights=c_hi - c_lo, minlength=nq) != 0)
            if len(todo):
                out[todo] = 0
                for rows, _, _ in ball(other, q[todo], np.full(len(todo), r), 2.0, opts):
                    out[todo] += np.bincount(rows, minlength=len(todo))
            yield out
    return each_radius()
