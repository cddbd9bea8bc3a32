#!/usr/bin/env bash
# Builds Canopy with AddressSanitizer + UndefinedBehaviorSanitizer (leak checking on) in a second
# build folder and runs the CPU test suite under it. Installs what is missing first, like
# scripts/build.sh. Arguments go to ctest as they are, e.g. a subset:
#   scripts/sanitize.sh                  # every test (the GPU ones skip without a GPU)
#   scripts/sanitize.sh -R 'ReadCsv|bench\.'
#   scripts/sanitize.sh --quick          # CI: the library and the GoogleTest suite only (every
#                                        # component), no canopy-bench, examples, soak or fuzz
#   CANOPY_ASAN_DIR     build folder (default: build-asan)
#   CANOPY_CUDA_ARCHS   CUDA architectures (default: 90, the H100)
#   CANOPY_ASAN_BUILD_ONLY=1   configure and build, run nothing
# Only host code is instrumented; device code runs as in a normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
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

# protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be.
export ASAN_OPTIONS="detect_leaks=1:protect_shadow_gap=0:halt_on_error=1:abort_on_error=0:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# install.consumer links a plain (uninstrumented) project against the instrumented library,
# which cannot link; it tests packaging, which the normal build's suite covers.
# --quick: the GoogleTest cases only, whose names are capitalised (bench., example., soak. ... are not).
filter=()
[ $quick = 1 ] && filter=(-R '^[A-Z]')
ctest --test-dir "$build_dir" --output-on-failure --parallel "$(nproc)" -E '^install\.consumer$' "${filter[@]}" "$@"
t2=$(date +%s)
echo "sanitize: tests took $((t2 - t1)) s"
