"""Fashion-MNIST on dlrun's runtime from Python (import dlrun): data-parallel, resumable at any
step with any number of ranks, and with --adaptive a batch size that dlrun's AdaptiveBatch
chooses by goodput while training. Run it with

    PYTHONPATH=build/python dlrun local --nproc 2 python3 examples/python_adaptive/train.py
    PYTHONPATH=build/python dlrun local --nproc 2 python3 examples/python_adaptive/train.py --adaptive --model mlp

(PYTHONPATH only from a build tree: `cmake --install` puts the package where python3 finds it.)
Stop it with Ctrl-C or SIGTERM to any rank: the ranks finish the same step, rank 0 checkpoints,
and they exit with 75; start it again, with any --nproc, and it continues at the next sample.
`dlrun resize JOB N` does the same while it runs. The last line rank 0 prints is
`test_accuracy=0.XXXX`. It reads Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist,
or $FASHION_MNIST_DIR). The options --trace-dir and --step-gate are for dlrun's tests (the
same as examples/fashion_mnist's)."""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

import dlrun

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fashion_mnist"))
from fashion_mnist import Cnn, load, mlp  # noqa: E402  (the C++ example's models, in Python)

class Trace:
    """--trace-dir: what the integration tests check (examples/common/trace.hpp's format)."""

    def __init__(self, directory, rank):
        self.rank = rank
        self.fds = {}
        if not directory:
            return
        os.makedirs(directory, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        self.fds["samples"] = os.open(os.path.join(directory, f"samples-rank{rank}.txt"), flags, 0o644)
        if rank == 0:
            self.fds["loss"] = os.open(os.path.join(directory, "loss.txt"), flags, 0o644)
            self.fds["starts"] = os.open(os.path.join(directory, "starts.txt"), flags, 0o644)
        with open(os.path.join(directory, f"pid-rank{rank}"), "w") as f:
            f.write(str(os.getpid()))

    def write(self, name, line):
        if name in self.fds:
            os.write(self.fds[name], (line + "\n").encode())  # one write: never half a line


class StepGate:
    """--step-gate FILE: before step S every rank waits until FILE holds a number >= S (a stop
    request ends the wait, so that the step carrying it is taken)."""

    def __init__(self, path):
        self.path = path
        self.limit = 0

    def wait_for(self, step, ctx):
        while self.path and step > self.limit and not ctx.stop_pending():
            try:
                with open(self.path) as f:
                    self.limit = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
            if step > self.limit:
                time.sleep(0.005)


def evaluate(model, test, ctx):
    """The test set's accuracy and mean cross-entropy over all ranks (each evaluates its share)."""
    model.eval()
    n = len(test)
    begin, end = rank_share(n, ctx.rank, ctx.world_size)
    images, labels = test.tensors
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(begin, end, 1000):
            j = min(end, i + 1000)
            logits, y = model(images[i:j].to(ctx.device)), labels[i:j].to(ctx.device)
            correct += (logits.argmax(1) == y).sum().item()
            loss += F.cross_entropy(logits, y, reduction="sum").item()
    model.train()
    totals = ctx.all_reduce_sum([float(correct), loss, float(end - begin)])
    return totals[0] / max(totals[2], 1.0), totals[1] / max(totals[2], 1.0)


def accuracy(model, test, ctx):
    return evaluate(model, test, ctx)[0]


def rank_share(count, rank, world):
    base, extra = divmod(count, world)
    begin = rank * base + min(rank, extra)
    return begin, begin + base + (1 if rank < extra else 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size (the initial one with --adaptive)")
    parser.add_argument("--train-limit", type=int, default=None, help="train on the first N images only")
    parser.add_argument("--lr", type=float, default=2e-3, help="Adam's learning rate (for --batch-size)")
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--adaptive", action="store_true", help="let AdaptiveBatch choose the batch size")
    parser.add_argument("--max-batch-size", type=int, default=4096)
    parser.add_argument("--max-micro-batch", type=int, default=0, help="per rank (0: no limit)")
    parser.add_argument("--replan-every", type=int, default=0, help="steps between decisions (0: 25 on a GPU, 50 on the CPU)")
    parser.add_argument("--no-noise-floor", dest="noise_floor", action="store_false",
                        help="choose by goodput alone, without the noise floor (docs/adaptive.md)")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="default: $DLRUN_RUN_DIR/checkpoints, ./checkpoints without dlrun")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="also checkpoint every N steps")
    parser.add_argument("--target-accuracy", type=float, default=0,
                        help="stop once the test accuracy, measured every --eval-every samples, reaches it")
    parser.add_argument("--target-test-loss", type=float, default=0,
                        help="stop once the test set's mean cross-entropy, measured every --eval-every samples, "
                             "is at most this")
    parser.add_argument("--eval-every", type=int, default=10000)
    parser.add_argument("--trace-dir", default="")
    parser.add_argument("--step-gate", default="")
    args = parser.parse_args()
    if args.target_accuracy and args.target_test_loss:
        parser.error("--target-accuracy and --target-test-loss exclude each other")

    ctx = dlrun.init()
    if "OMP_NUM_THREADS" in os.environ:  # dlrun sets cores / ranks
        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
    torch.manual_seed(args.seed)  # rank 0's weights win anyway (DataParallel broadcasts them)
    train, test = load("train", args.train_limit), load("t10k")
    train = TensorDataset(*(t.to(ctx.device) for t in train.tensors))
    model = dlrun.DataParallel((mlp() if args.model == "mlp" else Cnn()).to(ctx.device))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    if args.adaptive:
        loader = dlrun.AdaptiveDataLoader(train, args.batch_size, model=model, optimizer=optimizer,
                                          max_batch_size=max(args.max_batch_size, args.batch_size),
                                          max_micro_batch=args.max_micro_batch, replan_every=args.replan_every,
                                          noise_floor=args.noise_floor, seed=args.seed)
    else:
        loader = dlrun.ElasticDataLoader(train, args.batch_size, seed=args.seed)
    ckpt = dlrun.Checkpoint([model, optimizer, loader], directory=args.checkpoint_dir)
    info = ckpt.restore()
    loss_avg = info.values.get("loss", 0.0) if info else 0.0
    main_rank = ctx.rank == 0
    if info and main_rank:
        print(f"resumed from step {info.step} (epoch {loader.epoch + 1}, sample {loader.sampler.position} of "
              f"{len(train)}, loss {loss_avg:.4f}) saved by {info.saved_world_size} rank(s); now "
              f"{ctx.world_size} rank(s)", flush=True)
    trace, gate = Trace(args.trace_dir, ctx.rank), StepGate(args.step_gate)
    trace.write("starts", f"{ctx.world_size} {loader.step}")

    samples, next_eval, train_seconds, last_accuracy = 0, args.eval_every, 0.0, None
    for epoch in loader.epochs(args.epochs):
        epoch_start, epoch_samples = time.time(), 0
        step_loss, started = 0.0, None
        for x, y in loader:
            if started is None:  # the step's first micro-batch
                gate.wait_for(loader.step, ctx)
                started = time.perf_counter()
            loss = F.cross_entropy(model(x), y, reduction="sum") * loader.loss_scale()
            loss.backward()
            if args.adaptive:
                loader.observe_loss(loss)  # the training loss, for the noise floor
            optimizer.step()
            optimizer.zero_grad()
            step_loss += loss.item()
            if loader.accumulating:  # more micro-batches of this step follow
                continue
            train_seconds += time.perf_counter() - started
            step = loader.step
            loss_avg = step_loss if step == 1 else 0.95 * loss_avg + 0.05 * step_loss
            # The step's stop vote first (it finishes the step, as the C++ example's dp.step does):
            # a step in the trace is one whose vote is in, so a stop request sent after it is
            # carried by the next step. (The vote leaves with the last gradient bucket; a rank can
            # finish its optimizer step before a slower rank has cast its vote.)
            stop = ctx.stop_requested()
            trace.write("samples", f"{step} {epoch} " + " ".join(map(str, loader.batch.indices)))
            trace.write("loss", f"{step} {loss_avg:.6f} {step_loss:.6f}")
            samples += loader.batch.global_size
            epoch_samples += loader.batch.global_size
            step_loss, started, last_accuracy = 0.0, None, None
            if stop:
                ckpt.save(loss=loss_avg)
                if main_rank:
                    print(f"stopped after step {step} (epoch {epoch + 1}, sample {loader.sampler.position} of "
                          f"{len(train)}): checkpoint saved, exit {ctx.exit_code()}", flush=True)
                return ctx.exit_code()
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                ckpt.save(loss=loss_avg)
            if (args.target_accuracy or args.target_test_loss) and samples >= next_eval:
                next_eval = samples + args.eval_every
                last_accuracy, test_loss = evaluate(model, test, ctx)
                reached = (last_accuracy >= args.target_accuracy if args.target_accuracy
                           else test_loss <= args.target_test_loss)
                if reached:
                    what = (f"test_accuracy={last_accuracy:.4f}" if args.target_accuracy
                            else f"test_loss={test_loss:.5f}")
                    if main_rank:
                        print(f"target reached: {what} after {samples} samples, {step} "
                              f"steps, {train_seconds:.2f} s of training", flush=True)
                    print_accuracy(main_rank, last_accuracy)
                    return 0
        seconds = time.time() - epoch_start
        last_accuracy = accuracy(model, test, ctx)
        if main_rank:
            extra = ""
            if args.adaptive:
                s = loader.stats()
                g, micro, accum = loader.shape()
                extra = f", batch {g} ({micro} x {accum} per rank), noise scale {s['noise_scale']:.0f}, " \
                        f"lr x{s['lr_factor']:.2f}"
            print(f"epoch {epoch + 1}/{args.epochs}: loss {loss_avg:.4f}, test accuracy {last_accuracy:.4f}, "
                  f"{seconds:.1f} s, {epoch_samples / max(seconds, 1e-9):.0f} samples/s{extra}", flush=True)
        ckpt.save(loss=loss_avg)
    print_accuracy(main_rank, last_accuracy if last_accuracy is not None else accuracy(model, test, ctx))
    return 0


def print_accuracy(main_rank, value):
    if main_rank:
        print(f"test_accuracy={value:.4f}", flush=True)
        # What dlrun keeps with the job's record (dlrun status --json's "result").
        if "DLRUN_RESULT_FILE" in os.environ:
            with open(os.environ["DLRUN_RESULT_FILE"], "w") as f:
                json.dump({"test_accuracy": round(value, 4)}, f)


if __name__ == "__main__":
    sys.exit(main())
