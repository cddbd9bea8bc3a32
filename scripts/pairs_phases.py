#!/usr/bin/env python3
"""Where a new tree's query_pairs (build + call) spends its time: the tree's calls into the
module timed by a proxy, median of --repeat (a new tree each time), at 10^6 uniform 3-d points
with a mean of 32 neighbours, float32 and float64.
    python3 scripts/pairs_phases.py [--n 1000000] [--repeat 5]"""
import argparse
import collections
import statistics
import time

import numpy as np

import canopy


class Timed:
    def __init__(self, inner, log):
        self._inner, self._log = inner, log

    def __getattr__(self, name):
        f = getattr(self._inner, name)
        if not callable(f):
            return f

        def call(*a, **kw):
            t0 = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                self._log[name].append((time.perf_counter() - t0) * 1e3)
        return call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    pts = rng.random((a.n, 3))
    r = (32 / a.n / (4 / 3 * np.pi)) ** (1 / 3)
    for dtype in (np.float32, np.float64):
        x = pts.astype(dtype)
        rows = collections.defaultdict(list)
        for i in range(a.repeat + 1):
            log = collections.defaultdict(list)
            t0 = time.perf_counter()
            t = canopy.cKDTree(x)
            t1 = time.perf_counter()
            t._index = Timed(t._index, log)
            out = t.query_pairs(r, output_type="ndarray")
            t2 = time.perf_counter()
            if i == 0:
                continue
            rows["build"].append((t1 - t0) * 1e3)
            rows["query_pairs"].append((t2 - t1) * 1e3)
            rows["build + call"].append((t2 - t0) * 1e3)
            for k, v in log.items():
                rows[f"  _index.{k} (x{len(v)})"].append(sum(v))
            for k, v in vars(t.last_stats).items():
                if k.endswith("_ms") or k == "total":
                    rows[f"  stats.{k}"].append(v)
        print(f"{np.dtype(dtype).name}: {len(out)} pairs")
        for k, v in rows.items():
            print(f"  {k:32s} {statistics.median(v):9.2f}  (min {min(v):.2f})")


if __name__ == "__main__":
    main()
