"""Hostile or absurd input to `dlrun submit` and `dlrun local`: refused with exit 2 and a
clear message, never a crash (docs/job-toml.md, "Limits"). `submit --dry-run` of a Slurm
job prints the sbatch script without a cluster, so the script's quoting is checked here."""
import os
import random
import re
import subprocess
import unittest

from harness import SOURCE_DIR, DlrunTestCase

SLURM_JOB = '''name = "on-slurm"
command = ["./train", "--epochs", "3"]
[scheduler]
kind = "slurm"
partition = "debug"
time_limit = "10:00"
account = "lab"
nodes = 2
ranks_per_node = 2
sbatch_options = ["--exclusive"]
[env]
NCCL_DEBUG = "WARN"
'''

SLURM_GPU_JOB = '''command = ["python3", "train.py", "--lr", "0.1"]
grace = 30.5
watchdog = 600
max_restarts = 3
checkpoint_dir = "ckpt"
[env]
OMP_NUM_THREADS = 4
DEBUG = false
"QUOTED" = 'x.y[z]{w}'
[scheduler]
kind = "slurm"
gpus_per_node = 4
nodes = 1
'''

LOCAL_JOB = '''name = "hello"
command = ["sh", "-c", "echo rank $RANK of $WORLD_SIZE"]
workdir = "."
max_restarts = 1
grace = 5
watchdog = 0
[env]
A = "x"
B = 2
C = true
[resources]
nproc = 2
'''


class InputCase(DlrunTestCase):
    def write(self, text, name="job.toml"):
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
        return path

    def dry_run(self, text):
        return self.dlrun("submit", "--dry-run", self.write(text), timeout=60)

    def assert_refused(self, text, *messages):
        r = self.dry_run(text)
        self.assertEqual(r.returncode, 2, r.stderr)
        for message in messages:
            self.assertIn(message, r.stderr)
        self.assertEqual(r.stdout, "")
        return r


class Limits(InputCase):
    def test_deep_table_header_is_refused_not_a_crash(self):
        r = self.assert_refused("[" + ".".join(["a"] * 50000) + "]\n" + SLURM_JOB,
                                "job.toml:1:", "more than 32 dotted parts")
        self.assertNotIn("internal", r.stderr)

    def test_deep_dotted_key_and_nesting_are_refused(self):
        self.assert_refused(SLURM_JOB + ".".join(["k"] * 40) + ' = "v"\n', "job.toml:13:", "more than 32 dotted parts")
        self.assert_refused("x = " + "[" * 40 + "]" * 40 + "\n" + SLURM_JOB, "job.toml:1:", "nested more than 32 deep")
        self.assert_refused("x = " + "{a = " * 40 + "1" + "}" * 40 + "\n" + SLURM_JOB, "nested more than 32 deep")

    def test_dots_and_brackets_in_strings_are_not_counted(self):
        dots = ".".join(["a"] * 100)
        # As values: accepted.
        ok = SLURM_JOB + f'X = "{dots}[[[[{{{{"\nY = \'\'\'{dots}\n[[[[\'\'\'\nZ = """{"[" * 100}\\"]"""\n'
        r = self.dry_run(ok)
        self.assertEqual(r.returncode, 0, r.stderr)
        # As quoted [env] keys: one part each; refused only because they are not variable names.
        r = self.dry_run(SLURM_JOB + f'"{dots}" = "v"\n')
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertNotIn("dotted parts", r.stderr)
        self.assertIn("is not a valid environment variable name", r.stderr)

    def test_job_file_over_one_mib_is_refused(self):
        self.assert_refused(SLURM_JOB + "#" * (1024 * 1024) + "\n",
                            "job.toml: the job file is too large: at most 1048576 bytes are accepted")
        r = self.dlrun("submit", "--dry-run", "/dev/zero", timeout=60)  # read only up to the limit
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("/dev/zero: the job file is too large", r.stderr)

    def test_env_value_too_long_for_exec_is_refused(self):
        value = "v" * (128 * 1024)
        self.assert_refused(SLURM_JOB + f'BIG = "{value}"\n',
                            "'BIG' is too long to pass to a program: 131076 bytes as BIG=value, at most 131071")

    def test_env_total_too_large_is_refused(self):
        values = "".join(f'V{i} = "{"v" * 100000}"\n' for i in range(6))
        self.assert_refused(SLURM_JOB + values, "command and [env] together are", "at most 524288 bytes")

    def test_long_names_are_refused(self):
        self.assert_refused(SLURM_JOB.replace('"on-slurm"', '"' + "n" * 256 + '"'),
                            "job.toml:1:8: 'name' is 256 bytes long: at most 255")
        self.assert_refused(SLURM_JOB + "K" * 256 + ' = "v"\n', "environment variable name", "at most 255")
        self.assert_refused(SLURM_JOB.replace('"debug"', '"' + "p" * 256 + '"'), "'partition' is 256 bytes long")


class Durations(InputCase):
    def local_refused(self, *args):
        r = self.dlrun("local", "--nproc", "1", *args, "--", "true", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        return r.stderr

    def test_grace_on_the_command_line(self):
        for value in ["nan", "inf", "-inf", "1e10", "604801", "-1"]:
            with self.subTest(value=value):
                err = self.local_refused("--grace", value)
                self.assertIn(f"--grace: {value}", err)
                self.assertIn("must be a number of seconds from 0 to 604800", err)
        r = self.dlrun("local", "--nproc", "1", "--grace", "604800", "--", "true", timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_other_durations_on_the_command_line(self):
        self.assertIn("--watchdog: nan", self.local_refused("--watchdog", "nan"))
        r = self.dlrun("run", "--hosts", "localhost:1", "--join-timeout", "inf", "--", "true", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--join-timeout: inf", r.stderr)
        r = self.dlrun("run", "--hosts", "localhost:1", "--connect-timeout", "1e10", "--", "true", timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--connect-timeout: 1e10", r.stderr)

    def test_grace_and_watchdog_in_the_job_file(self):
        for key in ["grace", "watchdog"]:
            for value, shown in [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf"), ("1e10", "10000000000")]:
                with self.subTest(key=key, value=value):
                    self.assert_refused(f"{key} = {value}\n" + SLURM_JOB,
                                        f"job.toml:1:{len(key) + 4}: '{key}' = {shown} is out of range: "
                                        "must be a number of seconds from 0 to 604800")
        r = self.dry_run("grace = 604800\n" + SLURM_JOB)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--grace 604800 ", r.stdout)


class SlurmScript(InputCase):
    INJECTED = "touch /tmp/dlrun-injected"

    def assert_not_a_command(self, script):
        for line in script.splitlines():
            self.assertFalse(line.startswith(self.INJECTED), script)

    def test_newlines_in_slurm_values_are_refused(self):
        for key, old in [("name", '"on-slurm"'), ("partition", '"debug"'), ("time_limit", '"10:00"'),
                         ("account", '"lab"'), ("sbatch_options", '["--exclusive"]')]:
            with self.subTest(key=key):
                bad = '"x\\n' + self.INJECTED + '"'
                new = "[" + bad + "]" if key == "sbatch_options" else bad
                r = self.assert_refused(SLURM_JOB.replace(f"{key} = {old}", f"{key} = {new}"),
                                        f"'{key}' must not contain control characters (a newline)")
                self.assert_not_a_command(r.stdout)

    def test_bad_env_names_are_refused(self):
        for name in ['"A;touch x"', '"A B"', '"1A"', '"A-B"', '"$(id)"', '"A\\nB"']:
            with self.subTest(name=name):
                self.assert_refused(SLURM_JOB + f'{name} = "v"\n', "is not a valid environment variable name")

    def test_env_values_are_single_quoted(self):
        marker = os.path.join(self.tmp, "injected")
        evil = f"x'\n touch {marker}\n'$(touch {marker})`touch {marker}`;touch {marker}"
        toml_value = evil.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        r = self.dry_run(SLURM_JOB + f'EVIL = "{toml_value}"\nSPACE = "a b; c"\n')
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("export SPACE='a b; c'\n", r.stdout)
        # The script up to its exec line, run by bash: the values arrive whole, nothing else runs.
        exports = r.stdout[:r.stdout.rindex("\nexec ") + 1]
        out = os.path.join(self.tmp, "out")
        subprocess.run(["bash", "-c", exports + f'printf %s "$EVIL" > {out}'], check=True, timeout=60)
        with open(out) as f:
            self.assertEqual(f.read(), evil)
        self.assertFalse(os.path.exists(marker), r.stdout)

    def test_sbatch_values_with_spaces_are_quoted_for_sbatch(self):
        # (A job's name cannot hold them since it names the job to every verb: its account can.)
        r = self.dry_run(SLURM_JOB.replace('"lab"', '"my lab #1 \\"x\\""'))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('#SBATCH "--account=my lab #1 \\"x\\""\n', r.stdout)

    def test_a_valid_job_still_renders(self):
        r = self.dry_run(SLURM_JOB)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("#SBATCH --job-name=on-slurm\n", r.stdout)
        self.assertIn("#SBATCH --partition=debug\n", r.stdout)
        self.assertIn("export NCCL_DEBUG=WARN\n", r.stdout)


def mutate(rng, text):
    """One random mutation of a job file's bytes."""
    data = bytearray(text)
    kind = rng.choice([0, 1, 2, 2, 2, 3, 4, 5, 6, 7, 7, 8])
    at = rng.randrange(len(data) + 1)
    if kind == 0 and data:
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == 1:
        data[at:at] = rng.choice([b".", b"[", b"{", b'"', b"=", b"\n", b"'", b"]", b"}", b",", b"#", b"\\"]) * \
            rng.randint(1, 4)
    elif kind == 2:
        piece = rng.choice([b".a", b"[", b"{a=", b"a.", b"[[", b'"', b"\n", b"\\u0000"])
        count = rng.choice([10, 100, 1000, 20000, 60000])
        # Deepen a key or a table header where there is one, else anywhere.
        ends = [i for i, c in enumerate(data) if c == ord("]")] if piece == b".a" else \
            [i + 1 for i, c in enumerate(data) if c == ord("\n")] if piece == b"a." else []
        at = rng.choice(ends) if ends else at
        data[at:at] = piece * count
    elif kind == 3:
        del data[at:]
    elif kind == 4:
        data = data + data[:rng.randrange(len(data) + 1)]
    elif kind == 5:
        data[at:at] = data[rng.randrange(len(data) + 1):][:rng.randint(1, 200)]
    elif kind == 6:
        end = min(len(data), at + rng.randint(1, 40))
        del data[at:end]
    elif kind == 7:
        data[at:at] = rng.choice([b"grace = nan\n", b"watchdog = inf\n", b"grace = 1e10\n", b'X = "\\u0000"\n',
                                  b"[env]\n", b"[scheduler]\n", b"[resources]\n", b"nproc = 0\n", b"gpus = []\n",
                                  b'"a.b" = 1\n', b'name = "x\\ny"\n', b"=\n", b"[a.b.c]\n"])
    else:
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(data)


class Fuzz(InputCase):
    """Seeded and bounded: ~300 mutated job files; each must exit 0 or 2, never crash."""
    SEED = 17
    CASES = 300

    def seeds(self):
        seeds = [SLURM_JOB.encode(), SLURM_JOB.encode(), SLURM_GPU_JOB.encode(), LOCAL_JOB.encode()]
        with open(os.path.join(SOURCE_DIR, "templates", "job.toml"), "rb") as f:
            seeds.append(f.read())
        return seeds

    def test_mutated_job_files_exit_0_or_2(self):
        rng = random.Random(self.SEED)
        seeds = self.seeds()
        codes = {}
        for case in range(self.CASES):
            text = rng.choice(seeds)
            for _ in range(1 if rng.random() < 0.6 else rng.randint(2, 3)):
                text = mutate(rng, text)
            path = self.write(text, f"case{case}.toml")
            # --dry-run parses and checks everything; a Slurm job prints its script, others exit 2.
            args = ["submit", "--dry-run", path] if rng.random() < 0.5 else \
                ["submit", "--dry-run", "--scheduler", "slurm", path]
            r = self.dlrun(*args, timeout=60)
            codes[r.returncode] = codes.get(r.returncode, 0) + 1
            self.assertIn(r.returncode, (0, 2), f"case {case} ({path}): {r.returncode}\n{r.stderr[-2000:]}\n"
                                                 f"input: {text[:300]!r}")
            if r.returncode == 2:
                self.assertRegex(r.stderr, re.compile(r"^dlrun: error: ", re.M))
                self.assertNotIn("internal", r.stderr)
            os.remove(path)
        # The mutations must leave some files valid, or the test exercises only the syntax errors.
        self.assertGreater(codes.get(0, 0), self.CASES // 60, codes)


if __name__ == "__main__":
    unittest.main()
