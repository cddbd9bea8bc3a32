"""scipy's pair queries (query_ball_tree, query_pairs, sparse_distance_matrix, count_neighbors) on
canopy's trees, and the exact ball search (_ball) they and query_ball_point are built on."""
import numpy as np

from . import _periodic
from ._tree_util import (_at, _ball_factor, _count_radii, _extents, _finite_rows, _gc_paused, _joined, _lists,
                         _near_radius, _number, _options, _pair_array, _power_bound, _power_sum, _rel, _stats, _widest,
                         _within)


class _PairQueries:
    """The pair queries; a tree class inherits them."""

    def query_ball_tree(self, other, r, p=2.0, eps=0, **options):
        """For each point i of this tree, the indices of other's points within distance r (a point
        at exactly r counts), as scipy's cKDTree.query_ball_tree: a list of n lists, each sorted.
        Exact in float64 over both trees' data (float32 data: over its float32 values), any
        p >= 1; eps >= 0 is accepted (the answers are exact)."""
        other, r, p = self._pair_args(other, r, p, eps, "query_ball_tree", "r")
        i, j, _ = self._pair_arrays(other, r, p, _options(options), with_d=False)
        return _lists(i, j, self.n)

    def query_pairs(self, r, p=2.0, eps=0, output_type="set", **options):
        """The pairs (i, j), i < j, of this tree's points within distance r of each other, as
        scipy's cKDTree.query_pairs: a set of tuples of ints, or with output_type="ndarray" an
        intp array (n_pairs, 2) ordered by (i, j). Exact as query_ball_tree."""
        if output_type not in ("set", "ndarray"):
            raise ValueError(f"Invalid output type {output_type!r}: 'set' or 'ndarray'")
        _, r, p = self._pair_args(self, r, p, eps, "query_pairs", "r")
        i, j, _ = self._pair_arrays(self, r, p, _options(options), upper=True, with_d=False)
        if output_type == "ndarray":
            return _pair_array(i, j)
        with _gc_paused():
            return set(zip(i.tolist(), j.tolist()))

    def sparse_distance_matrix(self, other, max_distance, p=2.0, output_type="dok_matrix", **options):
        """The distances d(i, j) <= max_distance between this tree's points i and other's points
        j, as scipy's cKDTree.sparse_distance_matrix: a scipy.sparse dok_matrix or coo_matrix (or,
        where the installed scipy has them, dok_array or coo_array: newer scipy's) of shape
        (n, other.n) (float64; a distance 0 is stored, as scipy stores it), a dict {(i, j):
        d}, or a structured ndarray with fields i, j (intp) and v (float64); ordered by (i, j).
        Exact as query_ball_tree: the distances are scipy's float64 p-distances."""
        kinds = ("dok_matrix", "coo_matrix", "dok_array", "coo_array", "dict", "ndarray")
        if output_type not in kinds:
            raise ValueError(f"Invalid output type {output_type!r}: one of {', '.join(kinds)}")
        other, r, p = self._pair_args(other, max_distance, p, 0, "sparse_distance_matrix", "max_distance")
        i, j, d = self._pair_arrays(other, r, p, _options(options))
        if output_type == "dict":
            with _gc_paused():
                return dict(zip(zip(i.tolist(), j.tolist()), d.tolist()))
        if output_type == "ndarray":
            out = np.empty(len(i), dtype=np.dtype([("i", np.intp), ("j", np.intp), ("v", np.float64)], align=True))
            out["i"], out["j"], out["v"] = i, j, d
            return out
        import scipy.sparse  # (scipy's own containers: only these outputs need scipy)
        kind = getattr(scipy.sparse, "coo_array" if output_type.endswith("_array") else "coo_matrix", None)
        if kind is None:
            raise ValueError(f"output_type {output_type!r}: this scipy ({scipy.__version__}) has no {output_type}")
        coo = kind((d, (i, j)), shape=(self.n, other.n))
        return coo if output_type.startswith("coo") else coo.todok()

    def count_neighbors(self, other, r, p=2.0, weights=None, cumulative=True, **options):
        """The two-point correlation, as scipy's cKDTree.count_neighbors: the number of pairs
        (x1 of this tree, x2 of other) with distance(x1, x2) <= r, for r one number (an int) or a
        1-d array (an int array, one count per r, in r's order). weights: None, one array (self's
        and other's: other must be this tree), or a tuple (self's, other's) where either may be
        None; weighted counts sum w1[i] * w2[j] and are float64. cumulative=False: r are bin
        edges (non-decreasing) and result[i] counts the pairs with r[i-1] < distance <= r[i]
        (distance <= r[0] for i = 0). Exact as query_ball_tree: the pairs are counted from their
        float64 distances (radii at least the largest possible distance count every pair without
        a search). r must be >= 0 (scipy answers a negative r as |r| for even p)."""
        other = self._pair_args(other, 0.0, p, 0, "count_neighbors", "r")[0]
        p = _number(p, "p", 1.0)
        if np.ndim(r) > 1:
            raise ValueError("r must be either a single value or a one-dimensional array of values")
        try:
            rs = np.array(r, dtype=np.float64, ndmin=1)
        except (TypeError, ValueError):
            raise TypeError(f"r = {r!r}: a number or a 1-d array of numbers is needed") from None
        if not (rs >= 0).all():
            raise ValueError("r: radii must be >= 0 (NaN is not a radius)")
        if not cumulative and (rs[:-1] > rs[1:]).any():
            raise ValueError("r must be non-decreasing for non-cumulative counting.")
        w1, w2 = self._pair_weights(other, weights)
        weighted = w1 is not None or w2 is not None
        u, first, inverse = np.unique(rs, return_index=True, return_inverse=True)
        bins = np.zeros(len(u), np.float64 if weighted else np.int64)  # bin k: u[k-1] < d <= u[k]
        # Every pair is within a radius >= bound, an upper bound of any pair's float64 p-distance
        # (the boxes' widest extent, with a margin for rounding): those radii are counted from n.
        bound = np.nan
        if self._n_eng and other._n_eng:
            bound = _widest(self._lo, self._hi, other._lo, other._hi, p, self._box)
        searched = u[~(u >= bound)] if np.isfinite(bound) else u
        opts = _options(options)
        totals = None  # the (weighted) pairs within each searched radius
        # (kd-tree counts at two radii per r, all from one walk: faster than binning the pairs'
        # float64 distances from lists at the largest r, on the CPU too)
        if len(searched) and p == 2 and w2 is None and other._kind == "kd" and other._index is not None:
            if other._box is None:
                totals = self._radii_totals(other, searched, opts, w1)
            else:
                counter = _periodic.counts(other, other._rows(self.data, keep64=self.data.dtype != np.float32)[0],
                                           searched, opts, self)
                if counter is not None:
                    totals = [c.sum() if w1 is None else c @ w1 for c in counter]
        if totals is not None:
            bins[:len(searched)] = np.diff(np.asarray(totals, bins.dtype), prepend=0)
        elif len(searched):
            for i, j, d in self._pairs(other, float(searched[-1]), p, opts):
                wij = None
                if weighted:
                    wij = (w1[i] if w1 is not None else 1.0) * (w2[j] if w2 is not None else 1.0)
                bins[:len(searched)] += np.bincount(self._bin_of(other, searched, p, i, j, d), weights=wij,
                                                    minlength=len(searched))
        if len(searched) < len(u):
            total = self._total(w1) * other._total(w2)
            bins[len(searched)] = total - bins[:len(searched)].sum()
        if cumulative:
            out = np.cumsum(bins)[inverse]
        else:
            is_first = np.zeros(len(rs), bool)
            is_first[first] = True
            out = np.where(is_first, bins[inverse], 0).astype(bins.dtype)
        if not weighted:
            out = out.astype(np.intp, copy=False)
        if np.ndim(r) == 0:
            return np.float64(out[0]) if weighted else int(out[0])
        return out

    def _bin_of(self, other, radii, p, i, j, d):
        """Each pair's bin: the first of the ascending radii it is within, as scipy decides it
        (the p-th power sum against r ** p: _within); the power sums are computed for the pairs
        within rounding of a radius only. (Periodic boxes: by the distances alone.)"""
        b = np.searchsorted(radii, d)
        if p == 1 or np.isinf(p) or self._box is not None or not len(d):
            return b
        near = _near_radius(d, radii[np.minimum(b, len(radii) - 1)])  # (the bin's radius, or the one before)
        near |= (b > 0) & _near_radius(d, radii[np.maximum(b - 1, 0)])
        if near.any():
            s = _power_sum(other._gather(j[near]) - self._gather(i[near]), p)
            b[near] = np.searchsorted(_power_bound(np.asarray(radii, np.float64), p), s)
        return b

    def _total(self, w):
        """The number (or the weight, w) of this tree's points that pairs can hold: those without
        a NaN coordinate."""
        if w is None:
            return self._n_eng
        return w.sum() if self._keep is None else w[self._keep].sum()

    def _ball(self, q, q32, eps_q, rr, p, opts):
        """The exact ball search behind query_ball_point and the pair queries: for chunks of the
        rows of q (as _rows gives them) yields (rows, D, I, inside), _search's candidates with the
        mask of those within rr[row] (the p-th power sum against rr ** p, as scipy: _within; every
        such point is among them). Each row comes once."""
        kp = self._start_k(q32, rr, p, opts)
        for rows, D, I in self._search(q, q32, eps_q, p, kp, lambda rows, D: rr[rows], opts):
            yield rows, D, I, _within(D, rr[rows, None], p, lambda near: self._row_diffs(q, rows, I, near))

    def _start_k(self, q32, rr, p, opts):
        """A first guess at each row's candidate count: the kd-tree's float32 count within the
        largest radius (widened past any rounding), else 16. Only a guess: _search checks."""
        if self._kind != "kd" or self._index is None or not rr.size or not np.isfinite(rr).all():
            return 16
        rho = float(rr.max()) * _ball_factor(self.m, p) * (1 + 2 * _rel(self.m)) + 2 * self._eps_x + 1e-30
        finite = _finite_rows(q32)
        if rho > 1e38 or not finite.any():
            return 16
        rows = np.ascontiguousarray(q32 if finite.all() else q32[finite])  # (every row finite: no gather)
        counts = np.empty(len(rows), np.int64)
        self.last_stats = _stats(self._index.count(rows, len(rows), rho, counts, opts))
        kp = np.full(len(q32), 16, np.int64)
        kp[finite] = counts + 1
        return kp

    def _pair_args(self, other, r, p, eps, call, rname):
        """other, r and p of a pair query, checked as scipy checks them (a TypeError for an other
        that is not a tree, a ValueError for trees of different dimensions)."""
        if not isinstance(other, _PairQueries):
            raise TypeError(f"{call}: other is a {type(other).__name__}; a canopy tree is needed "
                            "(cKDTree, KDTree, BallTree or VPTree)")
        if other.m != self.m:
            raise ValueError(f"Trees passed to {call} have different dimensionality ({self.m} and {other.m})")
        if not (self._host and other._host):
            raise ValueError(f"{call}: trees over CUDA arrays answer query and query_ball_point counts only; "
                             "build both trees from numpy arrays for pair queries")
        L1, L2 = (t._box.L if t._box is not None else np.zeros(t.m) for t in (self, other))
        if not np.array_equal(L1, L2):
            raise ValueError(f"{call}: the trees have different periodic boxes (boxsize {self.boxsize} and "
                             f"{other.boxsize}); pair queries need the same box")
        _number(eps, "eps")
        return other, _number(r, rname), _number(p, "p", 1.0)

    def _pair_weights(self, other, weights):
        """scipy's weights of count_neighbors as (self's, other's) float64 arrays or None."""
        if weights is None:
            return None, None
        if isinstance(weights, tuple):
            if len(weights) != 2:
                raise ValueError(f"weights: a tuple of {len(weights)}; (self's, other's) is needed")
            w1, w2 = weights
        else:
            if other is not self:
                raise ValueError("Two different trees are used. Specify weights for both in a tuple.")
            w1 = w2 = weights

        def check(w, tree):
            if w is None:
                return None
            try:
                w = np.asarray(w, dtype=np.float64)
            except (TypeError, ValueError):
                raise TypeError("weights: numbers are needed") from None
            if w.shape != (tree.n,):
                raise ValueError(f"Number of weights differ from the number of data points "
                                 f"({w.shape[0] if w.ndim else 0} weights, {tree.n} points)")
            return w
        return check(w1, self), check(w2, other)

    def _radii_totals(self, other, radii, opts, w=None):
        """For each radius, the pairs (i of self, j of other) within it (float64 2-norm), exact, or
        their weights w[i] summed, from other's kd-tree counts in float32. A pair at float64
        distance D has engine distance d~ (float32 coordinates) with |d~^2 - d^2| <= _rel(m) d^2 +
        1e-36 (m + 2 roundings of size 2^-24 at most, doubled) and |d - D| <= eps_x + eps_q + D
        1e-12 (_search's bounds, and float64's own rounding): counting at a radius hi past r + that
        slack counts a superset of the points within r, at a radius lo short of r - slack a subset;
        where a row's two counts agree they are its answer, and the rows where they differ (points
        within rounding of r) are counted by the exact ball search (_ball_flat). Radii go in
        batches of one walk (run_radii: all their counts, at most 32 radii and 2^24 counts), each
        batch's uncertain rows in one exact search at its largest radius: on the GPU a search is a
        few engine calls of fixed cost (H200, 10^6 points, 8 radii: 7 searches took 0.2 of the
        call's 0.37 s), and the rows' sums are the columns' (not a row array per radius)."""
        q, q32, eps_q, _, _ = other._rows(self.data, keep64=self.data.dtype != np.float32)
        finite = _finite_rows(q32)
        rows, bad = np.flatnonzero(finite), np.flatnonzero(~finite)
        sub = np.ascontiguousarray(_at(q32, rows))
        slack = other._eps_x + (float(eps_q[rows].max()) if len(rows) else 0.0)
        w = None if w is None else np.asarray(w, np.float64)
        radii = radii.tolist()
        per_walk = max(2, min(32, (1 << 24) // max(1, len(rows))))
        totals, done = [], 0
        while done < len(radii):
            batch = radii[done:done + per_walk // 2]
            done += len(batch)
            brackets = [tuple(float(v) for v in _count_radii(r, slack, self.m)) for r in batch]
            values = sorted({v for hi, lo in brackets if np.isfinite(hi) for v in (hi, lo) if v == hi or v > 0})
            col = {v: j for j, v in enumerate(values)}
            pairs = [(col[hi], col[lo] if lo > 0 else None) for hi, lo in brackets if np.isfinite(hi)]
            sums, differ, count_at = self._walk_counts(other, sub, values, pairs, opts, w, rows)
            differ = iter(differ)
            plan = []  # per radius: (its total so far, the column of its lo count or None, its uncertain rows)
            for hi, lo in brackets:
                if not np.isfinite(hi):
                    plan.append((0, None, np.arange(self.n)))
                    continue
                low = col[lo] if lo > 0 else None
                plan.append((sums[low] if low is not None else 0, low, np.concatenate([rows[next(differ)], bad])))
            union = np.unique(np.concatenate([t for _, _, t in plan]))
            pair_rows, pair_j, pair_d = np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
            if len(union):  # (one radius-list call, and the float64 check: _ball_flat)
                found = list(other._ball_flat(q[union], q32[union], eps_q[union], np.full(len(union), batch[-1]), 2.0,
                                              opts))
                if found:
                    pair_rows = np.concatenate([c[0] for c in found])
                    pair_j = np.concatenate([c[1] for c in found])
                    pair_d = np.concatenate([c[2] for c in found])

            def diff_of(near):  # (the pairs within rounding of a radius: their coordinates)
                return other._gather(pair_j[near]) - q[union[pair_rows[near]]]
            for r, (total, low, todo) in zip(batch, plan):
                if len(todo):
                    inside = _within(pair_d, r, 2.0, diff_of)
                    exact = np.bincount(pair_rows[inside], minlength=len(union))[np.searchsorted(union, todo)]
                    at = np.searchsorted(rows, todo)  # a finite row's place in counts (bad rows: none)
                    known = np.zeros(len(todo), np.int64)
                    if low is not None:
                        ok = finite[todo]
                        known[ok] = count_at(at[ok], low)
                    total = total + ((exact - known).sum() if w is None else (exact - known) @ w[todo])
                totals.append(total)
        return totals

    def _walk_counts(self, other, sub, values, pairs, opts, w, rows):
        """One walk of other's kd-tree counting sub's rows at the float32 radii values: (the
        counts' column sums (w[rows]-weighted when w is given), for each (h, l) of pairs the
        positions in sub of the rows whose counts at values[h] and values[l] differ (l None: whose
        count at values[h] is not 0), count_at(positions, column): those rows' counts). Unweighted
        sums come from run_radii_totals: on the GPU the counts stay there (10^6 rows at 16 radii:
        128 MB, whose copy and scan took 0.1 s of a count_neighbors call on the H200)."""
        n, m = len(sub), max(1, len(values))
        if not n or not values:
            return np.zeros(m, np.int64 if w is None else np.float64), [np.empty(0, np.intp) for _ in pairs], None
        if w is None:
            raw = other._index.count_radii_totals(sub, n, values, [(h, -1 if l is None else l) for h, l in pairs], opts)
            sums, flagged = np.frombuffer(raw[0], np.int64), np.frombuffer(raw[1], np.int64)
            flags, flagged_counts = np.frombuffer(raw[2], np.uint32), np.frombuffer(raw[3], np.int64).reshape(-1, m)
            self.last_stats = _stats(raw[4])
            differ = [flagged[(flags >> np.uint32(c)) & 1 != 0] for c in range(len(pairs))]
            return sums, differ, lambda at, c: flagged_counts[np.searchsorted(flagged, at), c]
        counts = np.zeros((n, m), np.int64)
        self.last_stats = _stats(other._index.count_radii(sub, n, values, counts, opts))
        differ = _scan_counts(counts, pairs)[1]
        return w[rows] @ counts, differ, lambda at, c: counts[at, c]

    def _pairs(self, other, r, p, opts, upper=False, tag=False, with_d=True):
        """Every pair (i of self, j of other) at float64 p-distance <= r, each once, in chunks
        (i, j, d): other's exact ball search (_ball_flat: periodic across a box, tag as there) with
        self's points as its queries (float64 points are kept unrounded, float32 points are exact).
        Memory: one chunk of candidates. upper: pairs with j <= i may be left out (query_pairs)."""
        q, q32, eps_q, _, _ = other._rows(self.data, keep64=self.data.dtype != np.float32)
        yield from other._ball_flat(q, q32, eps_q, np.broadcast_to(float(r), (len(q),)), p, opts, upper, tag, with_d)

    def _pair_arrays(self, other, r, p, opts, upper=False, with_d=True):
        """The pairs of _pairs as arrays (i, j, d) ordered by (i, j) (d None unless with_d); upper:
        only i < j."""
        return _joined(self._pairs(other, r, p, opts, upper, tag=True, with_d=with_d), other.n, with_d, upper)

    def _listed_counts(self, q, q32, eps_q, rr, p, opts):
        """Each row's count within float64 p-distance rr[row]: its exact ball search's pairs counted."""
        counts = np.zeros(len(q), np.int64)
        for rows, c in self._ball_flat(q, q32, eps_q, rr, p, opts, with_d=False, count_only=True):
            counts[rows] += c
        return counts

    def _exact_counts(self, q, q32, eps_q, r, opts):
        """Each row's count within float64 2-norm r, as _radii_totals counts: the kd-tree's float32
        counts at radii past and short of r by every rounding (_count_radii), both from one walk,
        are the answer where they agree; the rows where they differ (a point within rounding of
        r) and the non-finite rows go to the exact ball search. (Listing every pair to count it
        brought 3 x 10^7 pairs to the host for 10^6 rows at a mean of 33.)"""
        finite = _finite_rows(q32)
        rows = np.flatnonzero(finite)
        slack = self._eps_x + (float(_at(eps_q, rows).max()) if len(rows) else 0.0)
        hi, lo = (float(v) for v in _count_radii(r, slack, self.m))
        counts = np.zeros(len(q), np.int64)
        todo = np.flatnonzero(~finite)
        if len(rows) and self._n_eng:
            # r at least the widest distance between the rows' box and the tree's: every finite
            # row counts every point, without a walk
            if r >= _widest(*_extents(_at(q, rows)), self._lo, self._hi, 2):
                counts[rows] = self._n_eng
                rows = rows[:0]
        if len(rows) and not np.isfinite(hi):  # (r past float32's range: every row exactly)
            todo = np.arange(len(q))
        elif len(rows):
            values = [lo, hi] if lo > 0 else [hi]
            sub = np.ascontiguousarray(_at(q32, rows))
            c = np.zeros((len(rows), len(values)), np.int64)
            self.last_stats = _stats(self._index.count_radii(sub, len(rows), values, c, opts))
            counts[rows if len(rows) < len(q) else slice(None)] = c[:, -1]  # (a fancy index: 7 ms at 10^6)
            differ = ~finite  # (a mask: np.union1d hashes, 0.5 s over 10^6 rows)
            differ[rows[c[:, -1] != (c[:, 0] if lo > 0 else 0)]] = True
            todo = np.flatnonzero(differ)
        if len(todo):
            counts[todo] = self._listed_counts(q[todo], q32[todo], eps_q[todo], np.full(len(todo), r), 2.0, opts)
        return counts


def _scan_counts(counts, pairs, block=1 << 13):
    """counts' column sums and, for each (h, l) of pairs, the rows where counts[:, h] !=
    counts[:, l] (l None: != 0): one pass over blocks of rows, each block (its rows' counts
    share cache lines) serving the sums and every pair, instead of a pass over the whole array
    (10^6 rows, 16 columns: 128 MB) for the sums and a strided one per pair."""
    sums = np.zeros(counts.shape[1], np.int64)
    found = [[] for _ in pairs]
    for b0 in range(0, len(counts), block):
        cb = counts[b0:b0 + block]
        sums += cb.sum(axis=0)
        for out, (h, l) in zip(found, pairs):
            nz = np.flatnonzero(cb[:, h] != (cb[:, l] if l is not None else 0))
            if len(nz):
                out.append(nz + b0)
    return sums, [np.concatenate(f) if f else np.empty(0, np.intp) for f in found]
