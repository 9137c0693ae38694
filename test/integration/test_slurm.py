"""`dlrun submit` onto a real Slurm cluster (slurm_cluster.py): sbatch, srun, one dlrun
agent per node, the same rendezvous as `dlrun run`; status, logs and cancel from Slurm."""
import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import DLRUN, PYTHON, DlrunTestCase, read_words, wait_for
import slurm_cluster

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
UNAVAILABLE = slurm_cluster.why_unavailable()


class OnSlurm(DlrunTestCase):
    @classmethod
    def setUpClass(cls):
        if UNAVAILABLE:
            raise unittest.SkipTest(UNAVAILABLE)
        cls.slurm_tmp = tempfile.mkdtemp(prefix="dlrun-slurm-")
        cls.slurm = slurm_cluster.SlurmCluster(cls.slurm_tmp)

    @classmethod
    def tearDownClass(cls):
        cls.slurm.stop()
        shutil.rmtree(cls.slurm_tmp, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.env = self.slurm.env(self.env)

    def job(self, command, extra="", top=""):
        path = os.path.join(self.tmp, f"job{time.monotonic_ns()}.toml")
        with open(path, "w") as f:
            f.write(f'name = "on-slurm"\ncommand = {json.dumps(command)}\n{top}[scheduler]\nkind = "slurm"\n'
                    f'nodes = 1\nranks_per_node = 2\n{extra}')
        return path

    def status(self, job_id):
        return json.loads(self.dlrun("status", "--json", str(job_id)).stdout)

    def test_two_ranks_do_a_gloo_allreduce_to_completed(self):
        r = self.dlrun("submit", "--wait", "--parsable", self.job([PYTHON, os.path.join(DATA, "allreduce.py")]),
                       timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        job = self.status(job_id)
        self.assertEqual((job["state"], job["exit_code"], job["ranks"]), ("SUCCEEDED", 0, 2))
        self.assertIsInstance(job["slurm_id"], int)
        scontrol = subprocess.run(["scontrol", "show", "job", str(job["slurm_id"])], env=self.env,
                                  capture_output=True, text=True).stdout
        self.assertIn("JobState=COMPLETED", scontrol)
        logs = self.dlrun("logs", job_id).stdout
        node = self.slurm.node
        self.assertIn(f"[{node}:0] rank 0 of 2 local 0 sum 3 expected 3", logs)
        self.assertIn(f"[{node}:1] rank 1 of 2 local 1 sum 3 expected 3", logs)
        self.assertEqual(self.dlrun("logs", job_id, "--rank", "1").stdout, "rank 1 of 2 local 1 sum 3 expected 3\n")

    def test_ranks_get_the_dlrun_environment(self):
        r = self.dlrun("submit", "--wait", "--parsable",
                       self.job(["sh", "-c", "echo $RANK $WORLD_SIZE $LOCAL_RANK $NODE_RANK $DLRUN_JOB_ID"]), timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        self.assertEqual(self.dlrun("logs", job_id, "--rank", "1").stdout, f"1 2 1 0 {job_id}\n")

    def test_export_env_and_log_dir(self):
        # sbatch hands the job whatever environment it is run with: only what the job keeps
        # (export_env) may reach it. The logs go to log_dir/ID, where dlrun logs finds them.
        env = dict(self.env, MY_TOKEN="t0k3n", MY_SECRET="s3cret")
        r = self.dlrun("submit", "--wait", "--parsable",
                       self.job(["sh", "-c", "echo [$MY_TOKEN] [$MY_SECRET]"],
                                top='export_env = ["MY_TOKEN"]\nlog_dir = "logs"\n'), env=env, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        self.assertEqual(self.dlrun("logs", job_id, "--rank", "1").stdout, "[t0k3n] []\n")
        with open(os.path.join(self.tmp, "logs", job_id, "rank-1.log")) as f:
            self.assertEqual(f.read(), "[t0k3n] []\n")
        self.assertIn("[t0k3n] []", self.dlrun("logs", job_id).stdout)  # output.log, sbatch's --output

    def test_watchdog(self):
        r = self.dlrun("submit", "--wait", "--parsable", self.job(["sleep", "600"], top="watchdog = 1\ngrace = 0\n"),
                       timeout=180)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        self.assertEqual(self.status(job_id)["state"], "FAILED")
        # Two ranks that never report: none is singled out.
        self.assertIn("no rank made progress for 1 s", self.dlrun("logs", job_id).stdout)

    def test_failing_rank_fails_the_job_with_its_code(self):
        r = self.dlrun("submit", "--wait", "--parsable",
                       self.job(["sh", "-c", "if [ $RANK = 1 ]; then exit 3; fi; sleep 60"]), timeout=180)
        self.assertEqual(r.returncode, 3, r.stderr)
        job = self.status(r.stdout.strip())
        self.assertEqual(job["state"], "FAILED")
        # Which rank, as a local job says it (Slurm says NonZeroExitCode; failed_rank was null).
        self.assertEqual(job["failed_rank"], 1, job)
        self.assertIn("rank 1", job["reason"])
        self.assertEqual(self.dlrun("status", r.stdout.strip()).returncode, 1)

    def test_a_job_keeps_the_slurm_conf_it_was_submitted_with(self):
        # A wait from a shell without SLURM_CONF (another CI step) asked the default controller,
        # said it could not, and waited for good.
        r = self.dlrun("submit", "--parsable", self.job(["sh", "-c", "sleep 2; exit 7"]))
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        without = {k: v for k, v in self.env.items() if k != "SLURM_CONF"}
        for args in (("status",), ("status", job_id)):  # its listing left the job's environment out
            r = self.dlrun(*args, env=without)
            self.assertNotIn("cannot ask Slurm", r.stderr)
        r = self.dlrun("wait", "--timeout", "120", job_id, env=without, timeout=180)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertNotIn("cannot ask Slurm", r.stderr)

    def test_signal_then_cancel_a_running_job(self):
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        r = self.dlrun("submit", "--parsable",
                       self.job(["sh", "-c", f"trap 'echo $RANK >> {marks}; exit 0' TERM; "
                                             f"trap 'echo $RANK-USR1 >> {marks}' USR1; "
                                             f"echo $RANK >> {ready}; while true; do sleep 0.1; done"]))
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        self.assertTrue(wait_for(lambda: self.status(job_id)["state"] == "RUNNING", 60))
        # Both ranks have set their trap: the cancel reaches running ranks, not starting ones.
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 120), read_words(ready))
        # scancel --signal to the batch step (dlrun), which passes it on; the job goes on.
        c = self.dlrun("cancel", "--signal", "USR1", job_id, timeout=60)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertTrue(wait_for(lambda: sorted(read_words(marks)) == ["0-USR1", "1-USR1"], 60), read_words(marks))
        self.assertEqual(self.status(job_id)["state"], "RUNNING")
        c = self.dlrun("cancel", job_id, timeout=180)
        self.assertEqual(c.stdout, f"Job {job_id} CANCELLED\n", c.stderr)
        job = self.status(job_id)
        self.assertEqual(job["state"], "CANCELLED")
        self.assertEqual(self.dlrun("status", job_id).returncode, 3)
        squeue = subprocess.run(["squeue", "-h"], env=self.env, capture_output=True, text=True).stdout
        self.assertEqual(squeue.strip(), "")

    def test_a_job_cancelled_while_pending_exits_143(self):
        # Slurm says ExitCode=0:0 for it and keeps its pending reason: submit --wait exited 0.
        wait = subprocess.Popen([DLRUN, "submit", "--wait", "--parsable",
                                 self.job(["true"], 'sbatch_options = ["--begin=now+1hour"]\n')],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Queued in Slurm (sbatch has answered): a cancel before that is the next test's.
        listed = lambda: json.loads(self.dlrun("status", "--json").stdout)
        self.assertTrue(wait_for(lambda: len(listed()) == 1 and listed()[0]["slurm_id"], 60), listed())
        job_id = str(listed()[0]["id"])
        c = self.dlrun("cancel", job_id, timeout=180)
        self.assertEqual(c.returncode, 0, c.stderr)
        out, err = wait.communicate(timeout=180)
        self.assertEqual(wait.returncode, 143, err)
        job = self.status(job_id)
        self.assertEqual((job["state"], job["exit_code"], job["reason"]), ("CANCELLED", 143, "Slurm: CANCELLED"))

    def test_a_job_cancelled_while_sbatch_runs_is_cancelled_in_slurm_too(self):
        # dlrun cancel between the job's record and sbatch's answer ran 'scancel 0' (exit 69), and
        # the job sbatch then queued stayed in Slurm. A slow sbatch (a busy controller) makes room.
        shim = os.path.join(self.tmp, "bin")
        os.mkdir(shim)
        gate = os.path.join(self.tmp, "sbatch-may-answer")
        real = shutil.which("sbatch", path=self.env["PATH"])
        with open(os.path.join(shim, "sbatch"), "w") as f:
            f.write(f"#!/bin/sh\nwhile [ ! -e {gate} ]; do sleep 0.05; done\nexec {real} \"$@\"\n")
        os.chmod(os.path.join(shim, "sbatch"), 0o755)
        env = dict(self.env, PATH=shim + os.pathsep + self.env["PATH"])
        submit = subprocess.Popen([DLRUN, "submit", "--wait", "--parsable",
                                   self.job(["true"], 'sbatch_options = ["--begin=now+1hour"]\n')],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        listed = lambda: json.loads(self.dlrun("status", "--json").stdout)
        self.assertTrue(wait_for(lambda: len(listed()) == 1, 60))
        job_id = str(listed()[0]["id"])
        c = self.dlrun("cancel", job_id, timeout=60)
        self.assertEqual((c.returncode, c.stdout), (0, f"Job {job_id} CANCELLED\n"), c.stderr)
        open(gate, "w").close()
        out, err = submit.communicate(timeout=120)
        self.assertEqual(submit.returncode, 143, err)
        self.assertIn(f"job {job_id} was cancelled while it was being submitted: cancelling Slurm job", err)
        job = self.status(job_id)
        self.assertEqual((job["state"], job["exit_code"]), ("CANCELLED", 143))
        self.assertIsInstance(job["slurm_id"], int)
        squeue = lambda: subprocess.run(["squeue", "-h"], env=self.env, capture_output=True, text=True).stdout.strip()
        self.assertTrue(wait_for(lambda: squeue() == "", 60), squeue())

    def test_a_job_that_cannot_start_says_why_while_pending(self):
        # Two nodes on a one-node cluster: Slurm queues it for good. It looked like any waiting job.
        path = os.path.join(self.tmp, "two-nodes.toml")
        with open(path, "w") as f:
            f.write('name = "too-big"\ncommand = ["true"]\n[scheduler]\nkind = "slurm"\nnodes = 2\nranks_per_node = 1\n')
        r = self.dlrun("submit", "--parsable", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        try:
            self.assertTrue(wait_for(lambda: "PartitionNodeLimit" in self.dlrun("status", job_id).stdout, 60),
                            self.dlrun("status", job_id).stdout)
            self.assertIn("it asks for more nodes than its partition allows, so it will not start as it is",
                          self.dlrun("status", job_id).stdout)
            # A wait says it once (it waited in silence), and goes on waiting.
            r = self.dlrun("wait", "--timeout", "3", job_id)
            self.assertEqual(r.returncode, 124, r.stderr)
            self.assertEqual(r.stderr.count("so it will not start as it is"), 1, r.stderr)
        finally:
            self.dlrun("cancel", job_id, timeout=180)

    def test_restarts_inside_slurm_are_counted(self):
        r = self.dlrun("submit", "--wait", "--parsable",
                       self.job(["sh", "-c", 'if [ "$DLRUN_RESTART_COUNT" = 0 ] && [ $RANK = 1 ]; then exit 3; fi'],
                                top="max_restarts = 1\n"), timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        job = self.status(r.stdout.strip())
        self.assertEqual((job["state"], job["restarts"]), ("SUCCEEDED", 1), job)

    def test_the_grace_period_holds_when_slurm_signals_the_job(self):
        # Slurm signals every step, and srun passes the signal on again: the agents took the
        # second SIGTERM for an impatient user and killed the ranks at once.
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        r = self.dlrun("submit", "--parsable",
                       self.job(["sh", "-c", f"trap 'sleep 1; echo $RANK >> {marks}; exit 0' TERM; "
                                             f"echo $RANK >> {ready}; while true; do sleep 0.1; done"], top="grace = 30\n"))
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 120), read_words(ready))
        c = self.dlrun("cancel", job_id, timeout=180)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertEqual(sorted(read_words(marks)), ["0", "1"], self.dlrun("logs", job_id).stdout)
        self.assertNotIn("killing all", self.dlrun("logs", job_id).stdout)

    def test_a_workdir_missing_on_the_node_fails_the_job(self):
        # sbatch's --chdir falls back to /tmp: the job ran there, and succeeded.
        r = self.dlrun("submit", "--wait", "--parsable", self.job(["pwd"], top='workdir = "/nonexistent/dir"\n'),
                       timeout=180)
        self.assertEqual(r.returncode, 70, r.stderr)
        job_id = r.stdout.strip()
        self.assertEqual(self.status(job_id)["state"], "FAILED")
        self.assertIn("the job's workdir /nonexistent/dir is not a directory on node", self.dlrun("logs", job_id).stdout)

    def test_slurm_that_cannot_be_asked_leaves_the_job_as_it_was(self):
        # scontrol failing (a controller restarting; here, no configuration) made a running job
        # FAILED for good, and dlrun clean would then remove the directory it runs in.
        gate = os.path.join(self.tmp, "gate")
        r = self.dlrun("submit", "--parsable", self.job(["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done"]))
        job_id = r.stdout.strip()
        self.assertTrue(wait_for(lambda: self.status(job_id)["state"] == "RUNNING", 120))
        blind = dict(self.env, SLURM_CONF=os.path.join(self.tmp, "no-such.conf"))
        r = self.dlrun("status", "--json", job_id, env=blind)
        self.assertEqual(json.loads(r.stdout)["state"], "RUNNING", r.stderr)
        self.assertIn(f"cannot ask Slurm about job {job_id}", r.stderr)
        self.assertIn("its state is as last seen", r.stderr)
        open(gate, "w").close()
        self.assertTrue(wait_for(lambda: self.status(job_id)["state"] == "SUCCEEDED", 120), self.status(job_id))

    def test_dry_run_prints_the_script_and_submits_nothing(self):
        r = self.dlrun("submit", "--dry-run", self.job(["./train"], 'partition = "debug"\ntime_limit = "10:00"\n'
                                                                   'sbatch_options = ["--exclusive"]\n'))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("#SBATCH --nodes=1\n", r.stdout)
        self.assertIn("#SBATCH --cpus-per-task=2\n", r.stdout)  # a CPU for each of the node's ranks
        self.assertIn("#SBATCH --partition=debug\n", r.stdout)
        self.assertIn("#SBATCH --time=10:00\n", r.stdout)
        self.assertIn("#SBATCH --exclusive\n", r.stdout)
        self.assertRegex(r.stdout, r"exec \S+dlrun _slurm-run .* --ranks-per-node 2 -- ./train\n")
        self.assertEqual(json.loads(self.dlrun("status", "--json").stdout), [])

    def test_scheduler_flag_overrides_the_file(self):
        path = os.path.join(self.tmp, "plain.toml")
        with open(path, "w") as f:
            f.write('command = ["true"]\n')
        r = self.dlrun("submit", "--scheduler", "slurm", "--wait", "--parsable", path, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsInstance(self.status(r.stdout.strip())["slurm_id"], int)


if __name__ == "__main__":
    unittest.main()
