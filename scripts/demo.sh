#!/usr/bin/env bash
# The demo behind `make demo`: real multi-rank training on this machine with dlrun local.
# Usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dlrun="$build/cli/dlrun"
export DLRUN_HOME=${DLRUN_HOME:-$PWD/$build/demo-home}

echo "== dlrun local --nproc 2: PyTorch DDP (an unmodified torch.distributed script) on Fashion-MNIST"
"$dlrun" local --nproc 2 -- /usr/bin/python3 examples/python_ddp/train.py --epochs 1 --train-limit 20000

if [[ -x "$build/examples/fashion_mnist/fashion_mnist" ]]; then
  echo
  echo "== dlrun local --nproc 2: the C++ runtime (examples/fashion_mnist) on Fashion-MNIST"
  "$dlrun" local --nproc 2 -- "$build/examples/fashion_mnist/fashion_mnist" --epochs 1 --train-limit 20000
  if [[ -d "$build/python/dlrun" ]]; then
    echo
    echo "== import dlrun: the same runtime from a Python script (examples/python_adaptive, docs/python.md)"
    PYTHONPATH="$build/python" "$dlrun" local --nproc 2 -- /usr/bin/python3 examples/python_adaptive/train.py \
      --epochs 1 --train-limit 20000
  fi
  echo
  echo "== --adaptive: dlrun::AdaptiveBatch picks the batch size by goodput and the noise floor"
  echo "   (the small MLP, whose per-step cost a larger batch spreads over more samples, so that"
  echo "   larger batches pay; as the loss levels off, a larger batch's lower floor pays too)"
  "$dlrun" local --nproc 2 --name demo-adaptive -- "$build/examples/fashion_mnist/fashion_mnist" \
    --model mlp --epochs 2 --adaptive --max-batch-size 4096 --replan-every 30
  echo
  echo "== dlrun history demo-adaptive: what it decided, and why (docs/adaptive.md)"
  "$dlrun" history demo-adaptive --svg "$DLRUN_HOME/demo-adaptive.svg"
fi
echo
echo "Each rank's full output is in $DLRUN_HOME/runs/latest/rank-N.log"
