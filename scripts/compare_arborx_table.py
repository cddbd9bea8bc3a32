#!/usr/bin/env python3
"""The table of scripts/compare-arborx.sh: Canopy's default call beside ArborX, per size.

Canopy: canopy-bench's JSON (build = the median wall time of its builds from host points; query
= the auto variant's inspect + schedule + execute, median of the repeats; radius lists without
their copy to the host, sorted per query). ArborX: arborx-bench's JSON (build = the points'
upload + the BVH's construction, median; query = the fenced query, median; lists unsorted).
Both in device memory; a first build, which loads the build's kernels, is in the JSON.
"""
import glob
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def auto_row(j):
    rows = [v for v in j["variants"] if v["name"] == "auto"]
    if not rows:
        raise SystemExit(f"compare_arborx_table: no auto variant in {j.get('source')}")
    return rows[0]


def main(out):
    sizes = sorted({int(os.path.basename(p).split("-")[1].split(".")[0]) for p in glob.glob(f"{out}/arborx-*.json")})
    if not sizes:
        raise SystemExit(f"compare_arborx_table: no arborx-*.json in {out}")
    print("| N | query | Canopy build + query (ms) | Canopy total | ArborX build + query (ms) | ArborX total "
          "| ArborX / Canopy | checks |")
    print("| ---: | --- | --- | ---: | --- | ---: | ---: | --- |")
    for n in sizes:
        ax = load(f"{out}/arborx-{n}.json")
        upload = ax["upload_ms"]
        for row in ax["rows"]:
            if row["query"] == "knn":
                c = load(f"{out}/canopy-knn-{n}-{row['k']}.json")
                name = f"kNN k = {row['k']}"
                check = (f"both equal brute force on {c['brute_force_checked']} / {row['checked']} sampled queries"
                         if row["wrong"] == 0 else f"ArborX: {row['wrong']} of {row['checked']} wrong")
            else:
                lists = row["query"] == "radius_lists"
                c = load(f"{out}/canopy-{'pcl' if lists else 'pc'}-{n}.json")
                name = f"radius {'lists' if lists else 'counts'}, r = {row['radius']:.6g}"
                pairs = auto_row(c)["checksum"]
                check = f"pairs: Canopy {pairs:,}, ArborX {row['pairs']:,}"
            a = auto_row(c)
            c_build, c_query = c["build_ms"], a["total_ms"]
            if row["query"] == "radius_lists":  # as ArborX's: the lists left in device memory
                c_query -= c["list_phases_ms"]["copy"]
            x_build, x_query = upload + row["build_ms"], row["query_ms"]
            print(f"| {n:,} | {name} | {c_build:.1f} + {c_query:.1f} | {c_build + c_query:.1f} | "
                  f"{x_build:.1f} + {x_query:.1f} | {x_build + x_query:.1f} | "
                  f"{(x_build + x_query) / (c_build + c_query):.2f}× | {check} |")
    print(f"\n{ax['library']}, Kokkos {ax['kokkos']}; {ax['repeat']} runs each (median).")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build-arborx/results")
