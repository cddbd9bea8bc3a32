#!/usr/bin/env bash
# Builds Canopy with AddressSanitizer + UndefinedBehaviorSanitizer (leak checking on) in a second
# build folder and runs the CPU test suite under it. Installs what is missing first, like
# scripts/build.sh. Arguments go to ctest as they are, e.g. a subset:
#   scripts/sanitize.sh                  # every test (the GPU ones skip without a GPU)
#   scripts/sanitize.sh -R 'ReadCsv|bench\.'
#   scripts/sanitize.sh --quick          # CI: the library and the GoogleTest suite only (every
#                                        # component), no canopy-bench, examples, soak or fuzz
#   scripts/sanitize.sh --ci             # CI: the host code of the library and of the whole
#                                        # GoogleTest suite (every component) instrumented, linked
#                                        # with the normal build's CUDA objects (run scripts/build.sh
#                                        # first); device code is not rebuilt, which is what makes it
#                                        # fit next to the normal CI run on 2 cores
#   scripts/sanitize.sh --thread         # ThreadSanitizer (clang++) over the same host code as
#                                        # --ci, in build-tsan, linked with the normal build's CUDA
#                                        # objects (run scripts/build.sh first): the CPU suite, the
#                                        # threads' tests included (the CUDA runtime, TBB, gtest
#                                        # stay uninstrumented; scripts/tsan.supp says what that
#                                        # costs). Arguments go to the test binary (--gtest_filter=...)
#   CANOPY_ASAN_DIR     build folder (default: build-asan; --ci: build-asan-ci)
#   CANOPY_TSAN_DIR     build folder of --thread (default: build-tsan)
#   CANOPY_TSAN_CXX     its compiler (default: clang++; g++ works too)
#   CANOPY_TSAN_SHARDS  --thread: run the suite as this many GoogleTest shards at once (default 1;
#                       the whole CPU suite takes over an hour in one process on 2 cores)
#   CANOPY_CUDA_ARCHS   CUDA architectures (default: 90, the H100)
#   CANOPY_ASAN_BUILD_ONLY=1   configure and build, run nothing
# Only host code is instrumented; device code runs as in a normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be.
sanitizer_env() {
  export ASAN_OPTIONS="detect_leaks=1:protect_shadow_gap=0:halt_on_error=1:abort_on_error=0:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
}

# The host code of the library and of the GoogleTest suite (every .cpp file), compiled with
# compiler $1 and the flags after it into $out/obj (only what changed since), then linked with the
# normal build's CUDA objects into $out/canopy_tests. $link_flags: the sanitizer's link flags.
host_build() {
  local cxx=$1
  shift
  local flags=("$@")
  # Every .cpp file the lists name (several may share a line), comments left out.
  mapfile -t lib_sources < <(sed -n '/^add_library(canopy STATIC/,/^)/p' CMakeLists.txt | grep -v '^[[:space:]]*#' | grep -oE '[A-Za-z0-9_/]+\.cpp\b')
  # Every test file but those whose tests all need a GPU (they skip where CI runs; the full
  # build above instruments them on a GPU machine).
  gpu_only='test_(kdtree_gpu|octree_gpu|forest_gpu|resident)\.cpp$'
  mapfile -t test_sources < <(sed -n '/^add_executable(canopy_tests/,/^)/p' tests/CMakeLists.txt | grep -v '^[[:space:]]*#' | grep -oE '[A-Za-z0-9_/]+\.cpp\b' | grep -Ev "$gpu_only" | sed 's|^|tests/|')
  mkdir -p "$out"
  objs=()
  pids=()
  for src in "${lib_sources[@]}" "${test_sources[@]}"; do
    obj=$out/obj/${src%.cpp}.o
    objs+=("$obj")
    if [[ ! -f $obj || $src -nt $obj ]] || { [[ -f $obj.d ]] && [[ -n $(find $(sed -e 's/\\$//' -e 's/^[^:]*://' "$obj.d") -newer "$obj" 2>/dev/null | head -1) ]]; }; then
      mkdir -p "$(dirname "$obj")"
      "$cxx" "${flags[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj" &
      pids+=($!)
      if [[ ${#pids[@]} -ge $(nproc) ]]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  # The device code as the normal build compiled it: the library's and the tests' .cu objects.
  mapfile -t cuda_objs < <(find "$normal/CMakeFiles/canopy.dir" "$normal/tests/CMakeFiles/canopy_tests.dir" -name '*.cu.o' | sort)
  "$cxx" $link_flags "${objs[@]}" "${cuda_objs[@]}" -lgtest -lgtest_main -ltbb -lz \
    -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -o "$out/canopy_tests"
}

# The flags of the normal build (NDEBUG included: the instrumented objects link with its CUDA
# objects, so both must see the same headers), at -O1 with a sanitizer's.
common_flags() {
  echo "-std=c++17 -O1 -g -DNDEBUG -ffp-contract=off -fno-omit-frame-pointer -DBOOST_ALL_NO_LIB -DGTEST_HAS_PTHREAD=1"
}

if [ "${1:-}" = --thread ]; then
  shift
  normal=${CANOPY_BUILD_DIR:-build}
  out=${CANOPY_TSAN_DIR:-build-tsan}
  [ -f "$normal/tests/canopy_tests" ] || { echo "sanitize --thread: build $normal first (scripts/build.sh)" >&2; exit 2; }
  # clang++ (Debian's clang) on a fresh machine: install-deps adds it.
  command -v "${CANOPY_TSAN_CXX:-clang++}" > /dev/null || scripts/install-deps.sh clang
  t0=$(date +%s)
  link_flags=-fsanitize=thread
  # shellcheck disable=SC2046
  host_build "${CANOPY_TSAN_CXX:-clang++}" $(common_flags) -fsanitize=thread \
    "-DCANOPY_TEST_DATA=\"$root/tests/data\"" -I"$root" -I"$root/tests" -isystem /usr/local/cuda/include
  t1=$(date +%s)
  echo "sanitize --thread: built the instrumented host code in $((t1 - t0)) s"
  # exitcode: a report fails the run at exit (every report is printed first).
  export TSAN_OPTIONS="suppressions=$root/scripts/tsan.supp:print_suppressions=0:second_deadlock_stack=1:exitcode=66${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
  # Left out for time, as in --ci (its code runs in the smaller CountsEqualBruteForce cases).
  filter=${CANOPY_SANITIZE_FILTER:--CountsEqualBruteForceEdge.LargeBatchAcrossWarpsAndBlocks}
  shards=${CANOPY_TSAN_SHARDS:-1}
  if [ "$shards" -gt 1 ]; then
    # GoogleTest's sharding: each process runs every shards-th test; logs in $out/shard-*.log.
    rc=0
    pids=()
    for ((i = 0; i < shards; ++i)); do
      GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$out/canopy_tests" --gtest_brief=1 --gtest_filter="$filter" "$@" \
        > "$out/shard-$i.log" 2>&1 &
      pids+=($!)
    done
    for ((i = 0; i < shards; ++i)); do
      wait "${pids[$i]}" || { rc=1; echo "sanitize --thread: shard $i failed (exit $?): $out/shard-$i.log" >&2; }
    done
    # A shard's "[  PASSED  ] N tests." is its last word on what finished.
    cat "$out"/shard-*.log | awk '/^\[  PASSED  \] [0-9]/{p+=$4} /^\[  SKIPPED \] [0-9]/{s+=$4} /^\[  FAILED  \] [A-Z]/{f++}
      END{print "sanitize --thread: " p+0 " passed, " s+0 " skipped, " f+0 " failed"}'
    grep -l 'WARNING: ThreadSanitizer' "$out"/shard-*.log >&2 && rc=1
    echo "sanitize --thread: $shards shards under ThreadSanitizer took $(($(date +%s) - t1)) s"
    exit $rc
  fi
  "$out/canopy_tests" --gtest_brief=1 --gtest_filter="$filter" "$@"
  echo "sanitize --thread: the GoogleTest suite under ThreadSanitizer took $(($(date +%s) - t1)) s"
  exit 0
fi

if [ "${1:-}" = --ci ]; then
  shift
  normal=${CANOPY_BUILD_DIR:-build}
  out=${CANOPY_ASAN_DIR:-build-asan-ci}
  [ -f "$normal/tests/canopy_tests" ] || { echo "sanitize --ci: build $normal first (scripts/build.sh)" >&2; exit 2; }
  t0=$(date +%s)
  link_flags=-fsanitize=address,undefined
  # shellcheck disable=SC2046
  host_build g++ $(common_flags) -fsanitize=address,undefined -fno-sanitize-recover=all \
    "-DCANOPY_TEST_DATA=\"$root/tests/data\"" -I"$root" -I"$root/tests" -isystem /usr/local/cuda/include
  t1=$(date +%s)
  echo "sanitize --ci: built the instrumented host code in $((t1 - t0)) s"
  sanitizer_env
  # Left out for time: one brute-force count of 10^5 queries (78 s instrumented) whose code the
  # other CountsEqualBruteForce cases run at smaller sizes.
  "$out/canopy_tests" --gtest_brief=1 --gtest_filter="${CANOPY_SANITIZE_FILTER:--CountsEqualBruteForceEdge.LargeBatchAcrossWarpsAndBlocks}" "$@"
  echo "sanitize --ci: the GoogleTest suite under ASan + UBSan took $(($(date +%s) - t1)) s"
  exit 0
fi

quick=0
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
scripts/install-deps.sh
build_dir=${CANOPY_ASAN_DIR:-build-asan}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

san="-fsanitize=address,undefined -fno-omit-frame-pointer"
# nvcc splits -Xcompiler values at commas, so each host flag is passed on its own.
cuda_san="-Xcompiler=-fsanitize=address -Xcompiler=-fsanitize=undefined -Xcompiler=-fno-omit-frame-pointer"
# Debug with its flags replaced: -O1 keeps the tests fast enough, and NDEBUG stays undefined.
# Benchmarks stay on (the bench.* tests run canopy-bench), and so do the examples (tested too);
# --quick leaves both out. The Python module stays out: an instrumented extension cannot load
# into an uninstrumented interpreter. Debug also turns on oneTBB's own assertions (TBB_USE_DEBUG).
extras=ON targets=()
if [ $quick = 1 ]; then
  extras=OFF
  targets=(--target canopy_tests)
fi
t0=$(date +%s)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
  -DCANOPY_BUILD_BENCHMARKS=$extras -DCANOPY_BUILD_EXAMPLES=$extras -DCANOPY_BUILD_PYTHON=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CANOPY_CUDA_ARCHS:-90}" \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
  -DCMAKE_CUDA_FLAGS="$cuda_san" -DCMAKE_CUDA_FLAGS_DEBUG="-g -Xcompiler=-O1" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)" "${targets[@]}"
t1=$(date +%s)
echo "sanitize: build took $((t1 - t0)) s"
[ "${CANOPY_ASAN_BUILD_ONLY:-0}" = 1 ] && exit 0

sanitizer_env
# install.consumer links a plain (uninstrumented) project against the instrumented library,
# which cannot link; it tests packaging, which the normal build's suite covers.
# --quick: the GoogleTest cases only, whose names are capitalised (bench., example., soak. ... are not).
filter=()
[ $quick = 1 ] && filter=(-R '^[A-Z]')
ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)" -E '^install\.consumer$' "${filter[@]}" "$@"
t2=$(date +%s)
echo "sanitize: tests took $((t2 - t1)) s"
