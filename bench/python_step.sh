#!/bin/sh
# Step time of the same model through dlrun.DataParallel (import dlrun, under dlrun local) and
# PyTorch's DistributedDataParallel (under torchrun), 2 ranks on this machine, Gloo/shared
# memory, Adam, one thread per rank: bench/python/step.py. PASSES passes (3), the two
# alternating first; one line per run.
#   sh bench/python_step.sh [BUILD_DIR]      (after make build)
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
torchrun=${TORCHRUN:-$src/../shared/bench/torchrun-debian}
export OMP_NUM_THREADS=1 PYTHONPATH="$build/python" DLRUN_HOME="${DLRUN_HOME:-$(mktemp -d)}"
step="$src/bench/python/step.py"
dlrun_step() {
  "$build/cli/dlrun" local --quiet --nproc 2 -- /usr/bin/python3 "$step" --impl dlrun "$@" 2>/dev/null | sed 's/^\[0\] //'
}
ddp_step() {
  "$torchrun" --nproc_per_node 2 --monitor_interval 0.1 "$step" --impl ddp "$@" 2>/dev/null
}
for pass in $(seq "${PASSES:-3}"); do
  for model in ${MODELS:-mlp cnn}; do
    if [ $((pass % 2)) -eq 1 ]; then
      dlrun_step --model "$model"; ddp_step --model "$model"
    else
      ddp_step --model "$model"; dlrun_step --model "$model"
    fi
  done
done
