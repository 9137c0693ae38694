"""One job model (issue 18, points 3 and 4): every run of dlrun local and dlrun run is a job
with a number, listed, followed, cancelled and resized like a submitted one; a stopped run is
resumed by that number (or its name) in its own run directory; old run directories go by
retention (dlrun clean)."""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
import unittest

from harness import DLRUN, DlrunTestCase, wait_for

# Counts to 40 steps, keeping its step in the run directory; stops on SIGTERM/SIGINT by saving
# it and exiting 75, as the runtime does. At step 10 it waits until the test creates
# RUN_DIR/release (so a stop lands there, whatever the machine's speed).
COUNTER = """
f="$DLRUN_RUN_DIR/step-$RANK"
s=$(cat "$f" 2>/dev/null || echo 0)
echo "rank $RANK starts at $s"
trap 'echo "$s" > "$f"; exit 75' TERM INT
while [ "$s" -lt 40 ]; do
  s=$((s+1))
  if [ "$s" -eq 10 ]; then
    touch "$DLRUN_RUN_DIR/waiting-$RANK"
    while [ ! -e "$DLRUN_RUN_DIR/release" ]; do sleep 0.05; done
  fi
done
echo "$s" > "$f"
echo "rank $RANK done at $s"
"""


def job_number(stderr):
    m = re.search(r"^dlrun: job (\d+):", stderr, re.M)
    assert m, stderr
    return int(m.group(1))


class Listed(DlrunTestCase):
    def status(self, *args):
        r = self.dlrun("status", "--json", *args)
        self.assertEqual(r.returncode if not args else 0, 0, r.stderr)
        return json.loads(r.stdout)

    def test_a_local_run_is_a_numbered_job(self):
        r = self.dlrun("local", "--nproc", "2", "sh", "-c", "echo out $RANK; echo err $RANK >&2")
        self.assertEqual(r.returncode, 0, r.stderr)
        job = job_number(r.stderr)
        jobs = self.status()
        self.assertEqual([j["id"] for j in jobs], [job])
        self.assertEqual(jobs[0]["state"], "SUCCEEDED")
        self.assertEqual(jobs[0]["origin"], "local")
        self.assertEqual(jobs[0]["name"], "sh")
        self.assertEqual(jobs[0]["exit_code"], 0)
        self.assertEqual(jobs[0]["ranks"], 2)
        self.assertEqual(jobs[0]["run_dir"], os.path.join(self.home, "runs", str(job)))
        # The same id in the ranks' environment, and the logs by it.
        logs = self.dlrun("logs", str(job))
        self.assertEqual(logs.returncode, 0, logs.stderr)
        # What the terminal showed, dlrun's own lines with it.
        lines = logs.stdout.splitlines()
        self.assertEqual(lines[0], f"dlrun: job {job}: 2 ranks of sh, logs in {self.home}/runs/{job}")
        self.assertEqual(sorted(lines[1:]), ["[0] err 0", "[0] out 0", "[1] err 1", "[1] out 1"])
        one = self.dlrun("logs", str(job), "--rank", "1")
        self.assertEqual(sorted(one.stdout.splitlines()), ["err 1", "out 1"])
        details = self.dlrun("status", str(job))
        self.assertEqual(details.returncode, 0)
        self.assertIn("started by:   dlrun local --nproc 2 sh -c", details.stdout)

    def test_logs_of_a_local_run_are_in_the_order_the_terminal_showed_them(self):
        # They were each rank's log in turn, without dlrun's own lines (why it restarted).
        gate = os.path.join(self.tmp, "gate")
        r = self.dlrun("local", "--nproc", "2", "--max-restarts", "1", "--ranks", "0", "sh", "-c",
                       f"if [ $RANK = 1 ]; then while [ ! -e {gate}$DLRUN_RESTART_COUNT ]; do sleep 0.02; done; "
                       f"echo second; exit 5; fi; echo first; touch {gate}$DLRUN_RESTART_COUNT; sleep 30")
        self.assertEqual(r.returncode, 5, r.stderr)
        logs = self.dlrun("logs", "1").stdout.splitlines()
        # Every rank's lines (the terminal showed rank 0's only), each attempt's before what
        # came after it.
        restart = logs.index("dlrun: warning: restarting all 2 ranks (restart 1 of 1)")
        for attempt in (logs[:restart], logs[restart:]):
            self.assertEqual(sorted(line for line in attempt if line.startswith("[")), ["[0] first", "[1] second"])
        self.assertTrue(logs[-1].startswith("dlrun: job 1 failed; 'dlrun local --resume 1' runs it again"), logs)
        # The newest job without its number (dlrun logs required one; latest was no job's name).
        self.dlrun("local", "-q", "--nproc", "1", "echo", "newest")
        for args in ([], ["latest"]):
            r = self.dlrun("logs", *args)
            self.assertEqual((r.returncode, r.stdout), (0, "[0] newest\n"), r.stderr)
        self.assertIn("job 2, your newest", self.dlrun("logs").stderr)
        self.assertIn("name:         echo", self.dlrun("status", "latest").stdout)

    def test_one_numbering_for_local_and_submitted_jobs(self):
        first = job_number(self.dlrun("local", "--nproc", "1", "true").stderr)
        job_file = os.path.join(self.tmp, "job.toml")
        with open(job_file, "w") as f:
            f.write('command = ["true"]\n[resources]\nnproc = 1\n')
        submitted = self.dlrun("submit", "--wait", "--parsable", job_file)
        self.assertEqual(submitted.returncode, 0, submitted.stderr)
        self.assertEqual(int(submitted.stdout.split()[0]), first + 1)
        r = self.dlrun("local", "--nproc", "1", "--name", "third", "true")
        self.assertEqual(job_number(r.stderr), first + 2)
        jobs = {j["id"]: j for j in self.status("--all")}
        self.assertEqual([jobs[i]["origin"] for i in sorted(jobs)], ["local", "submit", "local"])
        self.assertEqual(jobs[first + 2]["name"], "third")
        self.assertEqual(self.dlrun("status", "third", "--json").returncode, 0)

    def test_a_failed_run_says_how_it_ended_and_how_to_resume(self):
        r = self.dlrun("local", "--nproc", "2", "sh", "-c", 'exit $((RANK * 3))')
        self.assertEqual(r.returncode, 3)
        job = job_number(r.stderr)
        self.assertIn(f"dlrun local --resume {job}", r.stderr)
        [record] = self.status()
        self.assertEqual(record["state"], "FAILED")
        self.assertEqual(record["exit_code"], 3)
        self.assertEqual(record["failed_rank"], 1)

    def test_a_refused_plan_leaves_no_job(self):
        r = self.dlrun("local", "--nproc", "2", "--ranks", "5", "true")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(self.status("--all"), [])
        ok = self.dlrun("local", "--nproc", "1", "true")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertEqual(job_number(ok.stderr), 1)  # the refused run's number went to the next job

    def test_names_every_verb_can_use(self):
        for name, message in [("a b", "--name 'a b': a name is letters, digits"), ("12", "--name 12: a number is"),
                              ("x/y", "--name 'x/y': a name is")]:
            r = self.dlrun("local", "--nproc", "1", "--name", name, "true")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(message, r.stderr)
        self.assertEqual(self.status("--all"), [])

    def test_without_a_store_the_run_goes_on_unlisted(self):
        os.makedirs(os.path.join(self.home, "jobs.db"))  # a directory: SQLite cannot open it
        r = self.dlrun("local", "--nproc", "1", "sh", "-c", "echo id $DLRUN_JOB_ID")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("this run is not recorded", r.stderr)
        self.assertRegex(r.stdout, r"\[0\] id \d{8}-\d{6}-[0-9a-f]{4}")

    def test_dlrun_run_is_a_job_too(self):
        r = self.dlrun("run", "--hosts", "localhost:2", "sh", "-c", "echo from $RANK")
        self.assertEqual(r.returncode, 0, r.stderr)
        [record] = self.status()
        self.assertEqual(record["origin"], "run")
        self.assertEqual(record["state"], "SUCCEEDED")
        logs = self.dlrun("logs", str(record["id"]))
        self.assertEqual(sorted(logs.stdout.splitlines()), ["[localhost:0] from 0", "[localhost:1] from 1"])
        again = self.dlrun("run", "--resume", str(record["id"]), cwd="/")  # its own command line and hosts
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(job_number(again.stderr), record["id"])
        self.assertEqual(sorted(again.stdout.splitlines()), ["[localhost:0] from 0", "[localhost:1] from 1"])


class Steered(DlrunTestCase):
    def test_cancel_and_resize_a_local_run_by_its_number(self):
        program = self.script("elastic.sh", """
touch "$DLRUN_RUN_DIR/handles-stop"
echo "$WORLD_SIZE" >> "$DLRUN_RUN_DIR/sizes-$RANK"
trap 'exit 75' USR1 TERM INT
while :; do sleep 0.05; done
""")
        p = self.start("local", "--nproc", "1:3", program)
        run_dir = os.path.join(self.home, "runs", "1")
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(run_dir, "sizes-2")), 30))
        [record] = json.loads(self.dlrun("status", "--json").stdout)
        self.assertEqual((record["id"], record["state"], record["ranks"]), (1, "RUNNING", 3))
        r = self.dlrun("resize", "1", "auto")  # no scheduler sizes a foreground run
        self.assertEqual(r.returncode, 2)
        self.assertIn("job 1: 'auto' is for submitted jobs the goodput scheduler sizes; this one runs in the "
                      "foreground (dlrun local)", r.stderr)
        r = self.dlrun("resize", "--", "1", "-1")  # after "--" still JOB and RANKS, -1 refused as such
        self.assertEqual((r.returncode, r.stderr), (2, "dlrun: error: resize to -1 ranks: must be at least 1\n"))
        r = self.dlrun("resize", "1", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        # "ok 2" comes once the new ranks are started, not once they have run a line: on a busy
        # machine rank 0 writes its new size a moment later.
        sizes = lambda: open(os.path.join(run_dir, "sizes-0")).read().split()  # noqa: E731
        self.assertTrue(wait_for(lambda: sizes() == ["3", "2"], 30), sizes())
        record = json.loads(self.dlrun("status", "1", "--json").stdout)
        self.assertEqual((record["ranks"], record["resizes"], record["restarts"]), (2, 1, 0))
        # Between two sizes a resize is refused for now, not for good: 75 (try again), not 2.
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            db.execute("UPDATE jobs SET state = 'RESCALING' WHERE id = 1")
        r = self.dlrun("resize", "1", "3")
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("job 1 is RESCALING (another resize): try again once it runs", r.stderr)
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            db.execute("UPDATE jobs SET state = 'RUNNING' WHERE id = 1")
        r = self.dlrun("cancel", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "Job 1 CANCELLED")
        p.communicate(timeout=30)
        self.assertEqual(p.returncode, 143)
        self.assertEqual(json.loads(self.dlrun("status", "1", "--json").stdout)["state"], "CANCELLED")
        r = self.dlrun("resize", "1", "auto")
        self.assertEqual((r.returncode, r.stderr), (2, "dlrun: error: job 1 has ended (CANCELLED)\n"))

    def test_a_gpu_count_takes_only_gpus_no_other_job_holds(self):
        env = dict(self.env, DLRUN_FAKE_GPUS="4")
        p = self.start("local", "--gpus", "3", "sh", "-c", "touch $DLRUN_RUN_DIR/up-$RANK; sleep 60", env=env)
        self.assertTrue(wait_for(lambda: all(os.path.exists(os.path.join(self.home, "runs", "1", f"up-{r}"))
                                             for r in range(3)), 30))
        r = self.dlrun("local", "--gpus", "2", "true", env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gpus 2: only 1 of the 4 GPUs here is free: 0,1,2 are held by other jobs (dlrun status lists "
                      "them); wait, or name GPUs to share them (--gpus 0,3)", r.stderr)
        r = self.dlrun("local", "--gpus", "1", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=env)
        self.assertEqual((r.returncode, r.stdout), (0, "[0] gpu 3\n"), r.stderr)
        r = self.dlrun("local", "--gpus", "0,1", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)  # named GPUs: the user's choice
        self.assertEqual(sorted(r.stdout.splitlines()), ["[0] gpu 0", "[1] gpu 1"])
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)

    def test_a_run_inside_a_gpu_job_uses_that_jobs_gpus(self):
        env = dict(self.env, DLRUN_FAKE_GPUS="2")
        job_file = os.path.join(self.tmp, "job.toml")
        inner = [DLRUN, "local", "--gpus", "1", "sh", "-c", "echo inner $CUDA_VISIBLE_DEVICES"]
        with open(job_file, "w") as f:
            f.write(f"command = {json.dumps(inner)}\n[resources]\ngpus = 1\n")
        r = self.dlrun("submit", "--wait", "--parsable", job_file, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("[0] [0] inner 0", self.dlrun("logs", "1", env=env).stdout)

    def test_kill_9_of_dlrun_local_marks_its_job_lost(self):
        p = self.start("local", "--nproc", "1", "sh", "-c", "touch $DLRUN_RUN_DIR/up; sleep 60")
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.home, "runs", "1", "up")), 30))
        p.kill()
        p.communicate()
        record = json.loads(self.dlrun("status", "1", "--json").stdout)
        self.assertEqual(record["state"], "FAILED")
        self.assertIn("lost", record["reason"])


    def test_a_job_whose_dlrun_was_killed_is_lost_for_cancel_and_resume_without_status_first(self):
        # --resume said "job 1 is RUNNING: it has not ended (dlrun cancel 1 stops it)", and that
        # cancel recorded "CANCELLED by dlrun cancel (killed: …)" of ranks long dead: only dlrun
        # status put such a job right.
        for verb in ("cancel", "resume"):
            with self.subTest(verb=verb):
                shutil.rmtree(self.home, ignore_errors=True)
                p = self.start("local", "--nproc", "1", "sh", "-c", "touch $DLRUN_RUN_DIR/up; sleep 60")
                self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.home, "runs", "1", "up")), 30))
                p.kill()
                p.communicate()
                if verb == "cancel":
                    r = self.dlrun("cancel", "1")
                    self.assertNotIn("CANCELLED", r.stdout + r.stderr)
                else:
                    r = self.dlrun("local", "--resume", "1", "-q", "--nproc", "1", "true")
                    self.assertEqual(r.returncode, 0, r.stderr)
                record = json.loads(self.dlrun("status", "1", "--json").stdout)
                if verb == "cancel":
                    self.assertEqual(record["state"], "FAILED")
                    self.assertIn("lost", record["reason"])
                else:
                    self.assertEqual(record["state"], "SUCCEEDED")


class Resume(DlrunTestCase):
    def stop_counter(self, *extra):
        """Starts the counter on 2 ranks, stops dlrun with SIGINT midway; returns (job, stderr)."""
        program = self.script("counter.sh", COUNTER)
        p = self.start("local", "--nproc", "2", *extra, program, cwd=self.tmp)
        run_dir = os.path.join(self.home, "runs", "1")
        self.assertTrue(wait_for(lambda: all(os.path.exists(os.path.join(run_dir, f"waiting-{r}")) for r in (0, 1)), 60))
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        open(os.path.join(run_dir, "release"), "w").close()
        return job_number(err), err, run_dir

    def test_ctrl_c_then_resume_by_number_continues_in_the_same_run_directory(self):
        job, err, run_dir = self.stop_counter()
        self.assertIn(f"'dlrun local --resume {job}' runs it again", err)
        saved = {}
        for rank in (0, 1):
            with open(os.path.join(run_dir, f"step-{rank}")) as f:
                saved[rank] = int(f.read())
        self.assertEqual(saved, {0: 10, 1: 10})
        # From another directory, with nothing but the number: the job's own command line.
        r = self.dlrun("local", "--resume", str(job), cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(job_number(r.stderr), job)
        for rank in (0, 1):
            self.assertIn(f"[{rank}] rank {rank} starts at {saved[rank]}", r.stdout)
            self.assertIn(f"[{rank}] rank {rank} done at 40", r.stdout)
        jobs = json.loads(self.dlrun("status", "--all", "--json").stdout)
        self.assertEqual([(j["id"], j["state"], j["run_dir"]) for j in jobs], [(job, "SUCCEEDED", run_dir)])

    def test_a_bare_resume_keeps_the_users_umask_and_takes_how_it_is_shown(self):
        program = self.script("um.sh", 'echo "umask $(umask) rank $RANK"\n')
        old = os.umask(0o002)
        try:
            r = self.dlrun("local", "--nproc", "2", "--ranks", "0", "--color", "never", "--name", "um", program)
            self.assertEqual(r.stdout, "[0] umask 0002 rank 0\n", r.stderr)
            # The ranks of a bare resume got dlrun's private 077 (it runs dlrun again).
            r = self.dlrun("local", "--resume", "um")
            self.assertEqual(r.stdout, "[0] umask 0002 rank 0\n", r.stderr)
            # How it is shown may change; the job's own --ranks 0 gives way to --ranks 1.
            r = self.dlrun("local", "--resume", "um", "-q", "--ranks", "1")
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "[1] umask 0002 rank 1\n", ""))
            # ...for that one time: the job keeps its own command line.
            r = self.dlrun("local", "--resume", "um")
            self.assertEqual(r.stdout, "[0] umask 0002 rank 0\n", r.stderr)
            self.assertIn("job ", r.stderr)
            self.assertIn("--ranks 0 --color never", self.dlrun("status", "um").stdout)
            # --prefix undoes the job's --no-prefix, and the other way round.
            r = self.dlrun("local", "--nproc", "1", "--no-prefix", "--name", "np", program)
            self.assertEqual(r.stdout, "umask 0002 rank 0\n", r.stderr)
            r = self.dlrun("local", "--resume", "np", "--prefix", "<{rank}> ")
            self.assertEqual(r.stdout, "<0> umask 0002 rank 0\n", r.stderr)
            r = self.dlrun("local", "--resume", "um", "--no-prefix")
            self.assertEqual(r.stdout, "umask 0002 rank 0\n", r.stderr)
            # Other options (how many ranks) change the job's command line from now on: a whole
            # command line was needed to resume at another size.
            r = self.dlrun("local", "--resume", "um", "-q", "--nproc", "1")
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "[0] umask 0002 rank 0\n", ""))
            self.assertIn(f"started by:   dlrun local -q --nproc 1 --ranks 0 --color never --name um {program}",
                          self.dlrun("status", "um").stdout)
            r = self.dlrun("local", "--resume", "um")
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "[0] umask 0002 rank 0\n", ""))
        finally:
            os.umask(old)

    def test_the_resume_hint_names_the_step_of_the_newest_checkpoint(self):
        program = self.script("saves.sh", 'd="$DLRUN_RUN_DIR/checkpoints"\n'
                                          'mkdir -p "$d/step-000000000040" "$d/step-000000000042" "$d/.tmp-step-000000000050.1"\n'
                                          'touch "$d/step-000000000040/MANIFEST" "$d/step-000000000042/MANIFEST"\n'
                                          'mkdir -p "$d/step-000000000044"\n'  # no MANIFEST: cut short
                                          'exit 3\n')
        r = self.dlrun("local", "--nproc", "1", program)
        self.assertEqual(r.returncode, 3, r.stderr)
        job = job_number(r.stderr)
        self.assertIn(f"'dlrun local --resume {job}' runs it again in its run directory, from its checkpoint of "
                      "step 42\n", r.stderr)
        r = self.dlrun("local", "--nproc", "1", "sh", "-c", "exit 3")
        self.assertIn("from its checkpoint if it saved one\n", r.stderr)

    def test_a_resume_has_its_own_restarts_and_the_logs_say_where_it_starts(self):
        program = self.script("fails.sh", 'echo "attempt $DLRUN_RESTART_COUNT"\nexit 3\n')
        r = self.dlrun("local", "--nproc", "1", "--max-restarts", "1", "--name", "fl", program)
        self.assertEqual((r.returncode, r.stdout), (3, "[0] attempt 0\n[0] attempt 1\n"), r.stderr)
        job = job_number(r.stderr)
        # The budget is the run's; the count of restarts (dlrun status, DLRUN_RESTART_COUNT) goes on.
        r = self.dlrun("local", "--resume", "fl")
        self.assertEqual((r.returncode, r.stdout), (3, "[0] attempt 1\n[0] attempt 2\n"), r.stderr)
        self.assertIn("restart 1 of 1", r.stderr)
        self.assertEqual(json.loads(self.dlrun("status", "--json", "fl").stdout)["restarts"], 2)
        run_dir = os.path.join(self.home, "runs", str(job))
        with open(os.path.join(run_dir, "rank-0.log")) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[:3], ["attempt 0", "==> dlrun: restart 1 <==", "attempt 1"])
        self.assertRegex(lines[3], rf"^==> dlrun: job {job} starts here, \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ <==$")
        self.assertEqual(lines[4:], ["attempt 1", "==> dlrun: restart 2 <==", "attempt 2"])
        # Again: the count goes on from the two restarts so far.
        r = self.dlrun("local", "--resume", "fl")
        self.assertEqual(r.stdout, "[0] attempt 2\n[0] attempt 3\n", r.stderr)
        self.assertEqual(json.loads(self.dlrun("status", "--json", "fl").stdout)["restarts"], 3)
        with open(os.path.join(run_dir, "output.log")) as f:
            self.assertEqual(f.read().count(f"==> dlrun: job {job} starts here, "), 2)  # a line per resume

    def test_a_command_line_resumed_from_another_directory_says_where_the_job_ran(self):
        self.script("fail.sh", "exit 3\n")
        r = self.dlrun("local", "--nproc", "1", "--name", "rel", "./fail.sh", cwd=self.tmp)
        self.assertEqual(r.returncode, 3, r.stderr)
        r = self.dlrun("local", "--resume", "rel", "--nproc", "1", "./fail.sh", cwd="/")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"program './fail.sh' does not exist (job 1 was started in {self.tmp}; a command line given "
                      "with --resume runs in this directory, /)", r.stderr)
        self.assertEqual(json.loads(self.dlrun("status", "--json", "rel").stdout)["state"], "FAILED")

    def test_resume_by_name_with_a_command_line(self):
        job, _, run_dir = self.stop_counter("--name", "count")
        program = os.path.join(self.tmp, "counter.sh")
        r = self.dlrun("local", "--resume", "count", "--nproc", "2", program)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(job_number(r.stderr), job)
        self.assertNotIn("starts at 0", r.stdout)
        self.assertIn(f"dlrun local --nproc 2 {program}", self.dlrun("status", "count").stdout)

    def test_what_cannot_be_resumed_is_refused(self):
        job_file = os.path.join(self.tmp, "job.toml")
        with open(job_file, "w") as f:
            f.write('command = ["true"]\n[resources]\nnproc = 1\n')
        self.assertEqual(self.dlrun("submit", "--wait", job_file).returncode, 0)
        cases = [
            (["--resume", "1"], "job 1 was started by dlrun submit, not dlrun local"),
            (["--resume", "7"], "no job numbered 7"),
            (["--resume", "nosuch"], "no job named 'nosuch'"),
        ]
        for args, message in cases:
            r = self.dlrun("local", *args)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(message, r.stderr)
        p = self.start("local", "--nproc", "1", "sh", "-c", "touch $DLRUN_RUN_DIR/up; sleep 60")
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.home, "runs", "2", "up")), 30))
        r = self.dlrun("local", "--resume", "2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("job 2 is RUNNING: it has not ended", r.stderr)
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)
        # It keeps its name and run directory: others given were ignored without a word.
        for args, says in ((["--name", "other"], "--name other with --resume: job 2 keeps its name 'sh'"),
                           (["--run-dir", self.tmp], f"--run-dir {self.tmp} with --resume: job 2 resumes in its own")):
            r = self.dlrun("local", "--resume", "2", *args, "--nproc", "1", "true")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(says, r.stderr)


    def test_a_command_line_that_is_not_utf8_runs_and_resumes_byte_for_byte(self):
        # Linux's arguments are bytes (a Latin-1 file name): recording the job took them as JSON
        # text and failed (exit 70) before anything ran.
        word = b"caf\xe9"
        program = self.script("show.sh", 'printf "%s|" "$@" >> "$DLRUN_RUN_DIR/args"; exit 3\n')
        p = subprocess.run([DLRUN.encode(), b"local", b"--nproc", b"1", program.encode(), word],
                           env=self.env, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 3, p.stderr)
        job = job_number(p.stderr.decode(errors="replace"))
        r = subprocess.run([DLRUN, "local", "--resume", str(job)], env=self.env, capture_output=True, timeout=60)
        self.assertEqual(job_number(r.stderr.decode(errors="replace")), job)
        with open(os.path.join(self.home, "runs", str(job), "args"), "rb") as f:
            self.assertEqual(f.read(), word + b"|" + word + b"|")

    def test_a_run_directory_is_one_running_jobs_and_never_dlrun_state(self):
        runs = os.path.join(self.home, "runs")
        for run_dir in (runs, runs + "/", self.home, os.path.dirname(self.home)):
            r = self.dlrun("local", "--nproc", "1", "--run-dir", run_dir, "true")
            self.assertEqual(r.returncode, 2, run_dir)
            self.assertIn("it holds dlrun's own state", r.stderr)
        p = self.start("local", "--nproc", "1", "sh", "-c", "touch $DLRUN_RUN_DIR/up; sleep 60")
        try:
            self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(runs, "1", "up")), 30))
            for run_dir in (os.path.join(runs, "1"), os.path.join(runs, "1", "sub")):
                r = self.dlrun("local", "--nproc", "1", "--run-dir", run_dir, "true")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("job 1 (sh) is RUNNING in", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(runs, "1", "sub")))  # refused, and not made
            self.assertEqual(sorted(os.listdir(runs)), ["1", "latest"])  # nor a link to it
            self.assertEqual([j["id"] for j in json.loads(self.dlrun("status", "--all", "--json").stdout)], [1])
        finally:
            os.killpg(p.pid, signal.SIGTERM)
            p.communicate(timeout=30)
        # After a refusal, the next job (of the number the refused one had) runs in a directory of
        # its own, not in the refused one through a link left behind (it resumed from its files).
        for refused in (runs, self.home):
            self.assertEqual(self.dlrun("local", "--nproc", "1", "--run-dir", refused, "true").returncode, 2)
            r = self.dlrun("local", "--nproc", "1", "sh", "-c", 'echo "$DLRUN_RUN_DIR"')
            self.assertEqual(r.returncode, 0, r.stderr)
            own = os.path.join(runs, str(job_number(r.stderr)))
            self.assertEqual(os.path.realpath(r.stdout.split()[-1]), os.path.realpath(own))
            self.assertFalse(os.path.islink(own))


class Retention(DlrunTestCase):
    def run_jobs(self, count):
        for _ in range(count):
            self.assertEqual(self.dlrun("local", "--nproc", "1", "sh", "-c", "echo x > $DLRUN_RUN_DIR/ckpt").returncode, 0)

    def age(self, job, days):
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            db.execute("UPDATE jobs SET ended_at = ended_at - ? WHERE id = ?", (days * 86400, job))

    def test_clean_by_age_keeps_the_newest(self):
        self.run_jobs(4)
        for job in (1, 2, 3):
            self.age(job, 30)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[retention]\ndays = 7\nkeep = 1\n")
        dry = self.dlrun("clean", "--dry-run")
        self.assertEqual(dry.returncode, 0, dry.stderr)
        self.assertIn("Would remove 3 run directories", dry.stdout)
        self.assertTrue(os.path.isdir(os.path.join(self.home, "runs", "1")))
        r = self.dlrun("clean")
        self.assertIn("Removed 3 run directories", r.stdout)
        self.assertIn("jobs 3, 2, 1", r.stdout)
        self.assertEqual(sorted(d for d in os.listdir(os.path.join(self.home, "runs")) if d != "latest"), ["4"])
        # The records stay; what needs the directory says it is gone.
        self.assertEqual(len(json.loads(self.dlrun("status", "--all", "--json").stdout)), 4)
        logs = self.dlrun("logs", "1")
        self.assertEqual(logs.returncode, 2)
        self.assertIn("is gone", logs.stderr)
        resume = self.dlrun("local", "--resume", "1")
        self.assertIn("nothing to resume from", resume.stderr)
        # keep = 1 holds the newest even when it is old too.
        self.age(4, 30)
        self.assertIn("Nothing to remove", self.dlrun("clean").stdout)
        # --older-than 0: every ended job beyond --keep, whatever config.toml says.
        self.assertIn("Would remove 1 run directory (", self.dlrun("clean", "--older-than", "0", "--keep", "0", "-n").stdout)

    def test_clean_named_jobs_and_never_a_directory_outside_the_home(self):
        mine = os.path.join(self.tmp, "mine")
        self.assertEqual(self.dlrun("local", "--nproc", "1", "--run-dir", mine, "true").returncode, 0)
        self.run_jobs(1)
        r = self.dlrun("clean", "1", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Removed 1 run directory and 1 link", r.stdout)
        self.assertTrue(os.path.isdir(mine))
        self.assertFalse(os.path.lexists(os.path.join(self.home, "runs", "1")))
        self.assertFalse(os.path.exists(os.path.join(self.home, "runs", "2")))
        p = self.start("local", "--nproc", "1", "sh", "-c", "touch $DLRUN_RUN_DIR/up; sleep 60")
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.home, "runs", "3", "up")), 30))
        running = self.dlrun("clean", "3")
        self.assertEqual(running.returncode, 2)
        self.assertIn("job 3 is RUNNING: only an ended job's run directory is removed", running.stderr)
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)

    def test_clean_takes_only_a_directory_dlrun_made_and_none_that_holds_another_jobs(self):
        self.run_jobs(2)
        # A record whose run directory is $DLRUN_HOME/runs itself (dlrun local --run-dir took
        # it before it was refused): cleaning that job must leave every other job's directory.
        runs = os.path.join(self.home, "runs")
        with sqlite3.connect(os.path.join(self.home, "jobs.db")) as db:
            db.execute("UPDATE jobs SET run_dir = ? WHERE id = 1", (runs + "/",))
        r = self.dlrun("clean", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isfile(os.path.join(runs, "2", "ckpt")))
        # NaN days passed every range check and read as 0 (every ended job).
        r = self.dlrun("clean", "--older-than", "nan", "--keep", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--older-than nan: must be from 0 to 36500", r.stderr)
        self.assertTrue(os.path.isfile(os.path.join(runs, "2", "ckpt")))

    def test_a_submitted_jobs_run_directory_is_cleaned_too(self):
        # A submitted job runs in $DLRUN_HOME/jobs/ID (jobs.md, "Files"): retention left it
        # there for good, checkpoints and all.
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write('name = "kept"\ncommand = ["sh", "-c", "echo x > $DLRUN_RUN_DIR/ckpt"]\n[resources]\nnproc = 1\n')
        for _ in range(2):
            r = self.dlrun("submit", "--wait", job, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
        jobs = os.path.join(self.home, "jobs")
        self.assertTrue(os.path.isfile(os.path.join(jobs, "1", "ckpt")))
        self.age(1, 30)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[retention]\ndays = 7\nkeep = 0\n")
        r = self.dlrun("clean")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Removed 1 run directory", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(jobs, "1")))
        self.assertTrue(os.path.isfile(os.path.join(jobs, "2", "ckpt")))
        logs = self.dlrun("logs", "1")
        self.assertEqual(logs.returncode, 2)
        self.assertIn("is gone", logs.stderr)
        r = self.dlrun("clean", "2")
        self.assertIn("Removed 1 run directory", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(jobs, "2")))

    def test_a_job_cancelled_before_it_started_is_passed_over(self):
        # It has no run directory: clean failed on it ("internal: … cannot make absolute path"),
        # named or by age, and so did every later automatic clean.
        self.env["DLRUN_CPU_SLOTS"] = "1"
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write('command = ["sleep", "60"]\n[resources]\nnproc = 1\n')
        first = self.dlrun("submit", "--parsable", job).stdout.strip()
        second = self.dlrun("submit", "--parsable", job).stdout.strip()
        self.assertEqual(self.dlrun("cancel", second).returncode, 0)
        self.assertEqual(self.dlrun("cancel", first).returncode, 0)
        for args in ((second,), ("--dry-run", "--older-than", "0", "--keep", "0"), ("--older-than", "0", "--keep", "0")):
            r = self.dlrun("clean", *args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))
        self.assertFalse(os.path.exists(os.path.join(self.home, "jobs", first)))

    def test_bad_settings_are_named_with_their_line(self):
        os.makedirs(self.home, exist_ok=True)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[retention]\ndays = -1\n")
        r = self.dlrun("clean")
        self.assertEqual(r.returncode, 2)
        self.assertIn("config.toml:2:8: 'days' must be from 0 (never) to 36500", r.stderr)
        # dlrun status says so, as docs/jobs.md says, and lists the jobs (it said nothing).
        r = self.dlrun("status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("config.toml:2:8: 'days' must be from 0 (never) to 36500 (old run directories are not removed",
                      r.stderr)


if __name__ == "__main__":
    unittest.main()
