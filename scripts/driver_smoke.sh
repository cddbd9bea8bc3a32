#!/usr/bin/env bash
# The driver's smoke test: every canopy-bench subcommand with its defaults (--variants all), on
# generated inputs above the GPU tree-build threshold (10^5 and 10^6 points) and on the real
# files, each checked to exit 0 and to say what it should (the variants' results identical, the
# GPU trees equal to the CPU's, the forest predictions identical, ...); a summary table at the end,
# and a nonzero exit if any case failed (docs/driver.md, "The smoke test").
#
#   scripts/driver_smoke.sh [options]
#     --bin PATH       canopy-bench (env CANOPY_BENCH; default stage/bin/canopy-bench where it is
#                      there, else build/benchmarks/canopy-bench)
#     --data DIR       the real files (env CANOPY_DATA; default stage/data where it holds them, else
#                      ../shared/data): cities_171k.csv.gz, covtype_points_254k.csv.gz
#     --forest DIR     the forest models and rows (default tests/data/forest)
#     --device D       gpu (the default: without a GPU the script exits 77, "skipped") or cpu (every
#                      workload on the CPU executors; the GPU-only subcommands are skipped)
#     --sizes LIST     generated points, e.g. "100000 1000000" (the default; memcheck 100000; cpu 20000)
#     --real on|off    the real files (default on; off with --memcheck or --device cpu)
#     --memcheck       every case under compute-sanitizer --tool memcheck (MEMCHECK_ARGS, default
#                      "--leak-check full"); a case passes only with "ERROR SUMMARY: 0 errors"
#     --jobs N         cases run side by side (default 1)
#     --only REGEX     only the cases whose name matches (e.g. '^(knn|bt)_'); --skip REGEX leaves some out
#     --timeout S      seconds per case (default 300; memcheck 1200)
#     --out DIR        the logs, one per case (default a fresh temporary directory, kept)
#     --list           print the cases and exit
# Exit: 0 every case passed, 1 some failed, 77 no GPU (with --device gpu), 2 bad usage.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

bin=${CANOPY_BENCH:-}
data=${CANOPY_DATA:-}
forest=$root/tests/data/forest
device=gpu
sizes=""
real=""
memcheck=0
jobs=1
only=""
skip=""
case_timeout=""
out=""
list=0
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    # an option with a value sets the variable of its name (--timeout: case_timeout)
    --bin|--data|--forest|--device|--sizes|--real|--jobs|--only|--skip|--out|--timeout)
      (($# > 1)) || { echo "driver_smoke.sh: $1 needs a value" >&2; exit 2; }
      v=${1#--}; [[ $v == timeout ]] && v=case_timeout
      printf -v "$v" %s "$2"; shift 2 ;;
    --memcheck) memcheck=1; shift ;;
    --list) list=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "driver_smoke.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[[ $device == gpu || $device == cpu ]] || { echo "driver_smoke.sh: --device must be gpu or cpu" >&2; exit 2; }
if [[ -z $bin ]]; then
  bin=stage/bin/canopy-bench
  [[ -x $bin ]] || bin=$root/stage/bin/canopy-bench
  [[ -x $bin ]] || bin=$root/build/benchmarks/canopy-bench
fi
if [[ -z $data ]]; then
  data=stage/data
  [[ -f $data/cities_171k.csv.gz ]] || data=$root/stage/data
  [[ -f $data/cities_171k.csv.gz ]] || data=$root/../shared/data
fi
if [[ -z $sizes ]]; then
  sizes="100000 1000000"
  ((memcheck)) && sizes=100000
  [[ $device == cpu ]] && sizes=20000
fi
if [[ -z $real ]]; then
  real=on
  ((memcheck)) && real=off
  [[ $device == cpu ]] && real=off
fi
[[ -n $case_timeout ]] || { case_timeout=300; ((memcheck)) && case_timeout=1200; }
cities=$data/cities_171k.csv.gz
covtype=$data/covtype_points_254k.csv.gz

# ---- the cases: name, input (for the table), what the output must show, the arguments --------
# check: variants  "every variant's results identical" (pc, nn, knn, bt, vp, bh; exit 2 otherwise)
#        build     every tree's row, and on the GPU every GPU tree equal to the CPU's ("yes")
#        forest    "median of" and no variant differing from the first ("max rel diff")
#        study     "every variant's predictions are bit-identical to csr direct's"
#        serve     "every checked call's predictions are identical to csr direct's"
#        e2e, steps, schedule, quality: their summary line (they compare no variants)
names=() inputs=() checks=() argv=() needs=()
add() {  # add NAME INPUT CHECK NEEDS(any|gpu) ARGS...
  local name=$1 input=$2 check=$3 need=$4
  shift 4
  [[ -n $only && ! $name =~ $only ]] && return
  [[ -n $skip && $name =~ $skip ]] && return
  names+=("$name") inputs+=("$input") checks+=("$check") needs+=("$need")
  argv+=("$(printf '%q ' "$@")")
}
dev=(--device "$device")
for n in $sizes; do
  add "pc_u$n" "uniform:$n:3" variants any pc --generate "uniform:$n:3" --shuffle 1 --repeat 1 "${dev[@]}"
  for w in nn knn bt vp; do
    add "${w}_u$n" "uniform:$n:3" variants any $w --generate "uniform:$n:3" --shuffle 1 --repeat 1 "${dev[@]}"
  done
  add "bh_p$n" "plummer:$n" variants any bh --generate "plummer:$n" --shuffle 1 --repeat 1 "${dev[@]}"
  add "build_u$n" "uniform:$n:3" build any build --generate "uniform:$n:3" --trees kd,ball,vp,octree --repeat 1
  for w in pc knn; do
    add "e2e_${w}_u$n" "uniform:$n:3" e2e gpu e2e --generate "uniform:$n:3" --workload $w --repeat 1
  done
  add "steps_p$n" "plummer:$n" steps gpu steps --generate "plummer:$n" --steps 2
done
if [[ $real == on ]]; then
  # The commands of the crash reports (issue 35), then every workload on both files.
  add pc_cities_r0.0010512 cities_171k variants any pc --points "$cities" --radius 0.0010512 --shuffle 1 \
    --variants all --repeat 1 "${dev[@]}"
  add pc_covtype covtype_254k:0-6 variants any pc --points "$covtype" --columns 0-6 --shuffle 1 --repeat 1 "${dev[@]}"
  for w in nn knn bt vp; do
    add "${w}_cities" cities_171k variants any $w --points "$cities" --shuffle 1 --repeat 1 "${dev[@]}"
    add "${w}_covtype" covtype_254k:0-6 variants any $w --points "$covtype" --columns 0-6 --shuffle 1 --repeat 1 "${dev[@]}"
  done
  add bh_covtype covtype_254k:0-2 variants any bh --points "$covtype" --columns 0-2 --shuffle 1 --repeat 1 "${dev[@]}"
  add build_covtype covtype_254k:0-6 build any build --points "$covtype" --columns 0-6 --trees kd,ball,vp,octree --repeat 1
  add build_cities cities_171k build any build --points "$cities" --trees kd,ball,vp --repeat 1
  add e2e_knn_covtype covtype_254k:0-6 e2e gpu e2e --points "$covtype" --columns 0-6 --workload knn --repeat 1
fi
# quality traces on the CPU (the trees are built where Device::Auto builds them): the smallest size.
q=${sizes%% *}
for w in pc knn bt vp; do
  add "quality_${w}_u$q" "uniform:$q:3" quality any quality $w --generate "uniform:$q:3" --sample 1024 --depths 6,8
done
add "quality_bh_p$q" "plummer:$q" quality any quality bh --generate "plummer:$q" --sample 1024 --depths 4,6
# (the CPU schedulers alone: no CUDA call for memcheck to watch, which it reports as an error)
((memcheck)) || add schedule random schedule any schedule --repeat 1
fdev=gpu,cpu
[[ $device == cpu ]] && fdev=cpu
add forest_xgb_higgs xgb_higgs forest any forest --model "$forest/xgb_higgs.json" --data "$forest/higgs_rows.csv" \
  --label label --device $fdev --repeat 1
add forest_rf_covtype rf_covtype forest any forest --model "$forest/rf_covtype.json" \
  --data "$forest/covtype_rows_dense.csv" --label label --device $fdev --repeat 1
add forest_study_xgb_higgs xgb_higgs study gpu forest-study --model "$forest/xgb_higgs.json" \
  --data "$forest/higgs_rows.csv" --label label --batch 100,100000 --repeat 1
add forest_serve_xgb_higgs xgb_higgs serve any forest-serve --model "$forest/xgb_higgs.json" \
  --data "$forest/higgs_rows.csv" --label label --device "$device" --calls 500 --max-batch 10000 --check-every 10

if ((list)); then
  for i in "${!names[@]}"; do printf '%-26s %-18s %s\n' "${names[i]}" "${inputs[i]}" "canopy-bench ${argv[i]}"; done
  exit 0
fi

# ---- the binary and the device ------------------------------------------------------------------
if [[ ! -x $bin ]]; then
  echo "driver_smoke.sh: no canopy-bench at '$bin' (--bin or CANOPY_BENCH)" >&2
  exit 1
fi
# A GPU is there when the driver's own device line says so (the build subcommand prints it).
probe=$("$bin" build --generate uniform:1000:3 --trees kd --repeat 1 2>&1)
probe_rc=$?
if ((probe_rc != 0)); then
  echo "driver_smoke.sh: '$bin build' failed (exit $probe_rc):" >&2
  echo "$probe" | tail -5 >&2
  exit 1
fi
gpu_line=$(echo "$probe" | sed -n 's/.*; GPU: //p' | head -1)
has_gpu=1
[[ -z $gpu_line || $gpu_line == "no CUDA device"* ]] && has_gpu=0
if [[ $device == gpu && $has_gpu == 0 ]]; then
  echo "driver_smoke.sh: no GPU here (${gpu_line:-no device line}); skipped (--device cpu runs the CPU executors)"
  exit 77
fi
if ((memcheck)) && ! command -v compute-sanitizer > /dev/null; then
  echo "driver_smoke.sh: --memcheck needs compute-sanitizer on the PATH" >&2
  exit 1
fi
if [[ -z $out ]]; then out=$(mktemp -d /tmp/driver_smoke.XXXXXX); fi
mkdir -p "$out"
echo "driver smoke test: $bin; device $device (${gpu_line}); sizes $sizes; real files $real ($data);" \
     "memcheck $memcheck; ${#names[@]} cases, $jobs at a time; logs in $out"

# ---- running and judging a case -----------------------------------------------------------------
judge() {  # judge CHECK RC LOG -> "status<TAB>detail"
  local check=$1 rc=$2 log=$3 need="" bad="" detail=""
  if ((rc == 124 || rc == 137)); then printf 'TIMEOUT\tover %ss\n' "$case_timeout"; return; fi
  if ((rc > 128)); then printf 'CRASH\tsignal %d%s\n' $((rc - 128)) "$( ((rc == 139)) && echo ' (SIGSEGV)')"; return; fi
  if ((memcheck)) && ! grep -q "ERROR SUMMARY: 0 errors" "$log"; then
    printf 'MEMCHECK\t%s\n' "$(grep -m1 -o 'ERROR SUMMARY: [0-9]* errors*' "$log" || echo 'no summary')"
    return
  fi
  if ((rc != 0)); then
    detail=$(grep -m1 -o "canopy-bench: error: .*\|a GPU tree differs.*\|every variant's results DIFFER\|SOME .*DIFFER.*\|========= .*" "$log" | cut -c1-100)
    printf 'FAIL\texit %d%s\n' "$rc" "${detail:+: $detail}"
    return
  fi
  case $check in
    variants) need="every variant's results identical"; bad="RESULTS DIFFER\|results DIFFER" ;;
    build) need="^| kd |"; bad="| NO |" ;;
    forest) need="^median of"; bad="max rel diff\|skipped:" ;;
    study) need="every variant's predictions are bit-identical to csr direct's"; bad="DIFFER" ;;
    serve) need="every checked call's predictions are identical to csr direct's"; bad="DIFFER" ;;
    e2e) need="The default's second query on the same tree" ;;
    steps) need="^| mean |" ;;
    schedule) need="^median [0-9.]* ms" ;;
    quality) need="Δ / MST" ;;
  esac
  if [[ -n $bad ]] && grep -q "$bad" "$log"; then
    printf 'FAIL\t%s\n' "$(grep -m1 "$bad" "$log" | sed 's/  */ /g' | cut -c1-100)"
    return
  fi
  if ! grep -q "$need" "$log"; then printf 'FAIL\tno "%s" in the output\n' "$need"; return; fi
  case $check in
    variants)
      detail="$(awk '/^variant +depth/{t=1; next} t && NF >= 9 && $1 != "" && $1 !~ /^ms$/ {n++} /^median of/{exit} END{print n+0}' "$log") variants identical" ;;
    build)
      local rows yes
      rows=$(grep -c '^| \(kd\|ball\|vp\|octree\) |' "$log")
      yes=$(grep -c '^| \(kd\|ball\|vp\|octree\) |.*| yes |$' "$log")
      if [[ $device == gpu ]]; then
        ((yes == rows)) || { printf 'FAIL\t%d of %d GPU trees equal to the CPU\x27s\n' "$yes" "$rows"; return; }
        detail="$rows GPU trees equal to the CPU's"
      else
        detail="$rows CPU trees (no GPU rows)"
      fi ;;
    forest) detail="$(grep -c '^  \(gpu\|cpu\) ' "$log") variants x batches identical to the first" ;;
    study) detail="predictions bit-identical to csr direct's" ;;
    serve) detail="checked calls identical to csr direct's" ;;
    e2e) detail=$(grep -m1 "^| default" "$log" | awk -F'|' '{gsub(/ /,"",$3); print "default call " $3 " ms"}') ;;
    steps) detail=$(grep -m1 "^| mean |" "$log" | awk -F'|' '{gsub(/ /,"",$9); print "mean step " $9 " ms"}') ;;
    schedule) detail=$(grep -m1 -o "^median [0-9.]* ms" "$log") ;;
    quality)
      # Every schedule's Δ is at least the MST's (a lower bound on the optimum): Δ / MST >= 1.
      local q
      q=$(awk '/^variant /{t=1; next} t && /^[a-z]/ && substr($0, 51, 12) ~ /^ *[0-9.]+$/ {n++; r = substr($0, 51, 12) + 0;
                 if (r < 0.9995) bad = bad " " $1 "=" r} END{print n + 0 "\t" bad}' "$log")
      [[ -z ${q#*$'\t'} ]] || { printf 'FAIL\tΔ / MST below 1:%s\n' "${q#*$'\t'}"; return; }
      detail="${q%%$'\t'*} schedules, Δ / MST >= 1" ;;
  esac
  printf 'ok\t%s\n' "$detail"
}

run_case() {  # run_case INDEX: the log and NAME.result (rc, seconds, status, detail)
  local i=$1 name=${names[$1]} log=$out/${names[$1]}.log rc t0 t1
  eval "local args=(${argv[i]})"
  local cmd=("$bin" "${args[@]}")
  if ((memcheck)); then
    # shellcheck disable=SC2206
    local mc=(compute-sanitizer --tool memcheck ${MEMCHECK_ARGS---leak-check full} --error-exitcode 9)
    cmd=("${mc[@]}" "${cmd[@]}")
  fi
  t0=$(date +%s.%N)
  echo "\$ ${cmd[*]}" > "$log"
  CANOPY_UNDER_TOOL=$memcheck timeout -k 10 "$case_timeout" "${cmd[@]}" >> "$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\n' "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')" \
    "$(judge "${checks[i]}" "$rc" "$log")" > "$out/$name.result"
  IFS=$'\t' read -r rc t0 t1 detail < "$out/$name.result"
  printf '  %-26s %-8s %6ss  %s\n' "$name" "$t1" "$t0" "$detail"
}

start=$(date +%s)
for i in "${!names[@]}"; do
  rm -f "$out/${names[i]}.result"
  if [[ ${needs[i]} == gpu && $device != gpu ]]; then
    printf -- '-\t0\tskip\tneeds a GPU\n' > "$out/${names[i]}.result"
    continue
  fi
  if [[ ${inputs[i]} == *_171k* || ${inputs[i]} == *_254k* ]] && ! [[ -f $cities && -f $covtype ]]; then
    printf -- '-\t0\tFAIL\tmissing %s (--data, or --real off)\n' "$data" > "$out/${names[i]}.result"
    continue
  fi
  if ((jobs > 1)); then
    while (($(jobs -rp | wc -l) >= jobs)); do sleep 0.2; done
    run_case "$i" &
  else
    run_case "$i"
  fi
done
wait

# ---- the summary --------------------------------------------------------------------------------
failed=0
echo
printf '%-26s %-18s %4s %7s  %-8s %s\n' subcommand/case input rc seconds result detail
for i in "${!names[@]}"; do
  IFS=$'\t' read -r rc secs status detail < "$out/${names[i]}.result" || { rc='?' secs=0 status=FAIL detail='no result'; }
  printf '%-26s %-18s %4s %7s  %-8s %s\n' "${names[i]}" "${inputs[i]}" "$rc" "$secs" "$status" "$detail"
  [[ $status == ok || $status == skip ]] || failed=$((failed + 1))
done
echo
if ((failed)); then
  echo "driver smoke test: $failed of ${#names[@]} cases FAILED in $(($(date +%s) - start)) s (logs in $out)"
  exit 1
fi
echo "driver smoke test: all ${#names[@]} cases passed in $(($(date +%s) - start)) s (logs in $out)"
