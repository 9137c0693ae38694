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

    def test_a_store_a_group_shares_is_refused_and_nothing_is_written(self):
        # Any member could change a job in it to run their command as another member, or as root.
        os.makedirs(self.home)
        os.chmod(self.home, 0o2770)
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(JOB.format(tmp=self.tmp, extra=""))
        for args in (["local", "--nproc", "1", "true"], ["submit", job], ["status"]):
            r = self.dlrun(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(f"{self.home} is shared by group", r.stderr)
            self.assertEqual(r.stderr.count("error"), 1, r.stderr)
        self.assertEqual(os.listdir(self.home), [])
        self.assertEqual(mode(self.home), 0o2770)

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
    """Cancel says CANCELLED only once nothing of the job runs; a store is its user's alone."""
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

    def store_of_user_65534(self):
        """The store of user 65534 (which root made for it), and a directory everyone may write."""
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to act as two users")
        if self.as_user(65534, "--version").returncode != 0:
            self.skipTest(f"user 65534 cannot run {DLRUN} (a directory on its path is private)")
        os.chmod(self.tmp, 0o755)
        os.makedirs(self.home)
        os.chown(self.home, 65534, self.GID)
        os.chmod(self.home, 0o700)
        shared = os.path.join(self.tmp, "w")
        os.makedirs(shared)
        os.chmod(shared, 0o777)
        return shared

    def other_users_job(self):
        """A running job of user 65534, in its own store."""
        return self.submit_sleeper(os.path.join(self.store_of_user_65534(), "pids"), user=65534)

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

    def test_another_user_and_root_are_refused_a_users_store(self):
        job, pids = self.other_users_job()
        try:
            for uid in (1, None):  # another user, and root
                r = self.as_user(uid, "cancel", job)
                self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                self.assertIn(f"{self.home} belongs to user", r.stderr)
                self.assertIn("(uid 65534), not to you", r.stderr)
            self.assertTrue(all(pid_alive(pid) for pid in pids))
            r = self.as_user(65534, "cancel", job)  # its owner may
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual([pid for pid in pids if pid_alive(pid)], [])
        finally:
            kill_quietly(pids)

    def test_root_never_runs_what_a_users_store_says(self):
        # A user who writes a pending job "of root" into their own store: root's dlrun status,
        # whose sweep starts pending jobs of its own user, must not run it.
        out = self.store_of_user_65534()
        job = os.path.join(self.tmp, "quick.toml")
        with open(job, "w") as f:
            f.write('name = "quick"\ncommand = ["true"]\n[resources]\nnproc = 1\n')
        os.chmod(job, 0o644)
        r = self.as_user(65534, "submit", "--wait", job)
        self.assertEqual(r.returncode, 0, r.stderr)

        def plant(owner, marker):
            db = sqlite3.connect(os.path.join(self.home, "jobs.db"))
            row = db.execute("SELECT * FROM jobs WHERE id = 1").fetchone()
            names = [c[0] for c in db.execute("SELECT * FROM jobs LIMIT 0").description]
            values = dict(zip(names, row))
            values.update(id=None, state="PENDING", supervisor_pid=0, owner_uid=owner, submitted_at=values["submitted_at"] - 100,
                          spec_text=values["spec_text"].replace('["true"]', f'["touch", "{marker}"]'))
            db.execute(f"INSERT INTO jobs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                       [values[n] for n in names])
            db.commit()
            db.close()

        # The planted row runs when its owner is the one who looks: the way in works.
        mine = os.path.join(out, "mine")
        plant(65534, mine)
        self.as_user(65534, "status")
        self.assertTrue(wait_for(lambda: os.path.exists(mine), 30), "the planted job of its owner never ran")
        rooted = os.path.join(out, "rooted")
        plant(0, rooted)
        r = self.as_user(None, "status")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("not to you", r.stderr)
        self.as_user(None, "status")
        wait_for(lambda: os.path.exists(rooted), 3)
        self.assertFalse(os.path.exists(rooted), "root ran the job a user's store said was root's")


class PlantedDirectories(DlrunTestCase):
    """A run or log directory another user made first is not written at all."""

    def test_a_log_directory_another_user_made_first_is_refused_and_nothing_is_written(self):
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to act as two users")
        shared = os.path.join(self.tmp, "shared-logs")
        os.makedirs(shared)
        os.chmod(self.tmp, 0o755)
        os.chmod(shared, 0o1777)  # a log directory every user may write into, as /tmp
        victim = os.path.join(self.tmp, "victim.txt")
        with open(victim, "w") as f:
            f.write("mine\n")
        # Job numbers are known in advance: user 65534 makes the first job's log directory, with
        # a link where its output.log goes.
        planted = os.path.join(shared, "1")
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c",
                            f"mkdir -m 777 {planted} && ln -s {victim} {planted}/output.log"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(f'command = ["echo", "secret output"]\nlog_dir = "{shared}"\n[resources]\nnproc = 1\n')
        r = self.dlrun("submit", "--wait", job, timeout=120)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertIn(f"log directory {planted} belongs to user", r.stdout + r.stderr)
        with open(victim) as f:
            self.assertEqual(f.read(), "mine\n")


if __name__ == "__main__":
    unittest.main()
