#!/bin/bash
# dlrun's benchmarks on one GPU, inside a time budget (a lent GPU machine's minutes are few):
# builds dlrun against python3's CUDA LibTorch (scripts/gpu-build.sh), then, in this order and as
# long as the budget lasts:
#   1. fashion_mnist under `dlrun local --gpus 1`, a checkpoint and a resume of it on the GPU;
#   2. issue 15 on the GPU: bench/adaptive.py, the small MLP to a test loss of 0.32, every fixed
#      batch at each rate of a sweep, the adaptive job from fixed 64's best rate and from 1e-3,
#      and the same fixed batches in PyTorch DDP under torchrun (NCCL);
#   3. the step time of dlrun.DataParallel (import dlrun, NCCL) against DDP (bench/python/step.py),
#      and examples/python_adaptive --adaptive on the GPU;
#   4. AdaptiveBatch's overhead: fixed 64 against --adaptive --max-batch-size 64 (a run's median
#      samples/s over its epochs after the first);
#   6. (only when SECTIONS names it) the CNN to a test loss, fixed batches and adaptive;
#   5. more passes of 2 (C++ only), while at least PASS_SECONDS are left.
# Everything it prints goes to OUT_DIR/gpu-bench.log too, with the tables of 2 and 5 in files of
# their own, so that what ran is kept if the budget ends first.
#
#   scripts/gpu-bench.sh [BUILD_DIR]      (default build-gpu/)
#
# BUDGET: seconds for the whole script, build included (default 540). OUT_DIR (default
# BUILD_DIR/bench-out). FASHION_MNIST_DIR, DEPS_DEBS, DEPS_PREFIX: as for scripts/gpu-check.sh.
# SECTIONS: which of them run (default "1 2 3 4 5"; 3 is "3 3py", the step times and the Python
# example). SIZES and ADAPTIVE_LRS: bench/adaptive.py's --sizes and --adaptive-lrs in 2 and 5
# (default 64,256,1024,4096 and best,1e-3); PASSES: how many passes 5 makes (default 2);
# SCALING_RULE: the adaptive runs' --scaling-rule (default: the example's, auto).
# OVERHEAD_MODELS (default "mlp cnn"), OVERHEAD_ROUNDS (default 1, the modes alternated),
# OVERHEAD_MODES (default "fixed adaptive"; also nofloor, nomeasure, nodecide: see 4) and
# OVERHEAD_EPOCHS (default 3, at least 2): what 4 measures; its runs' epoch lines go to
# OUT_DIR/overhead.txt, and bench/overhead_rounds.py sums them up (per mode, and paired with
# each round's fixed run).
# 6 (not run by default): the CNN to a test loss of CNN_TARGET_LOSS (default 0.26), every fixed
# size of CNN_SIZES (default 64,256,1024,2048) at CNN_LR_FACTORS (default 1,2,4) of
# 1e-3·√(B/64), and the adaptive job from each of CNN_ADAPTIVE_LRS (default best: fixed 64's
# best rate), at most CNN_MAX_EPOCHS (default 15) epochs each; CNN_PASSES such passes (default
# 1; a pass after the first only while CNN_PASS_SECONDS, default 120, are left), each in
# OUT_DIR/cnn-passN.txt and the first adaptive run's picture in OUT_DIR/adaptive-cnn-gpu-passN.svg.
set -uo pipefail
start=$SECONDS
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$src/build-gpu}
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
budget=${BUDGET:-540}
out=${OUT_DIR:-$build/bench-out}
mkdir -p "$out"
exec > >(tee -a "$out/gpu-bench.log") 2>&1

sections=" ${SECTIONS:-1 2 3 3py 4 5} "
[[ $sections == *" 3 "* ]] && sections+="3py "
wants() { [[ $sections == *" $1 "* ]]; }
left() { echo $((budget - (SECONDS - start))); }
step() { echo; echo "== [$((SECONDS - start)) s] $*"; }
# within SECONDS CMD...: runs CMD for at most SECONDS, or what is left of the budget; skipped
# when under 15 s are left.
within() {
  local limit=$1
  shift
  local rest
  rest=$(left)
  ((rest > 15)) || { echo "gpu-bench: no time left for: $*"; return 124; }
  ((limit < rest)) || limit=$rest
  timeout --kill-after=5 "$limit" "$@"
  local rc=$?
  ((rc == 124)) && echo "gpu-bench: stopped after $limit s: $*"
  return $rc
}

nvidia-smi -L || true
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL",
  torch.cuda.nccl.version(), "GPUs", torch.cuda.device_count())'
nproc

step "build against python3's LibTorch"
. "$src/scripts/gpu-build.sh"
BUILD_TESTS=OFF gpu_build "$src" "$build" "$data" dlrun fashion_mnist dlrun_python ||
  { [[ -x $build/cli/dlrun && -x $build/examples/fashion_mnist/fashion_mnist ]] ||
      { echo "gpu-bench: the build failed"; exit 1; }; }
dlrun=$build/cli/dlrun
example=$build/examples/fashion_mnist/fashion_mnist
export DLRUN_HOME=$build/bench-home PYTHONPATH=$build/python FASHION_MNIST_DIR=$data
export PYTHON=${PYTHON:-$(command -v python3)} TORCHRUN="$(command -v python3) -m torch.distributed.run"

if wants 1; then
step "1. fashion_mnist on the GPU: an epoch with a checkpoint, then a resume to epoch 2"
rm -rf "$build/ckpt"
within 60 "$dlrun" local --gpus 1 "$example" --epochs 1 --batch-size 256 --checkpoint-dir "$build/ckpt"
within 60 "$dlrun" local --gpus 1 "$example" --epochs 2 --batch-size 256 --checkpoint-dir "$build/ckpt"
fi

mlp_sweep=(--model mlp --target-loss 0.32 --max-epochs 40 --eval-every 5000
           --sizes "${SIZES:-64,256,1024,4096}" --base-lr 1e-3 --lr-scaling sqrt --lr-factors 0.25,0.35
           --adaptive-lrs "${ADAPTIVE_LRS:-best,1e-3}" --gpus 1)
[[ -n ${SCALING_RULE:-} ]] && mlp_sweep+=(--scaling-rule "$SCALING_RULE")
# ADAPTIVE_VARIANTS: more adaptive runs in 2, 5 and 6, each with the example's options between
# two '|' added (bench/adaptive.py --adaptive-variant), e.g. "--replan-every 50|--replan-every 10".
variants=()
IFS='|' read -ra variant_list <<< "${ADAPTIVE_VARIANTS:-}"
# (--adaptive-variant=V: a variant of one option, "--no-noise-floor", is not read as an option)
for v in "${variant_list[@]}"; do [[ -n $v ]] && variants+=("--adaptive-variant=$v"); done
mlp_sweep+=("${variants[@]}")
if wants 2; then
step "2. issue 15 on the GPU, pass 1: the MLP to a test loss of 0.32, dlrun and torchrun + DDP"
within 260 python3 "$src/bench/adaptive.py" "$build" "${mlp_sweep[@]}" --with torchrun \
    --svg "$out/adaptive-mlp-gpu.svg" > "$out/mlp-pass1.txt"
cat "$out/mlp-pass1.txt"
fi

if wants 3; then
step "3. step time: dlrun.DataParallel (import dlrun) against DDP under torchrun, one GPU"
for model in mlp cnn; do
  for batch in 32 1024; do
    within 40 "$dlrun" local --quiet --gpus 1 "$PYTHON" "$src/bench/python/step.py" --impl dlrun \
        --device cuda --model "$model" --batch "$batch"
    within 40 $TORCHRUN --nproc_per_node 1 "$src/bench/python/step.py" --impl ddp --device cuda \
        --model "$model" --batch "$batch" 2>&1 | grep -v "^W"
  done
done
fi
if wants 3py; then
step "3. examples/python_adaptive --adaptive on the GPU (import dlrun): an epoch, then a resume"
rm -rf "$build/py-ckpt"
for epochs in 1 2; do
  within 60 "$dlrun" local --gpus 1 "$PYTHON" "$src/examples/python_adaptive/train.py" \
      --epochs "$epochs" --adaptive --model mlp --checkpoint-dir "$build/py-ckpt"
  echo "exit status $?"
done
fi

if wants 4; then
epochs=${OVERHEAD_EPOCHS:-3}
step "4. AdaptiveBatch's overhead held at 64 (samples/s of epochs 2 to $epochs)"
: > "$out/overhead.txt"  # this run's rounds only, where OUT_DIR is reused
for model in ${OVERHEAD_MODELS:-mlp cnn}; do
  for ((round = 1; round <= ${OVERHEAD_ROUNDS:-1}; round++)); do
    for mode in ${OVERHEAD_MODES:-fixed adaptive}; do
      # fixed; adaptive held at 64; nofloor: without the noise floor (no loss kept per step);
      # nomeasure: nor the noise scale measured; nodecide: nor decisions made.
      extra=()
      case $mode in
        adaptive) extra=(--adaptive --max-batch-size 64) ;;
        nofloor) extra=(--adaptive --max-batch-size 64 --no-noise-floor) ;;
        nomeasure) extra=(--adaptive --max-batch-size 64 --no-noise-floor --measure-every 1000000) ;;
        nodecide) extra=(--adaptive --max-batch-size 64 --no-noise-floor --measure-every 1000000
                         --replan-every 1000000) ;;
      esac
      echo "-- $model $mode" | tee -a "$out/overhead.txt"
      within 60 "$dlrun" local --quiet --gpus 1 "$example" --model "$model" --epochs "$epochs" \
          --batch-size 64 "${extra[@]}" | grep "epoch [0-9]*/$epochs:" | grep -v "epoch 1/" |
        tee -a "$out/overhead.txt"
    done
  done
done
python3 "$src/bench/overhead_rounds.py" "$out/overhead.txt"
fi

if wants 6; then
for ((cnn_pass = 1; cnn_pass <= ${CNN_PASSES:-1}; cnn_pass++)); do
  ((cnn_pass == 1 || $(left) > ${CNN_PASS_SECONDS:-120})) || break
  step "6. issue 15 on the GPU, CNN pass $cnn_pass: to a test loss of ${CNN_TARGET_LOSS:-0.26}, where its curve still climbs"
  within 300 python3 "$src/bench/adaptive.py" "$build" --model cnn --target-loss "${CNN_TARGET_LOSS:-0.26}" \
      --max-epochs "${CNN_MAX_EPOCHS:-15}" --eval-every 10000 --sizes "${CNN_SIZES:-64,256,1024,2048}" \
      --base-lr 1e-3 --lr-scaling sqrt --lr-factors "${CNN_LR_FACTORS:-1,2,4}" \
      --adaptive-lrs "${CNN_ADAPTIVE_LRS:-best}" --gpus 1 "${variants[@]}" \
      --svg "$out/adaptive-cnn-gpu-pass$cnn_pass.svg" > "$out/cnn-pass$cnn_pass.txt"
  cat "$out/cnn-pass$cnn_pass.txt"
done
fi

wants 5 || { step "done"; exit 0; }
for ((pass = 2; pass <= ${PASSES:-2} + 1; pass++)); do
  (($(left) > ${PASS_SECONDS:-100})) || break
  step "5. issue 15 on the GPU, pass $pass (dlrun only)"
  within "$(($(left) - 5))" python3 "$src/bench/adaptive.py" "$build" "${mlp_sweep[@]}" \
      > "$out/mlp-pass$pass.txt"
  cat "$out/mlp-pass$pass.txt"
done
step "done"
