#!/usr/bin/env bash
# The whole project built on the GPU machine, with the Python module for its Python, and the
# Python-side checks run there (the recipe of ../shared/GPU.md, "build there"; 72-112 s to build
# on the H200's 16 cores).
#   scripts/gpu-python.sh stage   here: Debian's oneTBB and pybind11-dev unpacked into stage/
#                                 (git-ignored; about 3 MB), which the run must `carry`
#   scripts/gpu-python.sh build [target]   there: configure and build into /tmp/cb (the whole
#                                 project, or one target such as _canopy); the folder stays while
#                                 the machine is warm
#   scripts/gpu-python.sh check   there, after build: canopy_tests, python/tests, scipy's own
#                                 test_kdtree.py, py_bench --scipy-calls, scipy_real_data.py on
#                                 the real data stage/ holds (JSON to $OUT)
# Example (the device tool, carry ["stage"]): bash scripts/gpu-python.sh build && bash scripts/gpu-python.sh check
set -uo pipefail
cd "$(dirname "$0")/.."
stage=$PWD/stage
out=${OUT:-/tmp/gpu-python}  # (the device tool brings back what lands in $OUT)
case "${1:-}" in
  stage)
    set -e
    mkdir -p stage/dl
    (cd stage/dl && apt-get download libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 pybind11-dev >/dev/null)
    for d in stage/dl/libtbb*.deb; do dpkg -x "$d" stage/tbb; done
    dpkg -x stage/dl/pybind11-dev*.deb stage/pyb
    rm -rf stage/dl
    # (the real data sets scipy_real_data.py reads there: ../shared/data is not carried)
    mkdir -p stage/data
    cp ../shared/data/cities_171k.csv.gz ../shared/data/covtype_points_254k.csv.gz stage/data/ 2>/dev/null || true
    du -sh stage
    ;;
  build)
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$stage/tbb/usr/lib/x86_64-linux-gnu
    cmake -S . -B /tmp/cb -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_PREFIX_PATH="$stage/tbb/usr" -DCANOPY_PYTHON="$(command -v python3)" \
      -Dpybind11_DIR="$stage/pyb/usr/lib/cmake/pybind11" > "$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
    start=$(date +%s)
    cmake --build /tmp/cb -j"$(nproc)" ${2:+--target "$2"} > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
    echo "gpu-python: built in $(( $(date +%s) - start )) s"
    ;;
  check)
    mkdir -p "$out"
    export LD_LIBRARY_PATH=$stage/tbb/usr/lib/x86_64-linux-gnu
    export PYTHONPATH=/tmp/cb/python
    /tmp/cb/tests/canopy_tests --gtest_brief=1 > "$out/gtest.log" 2>&1; echo "canopy_tests rc $?"; tail -3 "$out/gtest.log"
    CANOPY_TEST_DATA=$PWD/tests/data python3 -m pytest -q -p no:cacheprovider python/tests > "$out/pytest.log" 2>&1
    echo "python/tests rc $?"; tail -1 "$out/pytest.log"
    python3 python/tests/scipy_kdtree_suite.py 2>&1 | grep -m1 passed
    python3 scripts/py_bench.py --n 1000000 --repeat 3 --scipy-calls --json "$out/py_bench.json" 2>&1 | grep -E "^\| "
    if [ -d stage/data ]; then python3 scripts/scipy_real_data.py --data stage/data --json "$out/real_data.json"; fi
    ;;
  *)
    echo "usage: scripts/gpu-python.sh stage|build [target]|check" >&2
    exit 2
    ;;
esac
