"""Elastic jobs, the launcher's side: `dlrun resize`, GPUs left out, the watchdog. The
ranks here are small scripts that follow the runtime's protocol (docs/elastic.md): they say
that they handle the stop request (RUN_DIR/handles-stop), on SIGUSR1 they "checkpoint" and
exit with 75; they touch DLRUN_PROGRESS_FILE as they go. Programs that do not say so are
not resized unless --force."""
import json
import os
import re
import signal
import sqlite3
import time
import unittest

from harness import PYTHON, DlrunTestCase, read_words, wait_for

ELASTIC_RANK = """#!/bin/sh
trap 'echo "$RANK:$WORLD_SIZE" >> {stops}; exit 75' USR1
[ "$RANK" = 0 ] && : > "$DLRUN_RUN_DIR/handles-stop"
echo "$RANK:$WORLD_SIZE:$DLRUN_RESTART_COUNT" >> {starts}
while true; do sleep 0.05; done
"""


def submit_elastic(case, rank):
    """Submits the program `rank` as a job of 1 to 3 ranks on 4 CPU slots; returns its id."""
    case.env["DLRUN_CPU_SLOTS"] = "4"
    job_file = os.path.join(case.tmp, "job.toml")
    with open(job_file, "w") as f:
        f.write(f'command = ["{rank}"]\n[resources]\nnproc = "1:3"\n')
    r = case.dlrun("submit", "--parsable", job_file)
    case.assertEqual(r.returncode, 0, r.stderr)
    return r.stdout.strip()


class Resize(DlrunTestCase):
    def elastic_rank(self):
        self.starts = os.path.join(self.tmp, "starts")
        self.stops = os.path.join(self.tmp, "stops")
        path = os.path.join(self.tmp, "rank.sh")
        with open(path, "w") as f:
            f.write(ELASTIC_RANK.format(starts=self.starts, stops=self.stops))
        os.chmod(path, 0o755)
        return path

    def job_id(self, proc):
        runs = os.path.join(self.home, "runs")
        found = wait_for(lambda: [d for d in os.listdir(runs) if d != "latest"] if os.path.isdir(runs) else [], 30)
        self.assertTrue(found)
        return found[0]

    def test_resize_a_local_job_up_and_down(self):
        p = self.start("local", "--nproc", "1:3", self.elastic_rank())
        job = self.job_id(p)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
        r = self.dlrun("resize", job, "2")
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {job} now runs 2 ranks\n"), r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 5, 30))
        r = self.dlrun("resize", job, "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 8, 30))
        starts = read_words(self.starts)
        self.assertEqual(sorted(starts[:3]), ["0:3:0", "1:3:0", "2:3:0"])
        self.assertEqual(sorted(starts[3:5]), ["0:2:1", "1:2:1"])
        self.assertEqual(sorted(starts[5:]), ["0:3:2", "1:3:2", "2:3:2"])
        self.assertEqual(sorted(read_words(self.stops)), ["0:2", "0:3", "1:2", "1:3", "2:3"])
        with open(os.path.join(self.home, "runs", job, "job.json")) as f:
            self.assertEqual(json.load(f)["world_size"], 3)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130)
        self.assertIn("resizing from 3 to 2 ranks: asking the ranks to checkpoint and stop", err)
        self.assertIn("now running 2 ranks", err)

    def test_resizes_at_once_each_get_their_answer(self):
        # Two clients shared one request and one answer file: one took the other's answer or
        # overwrote its request, and the other waited out its timeout (600 s).
        p = self.start("local", "--nproc", "1:3", self.elastic_rank())
        job = self.job_id(p)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
        clients = [self.start("resize", job, str(n)) for n in (2, 1, 2)]
        for client in clients:
            out, err = client.communicate(timeout=120)
            # Each is answered at once: done; or not now (75: the job is RESCALING, or stopping:
            # try again); or refused while the new ranks had not yet said again that they handle
            # the stop request (3). None waits out its timeout.
            self.assertIn(client.returncode, (0, 75, 3), out + err)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)

    def test_a_local_gpu_job_shrinks_and_grows_back_onto_its_gpus(self):
        starts = os.path.join(self.tmp, "gpu-starts")
        path = os.path.join(self.tmp, "gpu-rank.sh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\ntrap 'exit 75' USR1\ntouch \"$DLRUN_RUN_DIR/handles-stop\"\n"
                    f"echo \"$DLRUN_RESTART_COUNT:$RANK:$CUDA_VISIBLE_DEVICES\" >> {starts}\n"
                    "while true; do sleep 0.05; done\n")
        os.chmod(path, 0o755)
        p = self.start("local", "--gpus", "1:4", path, env=dict(self.env, DLRUN_FAKE_GPUS="4"))
        job = self.job_id(p)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 4, 30))
        r = self.dlrun("resize", job, "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 6, 30))
        r = self.dlrun("resize", job, "4")
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {job} now runs 4 ranks\n"), r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 10, 30))
        words = read_words(starts)
        self.assertEqual(sorted(words[:4]), ["0:0:0", "0:1:1", "0:2:2", "0:3:3"])
        self.assertEqual(sorted(words[4:6]), ["1:0:0", "1:1:1"])
        self.assertEqual(sorted(words[6:]), ["2:0:0", "2:1:1", "2:2:2", "2:3:3"])
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)

    def test_quiet_says_nothing_of_a_resize(self):
        p = self.start("local", "-q", "--nproc", "1:2", self.elastic_rank())
        job = self.job_id(p)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 2, 30))
        r = self.dlrun("resize", job, "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual((p.returncode, err), (130, ""))

    def test_resize_outside_the_range_is_refused(self):
        p = self.start("local", "--nproc", "2:3", self.elastic_rank())
        job = self.job_id(p)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
        r = self.dlrun("resize", job, "5")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, f"dlrun: error: job {job}: 5 ranks is outside the job's range 2:3\n")
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)

    def test_a_fixed_size_job_is_not_resized(self):
        p = self.start("local", "--nproc", "2", "sleep", "1000")
        job = self.job_id(p)
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.home, "runs", job, "job.json")), 30))
        r = self.dlrun("resize", job, "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("the job is not elastic: it was started with 2 ranks", r.stderr)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)

    def test_resize_unknown_job(self):
        r = self.dlrun("resize", "nope", "2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no job nope", r.stderr)

    def test_resize_a_submitted_job_moves_its_allocation(self):
        job = submit_elastic(self, self.elastic_rank())
        try:
            self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
            r = self.dlrun("resize", job, "1")
            self.assertEqual((r.returncode, r.stdout), (0, f"Job {job} now runs 1 rank\n"), r.stderr)
            status = json.loads(self.dlrun("status", "--json", job).stdout)
            # A resize spends no restart (docs/elastic.md): it is counted apart.
            self.assertEqual((status["state"], status["ranks"], status["restarts"], status["resizes"]),
                             ("RUNNING", 1, 0, 1))
            # To the size it has: nothing stops (it restarted the ranks and counted a resize).
            starts = len(read_words(self.starts))
            r = self.dlrun("resize", job, "1")
            self.assertEqual((r.returncode, r.stdout), (0, f"Job {job} already runs 1 rank (nothing was stopped)\n"),
                             r.stderr)
            time.sleep(1)
            self.assertEqual(len(read_words(self.starts)), starts)
            self.assertEqual(json.loads(self.dlrun("status", "--json", job).stdout)["resizes"], 1)
            r = self.dlrun("resize", job, "4")
            self.assertEqual(r.returncode, 2)
            self.assertIn("4 ranks is outside the job's range 1:3", r.stderr)
            # Inside its range, beyond what the machine has: never, not "now".
            r = self.dlrun("resize", job, "3", env=dict(self.env, DLRUN_CPU_SLOTS="2"))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"job {job}: 3 ranks can never run here: this machine has 2 CPU slots", r.stderr)
        finally:
            self.dlrun("cancel", job)


    def test_a_job_cancelled_during_its_resize_says_so(self):
        # dlrun resize exited 70 (dlrun's own failure): "the job's supervisor ended without answering".
        rank = self.script("slow.sh", f"""trap 'sleep 30; exit 75' USR1
[ "$RANK" = 0 ] && : > "$DLRUN_RUN_DIR/handles-stop"
echo "$RANK:$WORLD_SIZE" >> {self.tmp}/starts
while true; do sleep 0.05; done
""")
        job = submit_elastic(self, rank)
        status = lambda: json.loads(self.dlrun("status", "--json", job).stdout)
        self.assertTrue(wait_for(lambda: len(read_words(os.path.join(self.tmp, "starts"))) == 3, 30))
        client = self.start("resize", job, "1")
        self.assertTrue(wait_for(lambda: status()["state"] == "RESCALING", 30))
        self.assertEqual(self.dlrun("cancel", "--force", job).returncode, 0)
        _, err = client.communicate(timeout=60)
        self.assertEqual(client.returncode, 2, err)
        self.assertIn(f"job {job} ended (CANCELLED) before it was resized", err)

    def test_a_job_of_several_hosts_is_not_resized(self):
        p = self.start("run", "--hosts", "localhost:2", "sh", "-c", f"touch {self.tmp}/up-$RANK; sleep 30")
        try:
            self.assertTrue(wait_for(lambda: all(os.path.exists(f"{self.tmp}/up-{r}") for r in (0, 1)), 30))
            r = self.dlrun("resize", "1", "1")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("job 1 runs on several hosts (dlrun run, kind = \"ssh\"): such a job is not resized", r.stderr)
        finally:
            os.killpg(p.pid, signal.SIGTERM)
            p.communicate(timeout=60)

    def test_a_shrink_whose_client_is_gone_still_frees_the_slots(self):
        # Ctrl-C on `dlrun resize` while the ranks checkpoint: the job shrank, and the store said
        # so only once the answer reached the client, so the freed slots stayed taken.
        gate = os.path.join(self.tmp, "gate")
        starts = os.path.join(self.tmp, "starts")
        rank = self.script("slow.sh", f"""trap 'while [ ! -e {gate} ]; do sleep 0.05; done; exit 75' USR1
[ "$RANK" = 0 ] && : > "$DLRUN_RUN_DIR/handles-stop"
echo "$RANK:$WORLD_SIZE" >> {starts}
while true; do sleep 0.05; done
""")
        job = submit_elastic(self, rank)
        status = lambda: json.loads(self.dlrun("status", "--json", job).stdout)
        try:
            self.assertTrue(wait_for(lambda: len(read_words(starts)) == 3, 30))
            client = self.start("resize", job, "1")
            self.assertTrue(wait_for(lambda: status()["state"] == "RESCALING", 30))
            client.kill()
            client.wait()
            open(gate, "w").close()
            self.assertTrue(wait_for(lambda: len(read_words(starts)) == 4, 30))
            self.assertTrue(wait_for(lambda: (status()["state"], status()["ranks"]) == ("RUNNING", 1), 30), status())
        finally:
            self.dlrun("cancel", job)

    def test_a_resize_while_the_restarted_ranks_start_is_to_be_tried_again(self):
        # The ranks say that they handle the stop request at their first step. A resize right
        # after another was refused (exit 3) with a hint to --force, which kills a program that
        # does handle it: its earlier ranks had said so.
        starts = os.path.join(self.tmp, "starts")
        gate = os.path.join(self.tmp, "gate")
        rank = self.script("late.sh", f"""trap 'exit 75' USR1
echo "$RANK:$WORLD_SIZE" >> {starts}
[ "$DLRUN_RESTART_COUNT" = 0 ] || while [ ! -e {gate} ]; do sleep 0.05; done
[ "$RANK" = 0 ] && : > "$DLRUN_RUN_DIR/handles-stop"
while true; do sleep 0.05; done
""")
        job = submit_elastic(self, rank)
        try:
            self.assertTrue(wait_for(lambda: len(read_words(starts)) == 3, 30))
            self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.home, "jobs", job, "handles-stop")), 30))
            r = self.dlrun("resize", job, "1")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = self.dlrun("resize", job, "2")
            self.assertEqual((r.returncode, r.stdout), (75, ""), r.stderr)
            self.assertIn("the job's ranks are starting", r.stderr)
            self.assertIn("try again in a moment", r.stderr)
            self.assertNotIn("--force", r.stderr)
            open(gate, "w").close()  # the restarted ranks reach their first step
            self.assertTrue(wait_for(lambda: self.dlrun("resize", job, "2").returncode == 0, 30))
        finally:
            self.dlrun("cancel", job)

    def test_a_grow_whose_requester_died_before_asking_gives_its_slots_back(self):
        # `dlrun resize` (or the scheduler) takes a grow's slots in the store, then asks the
        # supervisor. Killed between the two, it left the slots recorded as the job's until its
        # next resize or its end: other jobs queued behind slots nobody used. The supervisor puts
        # its own allocation back once no requester holds the job's resize lock.
        import fcntl
        job = submit_elastic(self, self.elastic_rank())
        status = lambda: json.loads(self.dlrun("status", "--json", job).stdout)
        try:
            self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
            r = self.dlrun("resize", job, "1")
            self.assertEqual(r.returncode, 0, r.stderr)
            run_dir = status()["run_dir"]
            # Hold the lock as a requester would, and record a grow to 3 as begin_resize does.
            lock = open(os.path.join(run_dir, "resize.lock"), "a")
            fcntl.flock(lock, fcntl.LOCK_EX)
            db = sqlite3.connect(os.path.join(self.home, "jobs.db"), timeout=10)
            with db:
                db.execute("UPDATE jobs SET ranks = 3 WHERE id = ?", (int(job),))
                db.execute("INSERT INTO allocations (job, at, ranks, gpu_ids, cause) VALUES (?, ?, 3, '', 'resize')",
                           (int(job), time.time()))
            db.close()
            # While the requester lives, its grow stands (the supervisor looks every 5 s), and
            # another resize is told to try again (it waited without a word).
            r = self.dlrun("resize", job, "2")
            self.assertEqual(r.returncode, 75, r.stderr)
            self.assertIn(f"job {job} is being resized by another request", r.stderr)
            time.sleep(9)
            self.assertEqual(status()["ranks"], 3)
            lock.close()  # the requester dies
            self.assertTrue(wait_for(lambda: status()["ranks"] == 1, 30), status())
            self.assertEqual(status()["state"], "RUNNING")
            self.assertEqual(len(read_words(self.starts)), 4, read_words(self.starts))  # no restart since the resize
            with open(os.path.join(run_dir, "output.log")) as f:
                self.assertIn(f"job {job}: a resize was left unfinished (its requester ended before recording "
                              "it): the job's allocation is 1 rank again", f.read())
            db = sqlite3.connect(os.path.join(self.home, "jobs.db"), timeout=10)
            last = db.execute("SELECT ranks, cause FROM allocations WHERE job = ? ORDER BY seq DESC LIMIT 1",
                              (int(job),)).fetchone()
            db.close()
            self.assertEqual(last, (1, "undo"))
        finally:
            self.dlrun("cancel", job)


# A program that knows nothing of dlrun: no handler, no handles-stop. Each start appends
# RANK:WORLD_SIZE:RESTART_COUNT; SIGTERM is written down before it ends.
PLAIN_RANK = """trap 'echo "$RANK:$WORLD_SIZE" >> {stops}; exit 143' TERM
echo "$RANK:$WORLD_SIZE:$DLRUN_RESTART_COUNT" >> {starts}
while true; do sleep 0.05; done
"""


class Unannounced(DlrunTestCase):
    """Point 5 of issue 18: `dlrun resize` of a program that has not said it handles the stop
    request killed its ranks with SIGUSR1 and restarted them from scratch, printing success."""

    def plain_rank(self):
        self.starts = os.path.join(self.tmp, "starts")
        self.stops = os.path.join(self.tmp, "stops")
        return self.script("plain.sh", PLAIN_RANK.format(starts=self.starts, stops=self.stops))

    def test_a_local_run_is_refused_then_restarted_with_force(self):
        p = self.start("local", "--nproc", "1:2", "--run-dir", self.run_dir(), self.plain_rank())
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 2, 30))
        with open(os.path.join(self.run_dir(), "job.json")) as f:
            job = json.load(f)["id"]
        r = self.dlrun("resize", job, "1")
        self.assertEqual((r.returncode, r.stdout), (3, ""), r.stderr)
        self.assertEqual(
            r.stderr,
            f"dlrun: error: job {job}: not resized: its ranks have not said that they handle the stop request (no "
            "handles-stop in its run directory): resizing would kill them and restart them from their last "
            "checkpoint, if they save one. A program on the dlrun runtime says so when it first asks "
            "ctx.stop_requested() (every step, as docs/runtime.md's loop does): try again in a moment; any other "
            "program can say so (docs/elastic.md). To restart it at 1 rank anyway (from "
            f"its last checkpoint, if it saves one): dlrun resize --force {job} 1\n")
        # Nothing happened to the ranks.
        self.assertEqual(sorted(read_words(self.starts)), ["0:2:0", "1:2:0"])
        self.assertEqual(read_words(self.stops), [])
        with open(os.path.join(self.run_dir(), "job.json")) as f:
            self.assertEqual((json.load(f)["state"], p.poll()), ("running", None))
        r = self.dlrun("resize", "--force", job, "1")
        self.assertEqual((r.returncode, r.stdout),
                         (0, f"Job {job} now runs 1 rank (restarted: its program does not handle the stop request, "
                             "so it starts again from its last checkpoint, if it saves one)\n"), r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
        self.assertEqual(read_words(self.starts)[2], "0:1:1")
        self.assertEqual(sorted(read_words(self.stops)), ["0:2", "1:2"])  # SIGTERM, as a stop
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130)
        self.assertIn("resizing from 2 to 1 rank by restarting the ranks: they have not said that they handle "
                      "the stop request", err)

    def test_a_program_that_writes_handles_stop_is_resized_at_a_step(self):
        # The channel docs/channels.md gives any program (here a Python one, as a user would
        # write it): write $DLRUN_RUN_DIR/handles-stop once the SIGUSR1 handler is installed.
        starts = os.path.join(self.tmp, "starts")
        program = os.path.join(self.tmp, "train.py")
        with open(program, "w") as f:
            f.write(f"""import os, signal, sys, time
def stop(signum, frame):
    sys.exit(75)  # "restart me": a real program saves its checkpoint first
signal.signal(signal.SIGUSR1, stop)
if os.environ["RANK"] == "0":
    open(os.path.join(os.environ["DLRUN_RUN_DIR"], "handles-stop"), "w").close()
with open({starts!r}, "a") as f:
    f.write(os.environ["RANK"] + ":" + os.environ["WORLD_SIZE"] + "\\n")
while True:
    time.sleep(0.05)
""")
        p = self.start("local", "--nproc", "1:2", "--run-dir", self.run_dir(), PYTHON, program)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 2, 60))
        with open(os.path.join(self.run_dir(), "job.json")) as f:
            job = json.load(f)["id"]
        r = self.dlrun("resize", job, "1")
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {job} now runs 1 rank\n"), r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 3, 60))
        self.assertEqual(read_words(starts)[2], "0:1")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertIn("resizing from 2 to 1 rank: asking the ranks to checkpoint and stop", err)

    def test_ranks_that_said_they_handle_the_stop_and_do_not_stop_are_killed_and_said_so(self):
        # A program that writes handles-stop but never stops at a step (it ignores the request,
        # as a runtime program that never asks ctx.stop_requested() does): "now runs 1 rank"
        # alone hid that its ranks were killed at the end of the grace period.
        starts = os.path.join(self.tmp, "starts")
        program = self.script("deaf.sh", f"""
trap '' USR1 TERM
[ "$RANK" = 0 ] && touch "$DLRUN_RUN_DIR/handles-stop"
echo "$RANK:$WORLD_SIZE" >> {starts}
while :; do sleep 0.05; done
""")
        p = self.start("local", "--nproc", "1:2", "--grace", "1", "--run-dir", self.run_dir(), program)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 2, 60))
        with open(os.path.join(self.run_dir(), "job.json")) as f:
            job = json.load(f)["id"]
        r = self.dlrun("resize", job, "1")
        self.assertEqual((r.returncode, r.stdout),
                         (0, f"Job {job} now runs 1 rank (its ranks did not stop at a step within the grace period: "
                             "they were killed, and start again from their last checkpoint, if they saved one; does "
                             "the program ask ctx.stop_requested() after every step?)\n"), r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) == 3, 60))
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertIn("2 ranks did not stop at a step within 1 s of the resize's stop request: killing them", err)

    def test_a_submitted_job_is_refused_and_keeps_its_slots(self):
        job = submit_elastic(self, self.plain_rank())
        try:
            self.assertTrue(wait_for(lambda: len(read_words(self.starts)) == 3, 30))
            r = self.dlrun("resize", job, "1")
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn(f"dlrun resize --force {job} 1", r.stderr)
            status = json.loads(self.dlrun("status", "--json", job).stdout)
            self.assertEqual((status["state"], status["ranks"], status["restarts"], status["resizes"]),
                             ("RUNNING", 3, 0, 0))
            r = self.dlrun("resize", "--force", job, "2")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("(restarted:", r.stdout)
            status = json.loads(self.dlrun("status", "--json", job).stdout)
            self.assertEqual((status["state"], status["ranks"], status["restarts"], status["resizes"]),
                             ("RUNNING", 2, 0, 1))  # a resize by restart spends no max_restarts
            r = self.dlrun("resize", "--force", job, "auto")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--force goes with a number of ranks", r.stderr)
        finally:
            self.dlrun("cancel", job)


class LostGpu(DlrunTestCase):
    def test_a_gpu_whose_rank_keeps_failing_is_left_out(self):
        env = dict(self.env, DLRUN_FAKE_GPUS="4")
        script = self.script("gpu.sh", 'if [ "$CUDA_VISIBLE_DEVICES" = 2 ]; then echo "GPU 2 fell off the bus" >&2; '
                                       'exit 1; fi\necho "$RANK/$WORLD_SIZE on GPU $CUDA_VISIBLE_DEVICES"\nsleep 0.3\n')
        r = self.dlrun("local", "--gpus", "2:4", "--max-restarts", "3", script, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("leaving GPU 2 out: its rank failed 2 times in a row; continuing with 3 ranks\n"
                      "dlrun: warning: restarting all 3 ranks (restart 2 of 3)", r.stderr)  # not "all 4"
        last = [line for line in r.stdout.splitlines() if "/3 on GPU" in line]
        self.assertEqual(sorted(l.split("] ")[1] for l in last), ["0/3 on GPU 0", "1/3 on GPU 1", "2/3 on GPU 3"])

    def test_not_below_min(self):
        env = dict(self.env, DLRUN_FAKE_GPUS="2")
        script = self.script("gpu.sh", '[ "$CUDA_VISIBLE_DEVICES" = 1 ] && exit 1\nsleep 0.2\n')
        r = self.dlrun("local", "--gpus", "2:2", "--max-restarts", "2", script, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertNotIn("leaving GPU", r.stderr)


class Watchdog(DlrunTestCase):
    def test_a_rank_without_progress_counts_as_failed(self):
        script = self.script("hang.sh", 'if [ "$RANK" = 1 ]; then exec sleep 300; fi\n'
                                        'while true; do touch "$DLRUN_PROGRESS_FILE"; sleep 0.1; done\n')
        start = time.monotonic()
        r = self.dlrun("local", "--nproc", "2", "--watchdog", "4", "--grace", "1", script)
        self.assertLess(time.monotonic() - start, 60)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("dlrun: error: rank 1 made no progress for 4 s (--watchdog): treating it as failed", r.stderr)

    def test_ranks_that_never_reported_or_all_stopped_are_said_so(self):
        # A program that never touches the file (not on the runtime): the watchdog says what it
        # counts. Ranks that all stopped (waiting for one another): no rank is singled out.
        r = self.dlrun("local", "--nproc", "2", "--watchdog", "2", "--grace", "1", "sleep", "300")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("dlrun: error: no rank made progress for 2 s (--watchdog): treating the job as failed. No rank "
                      "has touched its progress file (DLRUN_PROGRESS_FILE) since it started, so their output counted as "
                      "progress, and they wrote none for that long", r.stderr)
        # ...and one that prints as it trains (a plain PyTorch script) runs on: the watchdog stopped
        # it, healthy, after its first seconds.
        script = self.script("prints.sh", 'end=$(( $(date +%s) + 5 )); while [ $(date +%s) -lt $end ]; do '
                                          'echo "step"; sleep 0.1; done; [ "$RANK" = 1 ] && exec sleep 300; echo done\n')
        r = self.dlrun("local", "--nproc", "2", "--watchdog", "2", "--grace", "1", script)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("[0] done", r.stdout)
        self.assertIn("dlrun: error: rank 1 made no progress for 2 s (--watchdog): treating it as failed", r.stderr)
        # Where only rank 0 prints (if rank == 0: print), the group's output counts for every rank.
        script = self.script("rank0.sh", 'end=$(( $(date +%s) + 5 )); while [ $(date +%s) -lt $end ]; do '
                                         '[ "$RANK" = 0 ] && echo "step"; sleep 0.1; done\n')
        r = self.dlrun("local", "--nproc", "3", "--watchdog", "2", "--grace", "1", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.dlrun("local", "--nproc", "2", "--watchdog", "2", "--grace", "1", "sh", "-c",
                       'touch "$DLRUN_PROGRESS_FILE"; exec sleep 300')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("dlrun: error: no rank made progress for 2 s (--watchdog): treating the job as failed (they "
                      "wait for one another: one rank stuck in its own work or I/O holds the others in their next "
                      "collective; an evaluation between steps longer than 2 s looks the same.", r.stderr)

    def test_ranks_that_report_progress_run_on(self):
        # Runs for three watchdog periods, by the clock (a count of touches would end sooner
        # on a slower machine), touching ten times a period.
        script = self.script("busy.sh", 'end=$(( $(date +%s) + 9 )); while [ $(date +%s) -lt $end ]; do '
                                        'touch "$DLRUN_PROGRESS_FILE"; sleep 0.3; done\n')
        r = self.dlrun("local", "--nproc", "2", "--watchdog", "3", script)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_bad_watchdog(self):
        r = self.dlrun("local", "--nproc", "1", "--watchdog", "-1", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--watchdog: -1 is out of range: must be a number of seconds from 0 to 604800", r.stderr)


if __name__ == "__main__":
    unittest.main()
