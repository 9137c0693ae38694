"""The goodput scheduler with real runtime jobs (examples/synthetic on fake GPUs): job A alone
grows to every GPU; job B arrives and A shrinks so that B starts at once; B ends and A grows
back; both train every sample of every epoch exactly once (the checks of test_synthetic)."""
import os
import unittest

from harness import wait_for
from test_scheduler import SchedulerTestCase
from test_synthetic import SYNTHETIC, SyntheticCase


class RuntimeJobs(SchedulerTestCase):
    def setUp(self):
        super().setUp()
        if not os.path.exists(SYNTHETIC):
            self.skipTest("examples/synthetic was not built")

    def synthetic_job(self, name, samples, epochs, step_ms):
        trace = os.path.join(self.tmp, f"trace-{name}")
        command = [SYNTHETIC, "--samples", str(samples), "--epochs", str(epochs), "--fixed", "--batch-size", "64",
                   "--step-ms", str(step_ms), "--trace-dir", trace]
        text = f'name = "{name}"\ncommand = {command!r}\n[resources]\ngpus = "1:4"\n'.replace("'", '"')
        return self.submit(text), trace

    def assert_every_sample_once(self, trace, samples, epochs):
        case = SyntheticCase()
        case.trace = trace
        seen = case.samples_per_epoch()
        self.assertEqual(sorted(seen), list(range(epochs)))
        for epoch, counts in seen.items():
            self.assertEqual(sorted(counts), list(range(samples)), f"{trace} epoch {epoch}: samples missing")
            self.assertEqual(set(counts.values()), {1}, f"{trace} epoch {epoch}: samples trained more than once")
        return case.starts()

    def test_a_grows_shrinks_for_b_and_grows_back_exactly(self):
        a, trace_a = self.synthetic_job("a", 8192, 2, 60)
        self.wait_ranks(a, 4)
        run_a = self.status(a)["run_dir"]
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(run_a, "handles-stop")), 60))
        b, trace_b = self.synthetic_job("b", 1024, 1, 60)
        self.wait_ranks(b, 2)
        self.assertEqual(self.status(a)["ranks"], 2)
        self.assertEqual(self.wait_state(b, ("SUCCEEDED", "FAILED"), timeout=120)["state"], "SUCCEEDED",
                         self.dlrun("logs", str(b)).stdout[-2000:])
        self.wait_ranks(a, 4)
        job = self.wait_state(a, ("SUCCEEDED", "FAILED"), timeout=240)
        self.assertEqual(job["state"], "SUCCEEDED", self.dlrun("logs", str(a)).stdout[-3000:])
        starts_a = self.assert_every_sample_once(trace_a, 8192, 2)
        self.assertEqual([world for world, _ in starts_a], [4, 2, 4], starts_a)
        starts_b = self.assert_every_sample_once(trace_b, 1024, 1)
        self.assertEqual([world for world, _ in starts_b], [2], starts_b)


if __name__ == "__main__":
    unittest.main()
