#!/usr/bin/env bash
# Stages what the forest GPU tests and benchmark need on a machine without a compiler, TBB or
# Python (the H100 machine: see ../shared/GPU.md) into stage/ (ignored by git, about 25 MB):
#   stage/bin/canopy_tests, stage/bin/canopy-bench   built here (Release, sm_90)
#   stage/lib/libtbb.so.12
#   stage/forest/   the benchmark models and data of scripts/make_forest_bench_models.py
# The tests read tests/data/forest from the source tree, which travels with the working tree.
# Then, on the GPU machine, from the repository root:
#   export LD_LIBRARY_PATH=$PWD/stage/lib
#   stage/bin/canopy_tests --gtest_filter='Forest*'
#   stage/bin/canopy-bench forest --model stage/forest/covtype_xgb_d8.json.gz ... (benchmarks/FOREST_RESULTS.md)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CANOPY_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$build_dir"
if [ ! -f bench-data/forest/covtype_xgb_d8.json.gz ] || [ ! -f bench-data/forest/higgs_rf_d20.json ]; then
  echo "stage_forest_gpu: run /usr/bin/python3 scripts/make_forest_bench_models.py first" >&2
  exit 1
fi
mkdir -p stage/bin stage/lib stage/forest
cp "$build_dir/tests/canopy_tests" "$build_dir/benchmarks/canopy-bench" stage/bin/
cp -L /lib/x86_64-linux-gnu/libtbb.so.12 stage/lib/
cp bench-data/forest/covtype_xgb_d8.json.gz bench-data/forest/covtype.csv.gz \
   bench-data/forest/higgs_rf_d20.json bench-data/forest/higgs.csv.gz stage/forest/
du -sh stage
