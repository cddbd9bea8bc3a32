#!/usr/bin/python3
"""Charts from canopy-bench --json output (matplotlib; PNG or SVG by the output's extension).

    /usr/bin/python3 scripts/plot.py RUN.json [RUN2.json ...] -o OUT.png [--title T]

What it draws follows the file:
  * a traversal suite (pc, nn, knn, bt, vp, bh: "variants") run at one depth: each variant's
    total time split into inspect / schedule / execute, with its speedup over mask-lockstep and
    its nodes per warp when the emulator counted them;
  * the same run with --depths: total time against top-tree depth per variant (the U-curve);
  * forest-study ("batches"): rows per second of each strategy per batch size (log-log).
Several files of one kind go side by side, one panel each.
"""
import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label_of(path, doc):
    for key in ("source", "input", "points", "generate", "model"):
        if isinstance(doc.get(key), str) and doc[key]:
            return pathlib.Path(doc[key]).name
    return pathlib.Path(path).stem


def plot_variants(ax, doc, title):
    rows = doc["variants"]
    depths = sorted({r["depth"] for r in rows if "depth" in r and not r.get("depth_auto")})
    if len(depths) > 2:
        by_name = {}
        for r in rows:
            if "depth" in r and not r.get("depth_auto"):
                by_name.setdefault(r["name"], []).append((r["depth"], r["total_ms"]))
        for name, pts in sorted(by_name.items()):
            pts.sort()
            ax.plot([d for d, _ in pts], [t for _, t in pts], marker="o", label=name)
        for r in rows:  # depth-free variants as horizontal references
            if "depth" not in r:
                ax.axhline(r["total_ms"], linestyle=":", linewidth=1)
                ax.annotate(r["name"], (depths[0], r["total_ms"]), fontsize=7, va="bottom")
        ax.set_xlabel("top-tree depth")
        ax.set_ylabel("total ms (inspect + schedule + execute)")
        ax.legend(fontsize=7)
        ax.set_title(title + ": depth sweep")
        return
    names = [r["name"] + (f" d{r['depth']}" if "depth" in r else "") for r in rows]
    bottom = [0.0] * len(rows)
    for phase, colour in (("inspect_ms", "#8da0cb"), ("schedule_ms", "#fc8d62"), ("execute_ms", "#66c2a5")):
        vals = [r.get(phase, 0.0) for r in rows]
        ax.barh(names, vals, left=bottom, color=colour, label=phase[:-3])
        bottom = [b + v for b, v in zip(bottom, vals)]
    for y, r in enumerate(rows):
        notes = []
        if r.get("speedup_vs_mask_lockstep"):
            notes.append(f"{r['speedup_vs_mask_lockstep']:.2f}x")
        if r.get("nodes_per_warp"):
            notes.append(f"{r['nodes_per_warp']:.0f} nodes/warp")
        if r.get("auto_schedule"):
            notes.append(f"picked {r['auto_schedule']} + {r['auto_executor']}")
        ax.annotate("  " + ", ".join(notes), (bottom[y], y), va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"ms ({doc.get('device', 'gpu')}; speedup over mask-lockstep)")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title)


def plot_forest(ax, doc, title):
    series = {}
    for b in doc["batches"]:
        for s in b.get("strategies", []):
            series.setdefault(s["variant"], []).append((b["batch"], s["rows_per_s"]))
    for name, pts in series.items():
        pts.sort()
        ax.plot([n for n, _ in pts], [r / 1e6 for _, r in pts], marker="o", label=name,
                linewidth=2.5 if name in ("auto", "tuned") else 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch (rows)")
    ax.set_ylabel("million rows / s")
    ax.legend(fontsize=7)
    ax.set_title(title)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="canopy-bench --json files")
    ap.add_argument("-o", "--output", required=True, help="chart file (.png or .svg)")
    ap.add_argument("--title", default="", help="a title over every panel")
    args = ap.parse_args(argv)
    docs = []
    for path in args.runs:
        try:
            with open(path) as f:
                docs.append((path, json.load(f)))
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"plot.py: {path}: {e}")
    fig, axes = plt.subplots(1, len(docs), figsize=(7 * len(docs), 4.8), squeeze=False)
    for ax, (path, doc) in zip(axes[0], docs):
        title = label_of(path, doc)
        if "variants" in doc:
            plot_variants(ax, doc, title)
        elif "batches" in doc:
            plot_forest(ax, doc, title)
        else:
            sys.exit(f"plot.py: {path}: neither a traversal suite ('variants') nor a forest study ('batches')")
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot.py: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
