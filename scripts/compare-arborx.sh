#!/usr/bin/env bash
# Canopy beside ArborX on the same GPU, the same points and the same queries: kNN at
# jz-tree's shape (N uniform 3-d points, N uniform queries) and the radius search for a mean
# of 30 neighbours, tree build included. ArborX and Kokkos are fetched and built here for the
# comparison only, never vendored into the repository.
#
#   scripts/compare-arborx.sh build   # Kokkos + ArborX + benchmarks/arborx (needs nvcc, no GPU)
#   scripts/compare-arborx.sh run     # both libraries on the GPU, then the table
#   scripts/compare-arborx.sh         # both
#
#   ARBORX_WORK    working folder (default: build-arborx)
#   KOKKOS_SRC     a Kokkos source tree (default: cloned at KOKKOS_COMMIT)
#   ARBORX_SRC     an ArborX source tree (default: cloned at ARBORX_COMMIT)
#   CANOPY_BENCH   canopy-bench (default: build/benchmarks/canopy-bench)
#   SIZES          N values (default: "1000000 10000000 30000000")
#   KS             k values (default: "8,30"); REPEAT (default 3); CHECK sampled queries (100)
#   CUDA_ARCH      the GPU's sm (default: 90, the H100)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(realpath -m "${ARBORX_WORK:-build-arborx}")
KOKKOS_COMMIT=${KOKKOS_COMMIT:-28848dfa8fc1411873b6a663c4d29ba05712510e}  # develop, 2025-06-20 (4.6.99)
ARBORX_COMMIT=${ARBORX_COMMIT:-f9244ba03904cc518a54d99e9f87bb42dc9ecaf3}  # v2.0.1, 2025-07-01
arch=${CUDA_ARCH:-90}
step=${1:-all}

source_tree() {  # name url commit override -> prints the tree
  local name=$1 url=$2 commit=$3 override=$4
  if [[ -n "$override" ]]; then
    echo "$override"
    return
  fi
  if [[ ! -d "$work/src/$name/.git" ]]; then
    git clone --quiet "$url" "$work/src/$name" >&2
    git -C "$work/src/$name" checkout --quiet "$commit" >&2
  fi
  echo "$work/src/$name"
}

build() {
  mkdir -p "$work/src" "$work/bin"
  local kokkos arborx
  kokkos=$(source_tree kokkos https://github.com/kokkos/kokkos "$KOKKOS_COMMIT" "${KOKKOS_SRC:-}")
  arborx=$(source_tree arborx https://github.com/arborx/ArborX "$ARBORX_COMMIT" "${ARBORX_SRC:-}")
  # Kokkos is built from a copy: the CUDA 13 patch must not touch a caller's tree.
  rm -rf "$work/kokkos-src" && cp -r "$kokkos" "$work/kokkos-src"
  # CUDA 13 changed two runtime calls that this Kokkos makes (cudaGraphAddDependencies gained
  # edge data, cudaMemPrefetchAsync takes a cudaMemLocation); newer Kokkos has the same fix.
  local inst=$work/kokkos-src/core/src/Cuda/Kokkos_Cuda_Instance.hpp
  if grep -q 'cudaGraphAddDependencies(graph, from, to, numDependencies)' "$inst"; then
    sed -i \
      -e 's|^\( *\)return cudaGraphAddDependencies(graph, from, to, numDependencies);|#if CUDART_VERSION >= 13000\n\1return cudaGraphAddDependencies(graph, from, to, nullptr, numDependencies);\n#else\n&\n#endif|' \
      -e 's|^\( *\)return cudaMemPrefetchAsync(devPtr, count, dstDevice, m_stream);|#if CUDART_VERSION >= 13000\n\1cudaMemLocation loc{};\n\1loc.type = cudaMemLocationTypeDevice;\n\1loc.id = dstDevice;\n\1return cudaMemPrefetchAsync(devPtr, count, loc, 0, m_stream);\n#else\n&\n#endif|' \
      "$inst"
    grep -q 'cudaMemLocationTypeDevice' "$inst" || { echo "compare-arborx: the CUDA 13 edit of $inst failed" >&2; exit 1; }
  fi
  # nvcc_wrapper's default sm_70 is gone from CUDA 13; CMake's compiler checks call it bare.
  sed "s/^default_arch=\"sm_70\"/default_arch=\"sm_$arch\"/" "$work/kokkos-src/bin/nvcc_wrapper" > "$work/bin/nvcc_wrapper"
  chmod +x "$work/bin/nvcc_wrapper"
  local cxx=$work/bin/nvcc_wrapper gen=()
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  local arch_flag
  case $arch in
    90) arch_flag=-DKokkos_ARCH_HOPPER90=ON ;;
    80) arch_flag=-DKokkos_ARCH_AMPERE80=ON ;;
    *) echo "compare-arborx: CUDA_ARCH=$arch: add its Kokkos_ARCH_ option here" >&2; exit 2 ;;
  esac
  # The legacy View: with the mdspan-based one (this Kokkos's default) under CUDA 13, ArborX's
  # first reduction wrote through a null pointer (compute-sanitizer, 2026-11-28, H200).
  cmake -S "$work/kokkos-src" -B "$work/kokkos-build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_STANDARD=20 -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_INSTALL_PREFIX="$work/kokkos" \
    -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON "$arch_flag" -DKokkos_ENABLE_TESTS=OFF \
    -DKokkos_ENABLE_IMPL_VIEW_LEGACY=ON ${KOKKOS_CMAKE_ARGS:-} >/dev/null
  cmake --build "$work/kokkos-build" --parallel "$(nproc)"
  cmake --install "$work/kokkos-build" >/dev/null
  cmake -S "$arborx" -B "$work/arborx-build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_EXTENSIONS=OFF -DKokkos_ROOT="$work/kokkos" -DARBORX_ENABLE_MPI=OFF -DCMAKE_INSTALL_PREFIX="$work/arborx" >/dev/null
  cmake --install "$work/arborx-build" >/dev/null
  cmake -S "$root/benchmarks/arborx" -B "$work/bench-build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_EXTENSIONS=OFF -DCMAKE_PREFIX_PATH="$work/kokkos;$work/arborx" >/dev/null
  cmake --build "$work/bench-build" --parallel "$(nproc)"
  cp "$work/bench-build/arborx-bench" "$work/bin/arborx-bench"
  echo "compare-arborx: built $work/bin/arborx-bench (Kokkos from $kokkos, ArborX from $arborx)"
}

run() {
  local bench=${CANOPY_BENCH:-build/benchmarks/canopy-bench} ax=$work/bin/arborx-bench out=$work/results
  local ks=${KS:-8,30} repeat=${REPEAT:-3} check=${CHECK:-100}
  [[ -x "$bench" ]] || { echo "compare-arborx: no $bench (scripts/build.sh builds it)" >&2; exit 2; }
  [[ -x "$ax" ]] || { echo "compare-arborx: no $ax (run the build step)" >&2; exit 2; }
  mkdir -p "$out"
  for n in ${SIZES:-1000000 10000000 30000000}; do
    local gen=(--generate "uniform:$n:3" --queries "uniform:$n:3" --repeat "$repeat")
    for k in ${ks//,/ }; do
      "$bench" knn "${gen[@]}" --k "$k" --variants auto --check "$check" --json "$out/canopy-knn-$n-$k.json" \
        > "$out/canopy-knn-$n-$k.log"
    done
    "$bench" pc "${gen[@]}" --radius auto:30 --variants auto --json "$out/canopy-pc-$n.json" > "$out/canopy-pc-$n.log"
    "$bench" pc "${gen[@]}" --radius auto:30 --variants auto --output lists --json "$out/canopy-pcl-$n.json" \
      > "$out/canopy-pcl-$n.log"
    local radius
    radius=$(python3 -c 'import json,sys; print(repr(json.load(open(sys.argv[1]))["radius"]))' "$out/canopy-pc-$n.json")
    "$ax" --points "$n" --queries "$n" --dims 3 --k "$ks" --radius "$radius" --repeat "$repeat" --check "$check" \
      --json "$out/arborx-$n.json" | tee "$out/arborx-$n.log"
  done
  python3 "$root/scripts/compare_arborx_table.py" "$out" | tee "$out/table.md"
}

case $step in
  build) build ;;
  run) run ;;
  all) build && run ;;
  *) echo "usage: scripts/compare-arborx.sh [build|run|all]" >&2; exit 2 ;;
esac
