#!/usr/bin/env python3
"""Markdown tables from the JSON files of `canopy-bench forest-study --json` (one per model):

    python3 scripts/forest_study_table.py results/study_*.json
    python3 scripts/forest_study_table.py --runs run1/study_*.json run2/study_*.json ...

Prints: rows per second per strategy and batch (with nvForest's published H100 numbers where
the issue gives them), the performance model's choice against the measured order, the gain of
each technique alone, and row scheduling per strategy. With --runs (several independent runs of
the same models): auto's median over the runs, the tuner's best, auto / tuned in every run and
auto against nvForest. Standard library only.
"""
import json
import math
import sys

# nvForest (the current FIL) on the H100, best of its layouts and chunk sizes, data on the
# device (the forest issue's numbers), by model file stem.
FIL = {
    "covtype_xgb_bin_d8": {100: 7.8e6, 10000: 1.2e8, 1000000: 1.7e8},
    "higgs_xgb_d6": {100: 6.2e6, 10000: 7.9e7, 1000000: 1.05e8},
    "covtype_rf_d12": {100: 8.5e6, 10000: 2.5e8, 1000000: 3.8e8},
}
STRATEGIES = ["direct", "shared-data", "shared-forest", "split-shared-forest"]


def stem(path):
    return path.rsplit("/", 1)[-1].split(".")[0]


def rate(v):
    if v is None:
        return "-"
    if v >= 1e8:
        return f"{v / 1e6:.0f} M"
    if v >= 1e6:
        return f"{v / 1e6:.1f} M"
    return f"{v / 1e6:.2f} M"


def main(paths):
    studies = [json.load(open(p)) for p in paths]
    names = [stem(s["model"]) for s in studies]

    print("### Rows per second (GPU time, rows on the device)\n")
    print("| model | batch | csr direct | direct | shared data | shared forest | split shared forest | auto (choice) | tuned | nvForest |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, s in zip(names, studies):
        for b in s["batches"]:
            v = {x["variant"]: x for x in b["strategies"]}
            cells = [rate(v["csr direct"]["rows_per_s"])]
            for k in STRATEGIES:
                cells.append(rate(v[k]["rows_per_s"]) if k in v else "n/a")
            a = v["auto"]
            cells.append(f"{rate(a['rows_per_s'])} ({a['kernel']})")
            cells.append(rate(v["tuned"]["rows_per_s"]))
            fil = FIL.get(name, {}).get(b["batch"])
            cells.append(rate(fil) if fil else "-")
            print(f"| {name} | {b['batch']:,} | " + " | ".join(cells) + " |")

    print("\n### The performance model\n")
    print("| model | batch | auto / best strategy | auto / tuned | Canopy's model order | paper's equations' order | measured order |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- |")
    within, within_tuned, cases, gains = 0, 0, 0, []
    for name, s in zip(names, studies):
        for b in s["batches"]:
            r = b["auto_over_best"]
            cases += 1
            within += r <= 1.10
            rt = b.get("auto_over_tuned")  # older files lack it
            within_tuned += rt is not None and rt <= 1.10
            if b["batch"] == 1000000:
                gains.append(b["auto_speedup_over_csr_direct"])
            tuned = "-" if rt is None else f"{rt:.3f}{'' if rt <= 1.10 else ' ✗'}"
            print(f"| {name} | {b['batch']:,} | {r:.3f}{'' if r <= 1.10 else ' ✗'} | {tuned} | {b['model_order']} | "
                  f"{b['paper_order']} | {b['measured_order']} |")
    print(f"\nauto within 10% of the best strategy in {within} of {cases} cases, of tuned in {within_tuned}; "
          f"auto over csr direct at 1,000,000 rows: {', '.join(f'{g:.2f}x' for g in gains)}, "
          f"geometric mean {math.exp(sum(math.log(g) for g in gains) / max(len(gains), 1)):.2f}x\n")

    print("### Each technique alone (gain over shared data on the format without rearrangement)\n")
    techniques = [t["variant"] for t in studies[0]["batches"][0]["techniques"]][1:]
    print("| model | batch | " + " | ".join(techniques) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in techniques) + " |")
    for name, s in zip(names, studies):
        for b in s["batches"]:
            g = {t["variant"]: t["gain"] for t in b["techniques"]}
            print(f"| {name} | {b['batch']:,} | " + " | ".join(f"{g[t]:.2f}x" for t in techniques) + " |")

    print("\n### Row scheduling (inspector + sort + gather included in the time)\n")
    print("| model | batch | nodes per warp, input order | scheduled | " +
          " | ".join(f"{k} without / with" for k in STRATEGIES) + " |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---" for _ in STRATEGIES) + " |")
    for name, s in zip(names, studies):
        for b in s["batches"]:
            rs = b["row_scheduling"]
            per = {x["strategy"]: x for x in rs["per_strategy"]}
            cells = []
            for k in STRATEGIES:
                x = per.get(k)
                cells.append(f"{x['ms_without']:.3f} / {x['ms_with']:.3f} ms" if x else "n/a")
            print(f"| {name} | {b['batch']:,} | {rs['nodes_per_warp_without']:.0f} | {rs['nodes_per_warp_with']:.0f} | " +
                  " | ".join(cells) + " |")

    print("\n### Tree rearrangement\n")
    print("| model | SimHash + LSH + order | CV of per-thread depth sums, model order | rearranged | adaptive layout |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, s in zip(names, studies):
        a = s["adaptive"]
        print(f"| {name} | {a['similarity_ms']:.1f} ms | {a['cv_model_order']:.4f} | {a['cv_rearranged']:.4f} | "
              f"{a['footprint_bytes'] / 2**20:.2f} MiB ({a['details']}; csr {a['csr_footprint_bytes'] / 2**20:.2f} MiB) |")


def runs_table(paths):
    by_model = {}
    for p in paths:
        s = json.load(open(p))
        by_model.setdefault(stem(s["model"]), []).append(s)
    print("| model | batch | auto, median of runs (its pick) | tuned, median | auto / tuned, each run | nvForest | auto / nvForest |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: |")
    within = total = 0
    for name in sorted(by_model):
        studies = by_model[name]
        for i, b in enumerate(studies[0]["batches"]):
            autos, tuned, ratios = [], [], []
            for s in studies:
                v = {x["variant"]: x for x in s["batches"][i]["strategies"]}
                autos.append((v["auto"]["rows_per_s"], v["auto"]["kernel"]))
                tuned.append(v["tuned"]["rows_per_s"])
                ratios.append(v["tuned"]["rows_per_s"] / v["auto"]["rows_per_s"])
            total += len(ratios)
            within += sum(r <= 1.10 for r in ratios)
            med = sorted(autos)[len(autos) // 2]
            fil = FIL.get(name, {}).get(b["batch"])
            print(f"| {name} | {b['batch']:,} | {rate(med[0])} ({med[1]}) | {rate(sorted(tuned)[len(tuned) // 2])} | "
                  + " / ".join(f"{r:.3f}" for r in ratios)
                  + f" | {rate(fil) if fil else '-'} | {f'{med[0] / fil:.2f}x' if fil else '-'} |")
    print(f"\nauto within 10% of tuned (tuned / auto <= 1.10) in {within} of {total} cases")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--runs":
        runs_table(sys.argv[2:])
    else:
        main(sys.argv[1:])
