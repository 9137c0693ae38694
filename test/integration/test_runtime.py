"""The runtime in real processes: examples/fashion_mnist under `dlrun local`, stopped in the
middle of an epoch by signals and resumed with other numbers of ranks. Asserts what a user
would see: exit codes, output lines, the samples each rank trained on (--trace-dir), losses."""

import collections
import os
import re
import signal
import subprocess
import time

from harness import BUILD_DIR, DlrunTestCase, wait_for

EXAMPLE = os.path.join(BUILD_DIR, "examples", "fashion_mnist", "fashion_mnist")
DATA_DIR = "/usr/share/datasets/fashion-mnist"

# 2 epochs of 1200 samples in global batches of 24: 50 steps an epoch, 100 in all.
TRAIN_LIMIT = 1200
BATCH = 24
EPOCHS = 2
STEPS = EPOCHS * TRAIN_LIMIT // BATCH


class ExampleCase(DlrunTestCase):
    # The training program, its options after it (test_python runs the Python example).
    example = [EXAMPLE]

    def setUp(self):
        super().setUp()
        if not os.path.exists(self.example[-1]):
            self.skipTest(f"{self.example[-1]} was not built")
        if not os.path.exists(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz")):
            self.skipTest("Fashion-MNIST is not installed (Debian: dataset-fashion-mnist)")
        self.trace = os.path.join(self.tmp, "trace")
        self.checkpoints = os.path.join(self.tmp, "checkpoints")

    def example_args(self, *extra):
        return [*self.example, "--epochs", str(EPOCHS), "--train-limit", str(TRAIN_LIMIT),
                "--batch-size", str(BATCH), "--checkpoint-dir", self.checkpoints,
                "--trace-dir", self.trace, *extra]

    def run_dlrun(self, *args, timeout=180):
        result = self.dlrun(*args, timeout=timeout)
        return result.returncode, result.stdout, result.stderr

    def losses(self):
        """{step: (running average, step loss)} from rank 0's loss.txt, asserting no step twice."""
        out = {}
        try:
            with open(os.path.join(self.trace, "loss.txt")) as f:
                for line in f:
                    step, average, value = line.split()
                    self.assertNotIn(int(step), out, f"step {step} was trained twice")
                    out[int(step)] = (float(average), float(value))
        except FileNotFoundError:
            pass
        return out

    def steps_done(self):
        try:
            with open(os.path.join(self.trace, "loss.txt")) as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def rank_pid(self, rank):
        with open(os.path.join(self.trace, f"pid-rank{rank}")) as f:
            return int(f.read())

    def finish(self, proc, timeout=120):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            self.fail(f"dlrun did not finish in {timeout} s:\n{out}\n{err}")
        return proc.returncode, out, err

    # Pacing (docs/development.md): a gated run takes step S only once the test has allowed
    # it, so a signal, kill or resize lands at a step the test chose, on a machine of any speed.
    def gated_args(self, *extra):
        """example_args with --step-gate: nothing is trained until allow()."""
        self.gate = os.path.join(self.tmp, "gate")
        return self.example_args("--step-gate", self.gate, *extra)

    def allow(self, step):
        """Lets a gated run train up to and including `step` (atomically: never half a number)."""
        with open(self.gate + ".new", "w") as f:
            f.write(f"{step}\n")
        os.rename(self.gate + ".new", self.gate)

    def last_step(self):
        """The step rank 0 trained last (0 before the first)."""
        try:
            with open(os.path.join(self.trace, "loss.txt")) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return 0
        return int(lines[-1].split()[0]) if lines else 0

    def hold_at(self, proc, step):
        """Allows training up to `step` and waits until it is there, held by the gate."""
        self.allow(step)
        self.wait_until(proc, lambda: self.last_step() == step, f"step {step}")

    def starts(self):
        """[(world size, step resumed from)], one per start of the group, from rank 0's trace."""
        try:
            with open(os.path.join(self.trace, "starts.txt")) as f:
                return [tuple(int(x) for x in line.split()) for line in f]
        except FileNotFoundError:
            return []

    def wait_starts(self, proc, count):
        """Waits until the group has started `count` times; returns the last start."""
        self.wait_until(proc, lambda: len(self.starts()) >= count, f"start {count} of the group")
        return self.starts()[-1]

    def wait_until(self, proc, predicate, what, timeout=180):
        reached = wait_for(lambda: predicate() or proc.poll() is not None, timeout=timeout)
        if proc.poll() is not None:
            self.fail(f"dlrun ended before {what}: {proc.communicate()}")
        self.assertTrue(reached, f"no {what} in {timeout} s")

    def signal_rank(self, rank, signum):
        """Sends signum to one rank and waits until the rank has taken it (its handler ran), so
        that the next step the gate allows carries the stop request."""
        pid = self.rank_pid(rank)
        os.kill(pid, signum)
        bit = 1 << (signum - 1)

        def delivered():
            try:
                with open(f"/proc/{pid}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except (FileNotFoundError, ProcessLookupError):  # gone (or reaped mid-read)
                return True
            return not (int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)) & bit

        self.assertTrue(wait_for(delivered, timeout=60), f"rank {rank} never took signal {signum}")

    def samples_per_epoch(self):
        """{epoch: Counter(index -> times trained)} over every rank's trace of every run."""
        seen = collections.defaultdict(collections.Counter)
        for name in os.listdir(self.trace):
            if not name.startswith("samples-rank"):
                continue
            with open(os.path.join(self.trace, name)) as f:
                for line in f:
                    fields = [int(x) for x in line.split()]
                    seen[fields[1]].update(fields[2:])
        return seen


class ElasticResume(ExampleCase):
    def test_stop_and_resume_with_2_then_1_then_3_ranks_trains_every_sample_once(self):
        # Run 1: 2 ranks. SIGUSR1 to rank 1 mid-epoch: all ranks stop after the same step,
        # checkpoint and exit 75; dlrun restarts them (restart 1), they resume.
        run1 = self.start("local", "--nproc", "2", *self.gated_args())
        self.hold_at(run1, 15)
        self.signal_rank(1, signal.SIGUSR1)
        self.allow(35)  # rank 0 has no request of its own: let it take the step that carries rank 1's
        self.assertEqual(self.wait_starts(run1, 2), (2, 16))
        self.hold_at(run1, 35)
        # Then SIGTERM to dlrun itself (as Ctrl-C would): ranks checkpoint, dlrun exits 143.
        os.kill(run1.pid, signal.SIGTERM)
        code, out1, err1 = self.finish(run1)
        self.assertEqual(code, 143, out1 + err1)
        self.assertIn("dlrun: ranks asked to be restarted: restarting all 2 ranks", err1)
        stops = re.findall(r"\[0\] stopped after step (\d+) \(epoch \d, sample \d+ of 1200\): "
                           r"checkpoint saved, exit 75", out1)
        self.assertEqual(stops, ["16", "36"], out1)
        resumed = re.findall(r"\[0\] resumed from step (\d+) .*saved by 2 rank\(s\); now 2 rank\(s\)", out1)
        self.assertEqual(resumed, stops[:1], out1)
        first_stop, second_stop = int(stops[0]), int(stops[1])

        # Run 2: 1 rank, from run 1's checkpoint; stopped again mid-way, by SIGHUP (the
        # terminal it was started from hung up: an ssh session that dropped). The rank died of
        # it, with every step since its last checkpoint.
        run2 = self.start("local", "--nproc", "1", *self.gated_args())
        self.hold_at(run2, second_stop + 15)
        os.kill(run2.pid, signal.SIGHUP)
        code, out2, err2 = self.finish(run2)
        self.assertEqual(code, 129, out2 + err2)
        self.assertRegex(out2, rf"\[0\] resumed from step {second_stop} .*saved by 2 rank\(s\); now 1 rank\(s\)")
        third_stop = int(re.search(r"\[0\] stopped after step (\d+)", out2).group(1))
        self.assertEqual(third_stop, second_stop + 16)

        # Run 3: 3 ranks, to the end.
        code, out3, err3 = self.run_dlrun("local", "--nproc", "3", *self.example_args(), timeout=180)
        self.assertEqual(code, 0, out3 + err3)
        self.assertRegex(out3, rf"\[0\] resumed from step {third_stop} .*saved by 1 rank\(s\); now 3 rank\(s\)")
        self.assertRegex(out3.strip().splitlines()[-1], r"^\[0\] test_accuracy=0\.\d{4}$")

        # Every sample of every epoch trained exactly once, over 4 starts and 3 world sizes.
        seen = self.samples_per_epoch()
        self.assertEqual(sorted(seen), list(range(EPOCHS)))
        for epoch, counts in seen.items():
            self.assertEqual(set(counts), set(range(TRAIN_LIMIT)), f"epoch {epoch}: samples missing")
            twice = [i for i, c in counts.items() if c != 1]
            self.assertEqual(twice, [], f"epoch {epoch}: samples trained more than once")

        # Every step once, numbered on from the checkpoint; the loss goes on from where it was.
        losses = self.losses()
        self.assertEqual(sorted(losses), list(range(1, STEPS + 1)))
        start = sum(losses[s][1] for s in range(1, 6)) / 5
        for stop in (first_stop, second_stop, third_stop):
            after = sum(losses[s][1] for s in range(stop + 1, stop + 6)) / 5
            self.assertLess(after, 0.75 * start, f"the loss after resuming at step {stop} is "
                            f"{after:.3f}, as high as at the start ({start:.3f}): weights not restored?")
            # The running average was restored, not restarted from the next step's loss.
            # (A fresh average would start near 0.05 x the step's loss.) Each step moves it
            # by 5 % of the step's deviation, well under a quarter of its value.
            self.assertLess(abs(losses[stop + 1][0] - losses[stop][0]), 0.25 * losses[stop][0])


class RankSignals(ExampleCase):
    def test_sigterm_to_one_rank_checkpoints_and_the_group_restarts(self):
        # A preempted rank: SIGTERM to it alone. All ranks stop after the same step and exit
        # 75; dlrun restarts them and they finish from the checkpoint.
        args = self.gated_args()
        args[args.index("--epochs") + 1] = "1"
        run = self.start("local", "--nproc", "2", *args)
        self.hold_at(run, 10)
        self.signal_rank(0, signal.SIGTERM)
        self.allow(STEPS)
        code, out, err = self.finish(run)
        self.assertEqual(code, 0, out + err)
        self.assertIn("dlrun: ranks asked to be restarted: restarting all 2 ranks", err)
        self.assertRegex(out, r"\[0\] stopped after step 11 .* exit 75")
        self.assertRegex(out, r"\[0\] resumed from step 11 ")
        counts = self.samples_per_epoch()[0]
        self.assertEqual(sorted(counts), list(range(TRAIN_LIMIT)))
        self.assertEqual(set(counts.values()), {1})
        self.assertEqual(sorted(self.losses()), list(range(1, TRAIN_LIMIT // BATCH + 1)))


class CheckpointFallback(ExampleCase):
    def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(self):
        args = self.example_args("--checkpoint-every", "10")
        args[args.index("--epochs") + 1] = "1"
        code, out, err = self.run_dlrun("local", "--nproc", "2", *args)
        self.assertEqual(code, 0, out + err)
        kept = sorted(os.listdir(self.checkpoints))
        self.assertEqual(kept, [".lock", "step-000000000030", "step-000000000040", "step-000000000050"])
        kept = kept[1:]
        newest = os.path.join(self.checkpoints, kept[-1])
        with open(os.path.join(newest, "module-model.pt"), "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
        code, out, err = self.run_dlrun("local", "--nproc", "1", *args)
        self.assertEqual(code, 0, out + err)
        self.assertIn(f"dlrun: warning: checkpoint {newest} is damaged (module-model.pt does not "
                      f"match its CRC-32 in the MANIFEST): falling back to {kept[-2]}", out + err)
        step = int(kept[-2].split("-")[1])
        self.assertIn(f"[0] resumed from step {step} ", out)


class Accuracy(ExampleCase):
    def test_two_ranks_reach_88_percent_on_the_full_data_in_two_epochs(self):
        code, out, err = self.run_dlrun("local", "--nproc", "2", EXAMPLE, "--epochs", "2",
                                    "--checkpoint-dir", self.checkpoints, timeout=850)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(len(re.findall(r"^\[0\] epoch \d/2: loss ", out, re.M)), 2, out)
        last = out.strip().splitlines()[-1]
        match = re.fullmatch(r"\[0\] test_accuracy=(0\.\d{4})", last)
        self.assertIsNotNone(match, out)
        self.assertGreaterEqual(float(match.group(1)), 0.88, out)


class InitErrors(ExampleCase):
    def test_a_half_set_environment_names_the_missing_variables(self):
        env = dict(self.env, RANK="0", WORLD_SIZE="2")
        env.pop("MASTER_ADDR", None)
        env.pop("MASTER_PORT", None)
        result = subprocess.run([EXAMPLE, "--epochs", "1"], capture_output=True, text=True,
                                env=env, timeout=60)
        self.assertEqual(result.returncode, 2)
        self.assertIn("fashion_mnist: error: RANK and WORLD_SIZE are set but MASTER_ADDR and "
                      "MASTER_PORT are not", result.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
