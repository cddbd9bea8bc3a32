#!/usr/bin/env python3
"""The baselines of `canopy-bench e2e`: scipy's cKDTree (build + query on every host core) and
cupyx's KDTree (build + query on the GPU, the points already in device memory), on the same
kind of input, the points querying themselves: pc counts the points within --radius, knn finds
the 8 nearest. Prints one markdown row per library (median of --repeat calls after a warm-up).

  e2e_baselines.py --generate uniform:1000000:3 --workload pc --radius 0.0197
  e2e_baselines.py --points covtype_points_254k.csv.gz --columns 0-6 --workload knn
"""
import argparse

import numpy as np

from bench_timing import timed  # scripts/ is on sys.path when a script here runs


def load(args):
    if args.points:
        import pandas as pd
        frame = pd.read_csv(args.points)
        cols = list(range(frame.shape[1]))
        if args.columns:
            cols = []
            for part in args.columns.split(","):
                lo, _, hi = part.partition("-")
                cols += list(range(int(lo), int(hi or lo) + 1))
        pts = frame.iloc[:, cols].to_numpy(dtype=np.float32)
        lo, hi = pts.min(axis=0), pts.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1)
        return ((pts - lo) / span).astype(np.float32)
    kind, n, dims = args.generate.split(":")
    if kind != "uniform":
        raise SystemExit("--generate: uniform:N:D only")
    return np.random.default_rng(args.seed).random((int(n), int(dims)), dtype=np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points")
    ap.add_argument("--columns", default="")
    ap.add_argument("--generate", default="uniform:1000000:3")
    ap.add_argument("--workload", choices=["pc", "knn"], default="pc")
    ap.add_argument("--radius", type=float, default=0.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--libraries", default="scipy,cupyx")
    args = ap.parse_args()
    pts = load(args)
    print(f"{args.workload}: {pts.shape[0]} points, {pts.shape[1]}-d")

    for lib in args.libraries.split(","):
        if lib == "scipy":
            from scipy.spatial import cKDTree

            def call():
                tree = cKDTree(pts)
                if args.workload == "pc":
                    return tree.query_ball_point(pts, args.radius, return_length=True, workers=-1)
                return tree.query(pts, k=8, workers=-1)
        elif lib == "cupyx":
            import cupy as cp
            from cupyx.scipy.spatial import KDTree
            pts_d = cp.asarray(pts)

            def call():
                tree = KDTree(pts_d)
                if args.workload == "pc":
                    out = tree.query_ball_point(pts_d, args.radius, return_length=True)
                else:
                    out = tree.query(pts_d, k=8)
                cp.cuda.Device().synchronize()
                return out
        else:
            raise SystemExit(f"unknown library {lib}")
        try:
            print(f"| {lib} | {timed(call, args.repeat):.1f} ms |", flush=True)
        except Exception as e:  # cupy's OutOfMemoryError: say so and go on
            if not (isinstance(e, MemoryError) or "OutOfMemory" in type(e).__name__):
                raise
            print(f"| {lib} | out of memory: {e} |", flush=True)


if __name__ == "__main__":
    main()
