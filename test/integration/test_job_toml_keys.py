"""Every job.toml key does what docs/job-toml.md says: one row per key, each a job submitted
with it and the effect a user would see (its output, its logs, its state). Issue 18 point 8:
`watchdog` and `log_dir` were accepted and ignored; [env], `checkpoint_dir` and `export_env`
never reached the ranks of a kind "ssh" job on another host (test_run.Submitted covers that
part: it needs other hosts); `dlrun submit --scheduler ssh` failed when the job started."""
import json
import os
import unittest

from harness import PYTHON, read_words, wait_for
from test_jobs import JobsTestCase


def echo(text):
    """A command that prints `text` (expanded by sh) as every rank."""
    return f'command = ["sh", "-c", {json.dumps("echo " + text)}]\n'


class KeysTestCase(JobsTestCase):
    def run_job(self, text, *extra, env=None):
        """Submits the job file `text`, waits for its end; returns (status, output.log)."""
        path = self.job_file(text, f"job-{len(os.listdir(self.tmp))}.toml")
        r = self.dlrun("submit", "--wait", "--parsable", *extra, path, env=env, timeout=120)
        job_id = int(r.stdout.split()[0]) if r.stdout.split() else None
        self.assertIsNotNone(job_id, r.stderr)
        logs = self.dlrun("logs", str(job_id), env=env)
        self.assertEqual(logs.returncode, 0, logs.stderr)
        return self.status(job_id, env=env), logs.stdout

    def rank_log(self, job, rank):
        return self.dlrun("logs", "--rank", str(rank), str(job["id"])).stdout


class LocalKeys(KeysTestCase):
    """Kind "local" (the default): each key, and what it changes."""

    def test_name(self):
        job, _ = self.run_job('name = "nightly"\n' + echo("hi") + "[resources]\nnproc = 1\n")
        self.assertEqual(job["name"], "nightly")
        job, _ = self.run_job(echo("hi") + "[resources]\nnproc = 1\n")
        self.assertEqual(job["name"], "sh")  # the default: the program's file name

    def test_command(self):
        job, out = self.run_job(echo("rank $RANK says hello") + "[resources]\nnproc = 1\n")
        self.assertEqual((job["state"], self.rank_log(job, 0)), ("SUCCEEDED", "rank 0 says hello\n"))

    def test_workdir(self):
        os.makedirs(os.path.join(self.tmp, "sub"))
        job, _ = self.run_job('workdir = "sub"\n' + echo("$(pwd)") + "[resources]\nnproc = 1\n")
        self.assertEqual(self.rank_log(job, 0), os.path.join(self.tmp, "sub") + "\n")

    def test_max_restarts(self):
        flag = os.path.join(self.tmp, "failed-once")
        text = (f'max_restarts = 1\ncommand = ["sh", "-c", "[ -e {flag} ] || {{ touch {flag}; exit 3; }}"]\n'
                "[resources]\nnproc = 1\n")
        job, _ = self.run_job(text)
        self.assertEqual((job["state"], job["restarts"]), ("SUCCEEDED", 1))
        os.remove(flag)
        job, _ = self.run_job(text.replace("max_restarts = 1\n", ""))
        self.assertEqual((job["state"], job["exit_code"]), ("FAILED", 3))

    def test_watchdog(self):
        # A rank that never touches DLRUN_PROGRESS_FILE: failed after the watchdog's seconds.
        job, out = self.run_job('watchdog = 1\ngrace = 0\ncommand = ["sleep", "600"]\n[resources]\nnproc = 1\n')
        self.assertEqual(job["state"], "FAILED", out)
        self.assertIn("rank 0 made no progress for 1 s (the job's watchdog): treating it as failed", out)
        # One that reports its progress runs on past it (a touch every 0.1 s, for three
        # watchdog periods by the clock: a slow machine only touches less often).
        text = ('watchdog = 3\ncommand = ["sh", "-c", "echo $DLRUN_PROGRESS_FILE; end=$(( $(date +%s) + 9 )); '
                'while [ $(date +%s) -lt $end ]; do touch $DLRUN_PROGRESS_FILE; sleep 0.1; done"]\n'
                '[resources]\nnproc = 1\n')
        job, out = self.run_job(text)
        self.assertEqual(job["state"], "SUCCEEDED", out)
        self.assertEqual(self.rank_log(job, 0), os.path.join(job["run_dir"], "progress", "rank-0") + "\n")

    def test_grace(self):
        # The watchdog stops a rank that ignores SIGTERM; grace says how long it has before SIGKILL.
        # The rank's one touch, once its trap is set, starts the watchdog's count after it.
        text = ('grace = 0.5\nwatchdog = 3\ncommand = ["sh", "-c", "trap \'\' TERM; touch $DLRUN_PROGRESS_FILE; '
                'while true; do sleep 0.1; done"]\n[resources]\nnproc = 1\n')
        job, out = self.run_job(text)
        self.assertEqual(job["state"], "FAILED", out)
        self.assertIn("1 rank still running 0.5 s after the stop signal: killing it", out)

    def test_checkpoint_dir(self):
        job, _ = self.run_job('checkpoint_dir = "ckpt"\n' + echo("$DLRUN_CHECKPOINT_DIR") + "[resources]\nnproc = 1\n")
        self.assertEqual(self.rank_log(job, 0), os.path.join(self.tmp, "ckpt") + "\n")
        job, _ = self.run_job(echo("$DLRUN_CHECKPOINT_DIR") + "[resources]\nnproc = 1\n")
        self.assertEqual(self.rank_log(job, 0), os.path.join(job["run_dir"], "checkpoints") + "\n")

    def test_log_dir(self):
        job, out = self.run_job('log_dir = "logs"\n' + echo("rank $RANK") + "[resources]\nnproc = 2\n")
        logs = os.path.join(self.tmp, "logs", str(job["id"]))
        with open(os.path.join(logs, "rank-1.log")) as f:
            self.assertEqual(f.read(), "rank 1\n")
        self.assertIn(f"logs in {logs}", out)  # output.log is there too: dlrun logs read it
        self.assertTrue(os.path.exists(os.path.join(logs, "output.log")))
        self.assertEqual(self.rank_log(job, 1), "rank 1\n")
        self.assertFalse(os.path.exists(os.path.join(job["run_dir"], "rank-1.log")))

    def test_env(self):
        job, _ = self.run_job(echo("$GREETING $COUNT $FLAG") + '[resources]\nnproc = 1\n'
                              '[env]\nGREETING = "hello"\nCOUNT = 3\nFLAG = true\n')
        self.assertEqual(self.rank_log(job, 0), "hello 3 1\n")

    def test_export_env(self):
        env = dict(self.env, MY_TOKEN="t0k3n", MY_OTHER="other")
        text = echo("[$MY_TOKEN] [$MY_OTHER]") + "[resources]\nnproc = 1\n"
        job, _ = self.run_job('export_env = ["MY_TOK*"]\n' + text, env=env)
        self.assertEqual(self.rank_log(job, 0), "[t0k3n] []\n")
        job, _ = self.run_job(text, env=env)
        self.assertEqual(self.rank_log(job, 0), "[] []\n")

    def test_resources_nproc(self):
        job, _ = self.run_job(echo("$RANK/$WORLD_SIZE $DLRUN_MIN_WORLD_SIZE:$DLRUN_MAX_WORLD_SIZE") +
                              "[resources]\nnproc = 3\n")
        self.assertEqual((job["ranks"], self.rank_log(job, 2)), (3, "2/3 3:3\n"))
        job, _ = self.run_job(echo("$RANK/$WORLD_SIZE $DLRUN_MIN_WORLD_SIZE:$DLRUN_MAX_WORLD_SIZE") +
                              '[resources]\nnproc = "1:2"\n')
        self.assertEqual((job["ranks"], self.rank_log(job, 1)), (2, "1/2 1:2\n"))

    def test_resources_gpus(self):
        self.env["DLRUN_FAKE_GPUS"] = "4"
        text = echo("$LOCAL_RANK:$CUDA_VISIBLE_DEVICES:$DLRUN_DEVICE") + "[resources]\n"
        for gpus, seen in (("2", ["0:0:cuda", "1:1:cuda"]), ("[1, 3]", ["0:1:cuda", "1:3:cuda"]),
                           ('"2,0"', ["0:2:cuda", "1:0:cuda"])):
            with self.subTest(gpus=gpus):
                job, _ = self.run_job(text + f"gpus = {gpus}\n")
                self.assertEqual([self.rank_log(job, r).strip() for r in range(2)], seen)
        r = self.dlrun("submit", self.job_file(text + "gpus = [0, 7]\n"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("can never run here: it asks for GPU 7, this machine has 4 GPUs (0 to 3)", r.stderr)

    def test_scheduler_policy(self):
        # An elastic GPU job is the goodput scheduler's by default; with fifo it starts itself.
        self.env["DLRUN_FAKE_GPUS"] = "2"
        text = echo("$WORLD_SIZE") + '[resources]\ngpus = "1:2"\n'
        job, _ = self.run_job(text + '[scheduler]\npolicy = "fifo"\n')
        self.assertEqual((job["state"], self.rank_log(job, 0)), ("SUCCEEDED", "2\n"))
        self.assertFalse(os.path.exists(os.path.join(self.home, "scheduler.log")))
        job, _ = self.run_job(text)
        self.assertEqual(job["state"], "SUCCEEDED")
        with open(os.path.join(self.home, "scheduler.log")) as f:
            self.assertIn(f"job {job['id']} (sh): start 0 -> 2 GPUs", f.read())


class SshKeys(KeysTestCase):
    """Kind "ssh" with this machine's names (no ssh is needed for them: test_run.Submitted
    runs the same keys on other hosts)."""

    def test_kind_hosts_and_the_keys_every_kind_has(self):
        text = ('log_dir = "logs"\ncheckpoint_dir = "ckpt"\n' +
                echo("$RANK/$WORLD_SIZE $DLRUN_JOB_ID $GREETING $DLRUN_CHECKPOINT_DIR") +
                '[env]\nGREETING = "hi"\n[scheduler]\nkind = "ssh"\nhosts = "localhost:1,127.0.0.1:1"\n')
        job, out = self.run_job(text)
        self.assertEqual((job["state"], job["ranks"]), ("SUCCEEDED", 2), out)
        ckpt = os.path.join(self.tmp, "ckpt")
        self.assertIn(f"[127.0.0.1:1] 1/2 {job['id']} hi {ckpt}", out)
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "logs", str(job["id"]), "rank-1.log")))

    def test_hostfile_and_gpu(self):
        self.env["DLRUN_FAKE_GPUS"] = "2"
        with open(os.path.join(self.tmp, "hosts"), "w") as f:
            f.write("localhost slots=2\n")
        job, out = self.run_job(echo("$RANK:$CUDA_VISIBLE_DEVICES") +
                                '[scheduler]\nkind = "ssh"\nhostfile = "hosts"\ngpu = true\n')
        self.assertEqual(job["state"], "SUCCEEDED", out)
        self.assertIn("[localhost:0] 0:0", out)
        self.assertIn("[localhost:1] 1:1", out)

    def test_watchdog(self):
        job, out = self.run_job('watchdog = 1\ngrace = 0\ncommand = ["sleep", "600"]\n'
                                '[scheduler]\nkind = "ssh"\nhosts = "localhost:1"\n')
        self.assertEqual(job["state"], "FAILED", out)
        self.assertIn("made no progress for 1 s", out)

    def test_scheduler_flag_makes_it_ssh(self):
        # `dlrun submit --scheduler ssh` on a file without a kind: the job must run as one.
        job, out = self.run_job(echo("$RANK/$WORLD_SIZE") + '[scheduler]\nhosts = "localhost:2"\n',
                                "--scheduler", "ssh")
        self.assertEqual(job["state"], "SUCCEEDED", out)
        self.assertIn("[localhost:1] 1/2", out)


class SlurmKeys(KeysTestCase):
    """Kind "slurm": what each key puts in the sbatch script (test_slurm runs them on Slurm)."""

    def test_every_key_reaches_the_script(self):
        text = ('name = "big"\nworkdir = "."\nmax_restarts = 2\ngrace = 7\nwatchdog = 30\nlog_dir = "logs"\n'
                'checkpoint_dir = "ckpt"\ncommand = ["./train"]\n[env]\nA = "b"\n'
                '[scheduler]\nkind = "slurm"\npartition = "gpu"\nnodes = 2\ngpus_per_node = 4\n'
                'time_limit = "1:00:00"\naccount = "lab"\nsbatch_options = ["--qos=high"]\n')
        # --dry-run submits nothing: --wait and --parsable with it are refused, not ignored.
        for flag in ("--wait", "--parsable"):
            refused = self.dlrun("submit", "--dry-run", flag, self.job_file(text))
            self.assertEqual(refused.returncode, 2, refused.stderr)
            self.assertTrue(f"--dry-run excludes {flag}" in refused.stderr or
                            f"{flag} excludes --dry-run" in refused.stderr, refused.stderr)
        r = self.dlrun("submit", "--dry-run", self.job_file(text))
        self.assertEqual(r.returncode, 0, r.stderr)
        script = r.stdout
        for line in ("#SBATCH --job-name=big", "#SBATCH --nodes=2", "#SBATCH --gpus-per-node=4",
                     "#SBATCH --partition=gpu", "#SBATCH --time=1:00:00", "#SBATCH --account=lab",
                     "#SBATCH --qos=high", f"#SBATCH --chdir={self.tmp}",
                     f"#SBATCH --output={self.tmp}/logs/ID/output.log", "export A=b",
                     f"export DLRUN_CHECKPOINT_DIR={self.tmp}/ckpt"):
            self.assertIn(line + "\n", script)
        exec_line = script.splitlines()[-1]
        for words in ("--grace 7", "--max-restarts 2", "--watchdog 30", f"--log-dir {self.tmp}/logs/ID",
                      "--gpu --ranks-per-node 4", "-- ./train"):
            self.assertIn(words, exec_line)


if __name__ == "__main__":
    unittest.main()
