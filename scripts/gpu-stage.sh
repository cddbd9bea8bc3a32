#!/usr/bin/env bash
# Stages what a run on a remote GPU machine needs into stage/ (ignored by git): the test and
# benchmark binaries built here, libtbb (the GPU machine has no oneTBB), the real datasets and,
# when scripts/make_forest_bench_models.py has written them, the forest benchmark models.
# Then, on the GPU machine, from the repository root: scripts/gpu-run.sh [tests|bench|depth|forest|smoke|all]
# `scripts/gpu-stage.sh forest` stages only what the forest tests and forest-study need (the
# carry limit is 64 MiB): the two binaries, libtbb and the forest-study models;
# `scripts/gpu-stage.sh traversal` everything but the forest models (tests, bench, pipeline,
# guided, guided-rows, depth-auto, graph).
# `scripts/gpu-stage.sh smoke` stages the driver's smoke test (gpu-run.sh smoke, smoke-memcheck):
# canopy-bench alone, stripped and packed, libtbb and the two real point files (the forest rows
# it reads travel with the tree, tests/data/forest).
# `scripts/gpu-stage.sh dist` stages the MPI layer's run (scripts/gpu-dist.sh, a machine of two
# or more GPUs): canopy-bench and canopy_mpi_tests built with MPI, canopy_tests, libtbb, Debian's
# Open MPI as files to unpack there (the GPU machines have none), and the covtype forest.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
build_dir=${CANOPY_BUILD_DIR:-build}
rm -rf stage && mkdir -p stage/bin stage/lib stage/data
cp "$build_dir"/benchmarks/canopy-bench stage/bin/
[ "$mode" = smoke ] || cp "$build_dir"/tests/canopy_tests stage/bin/
if [ "$mode" = dist ]; then
  cp "$build_dir"/tests/canopy_mpi_tests stage/bin/
  cp -L "$(ldconfig -p | awk '/libtbb.so.12 /{print $NF; exit}')" stage/lib/
  # Open MPI and the libraries it loads, as installed here (scripts/install-deps.sh), at their
  # own paths: gpu-dist.sh unpacks them into / without replacing files the machine has.
  packages="openmpi-bin libopenmpi3 openmpi-common libpmix2 libevent-core-2.1-7 libevent-pthreads-2.1-7 libhwloc15
            libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200
            libnuma1 libmunge2 libxnvctrl0"
  for p in $packages; do dpkg -L "$p"; done | while read -r f; do
    if [ -f "$f" ] || [ -L "$f" ]; then echo "$f"; fi
  done | grep -v '/share/doc\|/share/man\|/share/lintian\|java' | grep -Ev '^/(lib|lib64|bin|sbin)$' | sort -u > stage/mpi-files.txt
  # (/lib is /usr/lib on Debian 12 and Ubuntu 24.04 alike: one path, so no symlink need exist first)
  tar -czf stage/mpiroot.tgz --transform 's,^/*lib/,usr/lib/,' -T stage/mpi-files.txt 2>/dev/null
  mkdir -p stage/forest
  cp bench-data/forest/covtype_xgb_bin_d8.json.gz bench-data/forest/covtype_bin.csv.gz stage/forest/
  # The forest_diff fuzz target (scripts/fuzz.sh builds it) and its corpus, for gpu-dist.sh's FUZZ_S.
  fuzz_dir=${CANOPY_FUZZ_DIR:-build-fuzz}
  if [ -x "$fuzz_dir/fuzz_forest_diff" ]; then
    rm -rf stage/fuzz && mkdir -p stage/fuzz/seeds
    cp "$fuzz_dir/fuzz_forest_diff" stage/fuzz/
    cp tests/data/fuzz/forest_diff/* stage/fuzz/seeds/ 2>/dev/null || true
    cp "$fuzz_dir"/corpus/forest_diff/* stage/fuzz/seeds/ 2>/dev/null || true
    tar -czf stage/fuzz.tgz -C stage/fuzz . && rm -r stage/fuzz
  fi
  # Three binaries with the library's GPU code in each: stripped and packed, they fit the carry.
  strip stage/bin/*
  tar -czf stage/bins.tgz -C stage bin && rm -r stage/bin
  du -sh stage
  exit 0
fi
[ "$mode" = forest ] || [ "$mode" = smoke ] || for e in pc_example knn_example bh_example custom_example forest_example quadtree_cities; do
  cp "$build_dir"/examples/$e stage/bin/
done
cp -L "$(ldconfig -p | awk '/libtbb.so.12 /{print $NF; exit}')" stage/lib/
data=${CANOPY_DATA:-../shared/data}
[ "$mode" = forest ] || cp "$data"/covtype_points_254k.csv.gz "$data"/cities_171k.csv.gz stage/data/
if [ "$mode" != traversal ] && [ "$mode" != smoke ] && [ -f bench-data/forest/higgs_rf_d20.json ]; then
  mkdir -p stage/forest
  # (the multi-class covtype model, for gpu-run.sh forest; forest-study does not use it)
  if [ "$mode" != forest ] && [ -f bench-data/forest/covtype_xgb_d8.json.gz ]; then
    cp bench-data/forest/covtype_xgb_d8.json.gz bench-data/forest/covtype.csv.gz stage/forest/
  fi
  cp bench-data/forest/higgs.csv.gz stage/forest/
  # The forest-study models (scripts/make_forest_bench_models.py); forests gzipped to travel.
  for f in covtype_xgb_bin_d8.json.gz higgs_xgb_d6.json.gz letter_xgb_d4.json.gz covtype_bin.csv.gz letter.csv.gz \
           covtype_xgb_cat_d8.json.gz covtype_cat.csv.gz; do
    [ -f bench-data/forest/$f ] && cp bench-data/forest/$f stage/forest/
  done
  for f in higgs_rf_d20 covtype_rf_d12; do
    [ -f bench-data/forest/$f.json ] && gzip -c bench-data/forest/$f.json > stage/forest/$f.json.gz
  done
fi
# The forest stage carries its models beside the binaries: stripped and packed (gpu-run.sh
# unpacks them), they fit the 64 MiB carry.
if [ "$mode" = forest ] || [ "$mode" = smoke ]; then
  strip stage/bin/*
  tar -czf stage/bins.tgz -C stage bin && rm -r stage/bin
fi
du -sh stage
