#!/usr/bin/python3
"""scipy's own kd-tree tests with Canopy's trees in place of scipy's (issue 37).

Runs the test_kdtree.py that the installed scipy ships (Debian's python3-scipy:
/usr/lib/python3/dist-packages/scipy/spatial/tests/test_kdtree.py) with
scipy.spatial.KDTree and scipy.spatial.cKDTree replaced by canopy.KDTree and canopy.cKDTree,
then prints the passed / failed / error counts and the commonest causes of failure.

    PYTHONPATH=build/python /usr/bin/python3 python/tests/scipy_kdtree_suite.py [--device cpu]

scipy's test file is read where scipy installed it, never copied into this repository: it is
copied to a temporary folder beside a conftest.py that swaps the classes before pytest imports
the test module (the module does `from scipy.spatial import KDTree, cKDTree`). Exit status 0
whatever the counts (--min-passed N makes fewer than N passes an error, for ctest).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

CONFTEST = '''
import os
import scipy.spatial
import canopy

# scipy's test file names its test classes after the tree classes: they need their own names.
if hasattr(canopy, "cKDTree"):
    cKDTree, KDTree = canopy.cKDTree, canopy.KDTree
else:  # before issue 37 Canopy had KDTree only
    cKDTree = type("cKDTree", (canopy.KDTree,), {})
    KDTree = canopy.KDTree
_device = os.environ.get("CANOPY_SCIPY_SUITE_DEVICE")
if _device:  # every tree the tests build runs on this device
    def _on(cls):
        def __init__(self, data, *args, **kwargs):
            kwargs.setdefault("device", _device)
            cls.__init__(self, data, *args, **kwargs)
        return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__})
    cKDTree, KDTree = _on(cKDTree), _on(KDTree)
scipy.spatial.cKDTree = cKDTree
scipy.spatial.KDTree = KDTree
if hasattr(canopy, "cKDTreeNode"):  # the node class of cKDTree.tree (the test imports scipy's from _ckdtree)
    import scipy.spatial._ckdtree
    scipy.spatial._ckdtree.cKDTreeNode = canopy.cKDTreeNode
'''


def scipy_test_file():
    import scipy.spatial
    path = os.path.join(os.path.dirname(scipy.spatial.__file__), "tests", "test_kdtree.py")
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: install Debian's python3-scipy (apt-get install python3-scipy)")
    return path


def cause(text):
    """One line that names why a test failed: the last 'E   ' line of pytest's report, with
    numbers and array contents taken out so that alike failures group together."""
    lines = [l[4:].strip() for l in text.splitlines() if l.startswith("E   ")]
    line = next((l for l in reversed(lines) if re.match(r"^[A-Za-z_.]+(Error|Exception|Warning)\b", l)),
                lines[-1] if lines else (text.strip().splitlines() or ["?"])[-1])
    line = re.sub(r"0x[0-9a-f]+", "0x…", line)
    line = re.sub(r"\[[^\]]*\]", "[…]", line)
    line = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", line)
    return line[:160]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", help="cpu or gpu: every tree runs there (default: Canopy's auto)")
    ap.add_argument("--top", type=int, default=15, help="how many failure causes to print")
    ap.add_argument("--min-passed", type=int, default=0, help="exit 1 when fewer tests pass")
    ap.add_argument("-k", dest="keyword", help="pytest -k expression (a subset of the tests)")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every failing test with its cause")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="canopy-scipy-suite-") as tmp:
        shutil.copy(scipy_test_file(), os.path.join(tmp, "test_kdtree.py"))
        with open(os.path.join(tmp, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        env = dict(os.environ)  # pytest runs in tmp: PYTHONPATH's relative entries made absolute
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)
        if args.device:
            env["CANOPY_SCIPY_SUITE_DEVICE"] = args.device
        junit = os.path.join(tmp, "junit.xml")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", tmp,
               f"--junitxml={junit}", os.path.join(tmp, "test_kdtree.py")]
        if args.keyword:
            cmd += ["-k", args.keyword]
        subprocess.run(cmd, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not os.path.exists(junit):
            sys.exit("pytest wrote no report (is canopy importable? PYTHONPATH=build/python)")
        root = ET.parse(junit).getroot()

    counts = collections.Counter()
    causes = collections.Counter()
    failing = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "errors"
                why = cause((child.text or "") + "\n" + (child.get("message") or ""))
                causes[why] += 1
                failing.append((name, outcome, why))
                break
            if child.tag == "skipped":
                outcome = "skipped"
        counts[outcome] += 1
    total = sum(counts.values())
    print(f"scipy {os.path.dirname(scipy_test_file())}/test_kdtree.py with canopy's trees"
          f"{' on ' + args.device if args.device else ''}: {total} tests")
    print(f"  {counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, {counts['skipped']} skipped")
    if causes:
        print(f"top causes of the {counts['failed'] + counts['errors']} failures and errors:")
        for why, n in causes.most_common(args.top):
            print(f"  {n:4d}  {why}")
    if args.verbose:
        for name, outcome, why in failing:
            print(f"  {outcome:6s} {name}: {why}")
    return 1 if counts["passed"] < args.min_passed else 0


if __name__ == "__main__":
    sys.exit(main())
