"""scripts/plot.py draws the three kinds of canopy-bench --json output it knows and refuses others."""
import json
import pathlib
import subprocess
import sys

PLOT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "plot.py"


def run(tmp_path, doc, name):
    src = tmp_path / f"{name}.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / f"{name}.png"
    r = subprocess.run([sys.executable, str(PLOT), str(src), "-o", str(out)], capture_output=True, text=True)
    return r, out


def test_every_kind_of_run(tmp_path):
    row = {"inspect_ms": 0.1, "schedule_ms": 0.2, "execute_ms": 1.0, "total_ms": 1.3, "nodes_per_warp": 90.0}
    suite = {"source": "cities.csv", "device": "gpu",
             "variants": [dict(row, name="mask-lockstep", speedup_vs_mask_lockstep=1.0),
                          dict(row, name="auto", auto_schedule="leaf-sort", auto_executor="independent")]}
    sweep = {"source": "cities.csv", "variants": [dict(row, name="hybrid", depth=d, total_ms=1.0 + abs(d - 6))
                                                  for d in range(3, 10)] + [dict(row, name="independent")]}
    forest = {"model": "m.json", "batches": [{"batch": b, "strategies": [{"variant": "auto", "rows_per_s": 1e6 * b ** 0.5},
                                                                        {"variant": "csr direct", "rows_per_s": 5e5 * b ** 0.5}]}
                                             for b in (100, 10000, 1000000)]}
    for name, doc in (("suite", suite), ("sweep", sweep), ("forest", forest)):
        r, out = run(tmp_path, doc, name)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r, _ = run(tmp_path, {"rows": []}, "unknown")
    assert r.returncode != 0 and "neither a traversal suite" in r.stderr
