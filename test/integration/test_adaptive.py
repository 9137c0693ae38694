"""Adaptive batch size in real processes: examples/fashion_mnist --adaptive under `dlrun local`.
The batch size changes while training, a rank is stopped mid-epoch and the job resumes with
another number of ranks; every sample of every epoch is still trained exactly once, and
metrics.jsonl tells what was decided."""

import json
import os
import re
import signal

from test_runtime import ExampleCase


class AdaptiveTraining(ExampleCase):
    def adaptive_args(self, *extra):
        # --slow-ms: a fixed cost per step, as data loading is, so that larger batches are
        # clearly faster per sample and the goodput model moves the batch up (it is the
        # model's input, not the test's pacing: the step gate paces the test).
        # 4 epochs of 1200 samples, batches of 16 to 96 (micro-batches of at most 24 per rank:
        # 2 ranks accumulate 2 micro-steps at 96): 50 to 300 steps.
        args = self.gated_args("--adaptive", "--max-batch-size", "96", "--max-micro-batch", "24",
                                 "--replan-every", "8", "--slow-ms", "20", *extra)
        args[args.index("--batch-size") + 1] = "16"
        args[args.index("--epochs") + 1] = "4"
        return args

    def metrics(self, run_dir):
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_batch_changes_and_resume_with_3_ranks_trains_every_sample_once(self):
        run_dir1 = os.path.join(self.tmp, "run1")
        run1 = self.start("local", "--nproc", "2", "--run-dir", run_dir1, *self.adaptive_args())
        self.hold_at(run1, 32)
        os.kill(run1.pid, signal.SIGTERM)
        code, out1, err1 = self.finish(run1)
        self.assertEqual(code, 143, out1 + err1)
        stop = int(re.search(r"\[0\] stopped after step (\d+) .*exit 75", out1).group(1))
        self.assertEqual(stop, 33)
        lines1 = self.metrics(run_dir1)
        self.assertGreaterEqual(len(lines1), 3)
        for key in ("time", "step", "progress", "replicas", "global_batch", "micro_batch", "accum_steps",
                    "lr_factor", "samples_per_sec", "noise_scale", "efficiency", "goodput"):
            self.assertIn(key, lines1[-1])
        self.assertEqual({line["replicas"] for line in lines1}, {2})
        self.assertGreater(max(line["global_batch"] for line in lines1), 16,
                           f"the batch never grew: {lines1}\n{out1}{err1}")
        self.assertIn("adaptive batch: global 16 -> ", err1 + out1)
        self.assertTrue(os.path.exists(os.path.join(
            self.checkpoints, f"step-{stop:012d}", "state-adaptive.txt")))

        run_dir2 = os.path.join(self.tmp, "run2")
        self.allow(10**9)  # run 2 trains to the end
        code, out2, err2 = self.run_dlrun("local", "--nproc", "3", "--run-dir", run_dir2,
                                          *self.adaptive_args(), timeout=240)
        self.assertEqual(code, 0, out2 + err2)
        self.assertRegex(out2, rf"\[0\] resumed from step {stop} .*saved by 2 rank\(s\); now 3 rank\(s\)")
        lines2 = self.metrics(run_dir2)
        self.assertEqual({line["replicas"] for line in lines2}, {3})
        # The published model (docs/adaptive.md): what the scheduler predicts the job's goodput
        # from; run 2 restored the profile measured with 2 ranks and measured 3.
        with open(os.path.join(run_dir2, "goodput-model.json")) as f:
            model = json.load(f)
        self.assertEqual(model["version"], 1)
        self.assertEqual(model["replicas"], 3)
        self.assertEqual(model["measured_replicas"], [2, 3])
        self.assertEqual(model["efficiency"], "adam")  # Adam: the rate grows with the batch's square root
        self.assertEqual((model["initial_batch"], model["max_batch"]), (16, 96))
        self.assertGreater(model["params"]["beta_c"] + model["params"]["alpha_c"], 0)
        self.assertFalse(os.path.exists(os.path.join(run_dir2, "goodput-model.json.tmp")))
        self.assertGreater(lines2[0]["step"], stop)  # steps and progress go on from the checkpoint
        self.assertGreater(lines2[0]["progress"], lines1[-1]["progress"])

        seen = self.samples_per_epoch()
        self.assertEqual(sorted(seen), [0, 1, 2, 3])
        for epoch, counts in seen.items():
            self.assertEqual(set(counts), set(range(1200)), f"epoch {epoch}: samples missing")
            self.assertEqual({c for c in counts.values()}, {1}, f"epoch {epoch}: samples twice")
        steps = sorted(self.losses())
        self.assertEqual(steps, list(range(1, len(steps) + 1)))
        self.assertRegex(out2.strip().splitlines()[-1], r"^\[0\] test_accuracy=0\.\d{4}$")


class SleptStepCost(ExampleCase):
    """--step-ms, --sample-ms and --sync-ms-per-rank: a GPU-like cost slept inside each step, with
    and without AdaptiveBatch (whose throughput model must see it). Only lower bounds on time:
    a busy machine makes steps slower, never faster than what they sleep."""

    # 80 + 24 samples x 1 + 40 x (2 ranks - 1) = 144 ms a step at a global batch of 48.
    COST = ["--step-ms", "80", "--sample-ms", "1", "--sync-ms-per-rank", "40"]
    STEP_SECONDS = 0.144

    def args(self, *extra):
        args = self.example_args(*self.COST, *extra)
        args[args.index("--batch-size") + 1] = "48"
        args[args.index("--train-limit") + 1] = "480"  # 10 steps an epoch
        return args

    def test_fixed_steps_take_at_least_the_cost(self):
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", os.path.join(self.tmp, "run"),
                                        *self.args("--target-accuracy", "0.01", "--eval-every", "480"))
        self.assertEqual(code, 0, out + err)
        m = re.search(r"target reached: .* after 480 samples, 10 steps, ([\d.]+) s of training", out)
        self.assertIsNotNone(m, out + err)
        self.assertGreaterEqual(float(m.group(1)), 10 * self.STEP_SECONDS, out)

    def test_a_test_loss_target_stops_at_the_first_check_below_it(self):
        # --target-test-loss (the benchmark's other target): the test set's mean cross-entropy.
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", os.path.join(self.tmp, "run"),
                                        *self.args("--target-test-loss", "100", "--eval-every", "480"))
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"\[0\] target reached: test_loss=\d+\.\d{5} after 480 samples, 10 steps, [\d.]+ s of "
                              r"training\n")
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", os.path.join(self.tmp, "never"),
                                        *self.args("--target-test-loss", "1e-9", "--eval-every", "480"))
        self.assertEqual(code, 0, out + err)
        self.assertNotIn("target reached", out)
        self.assertRegex(out, r"test accuracy 0\.\d{4}, test loss \d+\.\d{4}, ")  # the epoch's line
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", os.path.join(self.tmp, "both"),
                                        *self.args("--target-test-loss", "1", "--target-accuracy", "0.5"))
        self.assertEqual(code, 2, out + err)
        self.assertRegex(out + err, r"--target-(accuracy|test-loss) excludes --target-(test-loss|accuracy)")

    def test_adaptive_measures_the_cost(self):
        run_dir = os.path.join(self.tmp, "run")
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", run_dir,
                                        *self.args("--adaptive", "--max-batch-size", "48"))
        self.assertEqual(code, 0, out + err)
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        self.assertGreaterEqual(len(lines), 2, out + err)
        for line in lines:
            self.assertEqual(line["global_batch"], 48)
            self.assertLessEqual(line["samples_per_sec"], 48 / self.STEP_SECONDS, line)

    def test_a_negative_cost_is_refused(self):
        code, out, err = self.run_dlrun("local", "--nproc", "1", *self.example_args("--sample-ms", "-0.5"))
        self.assertNotEqual(code, 0)
        self.assertIn("--sample-ms: -0.5 is not at least 0", out + err)
        self.assertFalse(os.path.exists(self.trace), "a rank trained before its options were checked")


class SgdOptimizer(ExampleCase):
    """--optimizer sgd: AdaptiveBatch scales SGD by AdaScale and rates samples by Pollux's
    efficiency, and the optimizer's state (momentum) is checkpointed under its own name."""

    def args(self, epochs, *extra):
        args = self.example_args("--optimizer", "sgd", "--adaptive", "--max-batch-size", "96",
                                 "--replan-every", "8", "--slow-ms", "20", *extra)
        args[args.index("--batch-size") + 1] = "16"
        args[args.index("--epochs") + 1] = str(epochs)
        return args

    def test_adaptive_sgd_publishes_its_efficiency_and_resumes_with_its_momentum(self):
        run_dir = os.path.join(self.tmp, "run1")
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", run_dir, *self.args(1))
        self.assertEqual(code, 0, out + err)
        with open(os.path.join(run_dir, "goodput-model.json")) as f:
            self.assertEqual(json.load(f)["efficiency"], "sgd")
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        grown = [line for line in lines if line["global_batch"] > 16]
        self.assertTrue(grown, f"the batch never grew: {lines}\n{out}{err}")
        for line in grown:  # AdaScale: the rate follows the gain, in [1, batch / 16]
            self.assertGreaterEqual(line["lr_factor"], 1 - 1e-9, line)
            self.assertLessEqual(line["lr_factor"], line["global_batch"] / 16 + 1e-9, line)
        saved = sorted(os.listdir(self.checkpoints))
        self.assertTrue(saved, out + err)
        self.assertTrue(os.path.exists(os.path.join(self.checkpoints, saved[-1], "optimizer-sgd.pt")), saved)
        code, out, err = self.run_dlrun("local", "--nproc", "2", "--run-dir", os.path.join(self.tmp, "run2"),
                                        *self.args(2))
        self.assertEqual(code, 0, out + err)
        self.assertRegex(out, r"\[0\] resumed from step \d+")
        self.assertRegex(out.strip().splitlines()[-1], r"^\[0\] test_accuracy=0\.\d{4}$")

    def test_momentum_without_sgd_and_a_momentum_of_1_are_refused(self):
        for extra, message in ((["--momentum", "0.5"], "--momentum: applies to --optimizer sgd only"),
                               (["--optimizer", "sgd", "--momentum", "1"], "--momentum: 1 is not at least 0 and below 1")):
            code, out, err = self.run_dlrun("local", "--nproc", "1", *self.example_args(*extra))
            self.assertNotEqual(code, 0)
            self.assertIn(message, out + err)
        self.assertFalse(os.path.exists(self.trace), "a rank trained before its options were checked")


if __name__ == "__main__":
    import unittest
    unittest.main()
