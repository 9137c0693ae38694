#!/bin/sh
# The shared-memory allreduce alone, two processes: bench/shm/run.sh
# (sizes: the small MLP's gradients, 4 MB, 16 MB). Needs only g++ and libfmt-dev.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O2 -std=c++17 -I"$src/runtime/src" -I"$src/runtime/include" -I"$src/launcher/include" \
  "$src/bench/shm/shm_allreduce_probe.cpp" "$src/runtime/src/shm_allreduce.cpp" -lfmt -o "$out/probe"
for n in 203530 1048576 4194304; do "$out/probe" "$n"; done
