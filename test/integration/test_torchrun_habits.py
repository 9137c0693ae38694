"""What a torchrun user types and expects: `train.py` run through python3, `-m module`,
`--nproc_per_node`, torchrun's environment variables, the traceback a rank's @record wrote,
and usage errors that say what was meant."""
import json
import os
import re
import subprocess
import unittest

from harness import PYTHON, DlrunTestCase, wait_for

TORCHELASTIC_KEYS = ["RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
                     "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                     "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_ERROR_FILE"]


def rank_lines(stdout):
    """{rank: [lines]} from output prefixed [RANK] or [HOST:RANK]."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^\[(?:[^\]]*:)?(\d+)\] (.*)$", line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def torch_importable():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed.elastic.multiprocessing.errors"],
                       capture_output=True, timeout=120)
    return r.returncode == 0


class TorchrunTestCase(DlrunTestCase):
    """Runs in a scratch directory whose bin/python3 (the test's Python) is first in PATH."""

    def setUp(self):
        super().setUp()
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        os.symlink(PYTHON, os.path.join(self.bin, "python3"))
        self.env["PATH"] = self.bin + os.pathsep + self.env.get("PATH", "")

    def write(self, name, text, mode=0o644):
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        return path

    def run_here(self, *args, **kwargs):
        return self.dlrun(*args, cwd=self.tmp, **kwargs)

    def assert_usage_error(self, r, message):
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("dlrun: error: "), lines[0])
        self.assertIn(message, lines[0])


SHOW = "import os, sys\nprint(sys.executable, os.environ['RANK'], *sys.argv[1:])\n"


class PythonPrograms(TorchrunTestCase):
    def test_script_runs_with_python3_from_path(self):
        self.write("train.py", SHOW)
        r = self.run_here("local", "--nproc", "2", "train.py", "--lr", "0.1")
        self.assertEqual(r.returncode, 0, r.stderr)
        python = os.path.join(self.bin, "python3")
        self.assertEqual(sorted(r.stdout.splitlines()), [f"[0] {python} 0 --lr 0.1", f"[1] {python} 1 --lr 0.1"])
        self.assertIn("2 ranks of train.py,", r.stderr)

    def test_print_reaches_the_log_as_it_happens(self):
        # As under torchrun (python -u): a rank's print() is in its log before the rank ends
        # (it waited in Python's buffer until exit, and was lost when the rank was killed).
        go = os.path.join(self.tmp, "go")
        self.write("train.py", "import os, time\nprint('loaded data')\n"
                               f"while not os.path.exists({go!r}): time.sleep(0.05)\n")
        env = dict(self.env)
        env.pop("PYTHONUNBUFFERED", None)
        p = self.start("local", "--nproc", "1", "--run-dir", self.run_dir(), "train.py", cwd=self.tmp, env=env)
        log = os.path.join(self.run_dir(), "rank-0.log")
        try:
            def printed():
                if not os.path.exists(log):
                    return False
                with open(log) as f:
                    return "loaded data" in f.read()
            self.assertTrue(wait_for(printed, 60), "the rank's print() waited in its buffer")
        finally:
            open(go, "w").close()
        self.assertEqual(p.wait(timeout=60), 0)
        # Python's buffering, where the user asks for it.
        env["PYTHONUNBUFFERED"] = ""
        self.write("show.py", "import os\nprint(repr(os.environ['PYTHONUNBUFFERED']))\n")
        r = self.dlrun("local", "--nproc", "1", "show.py", cwd=self.tmp, env=env)
        self.assertEqual(r.stdout, "[0] ''\n", r.stderr)

    def test_a_module_the_python_lacks_names_the_python_that_ran(self):
        # PATH's python3 may be a virtualenv's or pyenv's, without torch: say which one ran.
        self.write("train.py", "import dlrun_no_such_module.sub\n")
        r = self.run_here("local", "--nproc", "2", "train.py")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(f"(the ranks ran {os.path.join(self.bin, 'python3')}, which cannot import "
                      "'dlrun_no_such_module': install it there, or put the Python that has it before the script, "
                      "e.g. /usr/bin/python3 train.py)", r.stderr)

    def test_dot_slash_script_without_shebang(self):
        self.write("train.py", SHOW, mode=0o755)  # executable, but no #! line
        r = self.run_here("local", "--nproc", "2", "./train.py", "x")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(line.split()[-2] for line in r.stdout.splitlines()), ["0", "1"])
        self.assertNotIn("Exec format error", r.stderr)

    def test_a_scripts_own_interpreter_line_is_not_used(self):
        # As torchrun: python3 runs it whatever its #! line says (a stale one named an interpreter
        # that was not there: exit 70; one without torch failed).
        self.write("tool.py", "#!/opt/gone/bin/python\n" + SHOW, mode=0o755)
        r = self.run_here("local", "--nproc", "1", "./tool.py", "x")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"[0] {os.path.join(self.bin, 'python3')} 0 x\n")
        # ...unless --no_python says so, as torchrun's: the script runs as it is (it was refused,
        # with advice to drop it that ran another Python).
        self.write("own.py", "#!/bin/sh\necho \"own $1\"\n", mode=0o755)
        for name in ("./own.py", "own.py"):  # a bare name is the file here, as for python3
            r = self.run_here("local", "--nproc", "1", "--no_python", name, "x")
            self.assertEqual((r.returncode, r.stdout), (0, "[0] own x\n"), r.stderr)
        self.assertIn("own.py", self.dlrun("status", "--json").stdout)
        r = self.run_here("local", "--nproc", "1", "--no-python", "-m", "own")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("-m and --no-python", r.stderr)

    def test_a_python_script_without_py_is_told_to_run_with_python3(self):
        self.write("train", "import os\nprint(os.environ['RANK'])\n", mode=0o755)
        r = self.run_here("local", "--nproc", "1", "./train")
        self.assert_usage_error(r, "program './train' reads as a Python script, but its name does not end in .py and "
                                   "it has no #! line, so exec cannot start it: put the interpreter before it "
                                   "(python3 ./train), or name it with .py")

    def test_script_without_interpreter_says_how_to_name_one(self):
        # Before anything starts, as bad input (it was exit 70, a job recorded FAILED, and a
        # submitted one queued to fail when it started).
        self.write("train", "echo hi\n", mode=0o755)
        r = self.run_here("local", "--nproc", "1", "./train")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("dlrun: error: program './train' is a script without a #! line, which exec cannot start: begin "
                      "it with one such as #!/bin/sh, or put the interpreter before it (sh ./train)", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.home, "runs", "1")))
        job = self.write("job.toml", 'command = ["./train"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("submit", job)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"program '{self.tmp}/train' is a script without a #! line", r.stderr)
        self.assertEqual(self.dlrun("status", "--all").stdout.count("\n"), 1)  # the header alone

    def test_torchruns_one_machine_options_are_taken(self):
        # torchrun --standalone --nnodes=1 --nproc_per_node=2 …, PyTorch's own example (it was
        # "unknown option '--standalone'").
        r = self.run_here("local", "--standalone", "--nnodes=1", "--node_rank", "0", "--nproc_per_node=2",
                          "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--rdzv_id=x",
                          "--monitor_interval", "1", "-q", "sh", "-c", "echo $RANK $WORLD_SIZE $TORCHELASTIC_RUN_ID")
        # --rdzv_id names the run for the ranks, as under torchrun (it was taken and dropped).
        self.assertEqual((r.returncode, sorted(r.stdout.splitlines())), (0, ["[0] 0 2 x", "[1] 1 2 x"]), r.stderr)
        self.assert_usage_error(self.run_here("local", "--nnodes", "2", "--nproc", "2", "true"),
                                "--nnodes 2: dlrun local runs on this machine; for several, dlrun run --hosts")
        self.assert_usage_error(self.run_here("local", "--node_rank=1", "--nproc", "2", "true"),
                                "--node_rank 1: dlrun local runs on one machine, node 0")

    def test_explicit_python3_still_works(self):
        self.write("train.py", SHOW)
        r = self.run_here("local", "--nproc", "1", "python3", "-u", "train.py", "a")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, f"[0] {os.path.join(self.bin, 'python3')} 0 a\n")
        # The job is the script's, not the interpreter's (it was "python3" for every such job).
        self.assertIn("1 rank of train.py,", r.stderr)
        self.assertEqual(json.loads(self.run_here("status", "--json").stdout)[-1]["name"], "train.py")

    def test_missing_script_and_program_are_named(self):
        self.assert_usage_error(self.run_here("local", "--nproc", "2", "trian.py"),
                                "Python script 'trian.py' not found in this directory nor in PATH")
        self.write("train", "#!/bin/sh\n", mode=0o755)
        self.assert_usage_error(self.run_here("local", "--nproc", "2", "train"),
                                "program 'train' not found in PATH; to run the one in this directory, write ./train")

    def test_module(self):
        self.write("pkg/__init__.py", "")
        self.write("pkg/train.py", "import os, sys\nprint('module', os.environ['RANK'], *sys.argv[1:])\n")
        r = self.run_here("local", "--nproc", "2", "-m", "pkg.train", "--epochs", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[0] module 0 --epochs 3", "[1] module 1 --epochs 3"])
        self.assertIn("2 ranks of python3 -m pkg.train,", r.stderr)
        self.assert_usage_error(self.run_here("local", "--nproc", "2", "--module"), "-m: no module given")

    def test_submitted_job_runs_a_script(self):
        self.write("train.py", SHOW)
        job = self.write("job.toml", 'command = ["train.py", "a"]\n[resources]\nnproc = 2\n')
        env = dict(self.env, DLRUN_CPU_SLOTS="4")
        r = self.dlrun("submit", "--wait", "--parsable", job, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        for rank in range(2):
            logs = self.dlrun("logs", r.stdout.strip(), "--rank", str(rank), env=env)
            self.assertEqual(logs.stdout, f"{os.path.join(self.bin, 'python3')} {rank} a\n")
        missing = self.write("missing.toml", 'command = ["trian.py"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("submit", missing, env=env)
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"Python script 'trian.py' not found in {self.tmp} nor in PATH", r.stderr)

    def test_run_over_hosts_finds_the_script_as_local_does(self):
        self.write("train.py", SHOW)
        r = self.run_here("run", "--hosts", "localhost:2", "train.py", "b")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(line.split()[-2:] for line in r.stdout.splitlines()), [["0", "b"], ["1", "b"]])
        self.write("pkg/__init__.py", "")
        self.write("pkg/train.py", "import os\nprint('module', os.environ['RANK'])\n")
        r = self.run_here("run", "--hosts", "localhost:1", "-m", "pkg.train")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[localhost:0] module 0\n")


class TorchrunOptions(TorchrunTestCase):
    def test_nproc_per_node_spellings(self):
        for args in (["--nproc_per_node", "2"], ["--nproc-per-node", "2"], ["--nproc_per_node=2"]):
            r = self.run_here("local", *args, "sh", "-c", "echo $WORLD_SIZE")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(r.stdout.splitlines()), ["[0] 2", "[1] 2"])

    def test_nproc_per_node_gpu_cpu_and_auto(self):
        # torchrun's counts by device were refused as "expected a count N".
        show = ["sh", "-c", "echo $WORLD_SIZE ${CUDA_VISIBLE_DEVICES-none} $LOCAL_RANK"]
        fake = {**self.env, "DLRUN_FAKE_GPUS": "2"}
        for count in ("gpu", "auto"):
            r = self.dlrun("local", "--nproc_per_node", count, *show, env=fake, cwd=self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(r.stdout.splitlines()), ["[0] 2 0,1 0", "[1] 2 0,1 1"])  # torchrun's binding
        cores = len(os.sched_getaffinity(0))
        no_gpu = {**self.env, "DLRUN_FAKE_GPUS": "0"}
        for count in ("cpu", "auto"):
            r = self.dlrun("local", "--nproc_per_node", count, *show, env=no_gpu, cwd=self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(len(r.stdout.splitlines()), cores)
            self.assertIn(f"[0] {cores} none 0", r.stdout)
        r = self.dlrun("local", "--nproc_per_node", "gpu", *show, env=no_gpu, cwd=self.tmp)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--nproc_per_node gpu: no GPU here (DLRUN_FAKE_GPUS=0); --nproc N starts N CPU ranks", r.stderr)

    def test_other_underscore_spellings(self):
        r = self.run_here("local", "--nproc", "1", "--master_addr", "127.0.0.1", "--max_restarts", "1",
                          "sh", "-c", "echo $MASTER_ADDR $TORCHELASTIC_MAX_RESTARTS")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[0] 127.0.0.1 1\n")

    def test_help_lists_the_dash_spellings(self):
        r = self.dlrun("local", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("--nproc,--nproc-per-node N|MIN:MAX", r.stdout)
        self.assertIn("-m,--module", r.stdout)


class TorchelasticEnvironment(TorchrunTestCase):
    def test_each_rank_gets_torchruns_variables(self):
        self.write("env.py", "import json, os, sys\n"
                             "if os.environ['DLRUN_RESTART_COUNT'] == '0': sys.exit(1)\n"
                             f"print(json.dumps({{k: os.environ.get(k) for k in {TORCHELASTIC_KEYS!r}}}))\n")
        run_dir = self.run_dir()
        r = self.run_here("local", "--nproc", "2", "--max-restarts", "2", "--run-dir", run_dir, "env.py")
        self.assertEqual(r.returncode, 0, r.stderr)
        job = re.search(r"^dlrun: job (\S+):", r.stderr, re.M).group(1)
        envs = {rank: json.loads(lines[0]) for rank, lines in rank_lines(r.stdout).items()}
        self.assertEqual(sorted(envs), [0, 1])
        for rank, e in envs.items():
            self.assertEqual(e, {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                                 "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default", "ROLE_RANK": str(rank),
                                 "ROLE_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": job,
                                 "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_MAX_RESTARTS": "2",
                                 "TORCHELASTIC_ERROR_FILE": os.path.join(run_dir, f"rank-{rank}.error.json")})

    def test_hosts_of_dlrun_run_are_torchruns_groups(self):
        r = self.run_here("run", "--hosts", "localhost:1,127.0.0.1:2", "--max-restarts", "3", "sh", "-c",
                          "echo $GROUP_RANK $GROUP_WORLD_SIZE $LOCAL_WORLD_SIZE $ROLE_RANK $TORCHELASTIC_MAX_RESTARTS")
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = sorted(line.split("] ", 1)[1] for line in r.stdout.splitlines())
        self.assertEqual(rows, ["0 2 1 0 3", "1 2 2 1 3", "1 2 2 2 3"])


RECORDED = """import os, sys
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    if os.environ["RANK"] == "1":
        sys.stderr = open(os.devnull, "w")  # only the error file tells what happened
        raise ValueError("bad batch size 7 on rank 1")

if __name__ == "__main__":
    main()
"""


@unittest.skipUnless(torch_importable(), f"torch.distributed.elastic is not importable by {PYTHON}")
class ErrorFile(TorchrunTestCase):
    def test_recorded_exception_is_reported(self):
        self.write("train.py", RECORDED)
        run_dir = self.run_dir()
        r = self.run_here("local", "--nproc", "2", "--run-dir", run_dir, "train.py", timeout=180)
        self.assertEqual(r.returncode, 1, r.stderr)
        error_file = os.path.join(run_dir, "rank-1.error.json")
        self.assertIn(f"dlrun: error: rank 1 exited with code 1: ValueError: bad batch size 7 on rank 1; its traceback "
                      f"(from {error_file}; all its output in {os.path.join(run_dir, 'rank-1.log')}):", r.stderr)
        report, hint = r.stderr.split("its traceback (from", 1)[1].split("\ndlrun: job ", 1)
        self.assertIn("'dlrun local --resume ", hint)  # how to run it again, after the report
        self.assertIn('\n  |     raise ValueError("bad batch size 7 on rank 1")\n', report)
        self.assertTrue(report.rstrip("\n").endswith("\n  | ValueError: bad batch size 7 on rank 1"), report)

    def test_submitted_jobs_reason_names_the_exception(self):
        self.write("train.py", RECORDED)
        job = self.write("job.toml", 'command = ["train.py"]\n[resources]\nnproc = 2\n')
        env = dict(self.env, DLRUN_CPU_SLOTS="4")
        r = self.dlrun("submit", "--wait", "--parsable", job, env=env, timeout=180)
        self.assertEqual(r.returncode, 1, r.stderr)
        status = json.loads(self.dlrun("status", "--json", r.stdout.strip(), env=env).stdout)
        self.assertEqual(status["reason"], "rank 1 exited with code 1: ValueError: bad batch size 7 on rank 1")

    def test_an_earlier_attempts_error_file_is_not_reported_again(self):
        self.write("train.py", RECORDED.replace('    if os.environ["RANK"] == "1":',
                                                '    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "1":\n'
                                                '        os._exit(3)\n'
                                                '    if os.environ["RANK"] == "1":'))
        r = self.run_here("local", "--nproc", "2", "--max-restarts", "1", "train.py", timeout=180)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("rank 1 exited with code 1: ValueError: bad batch size 7 on rank 1; its traceback", r.stderr)
        self.assertRegex(r.stderr, r"rank \d exited with code 3; it wrote nothing to stderr")
        self.assertNotIn("exited with code 3: ValueError", r.stderr)

    def test_torch_sees_a_torchelastic_launch(self):
        self.write("check.py", "import torch.distributed as dist\nprint(dist.is_torchelastic_launched())\n")
        r = self.run_here("local", "--nproc", "1", "check.py", timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "[0] True\n")


class UsageErrors(TorchrunTestCase):
    def test_misspelt_command_gets_a_suggestion(self):
        for word, meant in (("lcoal", "local"), ("stauts", "status"), ("sbumit", "submit"), ("canel", "cancel")):
            self.assert_usage_error(self.dlrun(word, "1"),
                                    f"unknown command '{word}' (did you mean '{meant}'?); see 'dlrun --help'")
        self.assert_usage_error(self.dlrun("frobnicate"), "unknown command 'frobnicate'; see 'dlrun --help'")

    def test_every_command_names_an_unknown_option_and_the_closest_one(self):
        cases = [
            (["local", "--nprocs", "2", "true"], "unknown option '--nprocs' (did you mean '--nproc'?)", "local"),
            (["run", "--host", "a:1", "true"], "unknown option '--host' (did you mean '--hosts'?)", "run"),
            (["status", "--jsn"], "unknown option '--jsn' (did you mean '--json'?)", "status"),
            (["logs", "--folow", "1"], "unknown option '--folow' (did you mean '--follow'?)", "logs"),
            (["submit", "--wiat", "job.toml"], "unknown option '--wiat' (did you mean '--wait'?)", "submit"),
            (["cancel", "--forec"], "unknown option '--forec' (did you mean '--force'?)", "cancel"),
            (["init", "--froce", "dir"], "unknown option '--froce' (did you mean '--force'?)", "init"),
            (["resize", "--bogus", "1", "2"], "unknown option '--bogus'", "resize"),
            # Other launchers' spellings name dlrun's; one letter is like another only in the
            # other case ('-n' was "did you mean '-h'?").
            (["local", "-np", "2", "true"], "unknown option '-np' (did you mean '--nproc'?)", "local"),
            (["local", "-n", "2", "true"], "unknown option '-n' (did you mean '--nproc'?)", "local"),
            (["local", "--num_gpus", "2", "true"], "unknown option '--num_gpus' (did you mean '--gpus'?)", "local"),
            (["run", "-H", "a:2", "true"], "unknown option '-H' (did you mean '--hosts'?)", "run"),
            (["logs", "-F", "1"], "unknown option '-F' (did you mean '-f'?)", "logs"),
            (["local", "-H", "a:2", "true"], "unknown option '-H';", "local"),
            # The program's own options before the program: shown where they go.
            (["local", "-v", "true"], "unknown option '-v': an option of true goes after it: true -v", "local"),
            (["local", "--nproc", "2", "--epochs", "1", "--lr=0.1", "true", "x"],
             "unknown option '--epochs': an option of true goes after it: true --epochs 1 --lr=0.1", "local"),
            (["local", "--nproc", "2", "--epochs", "1"], "unknown option '--epochs'; put '--' before", "local"),
            # dlrun's own options after it: a dlrun option, and the value of one was taken for the
            # program ("an option of cfg/x goes after it: cfg/x -y 1 --ssh-config").
            (["run", "--hosts", "a:1", "-y", "1", "--ssh-config", "cfg/x", "./train"], "unknown option '-y'; put '--'",
             "run"),
            # torchrun's options dlrun has no counterpart of: what it does instead.
            (["local", "--tee", "3", "true"], "unknown option '--tee': torchrun's; in dlrun every rank's output is",
             "local"),
            (["run", "--log-dir", "x", "true"], "unknown option '--log-dir': torchrun's; in dlrun the logs go to the "
                                                "run directory: --run-dir DIR", "run"),
            (["local", "-t", "3", "true"], "unknown option '-t': torchrun's; in dlrun (--tee) every rank's output is",
             "local"),
            (["local", "--local-ranks-filter", "0", "true"],
             "unknown option '--local-ranks-filter' (did you mean '--ranks'?)", "local"),
        ]
        for args, message, verb in cases:
            r = self.dlrun(*args)
            self.assert_usage_error(r, message)
            self.assertTrue(r.stderr.rstrip("\n").endswith(f"; see 'dlrun {verb} --help'"), r.stderr)

    def test_a_commands_option_before_the_command_names_the_command(self):
        self.assert_usage_error(self.dlrun("--nproc", "2", "x.py"),
                                "unknown option '--nproc': it is an option of dlrun local; the command comes first: "
                                "dlrun local --nproc 2 x.py; see 'dlrun --help'")

    def test_unexpected_argument(self):
        self.assert_usage_error(self.dlrun("status", "1", "2"), "unexpected argument '2'; see 'dlrun status --help'")

    def test_a_count_after_the_program_is_shown_where_it_goes(self):
        # It went to the program, and dlrun said only that no count was given.
        self.assert_usage_error(self.dlrun("local", "true", "--nproc", "2"),
                                "say how many ranks to start: dlrun's options go before the program's name, and "
                                "those after it are the program's: dlrun local --nproc 2 true")
        self.assert_usage_error(self.dlrun("local", "./train", "--lr", "1", "--gpus=2", "x y"),
                                ": dlrun local --gpus=2 ./train --lr 1 'x y'")


if __name__ == "__main__":
    unittest.main()
