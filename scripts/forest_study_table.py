#!/usr/bin/env python3
"""Markdown tables from the JSON files of `canopy-bench forest-study --json` (one per model):

    python3 scripts/forest_study_table.py results/study_*.json
    python3 scripts/forest_study_table.py --runs run1/study_*.json run2/study_*.json ...
    python3 scripts/forest_study_table.py --serve results/serve_*.json

Prints: rows per second per strategy and batch, the default call (ForestPredictor(forest) with
every option left alone) and auto beside the tuner's best and nvForest's published H100
numbers where the issue gives them, the performance model's choice against the measured order,
the gain of each technique alone, and row scheduling per strategy. With --runs (several
independent runs of the same models): the default's and auto's medians over the runs, the
tuner's best, default / tuned and auto / tuned in every run, and both against nvForest. Ratios
named "x / tuned" are times (<= 1.10: within 10% of the tuner's best); "x / nvForest" are rows
per second (> 1: faster than nvForest). Files written before the default row existed show "-".
With --serve (`canopy-bench forest-serve --json`, one file per phase or per run): each phase's
latency percentiles per batch-size decade and its first calls. Standard library only.
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


def dur(ms):
    """A duration given in milliseconds: µs below one millisecond."""
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.2f} ms"


def ratio(r, limit=None):
    """A time ratio, marked when over the limit."""
    return f"{r:.3f}" + (" ✗" if limit is not None and r > limit else "")


def study_batches(names, studies):
    """(model name, batch) over every study's batches, in order: each table's rows."""
    for name, s in zip(names, studies):
        for b in s["batches"]:
            yield name, b


def by_variant(batch):
    """A batch's strategy rows by variant name."""
    return {x["variant"]: x for x in batch["strategies"]}


def main(paths):
    studies = [json.load(open(p)) for p in paths]
    names = [stem(s["model"]) for s in studies]

    print("### Rows per second (GPU time, rows on the device)\n")
    print("| model | batch | csr direct | direct | shared data | shared forest | split shared forest | default (choice) | "
          "auto (choice) | tuned | nvForest | default / tuned | default / nvForest |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, b in study_batches(names, studies):
        v = by_variant(b)
        cells = [rate(v["csr direct"]["rows_per_s"])]
        for k in STRATEGIES:
            cells.append(rate(v[k]["rows_per_s"]) if k in v else "n/a")
        d = v.get("default")
        cells.append(f"{rate(d['rows_per_s'])} ({d['kernel']})" if d else "-")
        a = v["auto"]
        cells.append(f"{rate(a['rows_per_s'])} ({a['kernel']})")
        cells.append(rate(v["tuned"]["rows_per_s"]))
        fil = FIL.get(name, {}).get(b["batch"])
        cells.append(rate(fil) if fil else "-")
        cells.append(ratio(v["tuned"]["rows_per_s"] / d["rows_per_s"], 1.10) if d else "-")
        cells.append(f"{d['rows_per_s'] / fil:.2f}x" if d and fil else "-")
        print(f"| {name} | {b['batch']:,} | " + " | ".join(cells) + " |")

    print("\n### The default call (a fresh ForestPredictor(forest), ForestRunOptions{} but the output)\n")
    print("| model | batch | layout | strategy | schedule | calls to settle | first call | trials | built in | "
          "whole call (rows on the host) | default / tuned | default / auto |")
    print("| --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, b in study_batches(names, studies):
        v = by_variant(b)
        d = v.get("default")
        if not d:
            continue
        settle = f"{d['settle_calls']}" + ("" if d.get("settled", True) else " (not settled)")
        print(f"| {name} | {b['batch']:,} | {d.get('layout', '-')} | {d['kernel']} | {d['schedule'] or '-'} | {settle} | "
              f"{d['first_call_ms']:.2f} ms ({d['first_tuning']}) | {d.get('settle_tuning_ms', 0):.2f} ms | "
              f"{d.get('build_ms', 0):.0f} ms | {dur(d['call_ms'])} | "
              f"{ratio(d['ms'] / v['tuned']['ms'], 1.10)} | {d['ms'] / v['auto']['ms']:.3f} |")

    print("\n### The performance model\n")
    print("| model | batch | auto / best strategy | auto / tuned | Canopy's model order | paper's equations' order | measured order |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- |")
    within, within_tuned, cases, gains = 0, 0, 0, []
    for name, b in study_batches(names, studies):
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
    for name, b in study_batches(names, studies):
        g = {t["variant"]: t["gain"] for t in b["techniques"]}
        print(f"| {name} | {b['batch']:,} | " + " | ".join(f"{g[t]:.2f}x" for t in techniques) + " |")

    print("\n### Row scheduling (inspector + sort + gather included in the time)\n")
    print("| model | batch | nodes per warp, input order | scheduled | " +
          " | ".join(f"{k} without / with" for k in STRATEGIES) + " |")
    print("| --- | ---: | ---: | ---: | " + " | ".join("---" for _ in STRATEGIES) + " |")
    for name, b in study_batches(names, studies):
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
    print("| model | batch | default, median of runs (its pick) | auto, median (its pick) | tuned, median | "
          "default / tuned, each run | auto / tuned, each run | nvForest | default / nvForest | auto / nvForest |")
    print("| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |")
    within = within_default = total = total_default = above = above_default = with_fil = with_fil_default = 0
    for name in sorted(by_model):
        studies = by_model[name]
        for i, b in enumerate(studies[0]["batches"]):
            autos, defaults, tuned, ratios, dratios = [], [], [], [], []
            for s in studies:
                v = by_variant(s["batches"][i])
                autos.append((v["auto"]["rows_per_s"], v["auto"]["kernel"]))
                tuned.append(v["tuned"]["rows_per_s"])
                ratios.append(v["tuned"]["rows_per_s"] / v["auto"]["rows_per_s"])
                if "default" in v:
                    defaults.append((v["default"]["rows_per_s"], v["default"]["kernel"]))
                    dratios.append(v["tuned"]["rows_per_s"] / v["default"]["rows_per_s"])
                else:
                    dratios.append(None)  # a file from before the default row
            total += len(ratios)
            within += sum(r <= 1.10 for r in ratios)
            total_default += sum(r is not None for r in dratios)
            within_default += sum(r is not None and r <= 1.10 for r in dratios)
            med = sorted(autos)[len(autos) // 2]
            dmed = sorted(defaults)[len(defaults) // 2] if defaults else None
            fil = FIL.get(name, {}).get(b["batch"])
            if fil:
                with_fil += len(autos)
                above += sum(a[0] > fil for a in autos)
                with_fil_default += len(defaults)
                above_default += sum(d[0] > fil for d in defaults)
            print(f"| {name} | {b['batch']:,} | {f'{rate(dmed[0])} ({dmed[1]})' if dmed else '-'} | "
                  f"{rate(med[0])} ({med[1]}) | {rate(sorted(tuned)[len(tuned) // 2])} | "
                  + " / ".join("-" if r is None else f"{r:.3f}" for r in dratios) + " | "
                  + " / ".join(f"{r:.3f}" for r in ratios)
                  + f" | {rate(fil) if fil else '-'} | {f'{dmed[0] / fil:.2f}x' if fil and dmed else '-'} | "
                  + f"{f'{med[0] / fil:.2f}x' if fil else '-'} |")
    print(f"\ndefault within 10% of tuned (tuned / default <= 1.10) in {within_default} of {total_default} cases, "
          f"auto in {within} of {total}; above nvForest: default in {above_default} of {with_fil_default} runs, "
          f"auto in {above} of {with_fil}")


def serve_table(paths):
    """canopy-bench forest-serve: per phase, latency per batch-size decade after the first calls,
    the first calls and the online tuning."""
    phases = []
    for p in paths:
        s = json.load(open(p))
        for ph in s["phases"]:
            phases.append((stem(s["model"]), s, ph))
    print("| model | phase | device | batch rows | calls | p50 | p99 | max | rows/s |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, s, ph in phases:
        for d in ph["decades"]:
            st = d["steady"]
            if not st["calls"]:
                continue
            print(f"| {name} | {ph['phase']} | {ph['device']} | {d['rows']} | {st['calls']} | {dur(st['p50_ms'])} | "
                  f"{dur(st['p99_ms'])} | {dur(st['max_ms'])} | {rate(st['rows_per_s'])} |")
    print(f"\n(after the first {phases[0][1]['steady_after'] if phases else 100} calls of each phase)\n")
    print("| model | phase | predictor built | first call | prior calls | refining calls | trials | "
          "worst first call of a class over its steady median | phase wall | checked calls |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, s, ph in phases:
        t = ph["tuning"]
        worst = ph.get("worst_first_excess_ms")
        cls = [c for c in ph["classes"] if c["first_excess_ms"] is not None]
        at = max(cls, key=lambda c: c["first_excess_ms"]) if cls else None
        fc = ph.get("first_call", {})
        print(f"| {name} | {ph['phase']} | {ph['build_ms']:.0f} ms | {fc.get('ms', 0):.2f} ms ({fc.get('rows', '-')} rows, "
              f"{fc.get('tuning', '-')}) | {t['prior_calls']} | {t['refining_calls']} | {t['tuning_ms_total']:.1f} ms | "
              + (f"{worst:+.2f} ms ({at['lo']}-{at['hi']} rows){'' if worst <= s['first_call_budget_ms'] else ' ✗'}"
                 if worst is not None else "-")
              + f" | {ph['wall_ms'] / 1000:.2f} s | {ph['checked_calls']}, "
              + ("identical" if ph["mismatches"] == 0 else f"{ph['mismatches']} DIFFER") + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--runs":
        runs_table(sys.argv[2:])
    elif sys.argv[1] == "--serve":
        serve_table(sys.argv[2:])
    else:
        main(sys.argv[1:])
