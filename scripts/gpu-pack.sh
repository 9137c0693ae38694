#!/bin/bash
# Packs what a lent GPU machine lacks into .gpu/ (ignored by git through .git/info/exclude), for
# a device run that carries it: Debian .debs of dlrun's build dependencies (the GPU machines
# run Ubuntu with a pip torch and have no package archive) and the Fashion-MNIST files. About
# 45 MB. Run on the Debian development machine, then on the GPU machine:
#
#   FASHION_MNIST_DIR=$PWD/.gpu/data DEPS_DEBS=$PWD/.gpu/debs OUT_DIR=$OUT BUDGET=545 \
#       bash scripts/gpu-bench.sh /tmp/build-gpu          (or scripts/gpu-check.sh)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p .gpu/debs .gpu/data
# scripts/gpu-build.sh's list: headers, and the shared libraries the -dev packages link to.
(cd .gpu/debs && apt-get download -q libfmt-dev libfmt9 libcli11-dev libtomlplusplus-dev libtomlplusplus3 \
    libboost1.74-dev libsqlite3-dev libsqlite3-0 nlohmann-json3-dev libnlopt-dev libnlopt0 \
    zlib1g-dev zlib1g libgloo-dev doctest-dev 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
cp /usr/share/datasets/fashion-mnist/*.gz .gpu/data/
du -sh .gpu
