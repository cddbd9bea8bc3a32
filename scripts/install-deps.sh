#!/usr/bin/env bash
# Installs the Debian packages Canopy builds with, if any are missing (needs root); without
# root it lists what is missing and how to install it. The CUDA toolkit must already be there.
# Arguments name further packages to install the same way.
set -euo pipefail

packages=(cmake ninja-build g++ make libtbb-dev libboost-graph-dev libcli11-dev libgtest-dev zlib1g-dev nlohmann-json3-dev
          # the Python package and its tests (python/): built for Debian's /usr/bin/python3
          python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-scipy python3-sklearn
          python3-xgboost python3-pandas  # the forest API takes DataFrames (its tests)
          python3-matplotlib  # scripts/plot.py and its test
          # the MPI layer (distributed/) and its mpirun tests
          libopenmpi-dev openmpi-bin
          "$@")  # extra packages a script needs (scripts/fuzz.sh: clang-14 libfuzzer-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "install-deps: the CUDA toolkit (nvcc) was not found on PATH or in /usr/local/cuda;" >&2
  echo "install-deps: install CUDA 12.4 or newer (nvcc 13 is tested) from NVIDIA first." >&2
  exit 1
fi
echo "install-deps: everything Canopy needs is installed"
