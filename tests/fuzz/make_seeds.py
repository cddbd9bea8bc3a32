#!/usr/bin/env python3
# Writes the fuzz targets' seed corpora (tests/data/fuzz/<target>/seed-*) from tests/data: heads
# of the CSV files, pruned copies of the test forests, spec strings. Reproducible; leaves the
# crash-* reproducers alone. Run from anywhere: python3 tests/fuzz/make_seeds.py
import gzip
import json
import os
import random

here = os.path.dirname(os.path.abspath(__file__))
data = os.path.join(here, "..", "data")
out = os.path.join(data, "fuzz")


def write(target, name, blob):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(blob)


def head(path, lines):
    with open(path, "rb") as f:
        return b"".join(f.readlines()[:lines])


def framed(mode, arg, body):  # read_csv's [mode][L][arg][content]
    return bytes([mode, len(arg)]) + arg + body


# ---- read_csv: mode bit 0 gzip, bit 1 read_forest_csv, bit 2 skip_incomplete ---------------------
cities = head(os.path.join(data, "cities_4k.csv"), 16)
covtype = head(os.path.join(data, "covtype_4k.csv"), 8)
higgs = head(os.path.join(data, "forest", "higgs_rows.csv"), 4)
letter = head(os.path.join(data, "forest", "letter_rows.csv"), 8)
write("read_csv", "cities", framed(0, b"", cities))
write("read_csv", "covtype-cols", framed(0, b"0-6", covtype))
write("read_csv", "covtype-gz", framed(1, b"1,3,5-7", covtype))
write("read_csv", "cities-raw-gz", framed(0, b"", gzip.compress(cities, mtime=0)))
write("read_csv", "crlf-blank", framed(0, b"", b"x,y\r\n1,2\r\n\r\n 3 ,\"4\"\r\n"))
write("read_csv", "skip-incomplete", framed(4, b"0-1", b"x,y,z\n1,,3\n4,5,6\n, ,\n"))
write("read_csv", "forest-higgs", framed(2, b"label", higgs))
write("read_csv", "forest-letter-gz", framed(3, b"0", letter))
write("read_csv", "forest-nolabel", framed(2, b"", b"a,b,c\n1,,nan\nNaN,2,3\n"))


# ---- specs: selector bit 0: generate (seed = selector >> 1), else parse_columns ------------------
for i, s in enumerate([b"0-6", b"1,3,5-7", b"", b" 2 - 4 ", b"7"]):
    write("specs", "columns-%d" % i, b"\x00" + s)
for i, s in enumerate([b"uniform:100:3", b"plummer:50", b"uniform:1:1", b"uniform,20,7", b"plummer:1"]):
    write("specs", "generate-%d" % i, bytes([1 + 2 * i]) + s)


# ---- forest_xgboost: small XGBoost models (their first trees) ------------------------------------
def xgb_trim(name, keep):
    with open(os.path.join(data, "forest", name + ".json")) as f:
        j = json.load(f)
    m = j["learner"]["gradient_booster"]["model"]
    m["trees"] = m["trees"][:keep]
    m["tree_info"] = m["tree_info"][:keep]
    m["gbtree_model_param"]["num_trees"] = str(keep)
    if "iteration_indptr" in m:
        m["iteration_indptr"] = list(range(keep + 1))
    for t in m["trees"]:  # unused by the importer: smaller seeds
        for k in ("base_weights", "loss_changes", "parents"):
            t.pop(k, None)
    j["learner"].pop("feature_names", None)
    j["learner"].pop("feature_types", None)
    return json.dumps(j, separators=(",", ":")).encode()


write("forest_xgboost", "higgs", xgb_trim("xgb_higgs", 1))
write("forest_xgboost", "higgs-v2", xgb_trim("xgb_higgs_v2", 1))
write("forest_xgboost", "covtype-multi", xgb_trim("xgb_covtype", 2))
write("forest_xgboost", "higgs-reg", xgb_trim("xgb_higgs_reg", 1))
# NaN / Infinity literals, categorical splits, UBJSON: taken as they are, where present.
if os.path.exists(os.path.join(data, "forest", "xgb_nonfinite.json")):
    write("forest_xgboost", "nonfinite", xgb_trim("xgb_nonfinite", 2))
for name in ("xgb_categorical.json", "xgb_lossguide_multi.ubj"):
    path = os.path.join(data, "forest", name)
    if os.path.exists(path):
        with open(path, "rb") as f:
            write("forest_xgboost", name.replace("xgb_", "").replace(".", "-"), f.read())


# ---- forest_canopy: [mode][JSON], mode bit 0 gzip; test forests pruned to depth 3 ----------------
def first_leaf(t, n):
    while t["left_children"][n] != -1:
        n = t["left_children"][n]
    return n


def prune(t, depth):
    keys = [k for k in t if isinstance(t[k], list)]
    new, order, level = {}, [0], {0: 0}
    for n in order:  # breadth-first, children of nodes above the cut
        if t["left_children"][n] != -1 and level[n] < depth:
            for c in (t["left_children"][n], t["right_children"][n]):
                level[c] = level[n] + 1
                order.append(c)
    idx = {o: i for i, o in enumerate(order)}
    p = {k: [] for k in keys}
    for o in order:
        inner = t["left_children"][o] != -1 and level[o] < depth
        for k in keys:
            p[k].append(t[k][o])
        if inner:
            p["left_children"][-1] = idx[t["left_children"][o]]
            p["right_children"][-1] = idx[t["right_children"][o]]
        else:
            p["left_children"][-1] = p["right_children"][-1] = -1
            p["features"][-1] = p["thresholds"][-1] = -2
            p["values"][-1] = t["values"][first_leaf(t, o)]
    return p


def canopy_trim(name, trees, depth):
    with open(os.path.join(data, "forest", name + ".json")) as f:
        j = json.load(f)
    j["trees"] = [prune(t, depth) for t in j["trees"][:trees]]
    return json.dumps(j, separators=(",", ":")).encode()


write("forest_canopy", "rf-covtype", b"\x00" + canopy_trim("rf_covtype", 2, 3))
write("forest_canopy", "et-higgs-gz", b"\x01" + canopy_trim("et_higgs", 2, 3))
write("forest_canopy", "rf-higgs-reg", b"\x00" + canopy_trim("rf_higgs_reg", 1, 4))
write("forest_canopy", "et-letter-reg-raw-gz", b"\x00" + gzip.compress(canopy_trim("et_letter_reg", 1, 3), mtime=0))
write("forest_canopy", "default-left", b"\x00" + json.dumps({
    "format": "canopy-forest", "version": 1, "task": "classification", "num_features": 2, "classes": [0, 1],
    "trees": [{"left_children": [1, -1, -1], "right_children": [2, -1, -1], "features": [1, -2, -2],
               "thresholds": [0.5, -2, -2], "values": [[], [1.0, 0.0], [0.25, 0.75]],
               "default_left": [True, False, False]}]}, separators=(",", ":")).encode())

# ---- forest_diff: the decoder takes any bytes ----------------------------------------------------
rng = random.Random(18)
for i in range(12):
    write("forest_diff", "random-%02d" % i, bytes(rng.randrange(256) for _ in range(rng.randrange(16, 300))))
