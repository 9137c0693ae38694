#!/usr/bin/env bash
# Installs the Debian packages dlrun needs to build, test and run its demo.
# Idempotent: does nothing (and prints nothing) when every package is present.
# Runs apt-get as root, or through sudo when not root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libcli11-dev libfmt-dev libtomlplusplus-dev
  libboost-dev libboost-filesystem-dev
  libsqlite3-dev doctest-dev nlohmann-json3-dev
  libtorch-dev libgloo-dev zlib1g-dev libnlopt-dev
  # An optimized BLAS for LibTorch's matrix products: without it Debian's libtorch falls back
  # to the reference BLAS, 10-20x slower (docs/benchmarks.md). The OpenMP build follows
  # OMP_NUM_THREADS, which dlrun sets per rank.
  libopenblas0-openmp
  python3-torch python3-dev pybind11-dev dataset-fashion-mnist
  procps iproute2 openssh-server openssh-client slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]})) || exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=()
((EUID == 0)) || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
