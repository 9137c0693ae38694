"""The goodput scheduler on this machine (docs/scheduling.md): elastic GPU jobs grow into
idle GPUs and shrink to let others in, decided by one `dlrun _schedule` process at a time,
which nobody starts by hand and whose kill -9 loses nothing. The ranks here are small scripts
that follow the runtime's protocol (they say they handle the stop request, and on SIGUSR1
they exit 75 to be restarted at the new size); test_scheduler_runtime.py runs real runtime
jobs. Fake GPUs (DLRUN_FAKE_GPUS)."""
import json
import os
import signal
import sqlite3
import time
import unittest
import xml.dom.minidom

from harness import read_words, wait_for
from test_jobs import JobsTestCase, supervisor_pid

# $1: a file that ends the job when it exists. Each start appends JOB:RANK:WORLD:GPU.
RANK = """trap 'exit 75' USR1
[ "$RANK" = 0 ] && [ -z "$NO_STOP_HANDLING" ] && : > "$DLRUN_RUN_DIR/handles-stop"
echo "$DLRUN_JOB_ID:$RANK:$WORLD_SIZE:$CUDA_VISIBLE_DEVICES" >> {starts}
while [ ! -e "$1" ]; do sleep 0.05; done
"""


class SchedulerTestCase(JobsTestCase):
    def setUp(self):
        super().setUp()
        self.env["DLRUN_FAKE_GPUS"] = "4"
        self.starts = os.path.join(self.tmp, "starts")
        self.rank = self.script("rank.sh", RANK.format(starts=self.starts))
        self.settings("restart_seconds = 1\n")

    def settings(self, text):
        os.makedirs(self.home, exist_ok=True)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[scheduler]\n" + text)

    def job(self, name, gpus, extra="", env=""):
        gate = os.path.join(self.tmp, f"done-{name}")
        text = (f'name = "{name}"\ncommand = ["{self.rank}", "{gate}"]\n{extra}'
                f'[resources]\ngpus = {json.dumps(gpus) if isinstance(gpus, str) else gpus}\n')
        if env:
            text += f"[env]\n{env}\n"
        return self.submit(text), gate

    def ranks(self, job_id):
        return self.status(job_id)["ranks"]

    def wait_ranks(self, job_id, ranks, timeout=60):
        ok = wait_for(lambda: (lambda j: j["state"] == "RUNNING" and j["ranks"] == ranks)(self.status(job_id)),
                      timeout, 0.1)
        self.assertTrue(ok, f"job {job_id} never ran {ranks} ranks: {self.status(job_id)}\n{self.scheduler_log()}")

    def scheduler_log(self):
        path = os.path.join(self.home, "scheduler.log")
        return open(path).read() if os.path.exists(path) else "(no scheduler.log)"

    def wait_weighed(self, jobs):
        """Waits until a round of the scheduler over `jobs` GPU jobs, started by a change of
        the queue, has decided to move nothing: the test is paced by the scheduler's work."""
        line = f"({jobs} GPU job{'' if jobs == 1 else 's'}): every allocation stays"
        self.assertTrue(wait_for(lambda: line in self.scheduler_log(), 60), self.scheduler_log())

    def starts_of(self, job_id):
        """The world sizes job `job_id`'s rank 0 started with, in order."""
        return [int(w.split(":")[2]) for w in read_words(self.starts)
                if w.split(":")[:2] == [str(job_id), "0"]]

    def lease(self):
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            row = db.execute("SELECT pid FROM scheduler_lease").fetchone()
        return row[0] if row else None


class Sharing(SchedulerTestCase):
    def test_no_room_is_made_for_a_fifo_job_that_cannot_start_yet(self):
        a, _ = self.job("a", "1:4")
        self.wait_ranks(a, 4)
        b, _ = self.job("b", "1:4")
        self.wait_ranks(b, 2)
        self.wait_ranks(a, 2)
        # A fifo job of 3 GPUs cannot fit beside the goodput jobs' MINs; a fifo job of 2 behind
        # it cannot start before it. Shrinking a and b for the second left 2 GPUs idle.
        line = "(3 GPU jobs): every allocation stays"
        big, _ = self.job("big", 3)
        self.assertTrue(wait_for(lambda: self.scheduler_log().count(line) >= 1, 60), self.scheduler_log())
        small, _ = self.job("small", 2)
        self.assertTrue(wait_for(lambda: self.scheduler_log().count(line) >= 2, 60), self.scheduler_log())
        self.assertEqual((self.ranks(a), self.ranks(b)), (2, 2), self.scheduler_log())
        self.assertNotIn("shrink 2 -> 1", self.scheduler_log())
        self.assertEqual(self.status(small)["reason"], f"behind job {big} (fifo)")

    def test_a_fifo_job_does_not_wait_behind_a_goodput_job_that_does_not_fit(self):
        # A goodput job of 2 GPUs or more waits (one is free); a fifo job of 1 GPU after it waited
        # "behind" it with the GPU idle, while later goodput jobs started on it.
        big, done_big = self.job("big", 3)
        self.wait_ranks(big, 3)
        elastic, _ = self.job("elastic", "2:4")
        self.assertTrue(wait_for(lambda: "waiting" in self.status(elastic)["reason"] or
                                 "scheduler" in self.status(elastic)["reason"], 30), self.status(elastic))
        one, done_one = self.job("one", 1)
        self.wait_ranks(one, 1)
        self.assertEqual(self.status(elastic)["state"], "PENDING")
        open(done_big, "w").close()
        self.wait_ranks(elastic, 3)
        open(done_one, "w").close()
        self.wait_ranks(elastic, 4)

    def test_a_goodput_job_past_starvation_seconds_is_not_passed_by_later_fifo_jobs(self):
        # Fifo jobs start themselves: a stream of small ones could pass a waiting goodput job for
        # good. Once it has waited past starvation_seconds, they wait behind it.
        self.settings("restart_seconds = 1\nstarvation_seconds = 1\n")
        big, done_big = self.job("big", 3)
        self.wait_ranks(big, 3)
        elastic, _ = self.job("elastic", "2:4")
        time.sleep(1.5)
        one, _ = self.job("one", 1)
        self.assertTrue(wait_for(lambda: "starvation_seconds" in self.status(one)["reason"], 30), self.status(one))
        self.assertEqual(self.status(one)["reason"], f"behind job {elastic}, which has waited past starvation_seconds "
                                                     "(goodput): the GPUs that come free are its first")
        self.assertEqual(self.status(one)["state"], "PENDING")
        open(done_big, "w").close()
        self.wait_ranks(elastic, 3)

    def test_a_job_grows_shrinks_for_another_and_grows_back(self):
        a, done_a = self.job("a", "1:4")
        self.wait_ranks(a, 4)  # alone: every GPU
        b, done_b = self.job("b", "1:4")
        # b starts at once, on what a gives back; the GPUs are split evenly.
        self.wait_ranks(b, 2)
        self.wait_ranks(a, 2)
        gpus = self.status(a)["gpus"] + self.status(b)["gpus"]
        self.assertEqual(sorted(gpus), [0, 1, 2, 3])
        open(done_b, "w").close()
        self.wait_state(b, ("SUCCEEDED",))
        self.wait_ranks(a, 4)  # b's GPUs go back to a
        open(done_a, "w").close()
        self.assertEqual(self.wait_state(a, ("SUCCEEDED",))["exit_code"], 0)
        starts = [w.split(":") for w in read_words(self.starts)]
        self.assertEqual(sorted(int(s[2]) for s in starts if s[0] == str(a) and s[1] == "0"), [2, 4, 4])
        # The scheduler said what it did, and ends by itself once no goodput job is left.
        log = self.scheduler_log()
        self.assertIn(f"job {a} (a): shrink 4 -> 2 GPUs", log)
        self.assertIn(f"job {b} (b): start 0 -> 2 GPUs", log)
        self.assertIn(f"job {a} (a): grow 2 -> 4 GPUs", log)
        self.assertTrue(wait_for(lambda: "ended" in self.scheduler_log().splitlines()[-1], 30), self.scheduler_log())
        self.assertIsNone(self.lease())
        # Every change is recorded, and drawn.
        trace = self.dlrun("status", "--trace", "--width", "40")
        self.assertEqual(trace.returncode, 0, trace.stderr)
        rows = [line for line in trace.stdout.splitlines() if line.startswith("GPU ")]
        self.assertEqual(len(rows), 4)
        self.assertTrue(all("A" in row for row in rows), trace.stdout)
        self.assertTrue(any("B" in row for row in rows), trace.stdout)
        svg = os.path.join(self.tmp, "trace.svg")
        r = self.dlrun("status", "--svg", svg, umask=0o022)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 jobs on 4 GPUs", r.stdout)
        # The user's file, made as their umask says (it was 0600: dlrun's own umask).
        self.assertEqual(os.stat(svg).st_mode & 0o777, 0o644)
        rects = xml.dom.minidom.parse(svg).getElementsByTagName("rect")
        self.assertGreater(len(rects), 4)

    def test_a_program_that_does_not_handle_the_stop_request_is_never_resized(self):
        a, done_a = self.job("a", "1:4", env='NO_STOP_HANDLING = "1"')
        self.wait_ranks(a, 4)
        b, done_b = self.job("b", "1:4")
        self.wait_weighed(2)  # the scheduler saw b, and left it waiting
        self.assertEqual(self.status(b)["state"], "PENDING")  # a keeps its GPUs: it would lose its work
        self.assertEqual(self.ranks(a), 4)
        # b says why (it said only that the policy gave it nothing).
        self.assertIn(f"job {a} holds 4 GPUs and cannot be resized: its ranks have not said that they handle the "
                      "stop request", self.status(b)["reason"])
        open(done_a, "w").close()
        self.wait_ranks(b, 4)
        open(done_b, "w").close()
        self.wait_state(b, ("SUCCEEDED",))
        self.assertEqual(self.starts_of(a), [4])  # never resized

    def test_fifo_policy_keeps_what_it_started_with(self):
        a, done_a = self.job("a", "1:4", extra='[scheduler]\npolicy = "fifo"\n')
        self.wait_ranks(a, 4)
        b, done_b = self.job("b", "1:4", extra='[scheduler]\npolicy = "fifo"\n')
        self.assertEqual((self.status(b)["state"], self.ranks(a)), ("PENDING", 4))
        open(done_a, "w").close()
        self.wait_ranks(b, 4)
        open(done_b, "w").close()
        self.wait_state(b, ("SUCCEEDED",))
        # a kept its 4 GPUs to its end, b waited for them; no scheduler was needed.
        self.assertEqual((self.starts_of(a), self.starts_of(b)), ([4], [4]))
        self.assertFalse(os.path.exists(os.path.join(self.home, "scheduler.log")))

    def test_a_pinned_job_keeps_its_size_until_auto(self):
        a, done_a = self.job("a", "1:4")
        self.wait_ranks(a, 4)
        # dlrun resize, as the scheduler, resizes only ranks that said they handle the stop request.
        run_dir = self.status(a)["run_dir"]
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(run_dir, "handles-stop")), 30))
        r = self.dlrun("resize", str(a), "2")
        pinned = f"; the goodput scheduler leaves it at 2 until 'dlrun resize {a} auto'\n"
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {a} now runs 2 ranks" + pinned), r.stderr)
        r = self.dlrun("resize", str(a), "2")
        self.assertEqual(r.stdout, f"Job {a} already runs 2 ranks (nothing was stopped)" + pinned, r.stderr)
        # A second job (fifo, 1 GPU) arrives after the resize: the scheduler weighs the queue
        # with a pinned at 2 and a GPU still idle, and leaves a there (unpinned, with
        # restart_seconds 1, it would grow).
        b, done_b = self.job("b", 1)
        self.wait_weighed(2)
        self.wait_ranks(b, 1)
        self.assertEqual(self.ranks(a), 2)
        # A size the free GPUs do not hold: who holds the others is said.
        r = self.dlrun("resize", str(a), "4")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"job {a}: not enough free GPUs for 4 ranks now; in use here: job {b} (b) has 1 GPU\n", r.stderr)
        open(done_b, "w").close()
        self.wait_state(b, ("SUCCEEDED",))
        self.assertEqual(self.starts_of(a), [4, 2])
        r = self.dlrun("resize", str(a), "auto")
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {a} is sized by the goodput scheduler again\n"), r.stderr)
        self.wait_ranks(a, 4)
        r = self.dlrun("resize", str(a), "lots")
        self.assertEqual(r.returncode, 2)
        self.assertIn("expected a number of ranks or 'auto'", r.stderr)
        open(done_a, "w").close()
        self.wait_state(a, ("SUCCEEDED",))


class Takeover(SchedulerTestCase):
    def test_kill_9_of_the_scheduler_loses_nothing(self):
        a, done_a = self.job("a", "1:4")
        self.wait_ranks(a, 4)
        self.assertTrue(wait_for(self.lease, 10))
        first = self.lease()
        os.kill(first, signal.SIGKILL)
        # The next job's arrival is served by a new scheduler (started by its supervisor).
        b, done_b = self.job("b", "1:4")
        self.wait_ranks(b, 2)
        self.wait_ranks(a, 2)
        second = self.lease()
        self.assertIsNotNone(second)
        self.assertNotEqual(first, second)
        # Killed while nothing waits, the scheduler is replaced by a running job's supervisor.
        os.kill(second, signal.SIGKILL)
        open(done_b, "w").close()
        self.wait_ranks(a, 4)
        open(done_a, "w").close()
        self.wait_state(a, ("SUCCEEDED",))

    def test_a_job_between_two_sizes_keeps_its_size_and_the_log_says_why(self):
        a, done_a = self.job("a", "1:4")
        self.wait_ranks(a, 4)
        # As a scheduler killed mid-resize leaves it (the store's state, written by hand here).
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            db.execute("UPDATE jobs SET state = 'RESCALING' WHERE id = ?", (a,))
        b, done_b = self.job("b", "1:4")
        line = f"(2 GPU jobs): every allocation stays until job {a} is resized (the round after weighs it again)"
        self.assertTrue(wait_for(lambda: line in self.scheduler_log(), 60), self.scheduler_log())
        self.assertEqual(self.status(b)["state"], "PENDING")
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            db.execute("UPDATE jobs SET state = 'RUNNING' WHERE id = ?", (a,))
        self.wait_ranks(b, 2)
        self.wait_ranks(a, 2)
        for done in (done_a, done_b):
            open(done, "w").close()
        self.wait_state(a, ("SUCCEEDED",))

    def test_a_scheduler_that_sees_too_few_gpus_says_so_and_one_started_by_a_job_sees_the_jobs(self):
        # Job a's supervisor starts the scheduler with a's environment: 1 GPU.
        self.env["DLRUN_FAKE_GPUS"] = "1"
        a, done_a = self.job("a", "1:2")
        self.wait_ranks(a, 1)
        self.assertTrue(wait_for(self.lease, 10))
        first = self.lease()
        self.env["DLRUN_FAKE_GPUS"] = "4"
        b, done_b = self.job("b", "2:4")
        line = (f"job {b} waits for 2 GPUs, and this scheduler (pid {first}) sees 1 on this machine "
                f"(DLRUN_FAKE_GPUS): it waits until it does")
        self.assertTrue(wait_for(lambda: line in self.scheduler_log(), 60), self.scheduler_log())
        self.assertEqual(self.status(b)["state"], "PENDING")
        open(done_a, "w").close()
        self.wait_state(a, ("SUCCEEDED",))
        # Killed, it is replaced by b's supervisor, with b's environment; `dlrun status` from a
        # shell without the variable (which would see no GPU) starts none (b's supervisor is
        # held meanwhile, so that only the status commands could).
        supervisor = supervisor_pid(b, self.home)
        os.kill(supervisor, signal.SIGSTOP)
        try:
            os.kill(first, signal.SIGKILL)
            self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{first}/stat") or
                                     open(f"/proc/{first}/stat").read().split(") ")[1][0] == "Z", 10))
            no_gpus = {k: v for k, v in self.env.items() if k != "DLRUN_FAKE_GPUS"}
            for _ in range(3):
                self.dlrun("status", env=no_gpus)
            time.sleep(0.5)
            lease = self.lease()
            self.assertTrue(lease is None or lease == first, f"a status command started scheduler {lease}")
        finally:
            os.kill(supervisor, signal.SIGCONT)
        self.wait_ranks(b, 4)
        with open(f"/proc/{self.lease()}/environ", "rb") as f:
            self.assertIn(b"DLRUN_FAKE_GPUS=4", f.read().split(b"\0"))
        open(done_b, "w").close()
        self.wait_state(b, ("SUCCEEDED",))

    def test_one_scheduler_at_a_time(self):
        a, done_a = self.job("a", "1:4")
        self.wait_ranks(a, 4)
        # Other dlrun commands sweep the queue: none starts a second scheduler.
        for _ in range(5):
            self.dlrun("status")
        self.assertTrue(wait_for(self.lease, 10))
        log = self.scheduler_log()
        self.assertEqual(log.count("started"), 1, log)
        open(done_a, "w").close()
        self.wait_state(a, ("SUCCEEDED",))


if __name__ == "__main__":
    unittest.main()
