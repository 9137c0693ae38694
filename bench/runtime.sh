#!/bin/sh
# Step time of dlrun's runtime (DataParallel over c10d::Reducer) against PyTorch DDP under
# torchrun, same model, same per-rank batch (64), Gloo, one thread per rank.
#   bench/runtime.sh [BUILD_DIR]      (after `cmake --build BUILD_DIR`)
# Prints one line per configuration; the table in docs/runtime.md came from it.
. "$(dirname "$0")/runtime/setup.sh"
torchrun=${TORCHRUN:-$src/../shared/bench/torchrun-debian}
steps=${STEPS:-30}
export OMP_NUM_THREADS=1
for model in ${MODELS:-small cnn mlp}; do
  # One process, no launcher: the compute alone, for both builds of LibTorch.
  "$work/bench/runtime_step" "$model" "$steps"
  "$torchrun" --nproc_per_node 1 --monitor_interval 0.1 "$src/bench/runtime/ddp_step.py" \
    "$model" "$steps" 2>/dev/null
  for n in 2; do
    "$build/cli/dlrun" local --quiet --nproc "$n" "$work/bench/runtime_step" "$model" "$steps" 2>/dev/null \
      | sed 's/^\[0\] //'
    "$build/cli/dlrun" local --quiet --nproc "$n" "$work/bench/runtime_step" "$model" "$steps" nosync 2>/dev/null \
      | sed 's/^\[0\] //'
    "$torchrun" --nproc_per_node "$n" --monitor_interval 0.1 "$src/bench/runtime/ddp_step.py" \
      "$model" "$steps" 2>/dev/null
  done
done
# Allreduce of 4/16/64 MB through the runtime against raw c10d Gloo, 2 ranks.
"$build/cli/dlrun" local --quiet --nproc 2 "$work/bench/allreduce" ${RUNS:-31} 2>/dev/null | sed 's/^\[0\] //'
