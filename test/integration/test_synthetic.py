"""The synthetic workload (examples/synthetic) under `dlrun local` on fake GPUs: it trains every
sample of every epoch exactly once, also across a resize, publishes its goodput model, and
its steps take at least the GPU-like cost it declares. The trace, the step gate and the
checks are those of the fashion_mnist tests (test_runtime.ExampleCase)."""

import json
import math
import os
import re
import time
import unittest

from harness import BUILD_DIR, DlrunTestCase
from test_runtime import ExampleCase

SYNTHETIC = os.path.join(BUILD_DIR, "examples", "synthetic", "dlrun_synthetic")
SAMPLES = 2048
EPOCHS = 2
DONE = re.compile(r"^\[0\] synthetic: done steps=(\d+) samples=(\d+) epochs=(\d+) "
                  r"final_loss=(-?(?:\d+\.\d+|nan|inf)) seconds=(\d+\.\d+)$")


class SyntheticCase(ExampleCase):
    """ExampleCase's pacing and trace readers, for dlrun_synthetic instead of fashion_mnist."""

    def setUp(self):
        DlrunTestCase.setUp(self)  # not ExampleCase's: no Fashion-MNIST needed
        if not os.path.exists(SYNTHETIC):
            self.skipTest("examples/synthetic was not built")
        self.trace = os.path.join(self.tmp, "trace")
        self.checkpoints = os.path.join(self.tmp, "checkpoints")
        self.env["DLRUN_FAKE_GPUS"] = "4"

    def example_args(self, *extra):
        return [SYNTHETIC, "--samples", str(SAMPLES), "--epochs", str(EPOCHS),
                "--checkpoint-dir", self.checkpoints, "--trace-dir", self.trace, *extra]

    def done_line(self, out):
        last = out.strip().splitlines()[-1]
        match = DONE.match(last)
        self.assertIsNotNone(match, out[-2000:])
        steps, samples, epochs = (int(match.group(i)) for i in (1, 2, 3))
        return steps, samples, epochs, float(match.group(4)), float(match.group(5))

    def assert_every_sample_once(self):
        seen = self.samples_per_epoch()
        self.assertEqual(sorted(seen), list(range(EPOCHS)))
        for epoch, counts in seen.items():
            self.assertEqual(sorted(counts), list(range(SAMPLES)), f"epoch {epoch}: samples missing")
            self.assertEqual(set(counts.values()), {1}, f"epoch {epoch}: samples trained more than once")


# No slept cost: fixed runs whose outcome, not their time, is tested.
NO_COST = ("--step-ms", "0", "--sample-ms", "0", "--sync-ms-per-rank", "0")
# AdaptiveBatch with a 10 ms step (larger batches pay) on noisy data, deciding every 5 steps.
GROWING = ("--noise", "4", "--step-ms", "10", "--sample-ms", "0", "--sync-ms-per-rank", "0",
           "--max-batch-size", "1024", "--replan-every", "5")


class SyntheticWorkload(SyntheticCase):
    def train(self, *args, launch=("--nproc", "2"), timeout=120):
        """dlrun_synthetic over SAMPLES samples with `args` under `dlrun local`; asserts that it
        exits 0 and returns its stdout and stderr."""
        code, out, err = self.run_dlrun("local", *launch, "--", SYNTHETIC, "--samples", str(SAMPLES), *args,
                                        timeout=timeout)
        self.assertEqual(code, 0, out[-2000:] + err[-3000:])
        return out, err

    def test_four_fake_gpus_train_every_sample_once_and_publish_the_goodput_model(self):
        run_dir = self.run_dir()
        code, out, err = self.run_dlrun("local", "--gpus", "1:4", "--run-dir", run_dir, "--",
                                        *self.example_args("--replan-every", "10"), timeout=180)
        self.assertEqual(code, 0, out[-2000:] + err[-3000:])
        self.assertEqual(self.starts(), [(4, 0)])
        steps, samples, epochs, final_loss, _ = self.done_line(out)
        self.assertEqual((samples, epochs), (EPOCHS * SAMPLES, EPOCHS))
        self.assertEqual(sorted(self.losses()), list(range(1, steps + 1)))
        # The data's noise is 1.0: the mean squared error falls from about |w*|² + 1 (17 at 16
        # features) towards 1.
        self.assertLess(final_loss, 2.0, out[-2000:])
        self.assertEqual(len(re.findall(r"\[0\] epoch \d/2: loss \d+\.\d+, .* noise scale \d+", out)), 2, out)
        self.assert_every_sample_once()
        with open(os.path.join(run_dir, "goodput-model.json")) as f:
            model = json.load(f)
        self.assertEqual(set(model), {"version", "params", "noise_scale", "efficiency", "initial_batch", "max_batch",
                                      "min_micro_batch", "max_micro_batch", "allow_accumulation",
                                      "measured_replicas", "compute_timed", "replicas", "global_batch"})
        self.assertEqual(set(model["params"]), {"alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r",
                                                "beta_r", "gamma"})
        self.assertEqual((model["initial_batch"], model["max_batch"], model["replicas"]), (64, 2048, 4))
        self.assertEqual(model["measured_replicas"], [4])
        self.assertGreater(model["noise_scale"], 0)
        self.assertEqual(model["efficiency"], "sgd")  # SGD: the learning rate follows the gain

    def test_steps_take_at_least_the_declared_cost(self):
        # 640 samples in batches of 32 on 2 ranks: 20 steps, each sleeping 20 ms + 16 samples
        # x 1 ms + 15 ms x (2 - 1) = 51 ms on every rank. Sleeping makes this a lower bound on
        # any machine; nothing bounds it from above.
        start = time.monotonic()
        code, out, err = self.run_dlrun("local", "--gpus", "2", "--", SYNTHETIC, "--fixed", "--samples", "640",
                                        "--epochs", "1", "--batch-size", "32", "--step-ms", "20",
                                        "--sample-ms", "1", "--sync-ms-per-rank", "15", timeout=120)
        wall = time.monotonic() - start
        self.assertEqual(code, 0, out[-2000:] + err[-3000:])
        steps, samples, _, _, seconds = self.done_line(out)
        self.assertEqual((steps, samples), (20, 640))
        self.assertGreaterEqual(seconds, steps * 0.051)
        self.assertGreaterEqual(wall, seconds)
        self.assertIn("[0] epoch 1/1: loss ", out)
        self.assertIn(", batch 32 (fixed)", out)

    def test_target_loss_stops_training_at_the_first_check_that_reaches_it(self):
        # Noise 1 on 16 features: the loss falls from about 17 towards 1. A target of 3 is
        # reached within 20 epochs of 2048 samples at batch 256 and lr 0.1; the run stops at the
        # first check (every 512 samples) at or below it, long before the 20 epochs.
        def run(target):
            out, _ = self.train("--fixed", "--epochs", "20", "--batch-size", "256", "--lr", "0.1", *NO_COST,
                                "--target-loss", target, "--eval-every", "512")
            return out
        out = run("3")
        reached = re.search(r"^\[0\] target reached: loss=(\d+\.\d+) after (\d+) samples, (\d+) steps, "
                            r"(\d+\.\d+) s$", out, re.M)
        self.assertIsNotNone(reached, out[-2000:])
        loss, samples, steps = float(reached.group(1)), int(reached.group(2)), int(reached.group(3))
        self.assertLessEqual(loss, 3.0)
        self.assertEqual(samples % 512, 0)
        self.assertEqual(samples, steps * 256)
        self.assertLess(samples, 20 * SAMPLES)
        done_steps, done_samples, _, final_loss, _ = self.done_line(out)
        self.assertEqual((done_steps, done_samples, final_loss), (steps, samples, loss))
        # A target below what the noise allows is never reached: all 20 epochs are trained.
        never = run("0.001")
        self.assertNotIn("target reached", never)
        self.assertEqual(self.done_line(never)[1], 20 * SAMPLES)

    def test_a_diverged_run_never_reaches_the_target(self):
        # At lr 3 (past the stable rate, about 1 on this well-conditioned problem) the loss
        # grows until it is infinite and then not a number. NaN compares false with the target,
        # so a check written as "not above it" took such a run as having reached it.
        out, _ = self.train("--fixed", "--epochs", "20", "--batch-size", "64", "--lr", "3", *NO_COST,
                            "--target-loss", "100", "--eval-every", "512")
        self.assertNotIn("target reached", out)
        _, samples, _, final_loss, _ = self.done_line(out)
        self.assertEqual(samples, 20 * SAMPLES)
        self.assertTrue(math.isnan(final_loss), out[-2000:])

    def test_an_ill_conditioned_problem_trains_slower_at_the_same_rate(self):
        # --condition 1000 spreads the curvature over the features 1000-fold (the targets stay
        # the same): at the same rate and steps the flattest directions barely move, so the
        # loss stays far above the well-conditioned run's. Fixed batch, seeded: deterministic.
        def final_loss(condition):
            out, _ = self.train("--fixed", "--epochs", "2", "--batch-size", "256", "--lr", "0.1", *NO_COST,
                                "--condition", condition)
            return self.done_line(out)[3]
        well, ill = final_loss("1"), final_loss("1000")
        self.assertGreater(ill, 2 * well, f"condition 1: {well}, condition 1000: {ill}")
        # Below 1 the spread would be the other way round: refused, not silently ignored.
        code, out, err = self.run_dlrun("local", "--nproc", "1", "--", SYNTHETIC, "--condition", "0.5")
        self.assertEqual(code, 2, out + err)
        self.assertIn("0.5 is not at least 1", out + err)

    def test_the_scaling_rule_option_sets_the_learning_rate_factor(self):
        # --scaling-rule sqrt: every epoch's learning-rate factor is the square root of the
        # batch's growth (the default, adascale, follows the measured gain instead).
        out, err = self.train("--epochs", "4", *GROWING, "--scaling-rule", "sqrt", timeout=180)
        epochs = [(int(b), float(f)) for b, f in re.findall(
            r"^\[0\] epoch \d+/4: .* batch (\d+) \(.*, lr x(\d+\.\d\d)$", out, re.M)]
        self.assertEqual(len(epochs), 4, out[-2000:])
        self.assertGreater(max(b for b, _ in epochs), 64, out[-2000:])
        for batch, factor in epochs:
            self.assertAlmostEqual(factor, (batch / 64) ** 0.5, delta=0.006, msg=f"batch {batch}")
        self.assertNotIn("may be diverging", out + err)
        code, out, err = self.run_dlrun("local", "--nproc", "1", "--", SYNTHETIC, "--scaling-rule", "steep")
        self.assertEqual(code, 2, out + err)
        self.assertIn("unknown scaling rule 'steep'", out + err)

    def test_a_learning_rate_past_what_the_model_takes_is_warned_of_once(self):
        # The linear rule from lr 1.2: beyond the 1 this problem takes (its steepest curvature is
        # 2) from the first step, and raised further as the batch grows, so the loss grows by
        # orders of magnitude within the first decisions (which come every --replan-every steps
        # whatever the machine's speed; a rate that passed 1 only after the batch grew would be
        # caught only by the decisions after it, which the cost budget spaces on a busy machine).
        # The run goes on (nothing fails), and rank 0 says once what is likely wrong.
        out, err = self.train("--epochs", "8", *GROWING, "--scaling-rule", "linear", "--lr", "1.2", timeout=180)
        warnings = re.findall(r"^\[0\] dlrun: warning: adaptive batch: the training loss \((\S+)\) is (.*): "
                              r"training may be diverging at global batch (\d+), where the learning rate is "
                              r"x(\d+\.\d\d) the initial one\. If it is, the scaled rate is too high", out + err, re.M)
        self.assertEqual(len(warnings), 1, out[-3000:] + err[-3000:])
        _, since, batch, factor = warnings[0]
        self.assertRegex(since, r"^(\d+x its lowest \(\S+, at global batch \d+\)|not finite)$")
        self.assertGreaterEqual(int(batch), 64)
        self.assertGreater(float(factor) * 1.2, 1)  # the rate had passed 1
        self.assertNotIn("[1] dlrun: warning: adaptive batch: the training loss", out + err)

    def test_count_progress_trains_on_while_a_large_batch_makes_less_progress_per_sample(self):
        # A fixed step cost makes larger batches faster per sample, the noise (scale about 150)
        # makes them less efficient: AdaptiveBatch grows the batch beyond the initial 64, each
        # such step's AdaScale gain is below its batch / 64, and --count-progress trains more
        # samples than the epochs hold to make the same progress. Without the flag the run
        # ends after exactly EPOCHS x SAMPLES samples (the tests above).
        out, _ = self.train("--epochs", "4", *GROWING, "--count-progress", launch=("--gpus", "2"), timeout=180)
        batches = [int(b) for b in re.findall(r"^\[0\] epoch \d+ \(\d+\.\d\d of 4 in progress\): .* batch (\d+) ",
                                               out, re.M)]
        self.assertGreater(max(batches, default=0), 64, out[-2000:])
        _, samples, epochs, _, _ = self.done_line(out)
        self.assertEqual(epochs, 4)
        self.assertGreater(samples, 4 * SAMPLES, out[-2000:])

    def test_resize_4_to_2_to_1_trains_every_sample_once(self):
        # --max-batch-size 64 keeps AdaptiveBatch (restored at each size) at the initial batch,
        # so the run has exactly 2 x 2048 / 64 = 64 steps and the holds below come before its end.
        run_dir = self.run_dir()
        p = self.start("local", "--gpus", "1:4", "--run-dir", run_dir, "--",
                       *self.gated_args("--max-batch-size", "64"))
        held = 8
        self.hold_at(p, held)
        self.assertEqual(self.starts(), [(4, 0)])
        with open(os.path.join(run_dir, "job.json")) as f:
            job = json.load(f)["id"]
        for start, (size, next_hold) in enumerate(((2, 30), (1, 50)), start=2):
            r = self.dlrun("resize", job, str(size), timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.wait_starts(p, start), (size, held + 1))
            held = next_hold
            self.hold_at(p, held)
        self.allow(10**6)
        code, out, err = self.finish(p, timeout=180)
        self.assertEqual(code, 0, out[-2000:] + err[-3000:])
        steps, samples, _, _, _ = self.done_line(out)
        self.assertEqual((steps, samples), (64, EPOCHS * SAMPLES))
        self.assertEqual(sorted(self.losses()), list(range(1, 65)), "the step count is not exact")
        self.assert_every_sample_once()
        self.assertRegex(out, r"\[0\] resumed from step 9 .*saved by 4 rank\(s\); now 2 rank\(s\)")
        self.assertRegex(out, r"\[0\] resumed from step 31 .*saved by 2 rank\(s\); now 1 rank\(s\)")


if __name__ == "__main__":
    unittest.main()


class History(SyntheticCase):
    """`dlrun history JOB|RUN_DIR [--svg FILE]`: what AdaptiveBatch decided in a run, and its picture."""

    def test_a_run_whose_batch_grows_is_summarised_and_drawn(self):
        # As test_count_progress's run: a fixed step cost and noisy gradients, so the batch grows.
        run_dir = self.run_dir()
        code, out, err = self.run_dlrun("local", "--gpus", "2", "--name", "grows", "--run-dir", run_dir, "--",
                                        SYNTHETIC, "--samples", str(SAMPLES), "--epochs", "4", "--noise", "4",
                                        "--step-ms", "10", "--sample-ms", "0", "--sync-ms-per-rank", "0",
                                        "--max-batch-size", "1024", "--replan-every", "5", "--count-progress",
                                        timeout=180)
        self.assertEqual(code, 0, out[-2000:] + err[-3000:])
        svg = os.path.join(self.tmp, "history.svg")
        code, out, err = self.run_dlrun("history", "grows", "--svg", svg)
        self.assertEqual(code, 0, out + err)
        self.assertIn(f"job 1 (grows): {run_dir}", out)
        rows = re.findall(r"^\s+(\d+)\s+2\s+(\d+)-(\d+)\s+[\d.]+\s+\d+\s+\d+\s+\S+$", out, re.M)
        self.assertGreaterEqual(len(rows), 2, out)
        self.assertEqual(rows[0][0], "64", out)
        self.assertGreater(max(int(r[0]) for r in rows), 64, out)
        self.assertRegex(out, r"batch size: 64 at first, \d+ at the end \(\d+ changes?\)")
        self.assertRegex(out, r"noise scale: \S+ samples at first, \S+ at the end")
        self.assertRegex(out, r"goodput at the end: \d+/s measured, \d+/s predicted by the published model at 2 rank")
        self.assertIn(f"Wrote {svg}", out)
        with open(svg) as f:
            picture = f.read()
        self.assertTrue(picture.startswith("<?xml"), picture[:200])
        self.assertEqual(picture.count("<polyline"), 3, picture[:2000])
        self.assertIn("job 1 (grows): batch size, goodput and noise scale over time", picture)
        # The run directory names the same run.
        code, by_dir, err = self.run_dlrun("history", run_dir)
        self.assertEqual(code, 0, by_dir + err)
        self.assertEqual(by_dir.splitlines()[1:], out.splitlines()[1:-1])
        # A directory here named as the job: which one is meant is asked, not guessed; ./ says.
        here = os.path.join(self.tmp, "here")
        os.makedirs(os.path.join(here, "grows"))
        r = self.dlrun("history", "grows", cwd=here)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("'grows' is both job 1 (grows) and a directory here: write ./grows", r.stderr)
        r = self.dlrun("history", "./grows", cwd=here)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("./grows/metrics.jsonl does not exist", r.stderr)
        # A directory that names no job is that directory.
        os.symlink(run_dir, os.path.join(here, "mine"))
        r = self.dlrun("history", "mine", cwd=here)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines()[0], f"mine: mine")
        self.assertEqual(r.stdout.splitlines()[1:], out.splitlines()[1:-1])
        # A directory here that is the job's own run directory: the job, no question asked.
        there = os.path.join(self.tmp, "there")
        os.makedirs(there)
        os.symlink(run_dir, os.path.join(there, "grows"))
        r = self.dlrun("history", "grows", cwd=there)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines()[0], f"job 1 (grows): {run_dir}")

    def test_a_resumed_run_is_one_history_without_the_time_between(self):
        run_dir = self.run_dir()
        args = [SYNTHETIC, "--samples", str(SAMPLES), "--noise", "4", "--step-ms", "10", "--sample-ms", "0",
                "--sync-ms-per-rank", "0", "--max-batch-size", "1024", "--replan-every", "5"]
        for epochs in ("2", "4"):  # the second run resumes from the first's checkpoint
            code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", run_dir, "--", *args,
                                            "--epochs", epochs, timeout=180)
            self.assertEqual(code, 0, out[-2000:] + err[-3000:])
            if epochs == "2":
                time.sleep(3)  # between the runs: not the run's time
        # The second run is another job: it is told whose checkpoint it goes on from.
        self.assertRegex(err, r"resumed from the checkpoint of step \d+ that job 1 saved in .*: this is job 2\.")
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        own = sum(line["seconds"] for line in lines)
        self.assertGreater(lines[-1]["time"] - lines[0]["time"], own + 2.5)
        svg = os.path.join(self.tmp, "resumed.svg")
        code, out, err = self.run_dlrun("history", run_dir, "--svg", svg)
        self.assertEqual(code, 0, out + err)
        self.assertIn("resumed from a checkpoint: once (", out)
        seconds = [float(v) for v in re.findall(r"^\s+\d+\s+2\s+\d+-\d+\s+([\d.]+)\s", out, re.M)]
        # The rows count the run's own seconds, both runs'.
        self.assertLess(sum(seconds), own + 0.5, out)
        self.assertGreater(sum(seconds), own - 0.5, out)
        with open(svg) as f:
            self.assertEqual(f.read().count(">resumed</text>"), 1)

    def test_what_has_no_history_is_refused_with_the_reason(self):
        empty = os.path.join(self.tmp, "empty-run")
        os.makedirs(empty)
        code, out, err = self.run_dlrun("history", empty)
        self.assertEqual(code, 2, out + err)
        self.assertIn("metrics.jsonl does not exist: the program does not use an adaptive batch", err)
        open(os.path.join(empty, "metrics.jsonl"), "w").close()
        code, out, err = self.run_dlrun("history", empty)
        self.assertIn("metrics.jsonl has no metrics: the program does not use an adaptive batch", err)
        code, out, err = self.run_dlrun("history", "17")
        self.assertEqual(code, 2, out + err)
        self.assertIn("no job 17", err)
        code, out, err = self.run_dlrun("history", os.path.join(self.tmp, "nowhere"))
        self.assertEqual(code, 2, out + err)
        self.assertIn("nowhere: no such directory", err)
