#!/usr/bin/env bash
# Fuzzes Canopy's input readers and its forest executors with clang's libFuzzer (issue 18).
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS|-runs=N]
#
#   TARGET   read_csv, specs, forest_xgboost, forest_canopy, forest_diff; all (default): each in
#            turn. Sources: tests/fuzz/fuzz_TARGET.cpp; seeds and crash reproducers:
#            tests/data/fuzz/TARGET/ (ctest replays them: ctest -R fuzz).
#   SECONDS  fuzz each target that long (default 60); -runs=N: N executions instead.
#
# e.g. scripts/fuzz.sh forest_diff -runs=10000000. Needs root the first time: it installs
# clang-14 and libfuzzer-14-dev (and Canopy's own build dependencies) if missing. It builds the
# library's CUDA objects with CMake in $CANOPY_REPLAY_DIR (default build-replay; the targets use
# the CPU paths only, but the host code links against them), compiles the library's .cpp files
# and the targets with clang++-14 -fsanitize=fuzzer,address,undefined -g -O1 into
# $CANOPY_FUZZ_DIR (default build-fuzz), and runs each target on build-fuzz/corpus/TARGET
# (seeded from tests/data/fuzz/TARGET). Crashes go to build-fuzz/artifacts/TARGET/; copy a fixed
# one to tests/data/fuzz/TARGET/crash-<what>. FUZZ_FLAGS adds libFuzzer flags (e.g. -jobs=2).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${1:-all}
budget=${2:-60}
replay_dir=${CANOPY_REPLAY_DIR:-build-replay}
fuzz_dir=${CANOPY_FUZZ_DIR:-build-fuzz}
all_targets=(read_csv specs forest_xgboost forest_canopy forest_diff)
if [[ $target == all ]]; then targets=("${all_targets[@]}"); else targets=("$target"); fi
for t in "${targets[@]}"; do
  [[ -f tests/fuzz/fuzz_$t.cpp ]] || { echo "fuzz: no target '$t' (targets: ${all_targets[*]})" >&2; exit 2; }
done
if [[ $budget == -runs=* ]]; then run_flag=$budget; else run_flag=-max_total_time=$budget; fi

# ---- tools --------------------------------------------------------------------------------------
scripts/install-deps.sh clang-14 libfuzzer-14-dev >/dev/null
cxx=clang++-14

# ---- the library's CUDA objects (nvcc, through CMake) -------------------------------------------
if [[ ! -f $replay_dir/CMakeCache.txt ]]; then
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$replay_dir" "${generator[@]}" -DCANOPY_BUILD_BENCHMARKS=OFF -DCANOPY_BUILD_EXAMPLES=OFF >/dev/null
fi
echo "fuzz: building the library in $replay_dir (its CUDA objects)"
cmake --build "$replay_dir" --target canopy -j"$(nproc)" | tail -1
mkdir -p "$fuzz_dir/obj"
mapfile -t cuda_objs < <(find "$replay_dir/CMakeFiles/canopy.dir" -name '*.cu.o' | sort)
rm -f "$fuzz_dir/libcanopy_cuda.a"
ar rcs "$fuzz_dir/libcanopy_cuda.a" "${cuda_objs[@]}"

# ---- the library's .cpp files and the targets, by clang with sanitizers ---------------------------
# -fno-sanitize-recover: undefined behaviour stops the run, so libFuzzer keeps the input.
common=(-std=c++17 -g -O1 -ffp-contract=off -fno-sanitize-recover=all -I"$root" -I"$root/tests/fuzz"
        -I/usr/local/cuda/include)
lib_flags=("${common[@]}" -fsanitize=fuzzer-no-link,address,undefined)
# The sources listed in add_library(canopy ...) of CMakeLists.txt.
mapfile -t sources < <(sed -n '/^add_library(canopy STATIC/,/^)/p' CMakeLists.txt | grep -oE '^[[:space:]]+[A-Za-z0-9_/]+\.cpp$' | tr -d ' ')

# Up to date: the object is newer than its source and than every header its .d file lists.
stale() {
  local obj=$1 src=$2
  [[ -f $obj && -f $obj.d && $obj -nt $src ]] || return 0
  local dep
  for dep in $(sed -e 's/\\$//' -e 's/^[^:]*://' "$obj.d"); do
    [[ $dep -nt $obj ]] && return 0
  done
  return 1
}
compile() {  # compile OBJ SRC FLAGS...
  local obj=$1 src=$2; shift 2
  if stale "$obj" "$src"; then
    mkdir -p "$(dirname "$obj")"
    "$cxx" "$@" -MMD -MF "$obj.d" -c "$src" -o "$obj"
  fi
}
echo "fuzz: compiling ${#sources[@]} library sources with $cxx"
pids=()
for src in "${sources[@]}"; do
  compile "$fuzz_dir/obj/${src%.cpp}.o" "$src" "${lib_flags[@]}" &
  pids+=($!)
  if [[ ${#pids[@]} -ge $(nproc) ]]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done
host_objs=()
for src in "${sources[@]}"; do host_objs+=("$fuzz_dir/obj/${src%.cpp}.o"); done
rm -f "$fuzz_dir/libcanopy_host.a"
ar rcs "$fuzz_dir/libcanopy_host.a" "${host_objs[@]}"

cuda_lib=/usr/local/cuda/lib64
for t in "${targets[@]}"; do
  compile "$fuzz_dir/obj/fuzz_$t.o" "tests/fuzz/fuzz_$t.cpp" "${common[@]}" -fsanitize=fuzzer,address,undefined
  "$cxx" -fsanitize=fuzzer,address,undefined "$fuzz_dir/obj/fuzz_$t.o" \
    -Wl,--start-group "$fuzz_dir/libcanopy_host.a" "$fuzz_dir/libcanopy_cuda.a" -Wl,--end-group \
    -L"$cuda_lib" -lcudart_static -ltbb -lz -ldl -lrt -lpthread -o "$fuzz_dir/fuzz_$t"
done

# ---- fuzzing ----------------------------------------------------------------------------------------
max_len() {
  case $1 in
    specs) echo 128 ;;
    forest_diff) echo 512 ;;
    read_csv) echo 4096 ;;
    *) echo 8192 ;;
  esac
}
# The targets write each input to a file: in memory (/dev/shm) read_csv runs 1.9x the inputs
# per second it runs on this machine's disk.
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
# The CUDA runtime (linked, never initialised on these CPU paths) and ASan's shadow gap.
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
status=0
summary=()
for t in "${targets[@]}"; do
  corpus=$fuzz_dir/corpus/$t
  artifacts=$fuzz_dir/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  dict=(); [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
  log=$fuzz_dir/fuzz_$t.log
  echo "fuzz: $t ($run_flag, log $log)"
  start=$(date +%s)
  rc=0
  # shellcheck disable=SC2086
  # -entropic=0: libFuzzer 14's entropic schedule spent half the time in its own bookkeeping
  # here (UpdateFeatureFrequency); without it these targets run 2.3x (read_csv) to 3.4x
  # (forest_diff) more inputs per second.
  "$fuzz_dir/fuzz_$t" "$run_flag" -entropic=0 -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${dict[@]}" ${FUZZ_FLAGS:-} "$corpus" "tests/data/fuzz/$t" >"$log" 2>&1 || rc=$?
  wall=$(( $(date +%s) - start ))
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1 || true)
  if [[ $rc -eq 0 ]]; then result=ok; else result="FAILED (exit $rc; see $log and $artifacts)"; status=1; fi
  line="$t: ${execs:-?} executions in ${wall} s: $result"
  echo "fuzz: $line"
  summary+=("$line")
done
echo "fuzz: summary"
printf '  %s\n' "${summary[@]}"
exit $status
