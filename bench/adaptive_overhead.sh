#!/bin/sh
# What dlrun::AdaptiveBatch costs per step when held at one batch size, against a plain
# DataParallel + Adam step, on examples/fashion_mnist's small MLP and CNN, 2 ranks, 32 samples
# per rank (bench/runtime/adaptive_overhead.cpp: the arms alternate in one process).
#   bench/adaptive_overhead.sh [BUILD_DIR]      (after `cmake --build BUILD_DIR`)
# PASSES (default 3) runs of each model; BLOCKS and STEPS per block as the program takes them;
# CADENCES (default "1 4") the measurement cadences of the adaptive arms.
BENCH_TARGET=adaptive_overhead . "$(dirname "$0")/runtime/setup.sh"
for pass in $(seq "${PASSES:-3}"); do
  for model in ${MODELS:-small cnn}; do
    "$build/cli/dlrun" local --quiet --nproc 2 "$work/bench/adaptive_overhead" "$model" "${BLOCKS:-30}" \
      "${STEPS:-50}" ${CADENCES:-1 4} 2>/dev/null | sed 's/^\[0\] //'
  done
done
