"""Elastic training for real: examples/fashion_mnist on the runtime, resized while it trains
(dlrun resize) and with ranks killed at random moments. Asserts that every sample of an
epoch is trained exactly once across resizes, that the step count is exact, and that the
final checkpoint loads."""
import os
import random
import re
import signal
import time
import unittest

from harness import wait_for
from test_runtime import BATCH, EPOCHS, STEPS, TRAIN_LIMIT, ExampleCase


class ResizeDuringTraining(ExampleCase):
    def test_resize_2_to_3_to_1_trains_every_sample_once(self):
        run_dir = os.path.join(self.tmp, "run")
        p = self.start("local", "--nproc", "1:3", "--run-dir", run_dir, "--", *self.gated_args())
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(run_dir, "job.json")), 30))
        with open(os.path.join(run_dir, "job.json")) as f:
            job = re.search(r'"id": "([^"]+)"', f.read()).group(1)
        held = 10
        self.hold_at(p, held)
        for start, (size, next_hold) in enumerate(((2, 30), (3, 55), (1, 80)), start=2):
            r = self.dlrun("resize", job, str(size), timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            # Every rank was asked to stop: each leaves the gate, they take one more step
            # together, checkpoint, and the group starts again at the new size.
            self.assertEqual(self.wait_starts(p, start), (size, held + 1))
            held = next_hold
            self.hold_at(p, held)
        self.allow(STEPS)
        code, out, err = self.finish(p, timeout=240)
        self.assertEqual(code, 0, err[-3000:])
        self.assertRegex(out.splitlines()[-1], r"^\[0\] test_accuracy=0\.\d{4}$")
        losses = self.losses()  # asserts that no step was trained twice
        self.assertEqual(sorted(losses), list(range(1, STEPS + 1)), "the step count is not exact")
        seen = self.samples_per_epoch()
        self.assertEqual(sorted(seen), list(range(EPOCHS)))
        for epoch, counter in seen.items():
            self.assertEqual(sorted(counter), list(range(TRAIN_LIMIT)), f"epoch {epoch} missed samples")
            self.assertEqual(set(counter.values()), {1}, f"epoch {epoch} repeated samples")
        for size in (2, 3, 1):
            self.assertIn(f"now running {size} rank", err)


class RandomKills(ExampleCase):
    KILLS = 20

    def test_twenty_kill_9_of_random_ranks(self):
        # The gate holds the run short of its last step until the test has killed 20 times,
        # so the run lasts as long as the kills take, on a machine of any speed. Each kill
        # lands once the group is back (rank 0 has written its start record) and has trained
        # a random number (0 to 6) of further steps, or while it waits at the gate.
        random.seed(7)
        gate = STEPS - 1
        p = self.start("local", "--nproc", "2", "--max-restarts", "25", "--grace", "2", "--",
                       *self.gated_args("--checkpoint-every", "5"))
        self.allow(gate)
        kills = 0
        while kills < self.KILLS:
            if p.poll() is not None:
                self.fail(f"dlrun ended after {kills} kills: {p.communicate()}")
            # Attempt `kills` has started: each attempt writes one start record, and no kill
            # lands before it.
            self.wait_until(p, lambda: len(self.starts()) > kills, f"start {kills + 1} of the group")
            base = self.steps_done()
            trained = base + random.randrange(7)
            # At the gate: this attempt trained up to it (a step after base is the gate's).
            self.wait_until(p, lambda: self.steps_done() >= trained or
                            (self.steps_done() > base and self.last_step() == gate), f"{trained} steps")
            rank = random.randrange(2)
            try:
                pid = self.rank_pid(rank)
                os.kill(pid, signal.SIGKILL)
            except (FileNotFoundError, ValueError, ProcessLookupError):
                time.sleep(0.01)
                continue  # that rank is being restarted: another moment
            kills += 1
            # Wait for the group to be back (a new pid for that rank) before the next kill.
            self.wait_until(p, lambda: self._pid_changed(rank, pid), f"rank {rank} restarted")
        self.allow(STEPS)
        code, out, err = self.finish(p, timeout=300)
        self.assertEqual(code, 0, err[-3000:])
        self.assertEqual(len(re.findall(r"rank \d was killed by signal 9 \(SIGKILL\); stopping", err)),
                         self.KILLS, err[-3000:])
        # The last attempt trained to the end: its steps reach exactly STEPS.
        with open(os.path.join(self.trace, "loss.txt")) as f:
            last_step = max(int(line.split()[0]) for line in f)
        self.assertEqual(last_step, STEPS)
        checkpoints = sorted(os.listdir(self.checkpoints))
        self.assertTrue(checkpoints)
        # The final checkpoint loads: a run from it has nothing left to train.
        r = self.dlrun("local", "--nproc", "1", "--", *self.example_args(), timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn(f"resumed from step {STEPS}", r.stdout)

    def _pid_changed(self, rank, old):
        try:
            return self.rank_pid(rank) != old
        except (FileNotFoundError, ValueError):
            return False


if __name__ == "__main__":
    unittest.main()
