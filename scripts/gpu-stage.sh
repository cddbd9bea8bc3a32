#!/usr/bin/env bash
# Stages what a run on a remote GPU machine needs into stage/ (ignored by git): the test and
# benchmark binaries built here, libtbb (the GPU machine has no oneTBB), the real datasets and,
# when scripts/make_forest_bench_models.py has written them, the forest benchmark models.
# Then, on the GPU machine, from the repository root: scripts/gpu-run.sh [tests|bench|depth|forest|all]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${CANOPY_BUILD_DIR:-build}
rm -rf stage && mkdir -p stage/bin stage/lib stage/data
cp "$build_dir"/tests/canopy_tests "$build_dir"/benchmarks/canopy-bench "$build_dir"/examples/pc_example \
   "$build_dir"/examples/knn_example "$build_dir"/examples/quadtree_cities stage/bin/
cp -L "$(ldconfig -p | awk '/libtbb.so.12 /{print $NF; exit}')" stage/lib/
data=${CANOPY_DATA:-../shared/data}
cp "$data"/covtype_points_254k.csv.gz "$data"/cities_171k.csv.gz stage/data/
if [ -f bench-data/forest/covtype_xgb_d8.json.gz ] && [ -f bench-data/forest/higgs_rf_d20.json ]; then
  mkdir -p stage/forest
  cp bench-data/forest/covtype_xgb_d8.json.gz bench-data/forest/covtype.csv.gz \
     bench-data/forest/higgs_rf_d20.json bench-data/forest/higgs.csv.gz stage/forest/
fi
du -sh stage
