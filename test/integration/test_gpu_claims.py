"""GPUs shared with other users (docs/local.md): a job's supervisor claims its GPUs
machine-wide, so that the dlrun of another store (another user's, or another DLRUN_HOME)
neither hands them out by count nor starts a queued job on them, and says whose they are.
Pretend GPUs (DLRUN_FAKE_GPUS) claim only where DLRUN_GPU_CLAIMS_DIR says: the tests' own."""
import json
import os
import shutil
import signal
import subprocess
import unittest

from harness import DLRUN, DlrunTestCase, wait_for

GPU_JOB = """name = "wide"
command = ["sh", "-c", "echo gpus $CUDA_VISIBLE_DEVICES"]
[resources]
gpus = 2
"""


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


class OtherStores(DlrunTestCase):
    def setUp(self):
        super().setUp()
        self.claims = os.path.join(self.tmp, "claims")
        self.env.update(DLRUN_FAKE_GPUS="2", DLRUN_GPU_CLAIMS_DIR=self.claims)
        self.other_home = os.path.join(self.tmp, "other-home")
        self.other = dict(self.env, DLRUN_HOME=self.other_home)

    def holding(self, *gpus_then_env, name="held", env=None):
        """Starts a dlrun local (of this test's store unless `env`) that holds `--gpus ...` until
        the test ends it; returns once its rank runs."""
        up = os.path.join(self.tmp, f"{name}-up")
        p = self.start("local", "--gpus", *gpus_then_env, "sh", "-c", f"touch {up}; exec sleep 60", env=env)
        self.assertTrue(wait_for(lambda: os.path.exists(up), 30))
        return p

    def submit_other(self, text, *options):
        """Submits job file `text` to the other store; returns its number."""
        job_file = os.path.join(self.tmp, "job.toml")
        with open(job_file, "w") as f:
            f.write(text)
        r = self.dlrun("submit", "--parsable", *options, job_file, env=self.other)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r.stdout.split()[0]

    def other_status(self, job):
        return json.loads(self.dlrun("status", job, "--json", env=self.other).stdout)

    def hold_gpu_0(self):
        """A dlrun local of this test's store on GPU 0, until the test ends it."""
        up = os.path.join(self.tmp, "up")
        p = self.start("local", "--gpus", "1", "sh", "-c", f"echo $CUDA_VISIBLE_DEVICES > {up}; exec sleep 60")
        self.assertTrue(wait_for(lambda: read(up) == "0", 30))
        return p

    def test_a_count_leaves_out_the_gpus_another_stores_job_holds(self):
        p = self.hold_gpu_0()
        whose = f"GPU 0 is in use by your dlrun job 1 of DLRUN_HOME={self.home} (pid {p.pid})"
        r = self.dlrun("local", "--gpus", "1", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=self.other)
        self.assertEqual((r.returncode, r.stdout), (0, "[0] gpu 1\n"), r.stderr)
        self.assertIn(whose + ": not chosen", r.stderr)
        r = self.dlrun("local", "--gpus", "2", "true", env=self.other)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--gpus 2: only 1 of the 2 GPUs here is free: 0 is held by other jobs (dlrun status lists "
                      "them); wait, or name GPUs to share them (--gpus 0,1)", r.stderr)
        r = self.dlrun("local", "--gpus", "3", "true", env=self.other)  # more than the machine has: that first
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--gpus 3: only 2 GPUs available (0,1)", r.stderr)
        # Named: the user's choice, as within one store; the warning says with whom it is shared.
        r = self.dlrun("local", "--gpus", "device=0", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=self.other)
        self.assertEqual((r.returncode, r.stdout), (0, "[0] gpu 0\n"), r.stderr)
        self.assertIn(whose + ": the two jobs share it", r.stderr)
        # Its claim goes with it, however it ends.
        p.kill()
        p.communicate(timeout=30)
        r = self.dlrun("local", "--gpus", "2", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=self.other)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[0] gpu 0", "[1] gpu 1"])
        self.assertNotIn("in use", r.stderr)

    def test_dlrun_runs_agents_leave_them_out_and_claim_their_own(self):
        p = self.hold_gpu_0()
        r = self.dlrun("run", "--hosts", "localhost:1", "--gpu", "sh", "-c",
                       "echo gpu $CUDA_VISIBLE_DEVICES; sleep 1", env=self.other)
        self.assertEqual((r.returncode, r.stdout), (0, "[localhost:0] gpu 1\n"), r.stderr)
        self.assertIn(f"GPU 0 is in use by your dlrun job 1 of DLRUN_HOME={self.home} (pid {p.pid}): not chosen",
                      r.stderr)
        r = self.dlrun("run", "--hosts", "localhost:2", "--gpu", "true", env=self.other)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--gpu (2 slots on localhost): only 1 of the 2 GPUs here is free: 0 is held by other jobs (dlrun "
                      "status lists them); wait, or name GPUs to share them (--gpu-ids 0,1)", r.stderr)
        # Named, it is shared, with a warning; while an agent's ranks run, its GPU is claimed.
        up = os.path.join(self.tmp, "agent-up")
        q = self.start("run", "--hosts", "localhost:1", "--gpu-ids", "1", "sh", "-c",
                       f"touch {up}; exec sleep 60", env=self.other)
        self.assertTrue(wait_for(lambda: os.path.exists(up), 30))
        r = self.dlrun("local", "--gpus", "1", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr, r"GPU 1 is in use by your dlrun run job \d+ \(pid \d+\): not chosen")
        # Its own store does not record a dlrun run's GPUs: it counts the agents' claims too.
        p.kill()
        p.communicate(timeout=30)
        r = self.dlrun("local", "--gpus", "1", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=self.other)
        self.assertEqual((r.returncode, r.stdout), (0, "[0] gpu 0\n"), r.stderr)
        self.assertRegex(r.stderr, r"GPU 1 is in use by your dlrun run job \d+ \(pid \d+\): not chosen")
        os.killpg(q.pid, signal.SIGTERM)
        q.communicate(timeout=30)

    def test_gpus_are_known_by_uuid_where_another_view_numbers_them_otherwise(self):
        # This store sees both GPUs; the other (a container showing it one GPU) sees the second as 0.
        self.env["DLRUN_FAKE_GPU_UUIDS"] = "GPU-aa,GPU-bb"
        other = dict(self.other, DLRUN_FAKE_GPUS="1", DLRUN_FAKE_GPU_UUIDS="GPU-bb")
        p = self.hold_gpu_0()  # GPU-aa
        r = self.dlrun("local", "--gpus", "1", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES", env=other)
        self.assertEqual((r.returncode, r.stdout), (0, "[0] gpu 0\n"), r.stderr)  # its 0 is GPU-bb: free
        self.assertNotIn("in use", r.stderr)
        q = self.holding("1", name="bb", env=other)
        r = self.dlrun("local", "--gpus", "1", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"GPU 1 is in use by your dlrun job 2 of DLRUN_HOME={self.other_home}", r.stderr)
        for proc in (p, q):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.communicate(timeout=30)

    def test_a_queued_job_waits_for_gpus_another_store_holds_and_says_whose(self):
        p = self.hold_gpu_0()
        job = self.submit_other(GPU_JOB)
        whose = f"waiting for 2 GPUs (1 free; GPU 0 is in use by your dlrun job 1 of DLRUN_HOME={self.home}"
        self.assertTrue(wait_for(lambda: whose in self.dlrun("status", job, env=self.other).stdout, 30))
        status = self.dlrun("status", job, env=self.other)
        self.assertIn("PENDING", status.stdout)
        self.assertIn(f"waiting for 2 GPUs (1 free; GPU 0 is in use by your dlrun job 1 of DLRUN_HOME={self.home}",
                      status.stdout)
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)
        self.assertTrue(wait_for(lambda: self.other_status(job)["state"] == "SUCCEEDED", 60), self.other_status(job))
        self.assertEqual(self.dlrun("logs", job, env=self.other).stdout.count("gpus"), 2)

    def test_a_resize_grows_only_onto_gpus_no_other_store_holds_and_claims_them(self):
        p = self.holding("device=1")
        job = self.submit_other('command = ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES >> $DLRUN_RUN_DIR/gpus-$RANK; '
                                'exec sleep 60"]\n[scheduler]\npolicy = "fifo"\n[resources]\ngpus = "1:2"\n')
        status = lambda: self.other_status(job)  # noqa: E731
        self.assertTrue(wait_for(lambda: status()["state"] == "RUNNING", 30), status())
        self.assertEqual(status()["gpus"], [0])  # GPU 1 is the other store's
        r = self.dlrun("resize", "--force", job, "2", env=self.other)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"not enough free GPUs for 2 ranks now; GPU 1 is in use by your dlrun job 1 of "
                      f"DLRUN_HOME={self.home}", r.stderr)
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)
        r = self.dlrun("resize", "--force", job, "2", env=self.other)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(status()["gpus"], [0, 1])
        # Its new GPU is claimed: this store's count finds none free.
        r = self.dlrun("local", "--gpus", "1", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("GPU 1 is in use by your dlrun job 1 of DLRUN_HOME=" + self.other_home, r.stderr)
        self.assertEqual(self.dlrun("cancel", job, env=self.other).returncode, 0)

    def test_a_run_inside_a_job_uses_that_jobs_gpu_without_a_word(self):
        job_file = os.path.join(self.tmp, "job.toml")
        inner = [DLRUN, "local", "--gpus", "1", "sh", "-c", "echo inner $CUDA_VISIBLE_DEVICES"]
        with open(job_file, "w") as f:
            f.write(f"command = {json.dumps(inner)}\n[resources]\ngpus = 1\n")
        r = self.dlrun("submit", "--wait", "--parsable", job_file)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        logs = self.dlrun("logs", "1").stdout
        self.assertIn("[0] [0] inner 0", logs)
        self.assertNotIn("in use", logs)

    def test_the_goodput_scheduler_starts_a_job_as_soon_as_another_store_lets_go(self):
        p = self.holding("2")
        job = self.submit_other('command = ["sh", "-c", "echo ran on $CUDA_VISIBLE_DEVICES"]\n[resources]\ngpus = "1:2"\n')
        reason = lambda: self.other_status(job)["reason"]  # noqa: E731
        whose = f"GPUs 0,1 are in use by your dlrun job 1 of DLRUN_HOME={self.home} (pid {p.pid})"
        self.assertTrue(wait_for(lambda: whose in reason(), 30), reason())
        self.assertIn("waiting for the scheduler (no GPU is free of other users' jobs", reason())
        os.killpg(p.pid, signal.SIGTERM)
        p.communicate(timeout=30)
        # At once, not at the scheduler's next interval (60 s): a claim let go changes what the
        # queue may use, as a job's end does.
        self.assertTrue(wait_for(lambda: self.other_status(job)["state"] == "SUCCEEDED", 30), self.other_status(job))

    def test_another_users_waiting_job_gets_room_from_an_elastic_job_that_holds_every_gpu(self):
        # Each store schedules its own jobs: an elastic job of one user kept every GPU, and
        # another user's job waited for good. A waiting job now says so in the claims
        # directory, and the other store's scheduler shrinks its jobs for it, to its fair share.
        gate = os.path.join(self.tmp, "gate")
        rank = os.path.join(self.tmp, "rank.sh")
        with open(rank, "w") as f:
            f.write("#!/bin/sh\ntrap 'exit 75' USR1\n"
                    '[ "$RANK" = 0 ] && : > "$DLRUN_RUN_DIR/handles-stop"\n'
                    f"while [ ! -e {gate} ]; do sleep 0.05; done\n")
        os.chmod(rank, 0o755)
        os.makedirs(self.home, exist_ok=True)
        with open(os.path.join(self.home, "config.toml"), "w") as f:
            f.write("[scheduler]\nrestart_seconds = 1\n")
        job_file = os.path.join(self.tmp, "elastic.toml")
        with open(job_file, "w") as f:
            f.write(f'command = ["{rank}"]\n[resources]\ngpus = "1:2"\n')
        r = self.dlrun("submit", "--parsable", job_file)
        self.assertEqual(r.returncode, 0, r.stderr)
        mine = r.stdout.strip()
        mine_status = lambda: json.loads(self.dlrun("status", mine, "--json").stdout)  # noqa: E731
        self.assertTrue(wait_for(lambda: mine_status()["state"] == "RUNNING" and mine_status()["ranks"] == 2, 60),
                        mine_status())
        def claimed():
            names = os.listdir(self.claims) if os.path.isdir(self.claims) else []
            return [n for n in names if n.startswith("dlrun-gpu-")]
        self.assertTrue(wait_for(lambda: len(claimed()) == 2, 60), claimed())  # its supervisor has them
        theirs = self.submit_other('command = ["sh", "-c", "echo ran on $CUDA_VISIBLE_DEVICES"]\n'
                                   '[resources]\ngpus = 1\n')
        self.assertTrue(wait_for(lambda: self.other_status(theirs)["state"] == "SUCCEEDED", 90),
                        (self.other_status(theirs), read(os.path.join(self.home, "scheduler.log"))))
        self.assertIn("other users' jobs wait for GPUs: this store's jobs use at most 1 of the 2 GPUs now",
                      read(os.path.join(self.home, "scheduler.log")))
        self.assertEqual(mine_status()["state"], "RUNNING")
        # Room made, and taken: the elastic job grows back once the other job has ended.
        self.assertTrue(wait_for(lambda: mine_status()["ranks"] == 2, 90), mine_status())
        open(gate, "w").close()
        self.assertTrue(wait_for(lambda: mine_status()["state"] == "SUCCEEDED", 60), mine_status())
        self.assertEqual([n for n in os.listdir(self.claims) if n.startswith("dlrun-want-")], [])

    def test_scheduler_log_says_what_started_a_round_that_moved_nothing(self):
        # A round that another store's claims started said "the queue changed".
        first = self.holding("1", name="first")
        second = self.holding("1", name="second")
        job = self.submit_other('command = ["true"]\n[resources]\ngpus = "2:2"\n[scheduler]\npolicy = "goodput"\n')
        log = os.path.join(self.other_home, "scheduler.log")
        self.assertTrue(wait_for(lambda: "started" in (read(log) or ""), 30), read(log))
        os.killpg(first.pid, signal.SIGTERM)
        first.communicate(timeout=30)
        line = "other users' jobs took or let go of GPUs (1 GPU job): every allocation stays"
        self.assertTrue(wait_for(lambda: line in (read(log) or ""), 30), read(log))
        self.assertNotIn("the queue changed", read(log))
        self.assertEqual(self.other_status(job)["state"], "PENDING")
        os.killpg(second.pid, signal.SIGTERM)
        second.communicate(timeout=30)
        self.assertTrue(wait_for(lambda: self.other_status(job)["state"] == "SUCCEEDED", 30), self.other_status(job))

    def test_a_submitted_jobs_supervisor_claims_its_gpus(self):
        release = os.path.join(self.tmp, "release")
        job = self.submit_other(GPU_JOB.replace('"echo gpus $CUDA_VISIBLE_DEVICES"',
                                                f'"touch {self.tmp}/up-$RANK; while [ ! -e {release} ]; do sleep 0.1; done"'))
        self.assertTrue(wait_for(lambda: all(os.path.exists(os.path.join(self.tmp, f"up-{i}")) for i in (0, 1)), 30))
        r = self.dlrun("local", "--gpus", "1", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("GPU 0 is in use by your dlrun job 1 of DLRUN_HOME=" + self.other_home, r.stderr)
        self.assertIn("--gpus 1: only 0 of the 2 GPUs here are free: 0,1 are held by other jobs", r.stderr)
        status = self.dlrun("status")
        self.assertIn(f"Outside this queue: GPUs 0,1 are in use by your dlrun job 1 of DLRUN_HOME={self.other_home}",
                      status.stdout)
        open(release, "w").close()
        self.assertTrue(wait_for(lambda: self.other_status(job)["state"] == "SUCCEEDED", 60), self.other_status(job))
        self.assertTrue(wait_for(lambda: self.dlrun("local", "--gpus", "2", "true").returncode == 0, 30))


class OtherUsers(DlrunTestCase):
    """The same between two real users (root runs them through setpriv)."""

    def as_user(self, uid, *args, popen=False):
        cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", DLRUN, *args]
        env = dict(self.env, DLRUN_FAKE_GPUS="2", DLRUN_GPU_CLAIMS_DIR=os.path.join(self.tmp, "claims"),
                   DLRUN_HOME=os.path.join(self.tmp, f"home-{uid}"))
        if popen:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                 start_new_session=True)
            self._started = getattr(self, "_started", []) + [p]
            return p
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    def test_another_users_job_keeps_its_gpu_and_is_named(self):
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to act as two users")
        os.chmod(self.tmp, 0o1777)  # sticky, as /tmp: the users' stores are made in it
        if self.as_user(65534, "--version").returncode != 0:
            self.skipTest(f"user 65534 cannot run {DLRUN} (a directory on its path is private)")
        os.mkdir(os.path.join(self.tmp, "claims"))
        os.chmod(os.path.join(self.tmp, "claims"), 0o1777)  # as root makes it (docs/local.md)
        up = os.path.join(self.tmp, "up")
        p = self.as_user(65534, "local", "--gpus", "1", "sh", "-c", f"touch {up}; exec sleep 60", popen=True)
        self.assertTrue(wait_for(lambda: os.path.exists(up), 30))
        r = self.as_user(1, "local", "--gpus", "1", "sh", "-c", "echo gpu $CUDA_VISIBLE_DEVICES")
        self.assertEqual((r.returncode, r.stdout), (0, "[0] gpu 1\n"), r.stderr)
        owner = subprocess.run(["id", "-nu", "65534"], capture_output=True, text=True).stdout.strip()
        self.assertIn(f"GPU 0 is in use by user {owner}'s dlrun job 1 (pid {p.pid}): not chosen", r.stderr)
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate(timeout=30)
        # The claim file user 65534 made is there still; user 1 takes GPU 0 through it.
        r = self.as_user(1, "local", "--gpus", "2", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.count("warning"), 0, r.stderr)

    def test_a_claims_directory_another_user_made_is_warned_about(self):
        # The owner of a sticky directory may remove every file in it: every claim.
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to act as two users")
        os.chmod(self.tmp, 0o1777)  # sticky, as /tmp: the users' stores are made in it
        if self.as_user(65534, "--version").returncode != 0:
            self.skipTest(f"user 65534 cannot run {DLRUN} (a directory on its path is private)")
        r = self.as_user(65534, "local", "--gpus", "1", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("warning", r.stderr)  # its own
        r = self.as_user(1, "local", "--gpus", "1", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"GPU claims: {os.path.join(self.tmp, 'claims')} belongs to uid 65534, who can remove every "
                      "user's claims from it", r.stderr)


if __name__ == "__main__":
    unittest.main()
