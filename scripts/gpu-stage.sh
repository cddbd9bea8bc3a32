#!/usr/bin/env bash
# Stages what a run on a remote GPU machine needs into stage/ (ignored by git): the test and
# benchmark binaries built here, libtbb (the GPU machine has no oneTBB), the real datasets and,
# when scripts/make_forest_bench_models.py has written them, the forest benchmark models.
# Then, on the GPU machine, from the repository root: scripts/gpu-run.sh [tests|bench|depth|forest|all]
# `scripts/gpu-stage.sh forest` stages only what the forest tests and forest-study need (the
# carry limit is 64 MiB): the two binaries, libtbb and the forest-study models;
# `scripts/gpu-stage.sh traversal` everything but the forest models (tests, bench, pipeline,
# guided, guided-rows, depth-auto, graph).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
build_dir=${CANOPY_BUILD_DIR:-build}
rm -rf stage && mkdir -p stage/bin stage/lib stage/data
cp "$build_dir"/tests/canopy_tests "$build_dir"/benchmarks/canopy-bench stage/bin/
[ "$mode" = forest ] || for e in pc_example knn_example bh_example custom_example forest_example quadtree_cities; do
  cp "$build_dir"/examples/$e stage/bin/
done
cp -L "$(ldconfig -p | awk '/libtbb.so.12 /{print $NF; exit}')" stage/lib/
data=${CANOPY_DATA:-../shared/data}
[ "$mode" = forest ] || cp "$data"/covtype_points_254k.csv.gz "$data"/cities_171k.csv.gz stage/data/
if [ "$mode" != traversal ] && [ -f bench-data/forest/covtype_xgb_d8.json.gz ] && [ -f bench-data/forest/higgs_rf_d20.json ]; then
  mkdir -p stage/forest
  [ "$mode" = forest ] || cp bench-data/forest/covtype_xgb_d8.json.gz bench-data/forest/covtype.csv.gz stage/forest/
  cp bench-data/forest/higgs.csv.gz stage/forest/
  # The forest-study models (scripts/make_forest_bench_models.py); forests gzipped to travel.
  for f in covtype_xgb_bin_d8.json.gz higgs_xgb_d6.json.gz letter_xgb_d4.json.gz covtype_bin.csv.gz letter.csv.gz; do
    [ -f bench-data/forest/$f ] && cp bench-data/forest/$f stage/forest/
  done
  for f in higgs_rf_d20 covtype_rf_d12; do
    [ -f bench-data/forest/$f.json ] && gzip -c bench-data/forest/$f.json > stage/forest/$f.json.gz
  done
fi
du -sh stage
