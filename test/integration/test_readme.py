"""The README's dlrun commands run as written (issue 18), so that the README cannot drift from
the code. Each `dlrun …` line of its shell blocks runs for real, in a scratch directory, with
stand-ins only where the README names things this machine has not got: ./train, train.py,
pkg.train and the Fashion-MNIST example are a small script; 4 GPUs are DLRUN_FAKE_GPUS;
node1 and node2 are localhost; the Slurm cluster is --dry-run (the sbatch script); JOB and 12 are the numbers the
commands before printed. A README line this test cannot place fails it."""

import json
import os
import re
import shlex
import unittest

from harness import SOURCE_DIR, DlrunTestCase, wait_for

TRAIN = """#!/bin/sh
touch "$DLRUN_RUN_DIR/handles-stop"
echo "train rank $RANK of $WORLD_SIZE"
trap 'exit 75' USR1 TERM INT
case " $* " in
  *" --adaptive "*)  # what AdaptiveBatch's rank 0 writes, for `dlrun history`
    [ "$RANK" = 0 ] && printf '%s\n%s\n' \
      '{"time":1,"step":10,"replicas":2,"global_batch":64,"samples_per_sec":100,"goodput":100,"noise_scale":50}' \
      '{"time":2,"step":20,"replicas":2,"global_batch":128,"samples_per_sec":180,"goodput":150,"noise_scale":90}' \
      > "$DLRUN_RUN_DIR/metrics.jsonl";;
esac
if [ -n "$README_HOLD" ]; then
  touch "$DLRUN_RUN_DIR/up-$RANK"
  while [ ! -e "$README_HOLD" ]; do sleep 0.05; done
fi
"""
TRAIN_PY = "import os\nprint('train.py rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"


def readme_commands():
    """(line number, command) of every dlrun command in the README's shell blocks."""
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        lines = f.read().splitlines()
    commands, in_block, shell = [], False, False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            in_block, shell = not in_block, line.strip() in ("```", "```sh", "```bash")
            continue
        if in_block and shell and line.startswith("dlrun "):
            commands.append((number, line.split(" #", 1)[0].strip()))
    return commands


class ReadmeCommands(DlrunTestCase):
    def setUp(self):
        super().setUp()
        self.work = os.path.join(self.tmp, "work")
        os.makedirs(os.path.join(self.work, "pkg"))
        for name, text, mode in [("train", TRAIN, 0o755), ("train.py", TRAIN_PY, 0o644),
                                 ("pkg/__init__.py", "", 0o644), ("pkg/train.py", TRAIN_PY, 0o644),
                                 ("hosts", "localhost slots=2\n", 0o644),
                                 ("job.toml", 'command = ["./train"]\n[resources]\nnproc = 1\n', 0o644),
                                 ("slurm-job.toml", 'command = ["./train"]\n[scheduler]\nkind = "slurm"\nnodes = 1\n'
                                  'ranks_per_node = 2\n', 0o644)]:
            path = os.path.join(self.work, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, mode)
        self.env["DLRUN_FAKE_GPUS"] = "4"
        self.env["WANDB_API_KEY"] = "readme"  # what the README's -x line sends
        self.last_job = None

    def words(self, command):
        words = shlex.split(command)
        words = ["./train" if w == "build/examples/fashion_mnist/fashion_mnist" else w for w in words]
        words = ["localhost:4" if w == "node1:4,node2:4" else w.replace("$CI_JOB_ID", "7") for w in words]
        if words[:3] == ["dlrun", "submit", "--scheduler"] and "slurm" in words:
            words.insert(2, "--dry-run")
        if self.last_job is not None:
            words = [str(self.last_job) if w in ("12", "JOB") else w for w in words]
        return words[1:]

    def run_line(self, number, command):
        if "; dlrun resize" in command:
            return self.run_resize_line(number, command)
        r = self.dlrun(*self.words(command), cwd=self.work, timeout=120)
        self.assertEqual(r.returncode, 0, f"README.md:{number}: {command}\n{r.stdout}\n{r.stderr}")
        found = re.search(r"^dlrun: job (\d+):", r.stderr, re.M) or re.search(r"^Submitted job (\d+)", r.stdout, re.M)
        if found:
            self.last_job = int(found.group(1))
        return r

    def run_resize_line(self, number, command):
        first, second = command.split("; ")
        hold = os.path.join(self.tmp, "release")
        p = self.start(*self.words(first), cwd=self.work, env=dict(self.env, README_HOLD=hold))
        self.assertTrue(wait_for(lambda: json.loads(self.dlrun("status", "--json").stdout or "[]") and
                                 any(j["state"] == "RUNNING" for j in json.loads(self.dlrun("status", "--json").stdout)), 30))
        job = [j for j in json.loads(self.dlrun("status", "--json").stdout) if j["state"] == "RUNNING"][0]
        run_dir = job["run_dir"]
        self.assertTrue(wait_for(lambda: all(os.path.exists(f"{run_dir}/up-{r}") for r in range(job["ranks"])), 30))
        self.last_job = job["id"]
        r = self.dlrun(*self.words(second), cwd=self.work)
        self.assertEqual(r.returncode, 0, f"README.md:{number}: {second}\n{r.stdout}\n{r.stderr}")
        open(hold, "w").close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, f"README.md:{number}: {first}\n{out}\n{err}")

    def test_every_dlrun_command_of_the_readme_runs(self):
        commands = readme_commands()
        self.assertGreater(len(commands), 15)
        seen = set()
        for number, command in commands:
            with self.subTest(line=number, command=command):
                self.run_line(number, command)
                seen.update(part.split()[1] for part in command.split("; "))
        self.assertTrue({"local", "run", "submit", "status", "logs", "cancel", "resize", "clean", "history"} <= seen,
                        seen)
        # What the commands left: every run a job, the named one resumed under its number.
        jobs = json.loads(self.dlrun("status", "--all", "--json").stdout)
        self.assertTrue(all(j["state"] in ("SUCCEEDED", "CANCELLED") for j in jobs), jobs)
        self.assertEqual(sum(j["name"] == "mnist" for j in jobs), 1)


if __name__ == "__main__":
    unittest.main()
