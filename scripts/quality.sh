#!/usr/bin/env bash
# The schedule-quality table of benchmarks/RESULTS.md: canopy-bench quality for point correlation and kNN
# on covtype, cities and uniform:400000:7 (queries shuffled, so "input order" is a random
# order), the guided inspector's probes for kNN, and Barnes-Hut on plummer:100000. CPU-only
# work; a machine with more cores is faster.
#   scripts/quality.sh [canopy-bench] [output folder]
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${1:-build/benchmarks/canopy-bench}
out=${2:-out/quality}
data=${CANOPY_DATA:-../shared/data}
mkdir -p "$out"
inputs=("covtype --points $data/covtype_points_254k.csv.gz --columns 0-6"
        "cities --points $data/cities_171k.csv.gz" "uniform --generate uniform:400000:7")
{
  for w in pc knn; do
    for input in "${inputs[@]}"; do
      set -- $input
      name=$1; shift
      echo "== canopy-bench quality $w $* --shuffle 1"
      "$bench" quality $w "$@" --shuffle 1 --json "$out/${w}_$name.json"
      echo
    done
  done
  # Guided rows: the inspector's probe (docs/design.md, "Guided rows: probe or position"); uniform with a pipeline chunk's
  # 500,000 queries against the 400,000-point tree.
  for input in "${inputs[@]}"; do
    set -- $input
    name=$1; shift
    [[ $name == uniform ]] && set -- --generate uniform:400000:7 --queries uniform:500000:7
    echo "== canopy-bench quality knn $* --shuffle 1 --depths 8,12 --probes full,lean,none"
    "$bench" quality knn "$@" --shuffle 1 --depths 8,12 --probes full,lean,none --json "$out/rows_knn_$name.json"
    echo
  done
  echo "== canopy-bench quality bh --generate plummer:100000 --depths 2,3,4,5,6"
  "$bench" quality bh --generate plummer:100000 --depths 2,3,4,5,6 --json "$out/bh_plummer.json"
} 2>&1 | tee "$out/quality.txt"
