#!/usr/bin/python3
"""Compares the base_*.json and new_*.json files of scripts/gpu-compare.sh: per case and variant,
the total and execute times (new / base) and whether the checksums agree; for forest-study
files, each batch's variants' times and whether both runs' predictions equal csr direct's.
    scripts/compare_bench.py DIR"""
import glob
import json
import os
import sys

folder = sys.argv[1] if len(sys.argv) > 1 else "."
worst = 0.0
for base_path in sorted(glob.glob(os.path.join(folder, "base_*.json"))):
    case = os.path.basename(base_path)[len("base_"):-len(".json")]
    base = json.load(open(base_path))
    new = json.load(open(os.path.join(folder, "new_" + case + ".json")))
    print(case)
    if "batches" in base:  # forest-study: per batch and variant, the time and bit-identity to csr direct
        for bb, nb in zip(base["batches"], new["batches"]):
            for b, n in zip(bb["strategies"], nb["strategies"]):
                assert b["variant"] == n["variant"], (b["variant"], n["variant"])
                ratio = n["ms"] / b["ms"]
                worst = max(worst, abs(ratio - 1))
                same = "identical" if b.get("identical", True) and n.get("identical", True) else "NOT IDENTICAL"
                print(f"  {bb['batch']:>8} {b['variant']:22s} {b['ms']:9.4f} -> {n['ms']:9.4f} ms ({ratio:.3f}), {same}")
        continue
    for b, n in zip(base["variants"], new["variants"]):
        assert b["name"] == n["name"], (b["name"], n["name"])
        ratio = n["total_ms"] / b["total_ms"]
        worst = max(worst, abs(ratio - 1))
        same = "same" if b["checksum"] == n["checksum"] else "DIFFERENT"
        print(f"  {b['name']:22s} total {b['total_ms']:9.3f} -> {n['total_ms']:9.3f} ms ({ratio:.3f}), "
              f"execute {n['execute_ms'] / b['execute_ms']:.3f}, checksum {same}")
print(f"largest change of a total: {100 * worst:.1f}%")
