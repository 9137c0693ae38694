"""What one user of a machine can learn or do to another's jobs (docs/security.md): dlrun's
own files are private whatever the umask, a submitted job's stored environment holds no
secrets it was not given, cancel tells the truth."""
import glob
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import unittest

from harness import DLRUN, DlrunTestCase, kill_quietly, pid_alive, read_pids, wait_for

JOB = '''name = "private"
command = ["sh", "-c", "umask > {tmp}/umask.$DLRUN_JOB_ID; echo ${{MY_API_TOKEN:-unset}} ${{HF_TOKEN:-unset}} ${{PATH:+path}} > {tmp}/env.$DLRUN_JOB_ID"]
{extra}
[resources]
nproc = 1
'''


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


class PrivateFiles(DlrunTestCase):
    def run_with_umask(self, umask, *args, env=None):
        # The umask a careless user has: dlrun's files must not follow it.
        return subprocess.run(["sh", "-c", f'umask {umask}; exec "$@"', "sh", *args], capture_output=True,
                              text=True, env=env or self.env, timeout=120)

    def private_tree(self, top):
        """Every directory 0700 and file 0600 below `top` (symlinks aside)."""
        wrong = []
        for root, dirs, files in os.walk(top):
            for d in dirs:
                p = os.path.join(root, d)
                if not os.path.islink(p) and mode(p) != 0o700:
                    wrong.append((p, oct(mode(p))))
            for f in files:
                p = os.path.join(root, f)
                if not os.path.islink(p) and mode(p) != 0o600:
                    wrong.append((p, oct(mode(p))))
        return wrong

    def test_store_run_directories_and_logs_are_private_whatever_the_umask(self):
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(JOB.format(tmp=self.tmp, extra=""))
        r = self.run_with_umask("000", DLRUN, "submit", "--wait", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = self.run_with_umask("000", DLRUN, "local", "--nproc", "2", "sh", "-c", "echo hi; umask")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(mode(self.home), 0o700)
        self.assertEqual(mode(os.path.join(self.home, "jobs.db")), 0o600)
        self.assertEqual(self.private_tree(self.home), [])
        # The ranks keep the user's own umask for their files.
        with open(os.path.join(self.tmp, "umask.1")) as f:
            self.assertEqual(f.read().strip(), "0000")
        self.assertIn("0000", r.stdout)

    def test_a_home_an_older_dlrun_left_open_is_closed(self):
        os.makedirs(self.home)
        os.chmod(self.home, 0o755)
        r = self.dlrun("status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(mode(self.home), 0o700)
        os.chmod(self.home, 0o775)  # what umask 002 (Debian's default for users) made of it
        self.dlrun("status")
        self.assertEqual(mode(self.home), 0o700)
        os.chmod(os.path.join(self.home, "jobs.db"), 0o644)
        self.dlrun("status")
        self.assertEqual(mode(os.path.join(self.home, "jobs.db")), 0o600)

    def test_a_home_shared_on_purpose_keeps_its_group(self):
        os.makedirs(self.home)
        os.chmod(self.home, 0o2770)
        r = self.run_with_umask("077", DLRUN, "local", "--nproc", "1", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(mode(self.home), 0o2770)
        run = [d for d in glob.glob(os.path.join(self.home, "runs", "*")) if not os.path.islink(d)][0]
        self.assertEqual(mode(run) & 0o070, 0o070)

    def test_the_store_keeps_only_the_environment_a_job_needs(self):
        env = dict(self.env, MY_API_TOKEN="s3cret-token-1", HF_TOKEN="s3cret-token-2")
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(JOB.format(tmp=self.tmp, extra=""))
        r = self.dlrun("submit", "--wait", job, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(job, "w") as f:
            f.write(JOB.format(tmp=self.tmp, extra='export_env = ["MY_API_*"]'))
        r = self.dlrun("submit", "--wait", job, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "env.1")) as f:
            self.assertEqual(f.read().split(), ["unset", "unset", "path"])
        with open(os.path.join(self.tmp, "env.2")) as f:
            self.assertEqual(f.read().split(), ["s3cret-token-1", "unset", "path"])
        stored = b""
        for path in glob.glob(os.path.join(self.home, "jobs.db*")):
            with open(path, "rb") as f:
                stored += f.read()
        self.assertNotIn(b"s3cret-token-2", stored)

    def test_export_env_refuses_what_is_no_name(self):
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(JOB.format(tmp=self.tmp, extra='export_env = ["A B", "*X"]'))
        r = self.dlrun("submit", job)
        self.assertEqual(r.returncode, 2)
        self.assertIn("'export_env' items are variable names", r.stderr)


class Cancel(DlrunTestCase):
    """Cancel says CANCELLED only once nothing of the job runs, and only a job's owner (or
    root) may cancel it in a store shared on purpose."""
    GID = 4242

    def submit_sleeper(self, pidfile, user=None):
        job = os.path.join(self.tmp, "sleeper.toml")
        with open(job, "w") as f:
            f.write("name = \"sleeper\"\ngrace = 1\n"
                    f"command = [\"sh\", \"-c\", \"setsid sleep 1000 & echo $! > {pidfile}; echo $$ >> {pidfile}; wait\"]\n"
                    "[resources]\nnproc = 1\n")
        os.chmod(job, 0o644)
        r = self.as_user(user, "submit", "--parsable", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(wait_for(lambda: len(read_pids(pidfile)) == 2, 30), "the job did not start")
        return r.stdout.strip(), read_pids(pidfile)

    def shared_store_job(self):
        """A store shared on purpose by group 4242, and a running job of user 65534 in it."""
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to act as two users")
        if self.as_user(65534, "--version").returncode != 0:
            self.skipTest(f"user 65534 cannot run {DLRUN} (a directory on its path is private)")
        os.chmod(self.tmp, 0o755)
        os.makedirs(self.home)
        os.chown(self.home, 0, self.GID)
        os.chmod(self.home, 0o2770)
        shared = os.path.join(self.tmp, "w")
        os.makedirs(shared)
        os.chmod(shared, 0o777)
        return self.submit_sleeper(os.path.join(shared, "pids"), user=65534)

    def as_user(self, uid, *args):
        prefix = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={self.GID}", "--clear-groups"]
        return subprocess.run(prefix + [DLRUN, *args], capture_output=True, text=True, env=self.env, timeout=120)

    def test_force_cancel_returns_once_nothing_of_the_job_runs(self):
        pidfile = os.path.join(self.tmp, "pids")
        job, pids = self.submit_sleeper(pidfile)
        try:
            r = self.dlrun("cancel", "--force", job)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("CANCELLED", r.stdout)
            # At once: the process that left the rank's group (setsid) too.
            self.assertEqual([pid for pid in pids if pid_alive(pid)], [])
        finally:
            kill_quietly(pids)

    def test_another_user_cannot_cancel_a_job_and_nothing_is_recorded(self):
        job, pids = self.shared_store_job()
        try:
            r = self.as_user(1, "cancel", job)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("is user 65534's: only they (or root) may cancel it", r.stderr)
            self.assertTrue(all(pid_alive(pid) for pid in pids))
            r = self.as_user(1, "status", job)
            self.assertEqual(r.returncode, 5, r.stdout)  # RUNNING, as it is
            r = self.dlrun("cancel", job)  # root may
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual([pid for pid in pids if pid_alive(pid)], [])
        finally:
            kill_quietly(pids)

    def test_another_users_lost_job_is_theirs_to_recover(self):
        # A sweep by user 1 must not restart user 65534's job as user 1, nor judge it.
        job, pids = self.shared_store_job()
        try:
            db = sqlite3.connect(os.path.join(self.home, "jobs.db"))
            supervisor = db.execute("SELECT supervisor_pid FROM jobs WHERE id = ?", (int(job),)).fetchone()[0]
            db.close()
            os.kill(supervisor, signal.SIGKILL)
            self.assertTrue(wait_for(lambda: not pid_alive(supervisor), 10))
            r = self.as_user(1, "status", job)
            self.assertEqual(r.returncode, 5, r.stdout + r.stderr)  # still RUNNING: not user 1's to judge
            r = self.as_user(65534, "status", job)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)  # its owner's sweep: FAILED, lost
        finally:
            kill_quietly(pids)


if __name__ == "__main__":
    unittest.main()
