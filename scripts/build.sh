#!/usr/bin/env bash
# Installs what is missing, then configures and builds Canopy (Release) in build/.
#   CANOPY_BUILD_DIR    build folder (default: build)
#   CANOPY_CUDA_ARCHS   CUDA architectures (default: 90, the H100)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir=${CANOPY_BUILD_DIR:-build}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${CANOPY_CUDA_ARCHS:-90}" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)"
