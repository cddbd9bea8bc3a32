#!/usr/bin/env bash
# On the GPU machine: builds two source trees (e.g. the last release and the working tree, each
# a `git archive` unpacked into an ignored folder) and runs the standard driver cases (pc, knn,
# bh on two inputs each; forest-study on a test model) on both,
# alternately case by case so that drift on a shared machine hits both alike; the JSON files go
# to one archive in $OUT (or out/). scripts/compare_bench.py then compares them, here.
#   scripts/gpu-compare.sh BASE_SRC NEW_SRC [TBB_PREFIX]
# Data: stage/data/covtype_points_254k.csv.gz (copy it from ../shared/data). oneTBB must travel
# (../shared/GPU.md): TBB_PREFIX defaults to stage/tbb/usr.
set -uo pipefail
base_src=$1 new_src=$2 tbb=${3:-$PWD/stage/tbb/usr}
out=${OUT:-out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$tbb/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for t in base new; do
  src=base_src; [ $t = new ] && src=new_src
  ( cmake -S "${!src}" -B /tmp/canopy-$t -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_PREFIX_PATH="$tbb" > /dev/null && cmake --build /tmp/canopy-$t -j8 --target canopy-bench > "$out/build_$t.txt" 2>&1 ) &
done
wait
cov="--points stage/data/covtype_points_254k.csv.gz"
for c in "pc_covtype pc $cov --columns 0-6" "pc_uniform pc --generate uniform:400000:7" \
         "knn_covtype knn $cov --columns 0-6" "knn_uniform knn --generate uniform:400000:7" \
         "bh_covtype bh $cov --columns 0-2" "bh_uniform bh --generate uniform:400000:3"; do
  set -- $c
  name=$1
  shift
  for t in base new; do
    /tmp/canopy-$t/benchmarks/canopy-bench "$@" --shuffle 1 --variants all --json "$out/${t}_$name.json" > /dev/null 2>&1
  done
done
# The forest engine: forest-study's variants on a test model (each variant's `identical` says
# whether its predictions equal csr direct's, bit for bit).
f=$new_src/tests/data/forest
for t in base new; do
  /tmp/canopy-$t/benchmarks/canopy-bench forest-study --model "$f/xgb_higgs.json" --data "$f/higgs_rows.csv" \
    --label label --batch 100,10000,100000 --repeat 5 --json "$out/${t}_forest_xgb_higgs.json" > /dev/null 2>&1
done
tar -czf "$out/compare.tgz" -C "$out" $(cd "$out" && ls base_*.json new_*.json) && rm -f "$out"/base_*.json "$out"/new_*.json
echo "results in $out/compare.tgz"
