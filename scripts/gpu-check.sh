#!/bin/bash
# The GPU checks of dlrun, for a machine with NVIDIA GPUs and a CUDA build of PyTorch in
# python3 (pip's torch carries its LibTorch, CUDA and NCCL). Builds dlrun against that
# LibTorch, then runs: the runtime's unit tests (runtime::Cuda: NCCL, DataParallel and
# checkpoints on the GPU), fashion_mnist under `dlrun local --gpus N` (NCCL), a stop and
# resume of it on the GPU, the same on CPU ranks (Gloo), the torch.distributed example
# under `dlrun local --gpus N`, and when the Python module builds, examples/python_adaptive
# (import dlrun) on the GPUs and its step time against DDP (bench/python/step.py).
#
#   scripts/gpu-check.sh [BUILD_DIR]          (default build-gpu/)
#
# DEPS_DEBS or DEPS_PREFIX: dlrun's other build dependencies where they are not installed
# (scripts/gpu-build.sh).
# FASHION_MNIST_DIR: the dataset's .gz files (default /usr/share/datasets/fashion-mnist).
# EPOCHS: of the fashion_mnist runs (default 2).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-gpu}
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
epochs=${EPOCHS:-2}
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL",
  torch.cuda.nccl.version(), "GPUs", torch.cuda.device_count())'
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
((gpus > 0)) || { echo "gpu-check: no GPU visible to torch" >&2; exit 1; }

step() { echo; echo "== $*"; }
step "configure and build against $torch_prefix"
. "$src/scripts/gpu-build.sh"
gpu_build "$src" "$build" "$data" dlrun dlrun_runtime_unit_tests fashion_mnist
# import dlrun: built when CMake found Python's headers (pybind11 from torch's own headers).
cmake --build "$build" --target dlrun_python || echo "gpu-check: the Python module was not built"

dlrun=$build/cli/dlrun
example=$build/examples/fashion_mnist/fashion_mnist
step "runtime unit tests (the runtime::Cuda ones run here)"
failures=0
# From here on every check runs, and the exit status says whether one failed.
set +e
check() { "$@" || { echo "gpu-check: FAILED ($?): $*"; failures=1; }; }
"$build/test/unit/runtime/dlrun_runtime_unit_tests" -ts='runtime::Cuda' -s 2>&1 |
    grep -E "TEST CASE|skipped|passed|failed|ERROR" || true
"$build/test/unit/runtime/dlrun_runtime_unit_tests" || { echo "gpu-check: unit tests FAILED"; failures=1; }

step "fashion_mnist, dlrun local --gpus $gpus ($epochs epochs, global batch 256)"
check "$dlrun" local --gpus "$gpus" "$example" --epochs "$epochs" --batch-size 256

step "stop (SIGTERM after 3 s) and resume on the GPU"
rm -rf "$build/gpu-ckpt"
"$dlrun" local --gpus "$gpus" "$example" --epochs 1 --batch-size 64 --slow-ms 20 \
    --checkpoint-dir "$build/gpu-ckpt" > "$build/gpu-stop.log" 2>&1 & pid=$!
sleep 3; kill -TERM "$pid"; wait "$pid"; rc=$?
cat "$build/gpu-stop.log"
# dlrun itself was signalled: it exits 143 once the ranks stopped with their checkpoint (75).
echo "dlrun exited $rc"
((rc == 143)) && grep -q "checkpoint saved, exit 75" "$build/gpu-stop.log" || failures=1
check "$dlrun" local --gpus "$gpus" "$example" --epochs 1 --batch-size 64 --checkpoint-dir "$build/gpu-ckpt" \
    --checkpoint-every 200  # old checkpoints are pruned (keep the last 3)
ls "$build/gpu-ckpt"

step "fashion_mnist --adaptive on the GPU (AdaptiveBatch with CUDA gradients)"
check "$dlrun" local --gpus "$gpus" "$example" --epochs 1 --adaptive --max-batch-size 4096

step "fashion_mnist, dlrun local --nproc 2 --device cpu (Gloo, shared memory) on this LibTorch"
check "$dlrun" local --nproc 2 "$example" --epochs 1 --batch-size 256 --train-limit 20000

step "examples/python_ddp under dlrun local --gpus $gpus (NCCL)"
FASHION_MNIST_DIR=$data check "$dlrun" local --gpus "$gpus" python3 "$src/examples/python_ddp/train.py" \
    --epochs "$epochs" --batch-size 256
if [[ -d "$build/python/dlrun" ]]; then
  step "import dlrun: examples/python_adaptive under dlrun local --gpus $gpus (NCCL), fixed and --adaptive"
  export PYTHONPATH="$build/python"
  FASHION_MNIST_DIR=$data check "$dlrun" local --gpus "$gpus" python3 "$src/examples/python_adaptive/train.py" \
      --epochs 1 --batch-size 256 --checkpoint-dir "$build/gpu-py-ckpt"
  rm -rf "$build/gpu-py-ckpt"
  FASHION_MNIST_DIR=$data check "$dlrun" local --gpus "$gpus" python3 "$src/examples/python_adaptive/train.py" \
      --epochs 1 --adaptive --max-batch-size 4096 --checkpoint-dir "$build/gpu-py-ckpt-adaptive"
  rm -rf "$build/gpu-py-ckpt-adaptive"
  step "step time on the GPU: dlrun.DataParallel (NCCL) against DDP under torchrun (NCCL), $gpus rank(s)"
  for model in mlp cnn; do
    check "$dlrun" local --quiet --gpus "$gpus" python3 "$src/bench/python/step.py" --impl dlrun --device cuda \
        --model "$model"
    check python3 -m torch.distributed.run --nproc_per_node "$gpus" "$src/bench/python/step.py" --impl ddp \
        --device cuda --model "$model"
  done
  unset PYTHONPATH
fi
exit "$failures"
