"""`dlrun submit`, `status`, `logs`, `cancel`: the job queue on this machine, with real
detached supervisors, a real SQLite store and real processes."""
import calendar
import json
import os
import random
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
import unittest

from harness import DLRUN, DlrunTestCase, kill_quietly, pid_alive, read_pids, read_words, wait_for

MINIMAL = '''name = "hello"
command = ["sh", "-c", "echo rank $RANK of $WORLD_SIZE"]
[resources]
nproc = 2
'''


def supervisor_pid(job_id, home):
    """The pid of job JOB_ID's live supervisor, as the store in `home` records it (tests run
    in parallel, each with its own store and its own job 1)."""
    try:
        db = sqlite3.connect(f"file:{os.path.join(home, 'jobs.db')}?mode=ro", uri=True, timeout=10)
        try:
            row = db.execute("SELECT supervisor_pid FROM jobs WHERE id = ?", (int(job_id),)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    if not row or not row[0]:
        return None
    try:
        with open(f"/proc/{row[0]}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return None
    return row[0] if argv[1:2] == [b"_supervise"] else None


def line_count(path):
    try:
        with open(path) as f:
            return f.read().count("\n")
    except FileNotFoundError:
        return 0


class JobsTestCase(DlrunTestCase):
    def setUp(self):
        super().setUp()
        self.env["DLRUN_CPU_SLOTS"] = "4"
        self.procs_to_kill = []

    def tearDown(self):
        # Leave no job running behind a failed test.
        r = self.dlrun("status", "--json")
        if r.returncode == 0:
            for job in json.loads(r.stdout):
                if job["state"] in ("PENDING", "RUNNING"):
                    self.dlrun("cancel", "--force", str(job["id"]))
        kill_quietly(self.procs_to_kill)
        super().tearDown()

    def job_file(self, text, name="job.toml"):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def submit(self, text, *extra):
        r = self.dlrun("submit", "--parsable", *extra, self.job_file(text, f"job-{random.random()}.toml"))
        self.assertEqual(r.returncode, 0, r.stderr)
        return int(r.stdout)

    def status(self, job_id, env=None):
        r = self.dlrun("status", "--json", str(job_id), env=env)
        self.assertIn(r.returncode, (0, 1, 3, 4, 5), r.stderr)
        return json.loads(r.stdout)

    def wait_state(self, job_id, states, timeout=60):
        job = wait_for(lambda: (lambda j: j if j["state"] in states else None)(self.status(job_id)), timeout, 0.05)
        self.assertIsNotNone(job, f"job {job_id} never reached {states}: {self.status(job_id)}")
        return job

    def table_row(self, job_id, env=None):
        """Job JOB_ID's row of `dlrun status`, by column name (columns are cut where the header's
        names start: values such as POLICY's "3 (1.5x)" and REASON hold spaces)."""
        r = self.dlrun("status", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        names = lines[0].split()
        starts = [lines[0].index(f"{n}") if i == 0 else lines[0].index(f" {n}") + 1 for i, n in enumerate(names)]
        for line in lines[1:]:
            if line.split()[0] == str(job_id):
                return {n: line[a:b].strip() for n, a, b in zip(names, starts, starts[1:] + [len(line)])}
        self.fail(f"job {job_id} is not listed:\n{r.stdout}")

    def all_jobs(self):
        r = self.dlrun("status", "--all", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)


class Submit(JobsTestCase):
    def test_submit_returns_while_the_job_runs(self):
        # The job waits for a gate that only the test opens: submit can only have returned
        # because it does not wait for the job.
        gate = os.path.join(self.tmp, "gate")
        job_id = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                             '[resources]\nnproc = 1\n')
        self.assertIn(self.status(job_id)["state"], ("PENDING", "RUNNING"))
        open(gate, "w").close()
        self.assertEqual(self.wait_state(job_id, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")

    def test_minimal_job_runs_detached(self):
        r = self.dlrun("submit", self.job_file(MINIMAL))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^Submitted job (\d+) ")
        job_id = int(r.stdout.split()[2])
        job = self.wait_state(job_id, ("SUCCEEDED", "FAILED"))
        self.assertEqual((job["state"], job["exit_code"], job["ranks"]), ("SUCCEEDED", 0, 2))
        logs = self.dlrun("logs", str(job_id))
        self.assertIn("[0] rank 0 of 2\n", logs.stdout)
        self.assertIn("[1] rank 1 of 2\n", logs.stdout)
        self.assertEqual(self.dlrun("logs", str(job_id), "--rank", "1").stdout, "rank 1 of 2\n")

    def test_parsable_prints_only_the_id(self):
        r = self.dlrun("submit", "--parsable", self.job_file(MINIMAL))
        self.assertRegex(r.stdout, r"^\d+\n$")

    def test_wait_exits_with_the_jobs_code(self):
        ok = self.dlrun("submit", "--wait", self.job_file(MINIMAL))
        self.assertEqual(ok.returncode, 0, ok.stderr)
        failing = MINIMAL.replace('echo rank $RANK of $WORLD_SIZE', 'if [ $RANK = 1 ]; then exit 3; fi; sleep 30')
        r = self.dlrun("submit", "--wait", "--parsable", self.job_file(failing), timeout=120)
        self.assertEqual(r.returncode, 3)
        job = self.status(int(r.stdout))
        self.assertEqual(job["state"], "FAILED")
        self.assertEqual(job["reason"], "rank 1 exited with code 3")

    def test_job_env_workdir_and_checkpoint_dir(self):
        os.makedirs(os.path.join(self.tmp, "work"))
        text = '''name = "env"
command = ["sh", "-c", "echo $GREETING $(pwd) $DLRUN_CHECKPOINT_DIR $DLRUN_JOB_ID"]
workdir = "work"
[env]
GREETING = "hi"
[resources]
nproc = 1
'''
        job_id = self.submit(text, "--wait")
        out = self.dlrun("logs", str(job_id), "--rank", "0").stdout.split()
        self.assertEqual(out, ["hi", os.path.join(self.tmp, "work"),
                               os.path.join(self.home, "jobs", str(job_id), "checkpoints"), str(job_id)])

    def test_a_relative_dlrun_home_is_one_place_for_every_process(self):
        # The supervisor and the ranks run in the job file's directory: a relative DLRUN_HOME
        # put their files (rank logs, job.json, runs/1) under another directory than the store.
        os.makedirs(os.path.join(self.tmp, "here"))
        os.makedirs(os.path.join(self.tmp, "jobs"))
        path = os.path.join(self.tmp, "jobs", "job.toml")
        with open(path, "w") as f:
            f.write('name = "rel"\ncommand = ["sh", "-c", "echo from-the-rank; echo $DLRUN_CHECKPOINT_DIR"]\n'
                    '[resources]\nnproc = 1\n')
        env = dict(self.env, DLRUN_HOME="relhome")
        run = lambda *args: subprocess.run([DLRUN, *args], capture_output=True, text=True, env=env,
                                           cwd=os.path.join(self.tmp, "here"), timeout=60)
        r = run("submit", "--wait", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        home = os.path.join(self.tmp, "here", "relhome")
        logs = run("logs", "rel", "--rank", "0")
        self.assertEqual(logs.stdout, f"from-the-rank\n{home}/jobs/1/checkpoints\n", logs.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "jobs", "relhome")))

    def test_relative_program_is_found_in_workdir(self):
        self.script("train.sh", "echo trained\n")
        job_id = self.submit('command = ["./train.sh"]\n[resources]\nnproc = 1\n', "--wait")
        self.assertEqual(self.status(job_id)["state"], "SUCCEEDED")
        self.assertEqual(self.dlrun("logs", str(job_id), "--rank", "0").stdout, "trained\n")

    def test_status_exit_codes(self):
        ok = self.submit(MINIMAL, "--wait")
        self.assertEqual(self.dlrun("status", str(ok)).returncode, 0)
        r = self.dlrun("submit", "--wait", "--parsable", self.job_file(MINIMAL.replace("echo rank", "exit 4; echo")))
        self.assertEqual(r.returncode, 4)
        self.assertEqual(self.dlrun("status", r.stdout.strip()).returncode, 1)
        r = self.dlrun("status", "12345")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no job 12345", r.stderr)
        # Options that would change nothing are refused, not ignored.
        for args, says in ((["--all"], "--all and --recent choose the jobs of the listing: not with JOB"),
                           (["--recent", "3"], "--all and --recent choose"),
                           (["--since", "5"], "--since and --width shape the picture of --trace or --svg")):
            r = self.dlrun("status", *([str(ok)] if "--since" not in args else []), *args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(says, r.stderr)
        # A pending job's logs say it has none yet (an empty output read as an empty log).
        self.env["DLRUN_CPU_SLOTS"] = "2"
        gate = os.path.join(self.tmp, "gate-logs")
        holder = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                             '[resources]\nnproc = 2\n')
        try:
            self.wait_state(holder, ("RUNNING",))
            waiting = self.submit(MINIMAL)
            r = self.dlrun("logs", str(waiting))
            self.assertEqual((r.returncode, r.stdout), (0, ""))
            self.assertIn(f"job {waiting} is PENDING: it has no output yet", r.stderr)
            self.assertIsNone(self.status(waiting)["elapsed_seconds"])
            # Following it says it waits (nothing printed read as a hang), then follows.
            follow = self.start("logs", "-f", str(waiting))
            self.assertTrue(select.select([follow.stderr], [], [], 60)[0], "dlrun logs -f said nothing")
            self.assertIn(f"job {waiting} is PENDING: waiting for it to start", follow.stderr.readline())
        finally:
            open(gate, "w").close()
        self.wait_state(waiting, ("SUCCEEDED",))
        out, err = follow.communicate(timeout=60)
        self.assertEqual(follow.returncode, 0, err)

    def test_status_table(self):
        job_id = self.submit(MINIMAL, "--wait")
        r = self.dlrun("status")
        self.assertEqual(r.returncode, 0)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "NAME", "STATE", "EXIT", "RANKS", "GPUS", "RESTARTS", "RESIZES",
                                            "SUBMITTED", "ELAPSED", "BATCH", "SAMPLES/S", "POLICY", "REASON"])
        self.assertEqual(lines[1].split()[:8], [str(job_id), "hello", "SUCCEEDED", "0", "2", "-", "0", "0"])

    def test_status_shows_the_runtimes_metrics(self):
        gate = os.path.join(self.tmp, "gate")
        text = ('command = ["sh", "-c", "if [ $RANK = 0 ]; then '
                'echo \'{\\"step\\": 10, \\"global_batch\\": 256, \\"samples_per_sec\\": 1234.5}\' >> $DLRUN_RUN_DIR/metrics.jsonl; fi; '
                f'while [ ! -e {gate} ]; do sleep 0.05; done"]\n[resources]\nnproc = 2\n')
        job_id = self.submit(text)
        self.wait_state(job_id, ("RUNNING",))
        job = wait_for(lambda: (lambda j: j if j["global_batch"] else None)(self.status(job_id)), 30)
        self.assertIsNotNone(job)
        self.assertEqual((job["global_batch"], job["samples_per_sec"]), (256, 1234.5))
        row = self.table_row(job_id)
        self.assertEqual((row["BATCH"], row["SAMPLES/S"], row["POLICY"]), ("256", "1234.5", "-"))  # no POLICY for CPU ranks
        open(gate, "w").close()
        self.wait_state(job_id, ("SUCCEEDED",))

    def test_status_shows_what_the_goodput_policy_would_give_and_why(self):
        # Job 1 (elastic, 1:4 GPUs, the scheduler's) publishes a goodput model as the runtime
        # does and says it handles the stop request (the files are the channel, docs/adaptive.md,
        # docs/scheduling.md); alone it gets all 4 GPUs. Job 2 (1 GPU) arrives: the scheduler
        # shrinks job 1 to 3 so that job 2 starts, and status says what and why.
        # Every dlrun command here sees the 4 fake GPUs: any of them may start the scheduler
        # (status sweeps the queue), which counts the GPUs of its own environment.
        self.env["DLRUN_FAKE_GPUS"] = "4"
        env = self.env
        gate = os.path.join(self.tmp, "gate")
        model = json.dumps({"version": 1, "params": {"alpha_c": 0.02, "beta_c": 0.0005, "alpha_n": 0.01,
                            "beta_n": 0.001, "alpha_r": 0.01, "beta_r": 0.001, "gamma": 3.0},
                            "noise_scale": 5000, "initial_batch": 64, "max_batch": 4096, "min_micro_batch": 1,
                            "max_micro_batch": 256, "allow_accumulation": True, "measured_replicas": [4],
                            "replicas": 4, "global_batch": 256})
        with open(os.path.join(self.tmp, "model.json"), "w") as f:
            f.write(model)
        first = self.job_file(f'name = "a"\ncommand = ["sh", "-c", "trap \'exit 75\' USR1; if [ $RANK = 0 ]; then '
                              f'cp {self.tmp}/model.json $DLRUN_RUN_DIR/goodput-model.json; '
                              f': > $DLRUN_RUN_DIR/handles-stop; fi; while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                              '[resources]\ngpus = "1:4"\n', "a.toml")
        a = int(self.dlrun("submit", "--parsable", first, env=env).stdout)
        self.assertEqual(self.wait_state(a, ("RUNNING",))["ranks"], 4)
        run_dir = self.status(a)["run_dir"]
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(run_dir, "handles-stop")), 30))
        job = self.status(a, env=env)
        self.assertEqual(job["policy_gpus"], 4)
        self.assertEqual(job["predicted_speedup"], 1.0)  # alone, the fair share is all 4
        second = self.job_file(f'name = "b"\ncommand = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                               '[resources]\ngpus = 1\n', "b.toml")
        b = int(self.dlrun("submit", "--parsable", second, env=env).stdout)
        self.assertEqual(self.wait_state(b, ("RUNNING",))["gpus"], [3])
        jobs = {j["id"]: j for j in json.loads(self.dlrun("status", "--json", env=env).stdout)}
        self.assertEqual((jobs[a]["ranks"], jobs[a]["gpus"]), (3, [0, 1, 2]))
        self.assertEqual(jobs[b]["policy_gpus"], 1)
        self.assertEqual(jobs[a]["policy_gpus"], 3)
        self.assertGreater(jobs[a]["predicted_speedup"], 1.0)  # 3 GPUs beat its fair share of 2
        self.assertIsNone(jobs[b]["predicted_speedup"])  # no model: the neutral prediction
        self.assertEqual((jobs[a]["policy"], jobs[b]["policy"]), ("goodput", "fifo"))
        self.assertEqual(jobs[a]["owner_uid"], os.geteuid())
        self.assertRegex(self.table_row(a, env=env)["POLICY"], r"^3 \(\d+\.\dx\)$")
        details = self.dlrun("status", str(a), env=env).stdout
        self.assertIn("3 GPUs, predicted speedup", details)
        # The settings are read from $DLRUN_HOME/config.toml: a bad one is said, with its line
        # (and the jobs are still listed).
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[scheduler]\nfairness = 5\n")
        r = self.dlrun("status", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("config.toml:2:12: 'fairness' = 5: must be from -10 to 1", r.stderr)
        self.assertIn(str(a), r.stdout)
        # A submit then is refused with it (the scheduler, which reads it in the background, would
        # hold the job without a word): nothing is queued.
        r = self.dlrun("submit", "--parsable", first, env=env)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn("config.toml:2:12: 'fairness' = 5", r.stderr)
        self.assertEqual(r.stdout, "")
        os.remove(os.path.join(self.home, "config.toml"))
        open(gate, "w").close()
        self.wait_state(b, ("SUCCEEDED",))
        self.wait_state(a, ("SUCCEEDED",))

    def test_logs_follow_until_the_end(self):
        text = MINIMAL.replace('echo rank $RANK of $WORLD_SIZE', 'for i in 1 2 3; do echo tick $i; sleep 0.3; done')
        job_id = self.submit(text)
        r = self.dlrun("logs", "-f", "--rank", "0", str(job_id), timeout=60)
        self.assertEqual(r.stdout, "tick 1\ntick 2\ntick 3\n")
        self.assertNotIn("SUCCEEDED", r.stderr)
        # A job that did not succeed says so at the end (its log just stopped, as a success's).
        job_id = self.submit('command = ["sh", "-c", "echo tick; exit 3"]\n[resources]\nnproc = 1\n')
        for args in (["--rank", "0"], []):
            r = self.dlrun("logs", "-f", *args, str(job_id), timeout=60)
            self.assertIn("tick", r.stdout)
            self.assertIn(f"job {job_id} FAILED with exit code 3: rank 0 exited with code 3", r.stderr)
        # Without -f too, once it has ended (only -f said it).
        for args in (["--rank", "0"], []):
            r = self.dlrun("logs", *args, str(job_id), timeout=60)
            self.assertIn("tick", r.stdout)
            self.assertIn(f"job {job_id} FAILED with exit code 3: rank 0 exited with code 3", r.stderr)

    def test_following_ends_when_its_reader_is_gone(self):
        # logs -f JOB | grep -m1 MARK, status --watch | head: a CI step waiting for a line must
        # not wait for the whole job. The job runs until the test's gate opens.
        gate = os.path.join(self.tmp, "gate")
        job_id = self.submit(f'command = ["sh", "-c", "echo started; while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                             '[resources]\nnproc = 1\n')
        try:
            for command in (f"{DLRUN} logs -f {job_id} | grep -m1 started",
                            f"{DLRUN} logs -f --rank 0 {job_id} | grep -m1 started",
                            f"{DLRUN} status --watch 0.1 | head -1"):
                r = subprocess.run(["sh", "-c", command], env=self.env, capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, (command, r.stderr))
            self.assertEqual(self.status(job_id)["state"], "RUNNING")
        finally:
            open(gate, "w").close()
        self.wait_state(job_id, ("SUCCEEDED",))

    def test_logs_of_a_job_whose_run_directory_was_removed_say_so(self):
        job_id = self.submit(MINIMAL, "--wait")
        shutil.rmtree(os.path.join(self.home, "jobs", str(job_id)))
        for extra in ([], ["--rank", "0"], ["-f"]):
            r = self.dlrun("logs", str(job_id), *extra)
            self.assertEqual(r.returncode, 2, (extra, r.stdout, r.stderr))
            self.assertIn(f"job {job_id}: its run directory {os.path.join(self.home, 'jobs', str(job_id))} is gone",
                          r.stderr)

    def test_logs_rank_is_checked_against_the_ranks_the_job_may_have(self):
        self.env["DLRUN_CPU_SLOTS"] = "1"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                            '[resources]\nnproc = 1\n')
        pending = self.submit('command = ["true"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("logs", str(pending), "--rank", "1")  # it has not started: no allocation yet
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"--rank 1: job {pending} has ranks 0 to 0", r.stderr)
        self.assertEqual(self.dlrun("logs", str(pending), "--rank", "0").returncode, 0)
        open(gate, "w").close()
        self.wait_state(first, ("SUCCEEDED",))
        self.wait_state(pending, ("SUCCEEDED",))
        # An elastic job that ran below its MAX, once ended: its higher ranks never ran.
        env = dict(self.env, DLRUN_FAKE_GPUS="3")
        up = os.path.join(self.tmp, "up")
        holder = subprocess.Popen([DLRUN, "local", "--gpus", "1", "sh", "-c", f"touch {up}; exec sleep 60"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            self.assertTrue(wait_for(lambda: os.path.exists(up), 30))
            r = self.dlrun("local", "--gpus", "1:3", "true", env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            elastic = int(re.search(r"^dlrun: job (\d+):", r.stderr, re.M).group(1))
            self.assertEqual(json.loads(self.dlrun("status", str(elastic), "--json").stdout)["ranks"], 2)
            r = self.dlrun("logs", str(elastic), "--rank", "2")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"--rank 2: job {elastic} ran ranks 0 to 1 only", r.stderr)
            self.assertEqual(self.dlrun("logs", str(elastic), "--rank", "1").returncode, 0)
        finally:
            os.killpg(holder.pid, signal.SIGTERM)
            holder.wait(timeout=30)

    def test_status_lists_the_jobs_that_ended_last(self):
        # A long job ends after shorter ones submitted after it: it is among the last to end.
        gate = os.path.join(self.tmp, "gate")
        long = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                           '[resources]\nnproc = 1\n')
        short = [self.submit(MINIMAL, "--wait") for _ in range(2)]
        open(gate, "w").close()
        self.wait_state(long, ("SUCCEEDED",))
        r = self.dlrun("status", "--json", "--recent", "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([job["id"] for job in json.loads(r.stdout)], sorted([long, short[1]]))


class WaitReport(JobsTestCase):
    """`dlrun submit --wait` tells CI how the job ended, and does not leave it behind (issue
    18, point 6)."""

    FAILING = ('command = ["sh", "-c", "if [ $RANK = 1 ]; then i=1; while [ $i -le 30 ]; do echo line $i; '
               'i=$((i + 1)); done; echo oops >&2; exit 3; fi; sleep 30"]\n[resources]\nnproc = 2\n')

    def test_a_timeout_cancels_the_job_and_exits_124_and_a_name_may_be_given(self):
        # CI had to wrap it in timeout(1); one job file named one job for every run of a matrix.
        path = self.job_file('command = ["sleep", "60"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("submit", "--wait", "--timeout", "1", "--name", "ci-7", path)
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertIn("--timeout 1 s passed: cancelling job", r.stdout)
        job = self.status("ci-7")
        self.assertEqual((job["state"], job["reason"]), ("CANCELLED", "by dlrun submit --wait --timeout 1"))
        r = self.dlrun("submit", "--wait", "--timeout", "1", "--detach-on-interrupt", "--parsable", path)
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertEqual(self.status(r.stdout.strip())["state"], "RUNNING")
        self.assertEqual(self.dlrun("submit", "--timeout", "1", path).returncode, 2)
        self.assertEqual(self.dlrun("submit", "--name", "a b", path).returncode, 2)

    def test_a_failure_names_the_rank_its_code_and_shows_the_end_of_its_log(self):
        r = self.dlrun("submit", "--wait", self.job_file(self.FAILING))
        self.assertEqual(r.returncode, 3, r.stderr)
        job_id = int(r.stdout.split()[2])
        lines = r.stdout.splitlines()
        self.assertRegex(lines[1], rf"^Job {job_id} \(sh\) FAILED after \d+:\d\d with exit code 3: "
                                   r"rank 1 exited with code 3$")
        log = os.path.join(self.home, "jobs", str(job_id), "rank-1.log")
        self.assertEqual(lines[2], f"==> last 20 lines of rank 1's log ({log}) <==")
        self.assertEqual(lines[3:], [f"line {i}" for i in range(12, 31)] + ["oops"])
        self.assertEqual(self.status(job_id)["failed_rank"], 1)
        # --tail N; --parsable keeps standard output to the id and says the rest on stderr.
        r = self.dlrun("submit", "--wait", "--parsable", "--tail", "2", self.job_file(self.FAILING))
        self.assertEqual(r.returncode, 3)
        self.assertRegex(r.stdout, r"^\d+\n$")
        self.assertEqual(r.stderr.splitlines()[1:], [f"==> last 2 lines of rank 1's log "
                                                     f"({os.path.join(self.home, 'jobs', r.stdout.strip(), 'rank-1.log')}) <==",
                                                     "line 30", "oops"])

    def test_with_a_log_dir_the_tail_comes_from_there(self):
        logs = os.path.join(self.tmp, "mylogs")
        r = self.dlrun("submit", "--wait", "--tail", "1", self.job_file(f'log_dir = "{logs}"\n' + self.FAILING))
        self.assertEqual(r.returncode, 3, r.stderr)
        job_id = int(r.stdout.split()[2])
        self.assertEqual(r.stdout.splitlines()[2:], [
            f"==> last 1 line of rank 1's log ({os.path.join(logs, str(job_id), 'rank-1.log')}) <==", "oops"])

    def test_a_success_is_one_line(self):
        r = self.dlrun("submit", "--wait", self.job_file(MINIMAL))
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = int(r.stdout.split()[2])
        self.assertRegex(r.stdout.splitlines()[1], rf"^Job {job_id} \(hello\) SUCCEEDED in \d+:\d\d \(2 ranks\)$")
        self.assertEqual(len(r.stdout.splitlines()), 2)

    def test_a_lost_job_ends_at_its_last_output_not_its_last_mark(self):
        # Its supervisor marks job.json every 10 s: a job that died between two marks read
        # "FAILED after 0:00" though it had written output seconds later.
        gate = os.path.join(self.tmp, "gate")
        job_id = self.submit(f'command = ["sh", "-c", "echo early; while [ ! -e {gate} ]; do sleep 0.05; done; '
                             'echo late; exec sleep 300"]\n[resources]\nnproc = 1\n')
        output = os.path.join(self.home, "jobs", str(job_id), "output.log")

        def logged(word):
            try:
                with open(output) as f:
                    return word in f.read()
            except FileNotFoundError:
                return False

        self.assertTrue(wait_for(lambda: logged("early"), 30))
        time.sleep(2.5)
        open(gate, "w").close()
        self.assertTrue(wait_for(lambda: logged("late"), 30))
        os.kill(supervisor_pid(job_id, self.home), signal.SIGKILL)
        job = self.wait_state(job_id, ("FAILED",))
        started = calendar.timegm(time.strptime(job["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        ended = calendar.timegm(time.strptime(job["ended_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        self.assertGreaterEqual(ended - started, 2, job)

    def test_a_lost_job_shows_the_end_of_its_output(self):
        p = self.start("submit", "--wait", self.job_file('command = ["sh", "-c", "echo hello from $RANK; '
                                                         'exec sleep 300"]\n[resources]\nnproc = 1\n'))
        job_id = int(p.stdout.readline().split()[2])
        output = os.path.join(self.home, "jobs", str(job_id), "output.log")

        def written():
            # The supervisor has copied the rank's line into the job's output (on a busy machine
            # that comes a while after the rank printed it).
            try:
                with open(output) as f:
                    return "[0] hello from 0\n" in f.read()
            except FileNotFoundError:
                return False

        self.assertTrue(wait_for(written, 30))
        os.kill(supervisor_pid(job_id, self.home), signal.SIGKILL)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 70, err)
        self.assertIn("FAILED after", out)
        self.assertIn(": lost: its supervisor", out)
        # No one rank failed: the end of the job's output, all ranks prefixed, the supervisor's lines too.
        self.assertRegex(out, rf"\n==> last \d+ lines? of the job's output \({re.escape(output)}\) <==\n")
        self.assertTrue(out.endswith("\n[0] hello from 0\n"), out)

    def interrupted_wait(self, sig, *extra):
        """Starts `submit --wait` of a job that runs until the test's gate opens, waits until
        its rank runs, sends `sig` to the submit; returns it, the job id and the gate."""
        gate, ready = os.path.join(self.tmp, "gate"), os.path.join(self.tmp, "ready")
        p = self.start("submit", "--wait", *extra, self.job_file(
            f'command = ["sh", "-c", "touch {ready}; while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
            '[resources]\nnproc = 1\n'))
        job_id = int(p.stdout.readline().split()[2])
        self.assertTrue(wait_for(lambda: os.path.exists(ready), 30))
        p.send_signal(sig)
        return p, job_id, gate

    def test_sigusr1_is_passed_on_to_the_job_and_the_wait_goes_on(self):
        # It ended `submit --wait` (138) and left the job running unwatched.
        marks, ready = os.path.join(self.tmp, "marks"), os.path.join(self.tmp, "ready")
        p = self.start("submit", "--wait", self.job_file(
            f'command = ["sh", "-c", "trap \'echo USR1 >> {marks}\' USR1; touch {ready}; '
            f'until [ -s {marks} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n'))
        job_id = int(p.stdout.readline().split()[2])
        self.assertTrue(wait_for(lambda: os.path.exists(ready), 30))
        p.send_signal(signal.SIGUSR1)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn(f"got SIGUSR1: passed on to job {job_id}'s ranks", err)
        self.assertEqual(read_words(marks), ["USR1"])
        self.assertEqual(self.status(job_id)["state"], "SUCCEEDED")

    def test_sigterm_cancels_the_job(self):
        p, job_id, _ = self.interrupted_wait(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 143, err)
        self.assertIn(f"Got SIGTERM: cancelling job {job_id} (--detach-on-interrupt would leave it running)\n", out)
        self.assertRegex(out, rf"\nJob {job_id} \(sh\) CANCELLED after \d+:\d\d with exit code 143: by SIGTERM to dlrun submit --wait\n$")
        self.assertEqual(self.status(job_id)["state"], "CANCELLED")

    def test_sigint_with_detach_on_interrupt_leaves_the_job_running(self):
        p, job_id, gate = self.interrupted_wait(signal.SIGINT, "--detach-on-interrupt")
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn(f"Got SIGINT: job {job_id} goes on (--detach-on-interrupt): dlrun status {job_id}, "
                      f"dlrun cancel {job_id}\n", out)
        self.assertEqual(self.status(job_id)["state"], "RUNNING")
        open(gate, "w").close()
        self.assertEqual(self.wait_state(job_id, ("SUCCEEDED", "FAILED", "CANCELLED"))["state"], "SUCCEEDED")

    def test_a_job_cancelled_before_it_started_exits_143(self):
        self.env["DLRUN_CPU_SLOTS"] = "1"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                            '[resources]\nnproc = 1\n')
        p = self.start("submit", "--wait", self.job_file('name = "later"\ncommand = ["true"]\n[resources]\nnproc = 1\n'))
        second = int(p.stdout.readline().split()[2])
        self.assertEqual(self.status(second)["state"], "PENDING")
        self.assertEqual(self.dlrun("cancel", str(second)).returncode, 0)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 143, err)  # was 70, "lost or internal error"
        self.assertIn(f"Job {second} (later) CANCELLED before it started with exit code 143: by dlrun cancel\n", out)
        # Cancelled by a signal to its waiting submit: said so (it read "by dlrun cancel").
        p = self.start("submit", "--wait", self.job_file('name = "third"\ncommand = ["true"]\n[resources]\nnproc = 1\n'))
        third = int(p.stdout.readline().split()[2])
        self.assertEqual(self.status(third)["state"], "PENDING")
        os.killpg(p.pid, signal.SIGINT)
        p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130)
        self.assertEqual(self.status(third)["reason"], "by SIGINT to dlrun submit --wait")
        open(gate, "w").close()
        self.wait_state(first, ("SUCCEEDED",))

    def test_a_job_that_cannot_start_does_not_exit_as_if_never_submitted(self):
        # Exit 2 tells CI that nothing was submitted; this job was, and its directory went away.
        workdir = os.path.join(self.tmp, "work")
        os.mkdir(workdir)
        self.env["DLRUN_CPU_SLOTS"] = "1"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                            '[resources]\nnproc = 1\n')
        p = self.start("submit", "--wait", self.job_file(f'workdir = "{workdir}"\ncommand = ["true"]\n'
                                                         '[resources]\nnproc = 1\n'))
        second = int(p.stdout.readline().split()[2])
        os.rmdir(workdir)
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 70, out + err)
        self.assertEqual((self.status(second)["state"], self.status(second)["exit_code"]), ("FAILED", 70))
        self.wait_state(first, ("SUCCEEDED",))

    def test_detach_on_interrupt_needs_wait(self):
        r = self.dlrun("submit", "--detach-on-interrupt", self.job_file(MINIMAL))
        self.assertEqual(r.returncode, 2)
        self.assertIn("--detach-on-interrupt requires --wait", r.stderr)


class Wait(JobsTestCase):
    """`dlrun wait JOB…`: wait for jobs already submitted, as CI does after submitting several."""

    def gated(self, gate, code=0):
        return self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done; exit {code}"]\n'
                           '[resources]\nnproc = 1\n')

    def test_waits_for_every_job_and_exits_with_the_first_failures_code(self):
        gate = os.path.join(self.tmp, "gate")
        ok, bad, worse = self.gated(gate), self.gated(gate, 4), self.gated(gate, 5)
        p = self.start("wait", str(ok), str(bad), str(worse))
        time.sleep(0.5)
        self.assertIsNone(p.poll())  # nothing has ended: it waits
        open(gate, "w").close()
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 4, err)
        lines = out.splitlines()
        self.assertRegex(lines[0], rf"^Job {ok} \(sh\) SUCCEEDED in ")
        self.assertRegex(lines[1], rf"^Job {bad} \(sh\) FAILED after \d+:\d\d with exit code 4: rank 0 exited with code 4$")
        self.assertRegex(out, rf"\nJob {worse} \(sh\) FAILED after \d+:\d\d with exit code 5: ")
        # Jobs that have ended are answered at once; -q says it by the exit code alone.
        r = self.dlrun("wait", "-q", str(ok))
        self.assertEqual((r.returncode, r.stdout), (0, ""), r.stderr)
        self.assertEqual(self.dlrun("wait", "-q", str(worse), str(ok)).returncode, 5)

    def test_a_timeout_or_a_signal_ends_the_waiting_not_the_job(self):
        gate = os.path.join(self.tmp, "gate")
        job = self.gated(gate)
        r = self.dlrun("wait", "--timeout", "0.5", str(job))
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertIn(f"job {job} not ended after --timeout 0.5 s; it goes on (dlrun status {job})", r.stderr)
        p = self.start("wait", str(job))

        def blocks_sigint():
            # It waits for the signal now (before, SIGINT's default would end it): blocked, or in
            # sigtimedwait(2), which unblocks the signals it waits for while it sleeps.
            with open(f"/proc/{p.pid}/wchan") as f:
                if "sigtimedwait" in f.read():
                    return True
            with open(f"/proc/{p.pid}/status") as f:
                mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigBlk:"))
            return mask & (1 << (signal.SIGINT - 1))

        self.assertTrue(wait_for(lambda: p.poll() is not None or blocks_sigint(), 60))
        self.assertIsNone(p.poll(), p.communicate()[1] if p.poll() is not None else "")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn(f"got SIGINT: stopped waiting; job {job} goes on", err)
        self.assertIn(self.status(job)["state"], ("PENDING", "RUNNING"))
        open(gate, "w").close()
        r = self.dlrun("wait", str(job))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_at_the_timeout_every_job_that_ended_is_said(self):
        # Only the jobs named before the first still running were said: a failure after it, and
        # jobs already ended, got no line.
        gate = os.path.join(self.tmp, "gate")
        running = self.gated(gate)
        failed = self.submit('command = ["sh", "-c", "exit 6"]\n[resources]\nnproc = 1\n')
        self.wait_state(failed, ("FAILED",))
        r = self.dlrun("wait", "--timeout", "1", str(running), str(failed))
        self.assertEqual(r.returncode, 124, r.stderr)
        self.assertRegex(r.stdout, rf"^Job {failed} \(sh\) FAILED after \d+:\d\d with exit code 6: ")
        self.assertIn(f"job {running} not ended after --timeout 1 s", r.stderr)
        open(gate, "w").close()

    def test_an_unknown_job_is_said_before_any_waiting(self):
        gate = os.path.join(self.tmp, "gate")
        job = self.gated(gate)
        r = self.dlrun("wait", str(job), "nosuch")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no job numbered or named 'nosuch'", r.stderr)
        open(gate, "w").close()


class StatusColumns(JobsTestCase):
    """What `dlrun status` tells beside the state (issue 18, point 7)."""

    def test_restarts_count_failures_and_resizes_apart(self):
        # Attempt 1: rank 0 fails (a restart, spending max_restarts); attempt 2 runs 3 ranks
        # until `dlrun resize` asks for 2 (a resize, spending nothing).
        starts, gate = os.path.join(self.tmp, "starts"), os.path.join(self.tmp, "gate")
        rank = self.script("rank.sh", "trap 'exit 75' USR1\n: > \"$DLRUN_RUN_DIR/handles-stop\"\n"
                                      f"echo $RANK:$WORLD_SIZE:$DLRUN_RESTART_COUNT >> {starts}\n"
                                      'if [ "$DLRUN_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ]; then exit 1; fi\n'
                                      f"while [ ! -e {gate} ]; do sleep 0.05; done\n")
        job_id = self.submit(f'max_restarts = 1\ncommand = ["{rank}"]\n[resources]\nnproc = "1:3"\n')
        self.assertTrue(wait_for(lambda: len([w for w in read_words(starts) if w.endswith(":1")]) == 3, 60))
        r = self.dlrun("resize", str(job_id), "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        job = self.status(job_id)
        self.assertEqual((job["ranks"], job["restarts"], job["resizes"]), (2, 1, 1))
        row = self.table_row(job_id)
        self.assertEqual((row["RESTARTS"], row["RESIZES"]), ("1", "1"))
        open(gate, "w").close()
        job = self.wait_state(job_id, ("SUCCEEDED", "FAILED"))
        self.assertEqual((job["state"], job["restarts"], job["resizes"]), ("SUCCEEDED", 1, 1))

    def test_batch_and_samples_per_sec_are_smoothed_and_stay_once_the_job_ends(self):
        # Eleven metrics lines a second apart, the intervals alternating between 1000 and 3000
        # samples/s: 2000 over the window, whichever was measured last.
        gate = os.path.join(self.tmp, "gate")
        rank = self.script("rank.sh", 'if [ "$RANK" = 0 ]; then i=0; while [ $i -le 10 ]; do '
                                      's=3000; [ $((i % 2)) = 1 ] && s=1000; '
                                      'echo "{\\"time\\": $((1000 + i)), \\"replicas\\": 2, \\"global_batch\\": 256, '
                                      '\\"samples_per_sec\\": $s}" >> "$DLRUN_RUN_DIR/metrics.jsonl"; i=$((i + 1)); done; fi\n'
                                      f"while [ ! -e {gate} ]; do sleep 0.05; done\n")
        job_id = self.submit(f'command = ["{rank}"]\n[resources]\nnproc = 2\n')
        self.wait_state(job_id, ("RUNNING",))
        metrics = os.path.join(self.home, "jobs", str(job_id), "metrics.jsonl")
        self.assertTrue(wait_for(lambda: line_count(metrics) == 11, 30))
        job = self.status(job_id)
        self.assertEqual((job["global_batch"], job["samples_per_sec"]), (256, 2000))
        open(gate, "w").close()
        job = self.wait_state(job_id, ("SUCCEEDED",))
        self.assertEqual((job["global_batch"], job["samples_per_sec"]), (256, 2000))
        row = self.table_row(job_id)
        self.assertEqual((row["BATCH"], row["SAMPLES/S"]), ("256", "2000"))

    def test_a_mistake_in_config_toml_does_not_hide_the_jobs(self):
        # dlrun status exited 2 with only the mistake, while dlrun status JOB and logs worked.
        job_id = self.submit(MINIMAL, "--wait")
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[retension]\ndays = 3\n")
        for args in (("status",), ("status", "--json")):
            r = self.dlrun(*args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))
            self.assertIn("hello", r.stdout)
            self.assertIn("unknown table 'retension' (did you mean [retention]?)", r.stderr)
            self.assertEqual(r.stderr.count("warning"), 1, r.stderr)
        self.assertEqual(self.dlrun("status", str(job_id)).returncode, 0)

    def test_pending_jobs_say_why_they_wait(self):
        # Job a holds 2 of the 4 GPUs until the test opens its gate: b (4 GPUs) waits for
        # them, c (1 GPU) waits behind b (FIFO); d (CPU) does not: GPU and CPU jobs queue apart
        # (it waited behind b with every CPU slot free).
        self.env["DLRUN_FAKE_GPUS"] = "4"
        gate = os.path.join(self.tmp, "gate")
        wait = f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
        a = self.submit(wait + '[resources]\ngpus = 2\n')
        self.wait_state(a, ("RUNNING",))
        b = self.submit('command = ["true"]\n[resources]\ngpus = 4\n')
        c = self.submit('command = ["true"]\n[resources]\ngpus = 1\n')
        d = self.submit('command = ["true"]\n[resources]\nnproc = 1\n')
        self.assertEqual(self.wait_state(d, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
        self.assertEqual((self.status(b)["state"], self.status(b)["reason"]), ("PENDING", f"waiting for 4 GPUs (2 free; job {a} holds 2)"))
        self.assertEqual(self.status(c)["reason"], f"behind job {b} (fifo)")
        jobs = {j["id"]: j for j in json.loads(self.dlrun("status", "--json").stdout)}
        self.assertEqual((jobs[b]["reason"], jobs[c]["reason"], jobs[a]["reason"]),
                         (f"waiting for 4 GPUs (2 free; job {a} holds 2)", f"behind job {b} (fifo)", ""))
        self.assertEqual(self.table_row(b)["REASON"], f"waiting for 4 GPUs (2 free; job {a} holds 2)")
        self.assertEqual(self.table_row(c)["REASON"], f"behind job {b} (fifo)")
        self.assertEqual(self.table_row(a)["REASON"], "-")
        self.assertIn(f"reason:       behind job {b} (fifo)\n", self.dlrun("status", str(c)).stdout)
        open(gate, "w").close()
        for job_id in (a, b, c):
            self.assertEqual(self.wait_state(job_id, ("SUCCEEDED", "FAILED"))["reason"], "")
        self.assertEqual(self.table_row(c)["REASON"], "-")

    def test_a_goodput_job_waits_for_the_scheduler(self):
        # A fixed job holds all 4 GPUs: the goodput scheduler has none to give the elastic one.
        self.env["DLRUN_FAKE_GPUS"] = "4"
        gate = os.path.join(self.tmp, "gate")
        wait = f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
        a = self.submit(wait + '[resources]\ngpus = 4\n')
        self.wait_state(a, ("RUNNING",))
        b = self.submit('command = ["true"]\n[resources]\ngpus = "1:2"\n')
        want = "waiting for the scheduler (the policy gives it no GPU now)"
        self.assertTrue(wait_for(lambda: self.status(b)["reason"] == want, 60), self.status(b))
        self.assertEqual(self.table_row(b)["REASON"], want)
        open(gate, "w").close()
        self.assertEqual(self.wait_state(b, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")

    def test_exit_code_and_submit_time(self):
        ok = self.submit(MINIMAL, "--wait")
        r = self.dlrun("submit", "--wait", "--parsable", self.job_file(MINIMAL.replace("echo rank", "exit 4; echo")))
        failed = int(r.stdout.split()[0])
        self.assertEqual((self.table_row(ok)["EXIT"], self.table_row(failed)["EXIT"]), ("0", "4"))
        submitted = self.table_row(ok)["SUBMITTED"]
        self.assertRegex(submitted, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")  # local time, as squeue
        utc = time.strptime(self.status(ok)["submitted_at"], "%Y-%m-%dT%H:%M:%SZ")
        self.assertEqual(submitted, time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(calendar.timegm(utc))))
        self.assertEqual(self.status(failed)["exit_code"], 4)

    def test_watch_redraws_until_interrupted(self):
        p = self.start("status", "--watch", "0.2")
        lines, done = [], threading.Event()

        def read():
            for line in p.stdout:
                lines.append(line)
            done.set()
        reader = threading.Thread(target=read)
        reader.start()
        frames = lambda: sum(1 for line in list(lines) if line.startswith("Every 0.2s: dlrun status  "))
        self.assertTrue(wait_for(lambda: frames() >= 1, 30))
        job_id = self.submit(MINIMAL, "--wait")
        # A later frame lists the job submitted meanwhile.
        self.assertTrue(wait_for(lambda: any(line.startswith(f"{job_id} ") for line in list(lines)), 30))
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=30), 0)
        self.assertTrue(done.wait(30))
        reader.join()
        out = "".join(lines)
        self.assertGreaterEqual(frames(), 2)
        self.assertNotIn("\x1b", out)  # not a terminal: no escape codes, the frames follow each other


class Validation(JobsTestCase):
    def assert_refused(self, text, message):
        self.job_file(text)
        r = self.dlrun("submit", "job.toml", cwd=self.tmp)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(message, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(self.all_jobs(), [], "a job was submitted")

    def test_unknown_key_with_hint(self):
        self.assert_refused(MINIMAL + "max_restart = 2\n",
                            "dlrun: error: job.toml:5:1: unknown key 'max_restart' in [resources] (did you mean 'max_restarts'? "
                            "it belongs at the top, before any [table])")

    def test_misspelt_top_level_key(self):
        self.assert_refused(MINIMAL.replace("name =", "nmae ="), "job.toml:1:1: unknown key 'nmae' (did you mean 'name'?)")

    def test_wrong_type(self):
        self.assert_refused(MINIMAL.replace("nproc = 2", 'nproc = true'),
                            "job.toml:4:9: 'nproc' must be a count (2) or an elastic range (\"2:4\"), not a boolean")

    def test_bad_range(self):
        self.assert_refused(MINIMAL.replace("nproc = 2", "nproc = -1"), "job.toml:4:9: 'nproc' = -1 is out of range")
        self.assert_refused("grace = -5\n" + MINIMAL,
                            "job.toml:1:9: 'grace' = -5 is out of range: must be a number of seconds from 0 to 604800")

    def test_syntax_error(self):
        self.assert_refused(MINIMAL.replace('"hello"', '"hello'), "job.toml:1:")

    def test_missing_program(self):
        self.assert_refused(MINIMAL.replace('"sh", "-c"', '"no-such-program-xyz", "-c"'),
                            "job.toml: program 'no-such-program-xyz' not found in PATH")

    def test_more_than_the_machine_has(self):
        self.assert_refused(MINIMAL.replace("nproc = 2", "nproc = 5"),
                            "can never run here: it needs 5 CPU slots, this machine has 4")
        env = dict(self.env, DLRUN_FAKE_GPUS="2")
        r = self.dlrun("submit", self.job_file(MINIMAL.replace("nproc = 2", "gpus = 3")), env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn("needs 3 GPUs, this machine has 2", r.stderr)

    def test_missing_file(self):
        r = self.dlrun("submit", os.path.join(self.tmp, "nope.toml"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read job file", r.stderr)


class Scheduling(JobsTestCase):
    def test_queued_job_waits_for_slots(self):
        self.env["DLRUN_CPU_SLOTS"] = "2"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'name = "first"\ncommand = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                            '[resources]\nnproc = 2\n')
        self.wait_state(first, ("RUNNING",))
        second = self.submit('name = "second"\ncommand = ["true"]\n[resources]\nnproc = 1\n')
        # The first holds both slots until the test opens its gate: the second cannot start
        # (the times below prove it did not; this is what a user sees meanwhile).
        self.assertEqual(self.status(second)["state"], "PENDING")
        self.assertEqual(self.dlrun("status", str(second)).returncode, 4)
        self.assertEqual(self.dlrun("status", str(first)).returncode, 5)
        open(gate, "w").close()
        a = self.wait_state(first, ("SUCCEEDED",))
        b = self.wait_state(second, ("SUCCEEDED",))
        self.assertGreaterEqual(b["started_at"], a["ended_at"])

    def test_a_jobs_result_is_kept_with_its_record_and_shown(self):
        # A sweep's results were only in its logs, which dlrun clean removes with the run
        # directory: the program writes a JSON object to DLRUN_RESULT_FILE, dlrun keeps it.
        job_id = self.submit('command = ["sh", "-c", "echo \'{\\"test_accuracy\\": 0.875, \\"lr\\": 0.01}\' '
                             '> $DLRUN_RESULT_FILE"]\n[resources]\nnproc = 1\n')
        job = self.wait_state(job_id, ("SUCCEEDED", "FAILED"))
        self.assertEqual(job["result"], {"test_accuracy": 0.875, "lr": 0.01}, job)
        self.assertRegex(self.dlrun("status", str(job_id)).stdout, r'\nresult: +\{"test_accuracy":0.875,"lr":0.01\}\n')
        r = self.dlrun("clean", str(job_id))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.status(job_id)["result"], {"test_accuracy": 0.875, "lr": 0.01})
        self.assertRegex(self.dlrun("status", str(job_id)).stdout, r"\nrun dir: +\S+ \(removed: dlrun clean, or retention\)\n")
        # None written, not a JSON object, or a FIFO (which blocked dlrun status and the job's
        # supervisor at its end for good): null.
        for command in ('["true"]', '["sh", "-c", "echo 0.9 > $DLRUN_RESULT_FILE"]',
                        '["sh", "-c", "mkfifo $DLRUN_RESULT_FILE"]'):
            job_id = self.submit(f'command = {command}\n[resources]\nnproc = 1\n')
            self.assertIsNone(self.wait_state(job_id, ("SUCCEEDED", "FAILED"))["result"])

    def test_a_local_job_is_stopped_at_its_time_limit_as_a_cancel(self):
        # time_limit was Slurm's alone ("'time_limit' is for kind = slurm"); a sweep's run that
        # hangs or diverges ran for good, and submit --wait --timeout counts time in the queue.
        saved = os.path.join(self.tmp, "saved")
        job_id = self.submit(f'command = ["sh", "-c", "trap \'echo saved > {saved}; exit 0\' TERM; '
                             'while true; do sleep 0.05; done"]\n[resources]\nnproc = 1\n'
                             '[scheduler]\ntime_limit = "0:03"\n')
        job = self.wait_state(job_id, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=120)
        self.assertEqual((job["state"], job["reason"]), ("CANCELLED", "by its time_limit (3 s)"), job)
        self.assertTrue(os.path.exists(saved), "the ranks did not get SIGTERM first")
        self.assertIn("has run for its time_limit (3 s): stopping it", self.dlrun("logs", str(job_id)).stdout)

    def test_check_says_whether_a_job_file_would_be_taken_and_submits_nothing(self):
        # A sweep of 40 files could only be checked by submitting them: one bad file among them
        # left the sweep half submitted.
        good = self.job_file('command = ["true"]\n[resources]\nnproc = 1\n', "good.toml")
        bad = self.job_file('comand = ["true"]\n[resources]\nnproc = 1\n', "bad.toml")
        r = self.dlrun("submit", "--check", good)
        self.assertEqual((r.returncode, r.stdout), (0, f"{good}: fine (--check: nothing was submitted)\n"), r.stderr)
        r = self.dlrun("submit", "--check", bad)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("unknown key 'comand' (did you mean 'command'?)", r.stderr)
        self.assertEqual(self.all_jobs(), [])
        # A variable of this shell that the command names, and the job would not get: said.
        uses = self.job_file('command = ["sh", "-c", "ls $MY_DATA"]\n[resources]\nnproc = 1\n', "uses.toml")
        r = self.dlrun("submit", "--check", uses, env=dict(self.env, MY_DATA="/data"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('the command uses $MY_DATA, which this shell sets but a submitted job does not get', r.stderr)
        self.assertIn('export_env = ["MY_DATA"] in the job file passes it', r.stderr)

    def test_submit_resume_queues_an_ended_job_again_from_its_checkpoints(self):
        # A submitted job that failed (or was cancelled, or lost) could not be resumed: --resume
        # was dlrun local's, and submitting its file again started at step 0 in a new run
        # directory's checkpoints (or failed: a sweep's generated file was gone).
        once = os.path.join(self.tmp, "once")
        counter = self.script("count.sh", f"""f="$DLRUN_CHECKPOINT_DIR/n"; mkdir -p "$DLRUN_CHECKPOINT_DIR"
n=$(cat "$f" 2>/dev/null || echo 0); echo "start $n"
while [ "$n" -lt 6 ]; do n=$((n + 1)); echo $n > "$f"
  if [ $n = 3 ] && [ ! -e {once} ]; then touch {once}; exit 4; fi; done
echo "done $n $VIA_ENV"
""")
        path = self.job_file(f'name = "counter"\ncommand = ["{counter}"]\n[env]\nVIA_ENV = "kept"\n[resources]\nnproc = 1\n',
                             "gone.toml")
        first = int(self.dlrun("submit", "--parsable", path).stdout)
        self.assertEqual(self.wait_state(first, ("SUCCEEDED", "FAILED"))["exit_code"], 4)
        os.remove(os.path.join(self.tmp, "gone.toml"))
        r = self.dlrun("submit", "--wait", "--resume", str(first))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        checkpoints = os.path.join(self.home, "jobs", str(first), "checkpoints")
        self.assertRegex(r.stdout, rf"^Submitted job (\d+), to go on from job {first}'s checkpoints in {re.escape(checkpoints)} ")
        second = int(re.match(r"Submitted job (\d+)", r.stdout).group(1))
        self.assertEqual(self.dlrun("logs", str(second), "--rank", "0").stdout, "start 3\ndone 6 kept\n")
        self.assertEqual(self.status(second)["name"], "counter")
        self.assertIn(f"started by:   dlrun submit --resume {first}  (job file {os.path.join(self.tmp, 'gone.toml')}; "
                      f"on from the checkpoints in {checkpoints})", self.dlrun("status", str(second)).stdout)
        # A resumed job resumed again goes on in the same checkpoints; a name may be given.
        r = self.dlrun("submit", "--wait", "--parsable", "--name", "again", "--resume", str(second))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.dlrun("logs", "again", "--rank", "0").stdout, "start 6\ndone 6 kept\n")
        # Cleaning the first job keeps the checkpoints its resumptions use (in its run directory).
        r = self.dlrun("clean", str(first))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isdir(checkpoints), r.stdout)
        self.assertRegex(r.stdout, rf"Kept {re.escape(os.path.join(self.home, 'jobs', str(first)))}: job \d+ goes on "
                                   r"from its checkpoints \(dlrun submit --resume\)\n")
        # What cannot be resumed says why; dlrun local --resume of a submitted job points here.
        gate = os.path.join(self.tmp, "gate")
        running = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("submit", "--resume", str(running))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"it has not ended (dlrun cancel {running} stops it)", r.stderr)
        open(gate, "w").close()
        r = self.dlrun("local", "--resume", str(first))
        self.assertIn(f"dlrun submit --resume {first} queues it again", r.stderr)
        self.assertEqual(self.dlrun("submit").returncode, 2)

    def test_a_second_resume_of_one_job_while_the_first_runs_is_refused(self):
        # Two --resume of one job (a retried CI step) both went on from its checkpoints, each
        # overwriting the other's.
        once, gate = os.path.join(self.tmp, "once"), os.path.join(self.tmp, "gate")
        failed = self.submit(f'command = ["sh", "-c", "[ -e {once} ] || {{ touch {once}; exit 1; }}; '
                             f'while [ ! -e {gate} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        self.wait_state(failed, ("FAILED",))
        resumed = int(self.dlrun("submit", "--parsable", "--resume", str(failed)).stdout)
        self.wait_state(resumed, ("RUNNING",))
        r = self.dlrun("submit", "--resume", str(failed))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"job {resumed} (", r.stderr)
        self.assertIn(f"uses job {failed}'s checkpoint directory", r.stderr)
        self.assertIn(f"dlrun wait {resumed}", r.stderr)
        self.assertEqual(len(self.all_jobs()), 2)
        open(gate, "w").close()
        self.assertEqual(self.wait_state(resumed, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
        r = self.dlrun("submit", "--wait", "--resume", str(failed))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_resume_after_the_job_file_changed_says_it_runs_the_file_as_submitted(self):
        # The file fixed, the job resumed: it ran the old text without a word.
        path = self.job_file('command = ["sh", "-c", "exit 4"]\n[resources]\nnproc = 1\n', "fix.toml")
        r = self.dlrun("submit", "--wait", "--parsable", path)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.job_file('command = ["true"]\n[resources]\nnproc = 1\n', "fix.toml")
        r = self.dlrun("submit", "--wait", "--resume", r.stdout.strip())
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn(f"{path} has changed since job 1 was submitted: the resumed job runs it as it was then. To "
                      f"train on from these checkpoints with the file as it is now, set checkpoint_dir = "
                      f"\"{os.path.join(self.home, 'jobs', '1', 'checkpoints')}\" in it and submit it", r.stderr)

    def test_a_dlrun_local_that_takes_gpus_ahead_of_queued_jobs_says_so(self):
        self.env["DLRUN_FAKE_GPUS"] = "4"
        gate = os.path.join(self.tmp, "gate")
        running = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                              '[resources]\ngpus = 2\n')
        self.wait_state(running, ("RUNNING",))
        waiting = self.submit('name = "wide"\ncommand = ["true"]\n[resources]\ngpus = 4\n')
        r = self.dlrun("local", "-q", "--gpus", "2", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"job {waiting} (wide) waits in the queue for GPUs; this run takes what it uses ahead of it",
                      r.stderr)
        open(gate, "w").close()
        self.assertEqual(self.wait_state(waiting, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
        r = self.dlrun("local", "-q", "--gpus", "2", "true")
        self.assertNotIn("waits in the queue", r.stderr)

    def test_a_job_file_from_a_pipe_runs_where_it_was_submitted(self):
        # <(…) is /dev/fd/63: the job ran in /proc/PID/fd, and a relative program was looked
        # for in /dev/fd.
        r = subprocess.run(["bash", "-c", f"{DLRUN} submit --wait <(printf 'command = [\"sh\", \"-c\", \"pwd\"]\\n"
                            "[resources]\\nnproc = 1\\n')"], cwd=self.tmp, env=self.env, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        job_id = int(r.stdout.split()[2])
        self.assertEqual(self.dlrun("logs", str(job_id), "--rank", "0").stdout, os.path.realpath(self.tmp) + "\n")
        r = self.dlrun("submit", self.tmp + "/")
        self.assertIn(f"give its job file (e.g. {self.tmp}/job.toml)", r.stderr)

    def test_one_job_file_gives_each_job_its_own_checkpoint_dir_with_job_id(self):
        # A sweep's jobs from one job file shared its checkpoint_dir: the second "resumed" the
        # first's last step and reported its accuracy. {job_id} makes a directory per job; a
        # directory that a job not ended uses too is warned of at submit.
        path = self.job_file('checkpoint_dir = "ck/{job_id}"\ncommand = ["sh", "-c", "echo $DLRUN_CHECKPOINT_DIR"]\n'
                             '[resources]\nnproc = 1\n', "sweep.toml")
        ids = []
        for _ in range(2):
            r = self.dlrun("submit", "--parsable", path)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("too", r.stderr)
            ids.append(int(r.stdout))
        for job_id in ids:
            self.assertEqual(self.wait_state(job_id, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
            self.assertEqual(self.dlrun("logs", str(job_id), "--rank", "0").stdout,
                             os.path.join(self.tmp, "ck", str(job_id)) + "\n")
        r = self.dlrun("submit", self.job_file('checkpoint_dir = "ck/{jobid}"\ncommand = ["true"]\n'
                                               '[resources]\nnproc = 1\n', "typo.toml"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("{jobid} is not known here; {job_id} is the job's number", r.stderr)
        gate = os.path.join(self.tmp, "gate")
        shared = self.job_file(f'checkpoint_dir = "shared"\ncommand = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                               '[resources]\nnproc = 1\n', "shared.toml")
        first = int(self.dlrun("submit", "--parsable", shared).stdout)
        r = self.dlrun("submit", "--parsable", shared)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"checkpoint_dir {os.path.join(self.tmp, 'shared')} is job {first}'s", r.stderr)
        open(gate, "w").close()
        self.wait_state(int(r.stdout), ("SUCCEEDED",))

    def test_config_cpu_slots_count_for_every_job_whatever_the_submitting_shell_says(self):
        # DLRUN_CPU_SLOTS is read from each submitter's shell: a shell with its own count put
        # 6 ranks on 2 cores, and dlrun status gave a waiting job another reason in each shell.
        # [queue] cpu_slots in config.toml is one count for the whole store.
        os.makedirs(self.home, exist_ok=True)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[queue]\ncpu_slots = 2\n")
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                            '[resources]\nnproc = 2\n')
        self.wait_state(first, ("RUNNING",))
        other_shell = dict(self.env, DLRUN_CPU_SLOTS="6")
        r = self.dlrun("submit", "--parsable", self.job_file('command = ["true"]\n[resources]\nnproc = 2\n', "b.toml"),
                       env=other_shell)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("DLRUN_CPU_SLOTS=6 is not what this store counts: ", r.stderr)
        second = int(r.stdout)
        # Its supervisor has looked at the queue several times meanwhile (it started at once before).
        time.sleep(2)
        for env in (self.env, other_shell):
            job = self.status(second, env=env)
            self.assertEqual(job["state"], "PENDING")
            self.assertEqual(job["reason"], "waiting for 2 CPU slots (0 free)")
        open(gate, "w").close()
        a = self.wait_state(first, ("SUCCEEDED",))
        b = self.wait_state(second, ("SUCCEEDED",))
        self.assertGreaterEqual(b["started_at"], a["ended_at"])
        # A mistake in [queue] is refused at submit, with its line.
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[queue]\ncpu_slots = 0\n")
        r = self.dlrun("submit", self.job_file('command = ["true"]\n[resources]\nnproc = 1\n', "c.toml"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("config.toml:2:13: 'cpu_slots' must be a whole number of CPU ranks from 1 to 65536", r.stderr)

    def test_a_one_gpu_job_runs_on_the_gpu_it_was_given(self):
        # The allocation is a list of GPU ids: GPU "0" is not a count of none, nor "2" a count
        # of two.
        self.env["DLRUN_FAKE_GPUS"] = "3"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n'
                            '[resources]\ngpus = 2\n')
        self.wait_state(first, ("RUNNING",))
        second = self.submit('command = ["sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES"]\n[resources]\ngpus = 1\n')
        job = self.wait_state(second, ("SUCCEEDED", "FAILED"))
        self.assertEqual(job["state"], "SUCCEEDED", self.dlrun("logs", str(second)).stdout)
        self.assertEqual(job["gpus"], [2])
        self.assertEqual(self.dlrun("logs", str(second), "--rank", "0").stdout, "gpu 2\n")
        open(gate, "w").close()
        self.assertEqual(self.wait_state(first, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
        third = self.submit('command = ["sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES"]\n[resources]\ngpus = 1\n')
        self.assertEqual(self.wait_state(third, ("SUCCEEDED", "FAILED"))["state"], "SUCCEEDED")
        self.assertEqual(self.dlrun("logs", str(third), "--rank", "0").stdout, "gpu 0\n")

    def test_two_jobs_never_share_a_gpu(self):
        self.env["DLRUN_FAKE_GPUS"] = "3"
        record = os.path.join(self.tmp, "gpus")
        text = ('command = ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES $(date +%s.%N) start >> {r}; sleep 0.4; '
                'echo $CUDA_VISIBLE_DEVICES $(date +%s.%N) end >> {r}"]\n[resources]\ngpus = 2\n').format(r=record)
        ids = [self.submit(text) for _ in range(4)]
        for job_id in ids:
            self.wait_state(job_id, ("SUCCEEDED",), timeout=120)
        intervals = {}
        with open(record) as f:
            for line in f:
                gpu, stamp, what = line.split()
                intervals.setdefault(gpu, []).append((float(stamp), what))
        # Each GPU's starts and ends must alternate: never two holders at once.
        self.assertEqual(sum(len(v) for v in intervals.values()), 16)
        for gpu, events in intervals.items():
            depth = 0
            for _, what in sorted(events):
                depth += 1 if what == "start" else -1
                self.assertLessEqual(depth, 1, f"GPU {gpu} shared")
        gpus = {tuple(sorted(job["gpus"])) for job in map(self.status, ids)}
        for pair in gpus:
            self.assertEqual(len(pair), 2)

    def test_fifty_processes_opening_a_new_store_at_once(self):
        # The first opens switch the file to WAL: SQLite may answer "database is locked" at
        # once there, past its busy handler; dlrun retries. (SQLite's locks are per process,
        # so this takes processes, not threads.)
        for round in range(25):
            env = dict(self.env, DLRUN_HOME=os.path.join(self.tmp, f"home{round}"))
            procs = [subprocess.Popen([DLRUN, "status"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=env) for _ in range(50)]
            for p in procs:
                _, err = p.communicate(timeout=120)
                self.assertEqual(p.returncode, 0, err)

    def test_fifty_concurrent_submits(self):
        path = self.job_file('command = ["true"]\n[resources]\nnproc = 1\n')
        procs = [subprocess.Popen([DLRUN, "submit", "--parsable", path], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=self.env) for _ in range(50)]
        ids = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
            ids.append(int(out))
        self.assertEqual(len(set(ids)), 50)
        for job_id in ids:
            self.wait_state(job_id, ("SUCCEEDED",), timeout=180)


class CrashSafety(JobsTestCase):
    def test_kill_9_during_submit_loses_nothing(self):
        path = self.job_file('command = ["true"]\n[resources]\nnproc = 1\n')
        printed = []
        for i in range(12):
            p = subprocess.Popen([DLRUN, "submit", "--parsable", path], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, env=self.env)
            time.sleep(random.uniform(0, 0.03))
            p.kill()
            out, _ = p.communicate()
            if out.strip():
                printed.append(int(out))
        # Every job the store knows (whatever the submit managed to print) must run to the end.
        def settled():
            jobs = self.all_jobs()  # each status call sweeps and adopts orphans
            return jobs if all(j["state"] == "SUCCEEDED" for j in jobs) else None
        jobs = wait_for(settled, 60, 0.2)
        self.assertIsNotNone(jobs, self.all_jobs())
        self.assertTrue(set(printed) <= {j["id"] for j in jobs})
        db = sqlite3.connect(os.path.join(self.home, "jobs.db"))
        self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")

    def test_a_dlrun_local_that_ends_while_the_store_is_full_is_recorded_as_it_ended(self):
        # dlrun local cannot wait an hour at the user's terminal for room: it said "its end could
        # not be recorded" and exited, and the next sweep called the job lost: FAILED 70, "its
        # ranks were killed with it", of ranks that had all succeeded. Its run directory's job.json
        # says how it ended; the sweep records that.
        disk = self.small_disk("2m")
        self.env["DLRUN_HOME"] = os.path.join(disk, "home")
        run_dir = os.path.join(self.tmp, "run")
        gate = os.path.join(self.tmp, "gate")
        p = self.start("local", "--nproc", "1", "--run-dir", run_dir, "sh", "-c",
                       f"while [ ! -e {gate} ]; do sleep 0.05; done; echo done")
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(run_dir, "job.json")), 30))
        filler = self.fill(disk)
        open(gate, "w").close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(err.count("its end could not be recorded"), 1, err)
        self.assertIn("its end could not be recorded now", err)
        os.unlink(filler)
        job = self.status(1)
        self.assertEqual((job["state"], job["exit_code"]), ("SUCCEEDED", 0), job)

    def test_a_job_that_ends_while_the_store_is_full_is_recorded_once_there_is_room(self):
        # Its supervisor failed to record the end, exited 70, and the job read FAILED, "lost: its
        # ranks were killed with it" (they had succeeded); a dlrun wait on it failed with 70.
        disk = self.small_disk("2m")
        self.env["DLRUN_HOME"] = os.path.join(disk, "home")
        gate = os.path.join(self.tmp, "gate")
        job_id = self.submit(f'grace = 1\ncommand = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done; echo done"]\n'
                             '[resources]\nnproc = 1\n')
        self.wait_state(job_id, ("RUNNING",))
        waiter = subprocess.Popen([DLRUN, "wait", str(job_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=self.env)
        self.procs_to_kill.append(waiter.pid)
        filler = self.fill(disk)
        open(gate, "w").close()
        ended = time.time()
        time.sleep(3)  # the job has ended by now, and its end could not be recorded
        self.assertIsNone(waiter.poll(), "dlrun wait gave up on a full store")
        # What must write says so and asks to try again (it exited 70); a cancel leaves the
        # supervisor that holds the job's end alone (it killed it: the job read FAILED, lost).
        r = self.dlrun("submit", self.job_file(MINIMAL))
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("nothing was submitted: job store", r.stderr)
        r = self.dlrun("cancel", str(job_id))
        self.assertEqual(r.returncode, 75, r.stderr)
        self.assertIn("its ranks have ended, and its supervisor", r.stderr)
        # Its sweep cannot write: it says what it reads (exit 5: running).
        self.assertEqual(self.status(job_id)["state"], "RUNNING")
        os.unlink(filler)
        out, err = waiter.communicate(timeout=60)
        self.assertEqual(waiter.returncode, 0, err)
        job = self.wait_state(job_id, ("SUCCEEDED", "FAILED"))
        self.assertEqual((job["state"], job["exit_code"]), ("SUCCEEDED", 0), job)
        # Its end is when it ended, not when the store took it (a 6 s job read 0:52).
        recorded_end = calendar.timegm(time.strptime(job["ended_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        self.assertLess(recorded_end, ended + 3, job)
        logs = self.dlrun("logs", str(job_id)).stdout
        self.assertIn("done", logs)
        self.assertIn(f"job {job_id}'s end: cannot be recorded now", logs)

    def test_a_submit_killed_at_any_moment_leaves_no_job_waiting_for_another_command(self):
        # The supervisor records the job: no job exists without one, so every job the store
        # knows runs to its end by itself. Read the store directly: a dlrun command would
        # sweep and adopt orphans, which is what must not be needed.
        path = self.job_file('command = ["true"]\n[resources]\nnproc = 1\n')
        for i in range(40):
            p = subprocess.Popen([DLRUN, "submit", "--parsable", path], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, env=self.env)
            time.sleep(random.uniform(0, 0.02))
            p.kill()
            p.wait()

        def states():
            if not os.path.exists(os.path.join(self.home, "jobs.db")):
                return {}  # on a busy machine every submit may be killed before it made the store
            try:
                db = sqlite3.connect(f"file:{os.path.join(self.home, 'jobs.db')}?mode=ro", uri=True, timeout=10)
                try:
                    return dict(db.execute("SELECT id, state FROM jobs").fetchall())
                finally:
                    db.close()
            except sqlite3.Error as e:
                # A store killed while it was being made has no table of jobs: it holds none.
                return {} if "no such table" in str(e) else None
        settled = wait_for(lambda: (s := states()) is not None and all(v == "SUCCEEDED" for v in s.values()), 60, 0.2)
        self.assertTrue(settled, states())

    def test_no_job_is_ever_recorded_without_its_supervisor(self):
        # Watch the store while jobs are submitted: a row without a supervisor is a job that a
        # submit killed at that moment would leave waiting for another dlrun command.
        path = self.job_file('command = ["true"]\n[resources]\nnproc = 1\n')
        self.dlrun("status")  # creates the store
        seen, stop = [], threading.Event()

        def watch():
            db = sqlite3.connect(f"file:{os.path.join(self.home, 'jobs.db')}?mode=ro", uri=True, timeout=10)
            while not stop.is_set():
                try:
                    seen.extend(db.execute("SELECT id FROM jobs WHERE supervisor_pid = 0").fetchall())
                except sqlite3.Error:
                    pass
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            for i in range(10):
                r = self.dlrun("submit", path)
                self.assertEqual(r.returncode, 0, r.stderr)
        finally:
            stop.set()
            watcher.join()
        self.assertEqual(seen, [])

    def test_kill_9_of_a_running_supervisor_marks_the_job_lost(self):
        pids = os.path.join(self.tmp, "pids")
        job_id = self.submit(f'command = ["sh", "-c", "echo $$ >> {pids}; exec sleep 300"]\n[resources]\nnproc = 2\n')
        self.wait_state(job_id, ("RUNNING",))
        self.assertTrue(wait_for(lambda: len(read_pids(pids)) == 2, 30))
        self.procs_to_kill += read_pids(pids)
        pid = supervisor_pid(job_id, self.home)
        self.assertIsNotNone(pid)
        os.kill(pid, signal.SIGKILL)
        # No dlrun command for a while (a machine rebooting): its end is when it died, not when
        # a sweep noticed.
        killed = time.time()
        time.sleep(5)
        job = self.wait_state(job_id, ("FAILED",), timeout=30)
        self.assertIn("lost", job["reason"])
        self.assertEqual(job["exit_code"], 70)  # as submit --wait exits for it (was null)
        ended = calendar.timegm(time.strptime(job["ended_at"][:19], "%Y-%m-%dT%H:%M:%S"))
        self.assertLess(ended, killed + 3, job)
        self.assertTrue(wait_for(lambda: not any(pid_alive(p) for p in read_pids(pids)), 5), "ranks survived")
        # Its slots are free again.
        self.submit(MINIMAL, "--wait")

    def test_kill_9_of_a_pending_supervisor_does_not_lose_the_job(self):
        self.env["DLRUN_CPU_SLOTS"] = "1"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        second = self.submit('command = ["true"]\n[resources]\nnproc = 1\n')
        self.assertTrue(wait_for(lambda: supervisor_pid(second, self.home), 10))
        os.kill(supervisor_pid(second, self.home), signal.SIGKILL)
        open(gate, "w").close()
        self.wait_state(first, ("SUCCEEDED",))
        self.assertEqual(self.wait_state(second, ("SUCCEEDED",))["exit_code"], 0)


class Cancel(JobsTestCase):
    def test_cancel_running_job_stops_ranks_gracefully(self):
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        job_id = self.submit(f'command = ["sh", "-c", "trap \'echo $RANK >> {marks}; exit 0\' TERM; echo x >> {ready}; '
                             f'while true; do sleep 0.05; done"]\n[resources]\nnproc = 2\n')
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 30))
        r = self.dlrun("cancel", str(job_id))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"Job {job_id} CANCELLED\n")
        job = self.status(job_id)
        # Said as a pending job's cancel is (it read "stopped by SIGTERM").
        self.assertEqual((job["state"], job["exit_code"], job["reason"]), ("CANCELLED", 143, "by dlrun cancel"))
        with open(marks) as f:
            self.assertEqual(sorted(f.read().split()), ["0", "1"])
        self.assertEqual(self.dlrun("status", str(job_id)).returncode, 3)

    def test_a_job_cancelled_between_restarts_says_so(self):
        # While it waited to restart (its ranks asked for one, exit 75) it read "stopped by SIGTERM".
        job_id = self.submit('command = ["sh", "-c", "exit 75"]\n[resources]\nnproc = 1\n')
        self.assertTrue(wait_for(lambda: self.status(job_id)["requested_restarts"] >= 1, 60), self.status(job_id))
        self.assertEqual(self.dlrun("cancel", str(job_id)).returncode, 0)
        job = self.wait_state(job_id, ("CANCELLED",))
        self.assertTrue(job["reason"].startswith("by dlrun cancel"), job)

    def test_a_local_run_says_that_it_was_cancelled_and_a_resumed_one_forgets_it(self):
        up = [os.path.join(self.home, "runs", "1", f"up-{rank}") for rank in (0, 1)]
        ranks_up = lambda: wait_for(lambda: all(os.path.exists(f) for f in up), 30)
        p = self.start("local", "--nproc", "2", "--name", "cx", "sh", "-c", "touch $DLRUN_RUN_DIR/up-$RANK; sleep 30")
        self.assertTrue(ranks_up())
        self.assertEqual(self.dlrun("cancel", "cx").returncode, 0)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 143, err)
        self.assertIn("dlrun: cancelled by dlrun cancel: passing SIGTERM on to 2 ranks\n", err)
        self.assertEqual(self.status("cx")["reason"], "by dlrun cancel")
        # Taken up again and stopped by a plain SIGTERM: the old note is not this one's.
        for f in up:
            os.remove(f)
        p = self.start("local", "--resume", "cx")
        self.assertTrue(ranks_up())
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertIn("got SIGTERM: passing it on to 2 ranks", err)
        self.assertEqual(self.status("cx")["reason"], "stopped by SIGTERM")

    def test_a_job_run_here_from_a_slurm_job_file_can_be_cancelled(self):
        # `dlrun submit --scheduler local` over a file that says kind = "slurm": cancel read
        # the file without the override and refused it (exit 2); the job ran on.
        ready = os.path.join(self.tmp, "ready")
        job_id = self.submit(f'name = "here"\ncommand = ["sh", "-c", "touch {ready}; while true; do sleep 0.05; done"]\n'
                             f'grace = 2\n[resources]\nnproc = 1\n[scheduler]\nkind = "slurm"\n', "--scheduler", "local")
        self.assertTrue(wait_for(lambda: os.path.exists(ready), 30))
        r = self.dlrun("cancel", "here")
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {job_id} CANCELLED\n"), r.stderr)
        self.assertEqual(self.status(job_id)["exit_code"], 143)

    def test_cancel_pending_job(self):
        self.env["DLRUN_CPU_SLOTS"] = "1"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        second = self.submit('command = ["true"]\n[resources]\nnproc = 1\n')
        follower = self.start("logs", "-f", str(second))
        r = self.dlrun("cancel", str(second))
        self.assertEqual(r.stdout, f"Job {second} CANCELLED\n")
        # Following it ends with why nothing came (it printed nothing).
        out, err = follower.communicate(timeout=60)
        self.assertEqual((follower.returncode, out), (0, ""), err)
        self.assertIn(f"job {second} is CANCELLED and never started: it has no output", err)
        # A third job queued behind it: once the third has run, the queue has passed the
        # second by.
        third = self.submit('command = ["true"]\n[resources]\nnproc = 1\n')
        open(gate, "w").close()
        self.wait_state(first, ("SUCCEEDED",))
        self.wait_state(third, ("SUCCEEDED",))
        job = self.status(second)
        self.assertEqual((job["state"], job["reason"], job["exit_code"]), ("CANCELLED", "by dlrun cancel", 143))
        # It leaves no (empty) run directory behind, which nothing would ever remove.
        self.assertTrue(wait_for(lambda: not os.path.exists(os.path.join(self.home, "jobs", str(second))), 30))

    def test_history_of_a_job_not_started_says_so(self):
        self.env["DLRUN_CPU_SLOTS"] = "1"
        gate = os.path.join(self.tmp, "gate")
        first = self.submit(f'command = ["sh", "-c", "while [ ! -e {gate} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        second = self.submit('name = "later"\ncommand = ["true"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("history", "later")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"job {second} (later) has not started yet: it has no run directory", r.stderr)
        self.dlrun("cancel", str(second))  # it never will
        r = self.dlrun("history", str(second))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"job {second} (later) ended (CANCELLED) before it started", r.stderr)
        open(gate, "w").close()
        self.wait_state(first, ("SUCCEEDED",))

    def test_cancel_kills_a_job_that_ignores_sigterm(self):
        ready = os.path.join(self.tmp, "ready")
        job_id = self.submit('grace = 0.5\ncommand = ["sh", "-c", "trap \'\' TERM; touch ' + ready +
                             '; while true; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        self.wait_state(job_id, ("RUNNING",))
        self.assertTrue(wait_for(lambda: os.path.exists(ready), 60))  # SIGTERM is ignored by now
        start = time.monotonic()
        r = self.dlrun("cancel", str(job_id))
        self.assertLess(time.monotonic() - start, 30)
        self.assertEqual(r.stdout, f"Job {job_id} CANCELLED\n")

    def test_signal_passes_usr1_and_usr2_on_and_leaves_the_job_running(self):
        # As scancel --signal: a submitted job's ranks asked to checkpoint, say, before a
        # deadline; there was no way to reach them but to cancel the job.
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        job_id = self.submit(f'name = "sig"\ncommand = ["sh", "-c", "trap \'echo $RANK-USR1 >> {marks}\' USR1; '
                             f'trap \'echo $RANK-USR2 >> {marks}\' USR2; echo x >> {ready}; '
                             f'while [ ! -e {marks}.done ]; do sleep 0.05; done"]\n[resources]\nnproc = 2\n')
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 30))
        r = self.dlrun("cancel", "--signal", "USR1", "sig")
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {job_id}: SIGUSR1 sent for its ranks (one that handles it gets it now, one that has set no handler yet "
                          "once it does)\n"), r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(marks)) == 2, 30))
        r = self.dlrun("cancel", "--signal", "sigusr2", str(job_id))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(marks)) == 4, 30))
        self.assertEqual(sorted(read_words(marks)), ["0-USR1", "0-USR2", "1-USR1", "1-USR2"])
        self.assertEqual(self.status(job_id)["state"], "RUNNING")
        for bad in ("TERM", "KILL", "9", "USR3", ""):
            r = self.dlrun("cancel", "--signal", bad, str(job_id))
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
        self.assertEqual(self.dlrun("cancel", "--signal", "USR1", "--force", str(job_id)).returncode, 2)
        self.assertEqual(self.status(job_id)["state"], "RUNNING")
        # A job that cannot be signalled (it ended) does not keep the others from it.
        ended = self.submit(MINIMAL, "--wait")
        r = self.dlrun("cancel", "--signal", "usr1", str(ended), str(job_id))
        self.assertEqual((r.returncode, r.stdout), (1, f"Job {job_id}: SIGUSR1 sent for its ranks (one that handles it gets it now, one that has set no handler yet "
                          "once it does)\n"), r.stderr)
        self.assertIn(f"job {ended} is SUCCEEDED: only a running job's ranks can be signalled", r.stderr)
        self.assertTrue(wait_for(lambda: len(read_words(marks)) == 6, 30))
        r = self.dlrun("cancel", "--signal", "SIGTERM", str(job_id))
        self.assertIn("--signal SIGTERM: USR1 or USR2", r.stderr)
        open(marks + ".done", "w").close()
        self.wait_state(job_id, ["SUCCEEDED"])
        r = self.dlrun("cancel", "--signal", "USR1", str(job_id))
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"job {job_id} is SUCCEEDED: only a running job's ranks can be signalled", r.stderr)
        self.assertEqual(self.dlrun("cancel", "--signal", "USR1", "999").returncode, 2)

    def test_cancel_unknown_and_finished_jobs(self):
        r = self.dlrun("cancel", "999")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no job 999", r.stderr)
        job_id = self.submit(MINIMAL, "--wait")
        self.assertEqual(self.dlrun("cancel", str(job_id)).stdout, f"Job {job_id} had already ended (SUCCEEDED)\n")

    def test_every_job_named_is_tried_whatever_came_before(self):
        # An unknown job first left the others running (exit 2, nothing said of them).
        self.env["DLRUN_CPU_SLOTS"] = "2"
        one = self.submit('name = "long"\ncommand = ["sleep", "60"]\n[resources]\nnproc = 1\n')
        two = self.submit('name = "other"\ncommand = ["sleep", "60"]\n[resources]\nnproc = 1\n')
        self.wait_state(one, ("RUNNING",))
        self.wait_state(two, ("RUNNING",))
        r = self.dlrun("cancel", "999", str(one), "nosuchname", "other")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, f"Job {one} CANCELLED\nJob {two} CANCELLED\n")
        self.assertIn("no job 999", r.stderr)
        self.assertIn("no job numbered or named 'nosuchname'", r.stderr)
        self.assertEqual([self.status(j)["state"] for j in (one, two)], ["CANCELLED", "CANCELLED"])

    def test_running_jobs_named_together_are_signalled_before_any_is_waited_for(self):
        # They were cancelled one after the other: each waited out the one before (a grace
        # period each), and the scheduler could grow a later one into an earlier one's GPUs.
        # Each job's ranks stop only once the other job has its stop signal too (or after 20 s).
        self.env["DLRUN_CPU_SLOTS"] = "2"
        ready = os.path.join(self.tmp, "ready")
        ids = []
        for me, other in (("a", "b"), ("b", "a")):
            got, seen = os.path.join(self.tmp, f"got-{me}"), os.path.join(self.tmp, f"got-{other}")
            result = os.path.join(self.tmp, f"result-{me}")
            script = (f"trap 'touch {got}; i=0; while [ ! -e {seen} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
                      f"if [ -e {seen} ]; then echo together > {result}; else echo alone > {result}; fi; exit 0' TERM; "
                      f"echo x >> {ready}; while true; do sleep 0.05; done")
            ids.append(self.submit(f'name = "{me}"\ncommand = ["sh", "-c", "{script}"]\n[resources]\nnproc = 1\n'))
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 60))
        r = self.dlrun("cancel", str(ids[0]), str(ids[1]), str(ids[0]))
        self.assertEqual((r.returncode, r.stdout), (0, f"Job {ids[0]} CANCELLED\nJob {ids[1]} CANCELLED\n"), r.stderr)
        for me in ("a", "b"):
            with open(os.path.join(self.tmp, f"result-{me}")) as f:
                self.assertEqual(f.read().strip(), "together", me)

    def test_a_name_means_its_newest_job_that_has_not_ended(self):
        # A newer job of the name, cancelled while it waited, hid the older one that runs:
        # "Job 2 had already ended", and the running one went on.
        self.env["DLRUN_CPU_SLOTS"] = "1"
        text = 'name = "long"\ncommand = ["sleep", "60"]\n[resources]\nnproc = 1\n'
        running = self.submit(text)
        waiting = self.submit(text)
        self.wait_state(running, ("RUNNING",))
        self.assertEqual(self.dlrun("cancel", str(waiting)).returncode, 0)
        self.assertEqual(self.status("long")["id"], running)
        logs = self.dlrun("logs", str(waiting))
        self.assertEqual((logs.returncode, logs.stdout), (0, ""))
        self.assertIn(f"job {waiting} is CANCELLED and never started: it has no output", logs.stderr)
        self.assertEqual(self.dlrun("cancel", "long").stdout, f"Job {running} CANCELLED\n")
        # Once every one has ended, the newest.
        self.assertEqual(self.status("long")["id"], waiting)

    def test_cancel_of_a_name_several_waiting_or_running_jobs_share_asks_which(self):
        # A job file submitted twice: the newest (waiting) was cancelled, which may not be the
        # one meant. Nothing is cancelled; the numbers are listed.
        self.env["DLRUN_CPU_SLOTS"] = "1"
        text = 'name = "twice"\ncommand = ["sleep", "60"]\n[resources]\nnproc = 1\n'
        running = self.submit(text)
        waiting = self.submit(text)
        self.wait_state(running, ("RUNNING",))
        r = self.dlrun("cancel", "twice")
        self.assertEqual((r.returncode, r.stdout), (2, ""), r.stderr)
        self.assertIn(f"2 of your jobs named 'twice' have not ended ({running} RUNNING, {waiting} PENDING): say which "
                      "by number (dlrun cancel takes several)", r.stderr)
        self.assertEqual([self.status(j)["state"] for j in (running, waiting)], ["RUNNING", "PENDING"])
        # A verb that reads takes the newest, and says which it took.
        r = self.dlrun("status", "--json", "twice")
        self.assertEqual(json.loads(r.stdout)["id"], waiting)
        self.assertIn(f"'twice' is job {waiting}, the newest of the jobs of that name that have not ended (also "
                      f"{running}: say which by number)", r.stderr)
        r = self.dlrun("cancel", str(running), str(waiting))
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main()
