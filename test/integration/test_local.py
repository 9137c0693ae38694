"""`dlrun local`: what a user sees when starting ranks on one machine."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

from harness import (DLRUN, PYTHON, DlrunTestCase, kill_quietly, pid_alive, read_pids, read_words, wait_for)

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
ENV_KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
            "MASTER_ADDR", "MASTER_PORT", "DLRUN_RUN_DIR", "DLRUN_RESTART_COUNT", "DLRUN_JOB_ID",
            "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES"]
PRINT_ENV = [PYTHON, "-c", "import os, json; print(json.dumps({k: os.environ.get(k) for k in %r}))" % ENV_KEYS]


def rank_lines(stdout):
    """{rank: [lines]} from prefixed output."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"^\[(\d+)\] (.*)$", line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


class Environment(DlrunTestCase):
    def test_each_rank_gets_the_env_variables(self):
        r = self.dlrun("local", "--nproc", "3", "--run-dir", self.run_dir(), "--", *PRINT_ENV)
        self.assertEqual(r.returncode, 0, r.stderr)
        envs = {rank: json.loads(lines[0]) for rank, lines in rank_lines(r.stdout).items()}
        self.assertEqual(sorted(envs), [0, 1, 2])
        ports = {e["MASTER_PORT"] for e in envs.values()}
        self.assertEqual(len(ports), 1)
        self.assertTrue(1 <= int(ports.pop()) <= 65535)
        cores = len(os.sched_getaffinity(0))
        job = re.search(r"^dlrun: job (\S+):", r.stderr, re.M).group(1)
        for rank, e in envs.items():
            self.assertEqual(e["RANK"], str(rank))
            self.assertEqual(e["LOCAL_RANK"], str(rank))
            self.assertEqual(e["WORLD_SIZE"], "3")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "3")
            self.assertEqual(e["NODE_RANK"], "0")
            self.assertEqual(e["GROUP_RANK"], "0")
            self.assertEqual(e["MASTER_ADDR"], "127.0.0.1")
            self.assertEqual(e["DLRUN_RUN_DIR"], self.run_dir())
            self.assertEqual(e["DLRUN_RESTART_COUNT"], "0")
            self.assertEqual(e["DLRUN_JOB_ID"], job)
            self.assertEqual(e["OMP_NUM_THREADS"], str(max(1, cores // 3)))
            self.assertIsNone(e["CUDA_VISIBLE_DEVICES"])

    def test_user_settings_win(self):
        env = dict(self.env, OMP_NUM_THREADS="5")
        r = self.dlrun("local", "--nproc", "2", "--master-port", "0" if False else "45123",
                       "--master-addr", "127.0.0.1", "--", *PRINT_ENV, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        for lines in rank_lines(r.stdout).values():
            e = json.loads(lines[0])
            self.assertEqual(e["OMP_NUM_THREADS"], "5")
            self.assertEqual(e["MASTER_PORT"], "45123")

    def test_default_run_dir_keeps_logs_and_job_record(self):
        r = self.dlrun("local", "--nproc", "2", "sh", "-c", "echo out $RANK; echo err $RANK >&2")
        self.assertEqual(r.returncode, 0, r.stderr)
        job = re.search(r"^dlrun: job (\S+):", r.stderr, re.M).group(1)
        run_dir = os.path.join(self.home, "runs", job)
        for rank in range(2):
            with open(os.path.join(run_dir, f"rank-{rank}.log")) as f:
                self.assertEqual(sorted(f.read().splitlines()), [f"err {rank}", f"out {rank}"])
        with open(os.path.join(run_dir, "job.json")) as f:
            record = json.load(f)
        self.assertEqual(record["id"], job)
        self.assertEqual(record["state"], "succeeded")
        self.assertEqual(record["exit_code"], 0)
        self.assertEqual(record["command"], ["sh", "-c", "echo out $RANK; echo err $RANK >&2"])
        self.assertEqual(os.path.realpath(os.path.join(self.home, "runs", "latest")), run_dir)

    def test_two_jobs_at_once_get_different_ports(self):
        procs = [self.start("local", "--nproc", "1", "-q", "--", *PRINT_ENV) for _ in range(4)]
        ports = set()
        for p in procs:
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0, err)
            ports.add(json.loads(rank_lines(out)[0][0])["MASTER_PORT"])
        self.assertEqual(len(ports), 4)


class ExitCodes(DlrunTestCase):
    def test_success_is_zero(self):
        self.assertEqual(self.dlrun("local", "--nproc", "4", "true").returncode, 0)

    def test_a_rank_killed_by_a_sigkill_dlrun_did_not_send_is_told_of_the_oom_killer(self):
        # "rank 0 was killed by signal 9 (SIGKILL); it wrote nothing to stderr" gave no hint of
        # the kernel's out-of-memory killer, its most common sender.
        r = self.dlrun("local", "--nproc", "1", "sh", "-c", "kill -9 $$")
        self.assertEqual(r.returncode, 137, r.stderr)
        self.assertIn("rank 0 was killed by signal 9 (SIGKILL) (dlrun did not send it: the kernel's out-of-memory "
                      "killer sends SIGKILL", r.stderr)

    def test_failing_rank_code_is_passed_on_and_others_are_stopped(self):
        pids = os.path.join(self.tmp, "pids")
        script = self.script("train.sh", f"""
if [ "$RANK" = 1 ]; then
  # Fail once the others are up, so that "every rank was stopped" is checked on their pids.
  while [ "$(cat {pids} 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.02; done
  echo "loading data" >&2; echo "Traceback: out of memory" >&2; exit 7
fi
echo $$ >> {pids}
exec sleep 300
""")
        start = time.monotonic()
        r = self.dlrun("local", "--nproc", "3", "--run-dir", self.run_dir(), script)
        self.assertLess(time.monotonic() - start, 60)
        self.assertEqual(r.returncode, 7)
        self.assertIn("dlrun: error: rank 1 exited with code 7; stopping the other 2 ranks", r.stderr)
        self.assertIn("rank 1 exited with code 7; last 2 lines of its stderr", r.stderr)
        self.assertIn("  | Traceback: out of memory", r.stderr)
        self.assertIn(os.path.join(self.run_dir(), "rank-1.log"), r.stderr)
        self.assertEqual(len(read_pids(pids)), 2)
        for pid in read_pids(pids):
            self.assertFalse(pid_alive(pid), f"rank process {pid} survived")
        with open(os.path.join(self.run_dir(), "job.json")) as f:
            record = json.load(f)
        self.assertEqual((record["state"], record["exit_code"]), ("failed", 7))

    def test_a_rank_that_left_early_is_named_when_the_failure_is_about_peers(self):
        # Rank 1 returns 0 while rank 0 trains; rank 0's collective then fails (it was the
        # only one named, although rank 1 caused it).
        script = self.script("early.sh", 'if [ $RANK = 1 ]; then exit 0; fi\n'
                                         'sleep 0.5; echo "Connection closed by peer" >&2; exit 6\n')
        r = self.dlrun("local", "--nproc", "2", script)
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("rank 0 exited with code 6 (rank 1 had ended with code 0 before it: a rank that leaves while "
                      "the others train fails their collectives); last 1 line", r.stderr)
        # The rank that failed first lost its peer; the peer failed on its own, and says why.
        script = self.script("mismatch.sh", 'if [ $RANK = 1 ]; then trap "exit 2" TERM; '
                                            'echo "params[0] sizes [17, 10] do not match" >&2; sleep 30 & wait; fi\n'
                                            'sleep 0.3; echo "Connection closed by peer" >&2; exit 70\n')
        r = self.dlrun("local", "--nproc", "2", script)
        self.assertEqual(r.returncode, 70, r.stderr)
        self.assertIn("rank 0 exited with code 70; rank 1 exited with code 2 too, its last stderr line: params[0] "
                      "sizes [17, 10] do not match; last 1 line", r.stderr)
        # The rank whose error came first closed its connections in a `finally` before it
        # exited; the rank that lost it exited sooner, and was blamed alone.
        script = self.script("finally.sh", 'if [ $RANK = 1 ]; then trap "exit 1" TERM; '
                                           'printf "Traceback (most recent call last):\\nValueError: NaN loss\\n" >&2; '
                                           'touch closed; sleep 30 & wait; fi\n'
                                           'while [ ! -e closed ]; do sleep 0.05; done\n'
                                           'echo "RuntimeError: [gloo/pair.cc:598] Connection closed by peer" >&2; exit 3\n')
        r = self.dlrun("local", "--nproc", "2", script, cwd=self.tmp)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("rank 1 exited with code 1: the likelier cause, though rank 0 exited with code 3 before it: "
                      "rank 0 had lost a peer (RuntimeError: [gloo/pair.cc:598] Connection closed by peer); last 2 "
                      "lines of its stderr", r.stderr)
        self.assertIn("  | ValueError: NaN loss", r.stderr)
        # A refused connection is the rank's own error, and an error another rank logged and lived
        # on after is not its end: no one else is blamed.
        script = self.script("own.sh", 'if [ $RANK = 1 ]; then printf "Traceback (most recent call last):\\n'
                                       'ModuleNotFoundError: No module named x\\nstep 1\\n" >&2; sleep 30; fi\n'
                                       'sleep 0.3; echo "ConnectionRefusedError: [Errno 111] Connection refused" >&2; '
                                       'exit 1\n')
        r = self.dlrun("local", "--nproc", "2", "--grace", "1", script)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("rank 0 exited with code 1; last 1 line of its stderr", r.stderr)
        self.assertNotIn("likelier", r.stderr)
        # A rank that fails on its own, after another ended with 0: nothing about it.
        r = self.dlrun("local", "--nproc", "2", "sh", "-c", 'sleep 0.$RANK; echo bad >&2; exit $RANK')
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("rank 1 exited with code 1; last 1 line", r.stderr)

    def test_one_rank_failure_is_said_once_and_tail_0_shows_no_lines(self):
        r = self.dlrun("local", "--nproc", "1", "sh", "-c", "echo oops >&2; exit 3")
        self.assertEqual(r.returncode, 3)
        self.assertEqual(r.stderr.count("rank 0 exited with code 3"), 1, r.stderr)
        self.assertIn("rank 0 exited with code 3; last 1 line of its stderr", r.stderr)
        r = self.dlrun("local", "--nproc", "1", "--tail", "0", "sh", "-c", "echo oops >&2; exit 3")
        self.assertEqual(r.returncode, 3)
        self.assertNotIn("wrote nothing", r.stderr)
        self.assertRegex(r.stderr, r"dlrun: error: rank 0 exited with code 3 \(its output: \S+rank-0.log\)\n")

    def test_a_rank_that_cannot_start_is_recorded_with_dlruns_error(self):
        path = os.path.join(self.tmp, "not-a-binary")
        with open(path, "wb") as f:
            f.write(b"\x00\x01\x02 not a format exec knows\n")  # exec fails with ENOEXEC
        os.chmod(path, 0o755)
        r = self.dlrun("local", "--nproc", "1", path)
        self.assertEqual(r.returncode, 70, r.stderr)
        self.assertIn("cannot start", r.stderr)
        jobs = json.loads(self.dlrun("status", "--all", "--json").stdout)
        self.assertEqual((jobs[-1]["state"], jobs[-1]["exit_code"]), ("FAILED", 70))
        self.assertTrue(jobs[-1]["reason"].startswith(f"cannot start {path}: Exec format error"), jobs[-1])

    def test_a_missing_interpreter_is_named(self):
        # exec says ENOENT for a script that is there when its #! interpreter is not: the
        # message named the script, and a CRLF line (the usual cause) went unseen.
        for name, first, says in (("crlf.sh", "#!/bin/sh\r\n", "its #! line ends with a carriage return"),
                                  ("gone.sh", "#!/nonexistent/interp -x\n",
                                   "its #! line names the interpreter /nonexistent/interp, which does not exist")):
            path = os.path.join(self.tmp, name)
            with open(path, "w", newline="") as f:
                f.write(first + "echo hi\n")
            os.chmod(path, 0o755)
            r = self.dlrun("local", "--nproc", "1", path)
            self.assertEqual(r.returncode, 70, r.stderr)
            self.assertIn(f"cannot start {path}: No such file or directory ({says}", r.stderr)

    def test_a_rank_may_touch_its_progress_file_at_once(self):
        for _ in range(5):  # the directory once came after the ranks: 2 runs in 5 failed
            r = self.dlrun("local", "--nproc", "2", "--watchdog", "60", "sh", "-c", "touch $DLRUN_PROGRESS_FILE")
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_rank_killed_by_signal_gives_128_plus_signal(self):
        r = self.dlrun("local", "--nproc", "2", "sh", "-c", 'if [ $RANK = 0 ]; then kill -SEGV $$; fi; sleep 300')
        self.assertEqual(r.returncode, 128 + signal.SIGSEGV)
        self.assertIn("rank 0 was killed by signal 11 (SIGSEGV)", r.stderr)

    def test_rank_ignoring_sigterm_is_killed_after_grace(self):
        trapped = os.path.join(self.tmp, "trapped")
        script = self.script("stubborn.sh", f"""
if [ "$RANK" = 0 ]; then
  until [ -e {trapped} ]; do sleep 0.02; done  # rank 1 ignores SIGTERM by now
  exit 4
fi
trap '' TERM
touch {trapped}
while true; do sleep 0.1; done
""")
        start = time.monotonic()
        r = self.dlrun("local", "--nproc", "2", "--grace", "1", script)
        elapsed = time.monotonic() - start
        self.assertEqual(r.returncode, 4)
        self.assertIn("still running 1 s after the stop signal: killing it", r.stderr)
        self.assertLess(elapsed, 30)


class BadInput(DlrunTestCase):
    def assert_usage_error(self, args, message):
        r = self.dlrun(*args)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("dlrun: error: "), lines[0])
        self.assertIn(message, lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.home, "runs")), "a run was started")

    def test_an_unknown_log_level_is_said_and_changes_nothing(self):
        # It was ignored without a word.
        self.env["DLRUN_LOG_LEVEL"] = "verbose"
        r = self.dlrun("local", "--nproc", "1", "true")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("dlrun: warning: DLRUN_LOG_LEVEL=verbose: not a level (debug, info, warn, error or off); the "
                      "level stays as it was\n", r.stderr)
        self.assertIn("dlrun: job 1: 1 rank of true", r.stderr)  # info, as without it

    def test_missing_program(self):
        self.assert_usage_error(["local", "--nproc", "2", "no-such-program-xyz"],
                                "program 'no-such-program-xyz' not found in PATH")
        self.assert_usage_error(["local", "--nproc", "2", "./no/such/file"],
                                "program './no/such/file' does not exist")

    def test_not_executable(self):
        path = os.path.join(self.tmp, "data.txt")
        open(path, "w").close()
        self.assert_usage_error(["local", "--nproc", "1", path], "is not executable (try chmod +x")

    def test_no_program(self):
        self.assert_usage_error(["local", "--nproc", "2"], "no program given")

    def test_bad_counts(self):
        self.assert_usage_error(["local", "--nproc", "0", "true"], "--nproc 0: expected a count N (at least 1) or an elastic range MIN:MAX")
        self.assert_usage_error(["local", "--nproc", "3:2", "true"], "--nproc 3:2: expected a count N")
        self.assert_usage_error(["local", "true"], "say how many ranks to start: --nproc N")
        self.assert_usage_error(["local", "--nproc", "2", "--gpus", "1", "true"], "exclude each other")
        self.assert_usage_error(["local", "--nproc", "two", "true"], "--nproc")
        self.assert_usage_error(["local", "--nproc", "2", "--grace", "-1", "true"], "--grace: -1 is out of range")

    def test_bad_values_are_said_in_dlruns_words(self):
        self.assert_usage_error(["local", "--nproc", "1", "--tail", "-1", "true"], "--tail -1: must be from 0 to 100000")
        self.assert_usage_error(["local", "--nproc", "1", "--master-port", "abc", "true"],
                                "--master-port abc: not a number")
        self.assert_usage_error(["local", "--nproc", "1", "--nproc-per-node", "2", "true"],
                                "--nproc given more than once")
        self.assert_usage_error(["status", "--recent", "-1"], "--recent -1: must be 0 or more")
        self.assert_usage_error(["logs", "1", "--rank", "-1"], "--rank -1: must be 0 or more")
        self.assert_usage_error(["clean", "--older-than", "-1"], "--older-than -1: must be from 0 to 36500")
        # '' was taken as 0 or nothing: the option then did nothing, silently.
        for option in ("--max-restarts", "--master-addr", "--name", "--grace"):
            self.assert_usage_error(["local", "--nproc", "1", option, "", "true"], f"{option}: an empty value")
        self.assert_usage_error(["submit", self.tmp], f"{self.tmp} is a directory: give its job file")

    def test_unknown_option_suggests(self):
        self.assert_usage_error(["local", "--nprocs", "2", "true"],
                                "unknown option '--nprocs' (did you mean '--nproc'?)")

    def test_busy_master_port(self):
        import socket
        # Also a port listened on at another address of the machine only: rank 0's store, which
        # listens on all of them, failed to start in every rank (it was let through).
        for address, said in (("127.0.0.1", "port is already in use"),
                              ("127.0.0.2", "port is already in use on another address of this machine")):
            s = socket.socket()
            s.bind((address, 0))
            s.listen()
            port = s.getsockname()[1]
            try:
                self.assert_usage_error(["local", "--nproc", "1", "--master-port", str(port), "true"],
                                        f"--master-port {port}: {said}")
            finally:
                s.close()

    def test_master_addr_not_of_this_machine(self):
        # 192.0.2.0/24 is for documentation: no machine has it (was exit 70 and a failed job).
        self.assert_usage_error(["local", "--nproc", "1", "--master-addr", "192.0.2.7", "true"],
                                "--master-addr 192.0.2.7: not an address of this machine")

    def test_bad_prefix_and_ranks(self):
        self.assert_usage_error(["local", "--nproc", "1", "--prefix", "{rnak}", "true"],
                                "did you mean {rank}?")
        self.assert_usage_error(["local", "--nproc", "2", "--ranks", "5", "true"],
                                "--ranks: rank 5 does not exist (ranks are 0 to 1)")

    def test_unknown_subcommand(self):
        r = self.dlrun("lokal")
        self.assertEqual(r.returncode, 2)
        self.assertTrue(r.stderr.startswith("dlrun: error: "))

    def test_help_and_version(self):
        r = self.dlrun("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("local", r.stdout)
        r = self.dlrun("local", "--help")
        self.assertEqual(r.returncode, 0)
        for option in ["--nproc", "--gpus", "--master-port", "--run-dir", "--prefix", "--no-prefix",
                       "--ranks", "--grace", "--max-restarts", "--gpu-binding", "--color"]:
            self.assertIn(option, r.stdout)
        r = self.dlrun("--version")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"^dlrun \d+\.\d+\.\d+\n$")


class Output(DlrunTestCase):
    def test_heavy_output_keeps_every_line_whole(self):
        lines = 60000
        r = self.dlrun("local", "--nproc", "3", "--run-dir", self.run_dir(), "--",
                       PYTHON, os.path.join(DATA, "chatter.py"), str(lines), timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        pattern = re.compile(r"^\[(\d)\] rank (\d) line (\d+) (x*) end$")
        seen = {0: 0, 1: 0, 2: 0}
        for line in r.stdout.splitlines():
            m = pattern.match(line)
            self.assertIsNotNone(m, f"mixed or broken line: {line[:200]!r}")
            self.assertEqual(m.group(1), m.group(2))
            rank, number = int(m.group(1)), int(m.group(3))
            self.assertEqual(number, seen[rank], "lines out of order or lost")
            self.assertEqual(len(m.group(4)), number % 97)
            seen[rank] += 1
        self.assertEqual(seen, {0: lines, 1: lines, 2: lines})
        for rank in range(3):
            self.assertIn(f"[{rank}] rank {rank} done", r.stderr)
            with open(os.path.join(self.run_dir(), f"rank-{rank}.log")) as f:
                self.assertEqual(sum(1 for _ in f), lines + 1)

    def test_a_reader_that_goes_ends_the_job_as_sigpipe_would(self):
        # `dlrun local … | head -1`: the ranks ran on after head had gone, never ending.
        p = self.start("local", "--nproc", "2", "--run-dir", self.run_dir(), "sh", "-c",
                       "i=0; while :; do echo line $i; i=$((i + 1)); sleep 0.01; done")
        self.assertRegex(p.stdout.readline(), r"^\[\d\] line 0\n$")
        p.stdout.close()
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 141, err)
        self.assertIn("standard output's reader has gone (a pipe whose reader ended, as | head does): "
                      f"stopping the 2 ranks (their whole output is in {self.run_dir()})", err)
        with open(os.path.join(self.run_dir(), "rank-0.log")) as f:
            self.assertTrue(f.read().startswith("line 0\n"))  # logged, read or not

    def test_ranks_filter_shows_some_and_logs_all(self):
        r = self.dlrun("local", "--nproc", "3", "--ranks", "0,2", "--run-dir", self.run_dir(),
                       "sh", "-c", "echo hi $RANK")
        self.assertEqual(r.returncode, 0)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[0] hi 0", "[2] hi 2"])
        with open(os.path.join(self.run_dir(), "rank-1.log")) as f:
            self.assertEqual(f.read(), "hi 1\n")

    def test_no_prefix_and_custom_prefix(self):
        r = self.dlrun("local", "--nproc", "1", "--no-prefix", "sh", "-c", "echo plain")
        self.assertEqual(r.stdout, "plain\n")
        r = self.dlrun("local", "--nproc", "2", "--ranks", "1", "--prefix", "{host}:{local_rank}/{world_size}> ",
                       "sh", "-c", "echo x")
        self.assertEqual(r.stdout, f"{os.uname().nodename}:1/2> x\n")

    def test_last_line_without_newline_is_shown(self):
        r = self.dlrun("local", "--nproc", "1", "printf", "a\\nno newline")
        self.assertEqual(r.stdout, "[0] a\n[0] no newline\n")

    def test_last_line_is_kept_when_an_escaped_child_holds_the_output(self):
        # A child in a session of its own holds the rank's pipes: dlrun stops waiting for the
        # end of its output after a while, and the rank's unfinished last lines still count.
        escaped = os.path.join(self.tmp, "escaped")
        script = self.script("escape.sh", f"""
setsid sh -c 'echo $$ > {escaped}; exec sleep 1000' &
while [ ! -s {escaped} ]; do sleep 0.05; done
printf 'final words'
printf 'err partial' >&2
exit 3
""")
        r = self.dlrun("local", "--nproc", "1", script)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertEqual(r.stdout, "[0] final words\n")
        self.assertIn("rank 0 exited with code 3; last 1 line of its stderr", r.stderr)
        self.assertIn("  | err partial", r.stderr)
        # The escaped child is gone with the job.
        self.assertTrue(wait_for(lambda: not os.path.exists(f"/proc/{read_words(escaped)[0]}"), 30))

    def test_a_line_of_exactly_a_mebibyte_is_one_line(self):
        script = self.script("mib.sh", f"""
{PYTHON} -c 'import sys, time; sys.stdout.write("z" * (1 << 20)); sys.stdout.flush(); time.sleep(0.3); print(); print("next")'
""")
        r = self.dlrun("local", "--nproc", "1", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["[0] " + "z" * (1 << 20), "[0] next"])

    def test_a_longer_line_stays_whole_unprefixed_from_one_rank(self):
        # A JSON document of 2.5 MiB on one line came out as three lines, even with --no-prefix.
        script = self.script("json.sh", f"""
{PYTHON} -c 'import json; print(json.dumps({{"x": "y" * (5 << 19)}})); print("next")'
""")
        r = self.dlrun("local", "-q", "--nproc", "2", "--ranks", "0", "--no-prefix", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 2)
        self.assertEqual((len(json.loads(lines[0])["x"]), lines[1]), (5 << 19, "next"))
        # Prefixed, or several ranks on the terminal: cut at 1 MiB, as before (never two ranks in a line).
        r = self.dlrun("local", "-q", "--nproc", "1", script)
        self.assertEqual(len(r.stdout.splitlines()), 4)

    def test_colour_only_when_asked_or_on_a_terminal(self):
        r = self.dlrun("local", "--nproc", "1", "--color", "always", "echo", "x")
        self.assertEqual(r.stdout, "\x1b[36m[0]\x1b[0m x\n")
        r = self.dlrun("local", "--nproc", "1", "echo", "x")  # a pipe: no colour
        self.assertEqual(r.stdout, "[0] x\n")

    def run_on_terminal(self, env):
        import pty
        master, slave = pty.openpty()
        try:
            p = subprocess.run([DLRUN, "local", "-q", "--nproc", "1", "echo", "x"],
                               stdout=slave, stderr=subprocess.PIPE, env=env, timeout=60)
            self.assertEqual(p.returncode, 0)
            return os.read(master, 4096).decode()
        finally:
            os.close(master)
            os.close(slave)

    def test_colour_on_a_terminal_unless_no_color(self):
        env = dict(self.env, TERM="xterm")
        env.pop("NO_COLOR")
        self.assertEqual(self.run_on_terminal(env), "\x1b[36m[0]\x1b[0m x\r\n")
        self.assertEqual(self.run_on_terminal(dict(env, NO_COLOR="1")), "[0] x\r\n")

    def test_a_progress_bar_is_redrawn_in_place_on_a_terminal(self):
        # A rank redraws a bar with '\r' and ends its line only at the end (as tqdm does). On a
        # terminal each redraw shows as it comes (under "[0] ", in place); the rank is told by
        # DLRUN_TTY=1 that a bar is worth drawing although its stderr is a pipe.
        import pty
        import select
        gates = [os.path.join(self.tmp, f"gate{i}") for i in (1, 2)]
        rank = self.script("bar.sh", f"""printf '\\rstep 1' >&2
while [ ! -e {gates[0]} ]; do sleep 0.05; done
printf '\\rstep 2' >&2
while [ ! -e {gates[1]} ]; do sleep 0.05; done
printf '\\rdone\\n' >&2
echo "tty=$DLRUN_TTY"
""")
        env = dict(self.env, TERM="xterm")
        master, slave = pty.openpty()
        screen = b""

        def read_until(text, timeout=60):
            nonlocal screen
            deadline = time.monotonic() + timeout
            while text not in screen and time.monotonic() < deadline:
                if select.select([master], [], [], 0.2)[0]:
                    try:
                        screen += os.read(master, 4096)
                    except OSError:  # the terminal's other end closed
                        break
            return text in screen

        try:
            p = subprocess.Popen([DLRUN, "local", "-q", "--nproc", "1", rank], stdout=slave, stderr=slave,
                                 env=env, start_new_session=True)
            self._started = getattr(self, "_started", []) + [p]
            self.assertTrue(read_until(b"\r\x1b[K[0] step 1"), screen)
            with open(gates[0], "w"):
                pass
            self.assertTrue(read_until(b"\r\x1b[K[0] step 2"), screen)
            with open(gates[1], "w"):
                pass
            self.assertTrue(read_until(b"[0] tty=1"), screen)
            self.assertEqual(p.wait(timeout=60), 0)
        finally:
            os.close(master)
            os.close(slave)
        self.assertIn(b"\r\x1b[K[0] done\r\n", screen)

    def test_a_progress_bar_shows_its_last_state_when_not_on_a_terminal(self):
        r = self.dlrun("local", "--nproc", "1", "-q", "--run-dir", self.run_dir(), "sh", "-c",
                       "printf '\\r 10%%\\r 20%%\\r100%%\\n'; echo tty=$DLRUN_TTY")
        self.assertEqual((r.returncode, r.stdout), (0, "[0] 100%\n[0] tty=\n"), r.stderr)
        with open(os.path.join(self.run_dir(), "rank-0.log"), newline="") as f:
            self.assertEqual(f.read(), "\r 10%\r 20%\r100%\ntty=\n")  # the log keeps every byte

    def test_logs_go_on_after_the_disk_was_full_and_say_what_was_lost(self):
        # One write that failed for a full disk stopped the rank's log and output.log for the
        # rest of the run, without a word.
        disk = self.small_disk("1m")
        run_dir = os.path.join(disk, "run")
        gates = [os.path.join(self.tmp, f"gate{i}") for i in (1, 2)]
        said = os.path.join(self.tmp, "said")
        script = self.script("chat.sh", f"""echo before
while [ ! -e {gates[0]} ]; do sleep 0.05; done
for i in $(seq 3000); do echo during $i; done
touch {said}
while [ ! -e {gates[1]} ]; do sleep 0.05; done
echo after
""")
        p = self.start("local", "--nproc", "1", "--run-dir", run_dir, script)
        log = os.path.join(run_dir, "rank-0.log")
        def logged():
            if not os.path.exists(log):
                return False
            with open(log) as f:
                return "before" in f.read()
        self.assertTrue(wait_for(logged, 30))
        filler = self.fill(disk)
        open(gates[0], "w").close()
        # dlrun has passed on (and tried to log) what the rank wrote while the disk was full.
        shown = []
        for line in p.stdout:
            shown.append(line)
            if line == "[0] during 3000\n":
                break
        self.assertTrue(wait_for(lambda: os.path.exists(said), 30))
        os.unlink(filler)
        open(gates[1], "w").close()
        out, err = p.communicate(timeout=60)
        out = "".join(shown) + out
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("[0] after", out)
        self.assertIn(f"cannot write {log}: No space left on device", err)
        for name in ("rank-0.log", "output.log"):
            with open(os.path.join(run_dir, name)) as f:
                text = f.read()
            self.assertRegex(text, r"before\n(.*\n)*\[dlrun: \d+ bytes of output lost here: No space left on device\]\n", name)
            self.assertIn("after", text.split("bytes of output lost here")[-1], name)

    def test_a_long_progress_bar_shows_its_progress_when_not_on_a_terminal(self):
        # Through a pipe (tee, a CI log) a bar over a whole epoch showed nothing until the
        # epoch's end: its redraws are passed on as lines, one every 5 s at most.
        gate = os.path.join(self.tmp, "gate")
        script = self.script("bar.sh", f"""
printf '\\r 10%%'
sleep 6
printf '\\r 50%%'
while [ ! -e {gate} ]; do sleep 0.05; done
printf '\\r 50%%\\n'
printf '\\r100%%\\n'
""")
        p = self.start("local", "--nproc", "1", "-q", script)
        lines = []
        def read():
            for line in iter(p.stdout.readline, ""):
                lines.append(line)
        reader = threading.Thread(target=read)
        reader.start()
        self.assertTrue(wait_for(lambda: "[0]  50%\n" in lines, 60), lines)
        open(gate, "w").close()
        reader.join(timeout=60)
        self.assertEqual(p.wait(timeout=60), 0)
        # The first line's last state was passed on already: not twice.
        self.assertEqual(lines, ["[0]  50%\n", "[0] 100%\n"])

    def test_stdout_and_stderr_stay_apart(self):
        r = self.dlrun("local", "--nproc", "1", "-q", "sh", "-c", "echo to-out; echo to-err >&2")
        self.assertEqual(r.stdout, "[0] to-out\n")
        self.assertEqual(r.stderr, "[0] to-err\n")


class PtySession:
    """dlrun on a terminal of its own (a pty): what it shows, and what is typed into it."""

    def __init__(self, argv, env, cwd):
        import pty
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.chdir(cwd)
                os.execve(DLRUN, [DLRUN, *argv], env)
            finally:
                os._exit(127)
        self.out = b""

    def read_until(self, token=None, timeout=60):
        """Reads until `token` shows, or (None) to dlrun's end; whether it showed."""
        import select
        end = time.time() + timeout
        while (token is None or token not in self.out) and time.time() < end:
            if not select.select([self.fd], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # dlrun has ended
                break
            if not chunk:
                break
            self.out += chunk
        return token is None or token in self.out

    def type(self, text):
        os.write(self.fd, text)

    def exit_code(self):
        _, status = os.waitpid(self.pid, 0)
        return os.waitstatus_to_exitcode(status)

    def close(self):
        kill_quietly([self.pid])
        os.close(self.fd)


class StandardInput(DlrunTestCase):
    """Rank 0 reads dlrun's standard input, as under torchrun (it read /dev/null: a
    breakpoint() ended the rank, `… | dlrun local` gave it nothing)."""

    def test_a_pipe_or_file_reaches_rank_0_alone_and_a_restart_reads_on(self):
        r = subprocess.run([DLRUN, "local", "-q", "--nproc", "2", "sh", "-c", 'echo "r$RANK:$(cat | tr "\\n" " ")"'],
                           input="hello\nworld\n", capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[0] r0:hello world ", "[1] r1:"])
        data = os.path.join(self.tmp, "in.txt")
        with open(data, "w") as f:
            f.write("one\ntwo\n")
        with open(data) as f:
            r = subprocess.run([DLRUN, "local", "-q", "--nproc", "1", "--max-restarts", "1", "sh", "-c",
                                'read line; echo "got $line"; [ "$DLRUN_RESTART_COUNT" = 0 ] && exit 3; cat'],
                               stdin=f, capture_output=True, text=True, env=self.env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("[0] got one\n[0] got two\n", r.stdout)

    def test_pdb_in_rank_0_reads_the_terminal(self):
        script = os.path.join(self.tmp, "bp.py")
        with open(script, "w") as f:
            f.write('import os\nx = 41\nif os.environ["RANK"] == "0":\n    breakpoint()\n    print("after", x)\n'
                    'else:\n    print("rank 1 done")\n')
        session = PtySession(["local", "--stdin", "--color", "never", "-q", "--nproc", "2", PYTHON, script],
                             self.env, self.tmp)
        try:
            self.assertTrue(session.read_until(b"(Pdb) "), session.out)  # the prompt, before any newline
            session.type(b"p x + 1\n")
            self.assertTrue(session.read_until(b"42"), session.out)
            session.type(b"c\n")
            self.assertTrue(session.read_until(b"after 41"), session.out)
            self.assertEqual(session.exit_code(), 0, session.out)
        finally:
            session.close()
        self.assertIn(b"[1] rank 1 done", session.out)

    def test_a_terminal_is_rank_0s_only_with_stdin_and_an_answered_prompt_stays_shown(self):
        def run(args, answer=None):
            session = PtySession(["local", "--color", "never", "-q", "--nproc", "1", *args], self.env, self.tmp)
            try:
                if answer:
                    session.read_until(b"Name: ")
                    session.type(answer)
                session.read_until()
                return session.exit_code(), session.out
            finally:
                session.close()

        # Without --stdin the terminal is left alone: rank 0 reads the end of /dev/null at once.
        code, out = run(["sh", "-c", "cat; echo end"])
        self.assertEqual((code, out.replace(b"\r", b"")), (0, b"[0] end\n"))
        # With it, a prompt is shown before it is answered; the line it ends shows what came after it.
        script = os.path.join(self.tmp, "ask.py")
        with open(script, "w") as f:
            f.write('name = input("Name: ")\nprint("hello", name)\n')
        code, out = run(["--stdin", PYTHON, script], b"alice\n")
        self.assertEqual(code, 0, out)
        self.assertIn(b"[0] Name: alice\r\n", out)
        self.assertIn(b"[0] hello alice\r\n", out)


class Restarts(DlrunTestCase):
    def test_ranks_that_keep_asking_for_a_restart_at_once_are_restarted_later_and_later(self):
        # A program that exits 75 at once (a bug, a bad checkpoint) restarted ~800 times a second.
        starts = os.path.join(self.tmp, "starts")
        script = self.script("again.sh", f"echo $DLRUN_RESTART_COUNT >> {starts}; exit 75\n")
        p = self.start("local", "--nproc", "1", script)
        self.assertTrue(wait_for(lambda: len(read_words(starts)) >= 5, 60), read_words(starts))
        # Four restarts at once, then 1 s, then 2 s: in the next second at most one more start.
        time.sleep(1)
        self.assertLessEqual(len(read_words(starts)), 6)
        p.send_signal(signal.SIGTERM)  # while it waits to start again
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 143, err)
        self.assertIn("ranks asked to be restarted (exit 75) 4 times in a row, each within 10 s of its start: "
                      "restarting the rank in 1 s", err)

    def test_failed_group_restarts_and_counts(self):
        attempts = os.path.join(self.tmp, "attempts")
        script = self.script("flaky.sh", f"""
echo "$RANK $DLRUN_RESTART_COUNT $MASTER_PORT" >> {attempts}
if [ "$RANK" = 1 ] && [ "$DLRUN_RESTART_COUNT" = 0 ]; then
  # Fail only once rank 0 has recorded its first attempt (the stop would cut it short).
  until grep -q '^0 0 ' {attempts}; do sleep 0.02; done
  exit 3
fi
""")
        r = self.dlrun("local", "--nproc", "2", "--max-restarts", "2", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("restarting all 2 ranks (restart 1 of 2)", r.stderr)
        with open(attempts) as f:
            rows = [line.split() for line in f.read().splitlines()]
        self.assertEqual(sorted((a, b) for a, b, _ in rows), [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")])

    def test_budget_is_for_the_whole_job(self):
        attempts = os.path.join(self.tmp, "attempts")
        script = self.script("broken.sh", f"echo $DLRUN_RESTART_COUNT >> {attempts}; exit 5\n")
        r = self.dlrun("local", "--nproc", "1", "--max-restarts", "2", script)
        self.assertEqual(r.returncode, 5)
        self.assertIn("no restarts left (2 used)", r.stderr)
        with open(attempts) as f:
            self.assertEqual(f.read().split(), ["0", "1", "2"])

    def test_restart_request_code_does_not_spend_the_budget(self):
        attempts = os.path.join(self.tmp, "attempts")
        script = self.script("rescale.sh", f"""
echo $DLRUN_RESTART_COUNT >> {attempts}
if [ "$DLRUN_RESTART_COUNT" -lt 2 ]; then exit 75; fi
""")
        r = self.dlrun("local", "--nproc", "2", "--name", "asks", script)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(attempts) as f:
            self.assertEqual(sorted(f.read().split()), ["0", "0", "1", "1", "2", "2"])
        # The job's record counts them apart from the restarts after a failure.
        job = json.loads(self.dlrun("status", "asks", "--json").stdout)
        self.assertEqual((job["restarts"], job["requested_restarts"], job["resizes"]), (0, 2, 0))
        self.assertRegex(self.dlrun("status", "asks").stdout, r"\nrestarts: +2 \(asked for by the ranks\)\n")
        table = self.dlrun("status").stdout.splitlines()
        column = table[0].index("RESTARTS")
        row = next(line for line in table if " asks " in line)
        self.assertEqual(row[column:].split()[0], "2")


class Signals(DlrunTestCase):
    def rank_script(self, trap):
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        # The child is Python so that it can catch SIGINT: sh's background jobs ignore it.
        child = ("import os, signal, sys, time\n"
                 "def mark(sig, frame):\n"
                 f"    open({marks!r}, 'a').write('child-%s-%s\\n' % (os.environ['RANK'], signal.Signals(sig).name[3:]))\n"
                 "    sys.exit(0)\n"
                 "signal.signal(signal.SIGINT, mark)\n"
                 "signal.signal(signal.SIGTERM, mark)\n"
                 f"open({ready!r}, 'a').write('child\\n')\n"
                 "while True: time.sleep(0.05)\n")
        child_path = os.path.join(self.tmp, "child.py")
        with open(child_path, "w") as f:
            f.write(child)
        return marks, ready, self.script("trap.sh", f"""
{trap}
{PYTHON} {child_path} &
echo $RANK >> {ready}
while true; do sleep 0.05; done
""")

    def run_and_signal(self, sig, expected_code):
        # The rank (sh) gets the signal and ends; its child, once it has.
        marks, ready, script = self.rank_script(
            f'trap "echo rank-$RANK-INT >> {os.path.join(self.tmp, "marks")}; exit 0" INT; '
            f'trap "echo rank-$RANK-TERM >> {os.path.join(self.tmp, "marks")}; exit 0" TERM')
        p = self.start("local", "--nproc", "2", script)
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 4, 30), "ranks did not start")
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, expected_code, err)
        name = signal.Signals(sig).name[3:]
        self.assertEqual(sorted(read_words(marks)),
                         [f"child-0-{name}", f"child-1-{name}", f"rank-0-{name}", f"rank-1-{name}"])
        return err

    def test_sigint_reaches_ranks_and_their_children(self):
        err = self.run_and_signal(signal.SIGINT, 130)
        self.assertIn("got SIGINT: passing it on to 2 ranks (Ctrl-C again to kill them at once)", err)

    def test_sigterm_reaches_ranks_and_their_children(self):
        self.run_and_signal(signal.SIGTERM, 143)

    def test_a_ranks_children_keep_running_while_it_handles_the_stop_signal(self):
        # To the rank's process group, SIGTERM killed a DataLoader's workers while the rank
        # saved its checkpoint (it then failed on them); torchrun signals the rank alone.
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        script = self.script("worker.py", f"""
import os, signal, subprocess, sys, time
worker = subprocess.Popen(["sleep", "300"])  # a worker: same process group, no handler
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
open({ready!r}, "a").write("ready\\n")
while not stop:
    time.sleep(0.05)
time.sleep(0.5)  # saving a checkpoint, with the workers' help
alive = worker.poll() is None
open({marks!r}, "a").write("rank-%s-worker-%s\\n" % (os.environ["RANK"], "alive" if alive else "dead"))
sys.exit(0)  # the worker is left running: it gets SIGTERM now, and is not waited for long
""")
        # Run as the rank, and under a wrapper that SIGTERM ends at once (its program gets the
        # signal then, and its worker only once that program has ended).
        for command in ([PYTHON, script], ["sh", "-c", f"{PYTHON} {script}; echo after"]):
            for path in (marks, ready):
                if os.path.exists(path):
                    os.remove(path)
            p = self.start("local", "--nproc", "2", "--grace", "60", *command)
            self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 30), "ranks did not start")
            started = time.monotonic()
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=60)
            self.assertEqual(p.returncode, 143, err)
            self.assertEqual(sorted(read_words(marks)), ["rank-0-worker-alive", "rank-1-worker-alive"], command)
            self.assertLess(time.monotonic() - started, 30, err)  # the workers ended on SIGTERM, not at --grace
            self.assertNotIn("killing", err)

    def passed_on(self, sig, *extra):
        """dlrun gets `sig` while two ranks that trap it run; returns dlrun, its stderr and
        the marks the ranks left."""
        name = signal.Signals(sig).name[3:]
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        script = self.script("trap.sh", f"""
trap "echo rank-$RANK-{name} >> {marks}; exit 0" {name}
echo $RANK >> {ready}
while true; do sleep 0.05; done
""")
        p = self.start("local", "--nproc", "2", *extra, script)
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 30))
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
        return p, err, sorted(read_words(marks))

    def test_sighup_is_passed_on(self):
        p, err, marks = self.passed_on(signal.SIGHUP)
        self.assertEqual(p.returncode, 129, err)
        self.assertEqual(marks, ["rank-0-HUP", "rank-1-HUP"])

    def test_sigquit_is_passed_on_with_the_grace_period(self):
        # As torchrun: Ctrl-\ lets the ranks finish (it killed them with SIGKILL, unsaved).
        p, err, marks = self.passed_on(signal.SIGQUIT, "--grace", "120")
        self.assertEqual(p.returncode, 131, err)
        self.assertEqual(marks, ["rank-0-QUIT", "rank-1-QUIT"])

    def test_sigusr1_and_sigusr2_reach_each_rank_and_the_job_goes_on(self):
        # Slurm's --signal=USR1@120 and `kill -USR1` ask a program to checkpoint before a
        # deadline: dlrun died of them (the ranks were killed, the job was lost). They go to
        # each rank's own process (a child of it, a DataLoader worker, would die of a signal it
        # does not handle), and the job goes on.
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        child = self.script("child.sh", f"echo child >> {ready}\nexec sleep 300\n")
        script = self.script("usr.sh", f"""
trap "echo rank-$RANK-USR1 >> {marks}" USR1
trap "echo rank-$RANK-USR2 >> {marks}" USR2
{child} &
echo $RANK >> {ready}
until [ "$(grep -c "^rank-$RANK-" {marks} 2>/dev/null)" = 2 ]; do sleep 0.05; done
kill $!
""")
        p = self.start("local", "--nproc", "2", script)
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 4, 30), "ranks did not start")
        p.send_signal(signal.SIGUSR1)
        self.assertTrue(wait_for(lambda: len(read_words(marks)) == 2, 30), "SIGUSR1 did not reach both ranks")
        p.send_signal(signal.SIGUSR2)  # no resize request waits: the ranks', not dlrun resize's
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(sorted(read_words(marks)), ["rank-0-USR1", "rank-0-USR2", "rank-1-USR1", "rank-1-USR2"])
        self.assertIn("got SIGUSR1: passing it on to 2 ranks (the job goes on)", err)
        self.assertIn("got SIGUSR2: passing it on to 2 ranks (the job goes on)", err)

    def test_sigusr1_waits_for_a_rank_until_it_handles_it(self):
        # Sent at once, it ended a rank that had no handler yet (a Python rank importing torch,
        # a rank restarting), and one before the supervisor listened ended dlrun. It now waits
        # for each rank until the rank handles it; one that does not for a while is named.
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        go = os.path.join(self.tmp, "go")
        script = self.script("late.sh", f"""
if [ $RANK = 1 ]; then
  while [ ! -e {go} ]; do sleep 0.05; done  # no handler until then
fi
trap "echo rank-$RANK-USR1 >> {marks}" USR1
echo $RANK >> {ready}
until grep -q "^rank-$RANK-" {marks} 2>/dev/null; do sleep 0.05; done
""")
        p = self.start("local", "--nproc", "2", script)
        time.sleep(0.3)  # dlrun has blocked it by now (its main's first act); the ranks may not exist
        p.send_signal(signal.SIGUSR1)
        self.assertTrue(wait_for(lambda: read_words(marks) == ["rank-0-USR1"], 30), read_words(marks))
        time.sleep(5.5)  # rank 1 still has no handler: the signal waits, it is not killed
        self.assertIsNone(p.poll())
        self.assertEqual(read_words(marks), ["rank-0-USR1"])
        open(go, "w").close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(sorted(read_words(marks)), ["rank-0-USR1", "rank-1-USR1"])
        self.assertIn("warning: rank 1 has set no handler for SIGUSR1 yet: it waits until it does (it would end "
                      "it)", err)

    def test_a_held_signal_goes_to_the_next_attempts_ranks(self):
        # Held for ranks with no handler when a restart with one GPU fewer came, it was looked
        # up by the old ranks' numbers in the new group: dlrun ended with an internal error.
        marks = os.path.join(self.tmp, "marks")
        script = self.script("lost.sh", f"""
if [ "$CUDA_VISIBLE_DEVICES" = 3 ]; then sleep 0.3; exit 3; fi
[ $DLRUN_RESTART_COUNT -lt 2 ] && exec sleep 30  # no handler: the signal waits
trap "echo rank-$RANK-USR1 >> {marks}" USR1
until grep -q "^rank-$RANK-" {marks} 2>/dev/null; do sleep 0.05; done
""")
        p = self.start("local", "--gpus", "2:4", "--max-restarts", "3", "--grace", "1", script,
                       env=dict(self.env, DLRUN_FAKE_GPUS="4"))
        time.sleep(0.2)
        p.send_signal(signal.SIGUSR1)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("continuing with 3 ranks", err)
        self.assertEqual(sorted(read_words(marks)), ["rank-0-USR1", "rank-1-USR1", "rank-2-USR1"])

    def test_a_signal_while_the_ranks_stop_for_a_restart_goes_to_the_next_attempt(self):
        # It was dropped: a deadline notice lost because a rank had just failed.
        marks = os.path.join(self.tmp, "marks")
        stopping = os.path.join(self.tmp, "stopping")
        script = self.script("restart.sh", f"""
if [ $DLRUN_RESTART_COUNT = 0 ]; then
  [ $RANK = 1 ] && {{ sleep 0.3; exit 4; }}
  trap "touch {stopping}; sleep 1.5; exit 0" TERM  # a slow stop
  while true; do sleep 0.05; done
fi
trap "echo rank-$RANK-USR1 >> {marks}" USR1
until grep -q "^rank-$RANK-" {marks} 2>/dev/null; do sleep 0.05; done
""")
        p = self.start("local", "--nproc", "2", "--max-restarts", "1", script)
        self.assertTrue(wait_for(lambda: os.path.exists(stopping), 30))
        p.send_signal(signal.SIGUSR1)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("got SIGUSR1: passing it on to the ranks when they start again", err)
        self.assertEqual(sorted(read_words(marks)), ["rank-0-USR1", "rank-1-USR1"])

    def test_ctrl_c_while_a_failure_stops_the_group_kills_at_once_and_keeps_the_failure(self):
        marks = os.path.join(self.tmp, "marks")
        script = self.script("fail.sh", f"""
if [ $RANK = 1 ]; then
  while [ ! -s {marks} ]; do sleep 0.05; done  # rank 0 runs
  echo boom >&2; exit 5
fi
trap "echo stopped >> {marks}" TERM  # takes the stop, and goes on
echo started >> {marks}
while true; do sleep 0.05; done
""")
        p = self.start("local", "--nproc", "2", "--grace", "600", "--max-restarts", "2", script)
        self.assertTrue(wait_for(lambda: "stopped" in read_words(marks), 60), read_words(marks))
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)  # not the 600 s of --grace
        self.assertEqual(p.returncode, 5, err)  # the failure's code, not 130
        self.assertIn("got SIGINT: killing the other ranks now", err)
        self.assertIn("rank 1 exited with code 5; last 1 line of its stderr", err)
        self.assertNotIn("restarting", err)  # the signal said stop: no restart follows

    def test_a_reader_that_does_not_read_does_not_hold_up_a_stop(self):
        # dlrun's stdout is a pipe nobody reads (a full `less`, a terminal stopped with Ctrl-S).
        reader, writer = os.pipe()
        try:
            p = subprocess.Popen([DLRUN, "local", "--nproc", "2", "--run-dir", self.run_dir(), "sh", "-c",
                                  "while :; do echo line; done"], stdout=writer, stderr=subprocess.PIPE,
                                 env=self.env, start_new_session=True)
            self._started = getattr(self, "_started", []) + [p]
            os.close(writer)
            logs = [os.path.join(self.run_dir(), f"rank-{rank}.log") for rank in (0, 1)]
            # dlrun goes on reading the ranks (into their logs) far beyond what the pipe holds
            # (64 KiB), up to what it queues for the reader (4 MiB, with the prefixes).
            logged = lambda: sum(os.path.getsize(log) for log in logs if os.path.exists(log))
            self.assertTrue(wait_for(lambda: logged() > (1 << 20), 60), logged())
            p.send_signal(signal.SIGTERM)
            _, err = p.communicate(timeout=60)  # it waited in write(2) for good
            self.assertEqual(p.returncode, 143, err)
            # dlrun's own messages reach its stderr, which reads, although they were queued
            # behind the output its stdout never took.
            self.assertIn(b"got SIGTERM: passing it on to 2 ranks", err)
            self.assertIn(b"job", err.splitlines()[-1])
        finally:
            os.close(reader)

    def test_output_log_does_not_wait_for_a_terminal_that_does_not_read(self):
        # Both of dlrun's streams go to one pipe nobody reads: `dlrun logs` (output.log) still
        # shows what the rank printed after the pipe filled, and dlrun's own lines to the end.
        reader, writer = os.pipe()
        try:
            p = subprocess.Popen([DLRUN, "local", "--nproc", "1", "--run-dir", self.run_dir(), "sh", "-c",
                                  "i=0; while [ $i -lt 3000 ]; do echo filler-line-$i-of-the-flood; i=$((i+1)); done; "
                                  "echo after-the-flood; exec sleep 1000"],
                                 stdout=writer, stderr=writer, env=self.env, start_new_session=True)
            self._started = getattr(self, "_started", []) + [p]
            os.close(writer)
            log = os.path.join(self.run_dir(), "output.log")
            def copied():
                if not os.path.exists(log):
                    return False
                with open(log, "rb") as f:
                    return b"after-the-flood" in f.read()

            self.assertTrue(wait_for(copied, 60), "output.log waited for the terminal")
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
            self.assertEqual(p.returncode, 143)
            with open(log, "rb") as f:
                text = f.read().decode()
            self.assertTrue("[0] filler-line-2999-of-the-flood\n" in text, text[-2000:])
            # dlrun's own lines, although its stderr was the stuck pipe: in order, to the last.
            self.assertTrue("got SIGTERM: passing it on to 1 rank" in text, text[-2000:])
            self.assertLess(text.index("after-the-flood"), text.index("got SIGTERM"))
            self.assertIn("job", text.splitlines()[-1])
        finally:
            os.close(reader)

    def test_under_nohup_a_hang_up_is_nothing_to_dlrun_or_its_ranks(self):
        # nohup ignores SIGHUP; dlrun put its own handler in place, stopped the job on the
        # terminal's hang-up and passed it on: the ranks died with what they had not saved.
        ready = os.path.join(self.tmp, "ready")
        gate = os.path.join(self.tmp, "gate")
        script = self.script("r.sh", f"echo $RANK >> {ready}\nwhile [ ! -e {gate} ]; do sleep 0.05; done\necho done $RANK\n")
        p = self.start("local", "-q", "--nproc", "2", script,
                       preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 30), "ranks did not start")
        p.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        open(gate, "w").close()
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(sorted(out.splitlines()), ["[0] done 0", "[1] done 1"], err)
        self.assertNotIn("SIGHUP", err)

    def test_ctrl_z_stops_the_ranks_with_dlrun_and_fg_goes_on(self):
        # The ranks lead process groups of their own, which the terminal's Ctrl-Z did not reach:
        # they kept computing while the shell said the job was stopped. A pause longer than
        # --watchdog is no hang.
        ticks = os.path.join(self.tmp, "ticks")
        script = self.script("tick.sh", f"i=0; while [ $i -lt 60 ]; do echo $i >> {ticks}; "
                                        "touch \"$DLRUN_PROGRESS_FILE\"; i=$((i+1)); sleep 0.05; done\n")
        p = self.start("local", "--nproc", "2", "--watchdog", "1", script)
        self.assertTrue(wait_for(lambda: len(read_words(ticks)) >= 4, 30))
        p.send_signal(signal.SIGTSTP)
        def stopped(pid):
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        self.assertTrue(wait_for(lambda: stopped(p.pid), 30), "dlrun did not stop")
        time.sleep(0.5)
        before = len(read_words(ticks))
        time.sleep(2)  # longer than --watchdog
        self.assertEqual(len(read_words(ticks)), before, "the ranks went on while dlrun was stopped")
        p.send_signal(signal.SIGCONT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(len(read_words(ticks)), 120)

    def test_second_ctrl_c_kills_at_once(self):
        marks, ready, script = self.rank_script(
            f'trap "echo rank-$RANK-INT >> {os.path.join(self.tmp, "marks")}" INT')
        p = self.start("local", "--nproc", "2", "--grace", "120", script)
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 4, 30))
        p.send_signal(signal.SIGINT)
        # dlrun passed the first one on to the ranks, which note it and still run (their
        # children get it only once the ranks have ended).
        self.assertTrue(wait_for(lambda: len(read_words(marks)) == 2, 30), read_words(marks))
        time.sleep(0.5)
        self.assertEqual(sorted(read_words(marks)), ["rank-0-INT", "rank-1-INT"])
        self.assertIsNone(p.poll(), "dlrun ended although its ranks go on")
        start = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertLess(time.monotonic() - start, 30)
        self.assertEqual(p.returncode, 130)
        self.assertIn("got SIGINT again: killing all ranks now", err)


class NoOrphans(DlrunTestCase):
    def test_sigkill_of_dlrun_takes_ranks_and_children_down(self):
        pids = os.path.join(self.tmp, "pids")
        script = self.script("tree.sh", f"""
sleep 1000 &
echo $! >> {pids}
sh -c 'sleep 1000' &
echo $! >> {pids}
echo $$ >> {pids}
wait
""")
        p = self.start("local", "--nproc", "3", script)
        self.assertTrue(wait_for(lambda: len(read_pids(pids)) == 9, 30), "ranks did not start")
        procs = read_pids(pids)
        try:
            p.kill()
            p.wait(timeout=10)
            alive = wait_for(lambda: [pid for pid in procs if pid_alive(pid)] == [], 5)
            self.assertTrue(alive, f"orphans left: {[pid for pid in procs if pid_alive(pid)]}")
        finally:
            kill_quietly(procs)

    def test_background_children_do_not_outlive_a_finished_job(self):
        pids = os.path.join(self.tmp, "pids")
        r = self.dlrun("local", "--nproc", "2", "sh", "-c", f"sleep 1000 & echo $! >> {pids}")
        self.assertEqual(r.returncode, 0)
        procs = read_pids(pids)
        self.assertEqual(len(procs), 2)
        try:
            self.assertTrue(wait_for(lambda: not any(pid_alive(pid) for pid in procs), 5))
        finally:
            kill_quietly(procs)

    def test_sigkill_of_dlrun_takes_processes_that_left_the_group_down(self):
        pids = os.path.join(self.tmp, "pids")
        script = self.script("escape.sh", f"""
setsid sh -c 'echo $$ >> {pids}; exec sleep 1000' &
sh -c 'sleep 1000 & echo $! >> {pids}'
wait
""")
        p = self.start("local", "--nproc", "2", script)
        self.assertTrue(wait_for(lambda: len(read_pids(pids)) == 4, 30), "ranks did not start")
        procs = read_pids(pids)
        try:
            self.assertTrue(all(pid_alive(pid) for pid in procs))
            p.kill()
            p.wait(timeout=10)
            gone = wait_for(lambda: not any(pid_alive(pid) for pid in procs), 10)
            self.assertTrue(gone, f"escaped processes left: {[pid for pid in procs if pid_alive(pid)]}")
        finally:
            kill_quietly(procs)

    def test_a_job_submitted_from_a_rank_is_not_the_ranks(self):
        # Its supervisor leaves the rank's process group (it detaches): it must outlive the
        # dlrun local that ran the rank, and run its own job to the end.
        go = os.path.join(self.tmp, "go")
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(f'command = ["sh", "-c", "while [ ! -e {go} ]; do sleep 0.05; done"]\n[resources]\nnproc = 1\n')
        r = self.dlrun("local", "--nproc", "1", DLRUN, "submit", "--parsable", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.split()[-1]
        status = self.dlrun("status", job_id)
        self.assertIn(status.returncode, (4, 5), status.stdout)  # PENDING or RUNNING, not lost
        open(go, "w").close()
        self.assertTrue(wait_for(lambda: self.dlrun("status", job_id).returncode == 0, 60),
                        self.dlrun("status", job_id).stdout)

    def test_processes_that_left_the_group_end_with_the_job_and_with_each_attempt(self):
        pids = os.path.join(self.tmp, "pids")
        attempt_pids = os.path.join(self.tmp, "attempt")
        # Attempt 0 leaves a setsid'ed sleep and fails; attempt 1 finds it gone, leaves one
        # more and succeeds; after dlrun none is left.
        script = self.script("escape.sh", f"""
setsid sh -c 'echo $$ >> {pids}.'$DLRUN_RESTART_COUNT'; exec sleep 1000' &
while [ ! -s {pids}.$DLRUN_RESTART_COUNT ]; do sleep 0.01; done
if [ "$DLRUN_RESTART_COUNT" = 1 ]; then
  state=$(sed 's/.*) //' /proc/$(cat {pids}.0)/stat 2>/dev/null | cut -c1)
  [ -n "$state" ] && [ "$state" != Z ] && echo "attempt 0's process is alive ($state)" && exit 9
  exit 0
fi
exit 1
""")
        r = self.dlrun("local", "--nproc", "1", "--max-restarts", "1", script)
        procs = read_pids(pids + ".0") + read_pids(pids + ".1")
        try:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual(len(procs), 2)
            # Said each time (torchrun leaves them running: they vanished without a word).
            self.assertEqual(r.stderr.count("dlrun: stopped a process the ranks had left running outside their process "
                                            "groups (sleep (pid "), 2, r.stderr)
            self.assertTrue(wait_for(lambda: not any(pid_alive(pid) for pid in procs), 10),
                            f"escaped processes left: {[pid for pid in procs if pid_alive(pid)]}")
        finally:
            kill_quietly(procs)


class Gpus(DlrunTestCase):
    def gpu_env(self, **extra):
        env = dict(self.env, DLRUN_FAKE_GPUS="4")
        env.update(extra)
        return env

    def visible(self, *args, env):
        r = self.dlrun("local", *args, "--", *PRINT_ENV, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return {rank: json.loads(lines[0])["CUDA_VISIBLE_DEVICES"] for rank, lines in rank_lines(r.stdout).items()}

    def test_one_rank_per_gpu_each_with_its_own_device(self):
        self.assertEqual(self.visible("--gpus", "2", env=self.gpu_env()), {0: "0", 1: "1"})
        self.assertEqual(self.visible("--gpus", "1,3", env=self.gpu_env()), {0: "1", 1: "3"})

    def test_gpus_by_number_map_to_ranks_in_order(self):
        # Rank R runs on the R-th GPU listed: its CUDA_VISIBLE_DEVICES is that GPU, LOCAL_RANK
        # is R; with --gpu-binding all, every rank sees them all and cuda:LOCAL_RANK is its own.
        r = self.dlrun("local", "--gpus", "3,0,2", "--", *PRINT_ENV, env=self.gpu_env())
        self.assertEqual(r.returncode, 0, r.stderr)
        seen = {rank: json.loads(lines[0]) for rank, lines in rank_lines(r.stdout).items()}
        self.assertEqual({rank: (e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for rank, e in seen.items()},
                         {0: ("0", "3"), 1: ("1", "0"), 2: ("2", "2")})
        r = self.dlrun("local", "--gpus", "3,1", "--gpu-binding", "all", "--", *PRINT_ENV, env=self.gpu_env())
        seen = {rank: json.loads(lines[0]) for rank, lines in rank_lines(r.stdout).items()}
        self.assertEqual({rank: (e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for rank, e in seen.items()},
                         {0: ("0", "3,1"), 1: ("1", "3,1")})

    def test_a_gpu_that_does_not_exist_is_named(self):
        r = self.dlrun("local", "--gpus", "0,7", "true", env=self.gpu_env())
        self.assertEqual((r.returncode, r.stderr),
                         (2, "dlrun: error: --gpus 0,7: GPU 7 does not exist: this machine has 4 GPUs (0,1,2,3)\n"))

    def test_existing_cuda_visible_devices_is_honoured(self):
        env = self.gpu_env(CUDA_VISIBLE_DEVICES="2,3")
        self.assertEqual(self.visible("--gpus", "2", env=env), {0: "2", 1: "3"})
        r = self.dlrun("local", "--gpus", "0", "true", env=env)
        self.assertEqual(r.returncode, 2)
        r = self.dlrun("local", "--gpus", "1,2", "true", env=env)
        self.assertIn("--gpus 1,2: GPU 1 is not visible: CUDA_VISIBLE_DEVICES=2,3 (unset it to choose among all "
                      "of this machine's GPUs)", r.stderr)

    def test_gpu_binding_all_shows_every_rank_all_devices(self):
        self.assertEqual(self.visible("--gpus", "2", "--gpu-binding", "all", env=self.gpu_env()), {0: "0,1", 1: "0,1"})

    def test_too_many_gpus(self):
        r = self.dlrun("local", "--gpus", "5", "true", env=self.gpu_env())
        self.assertEqual(r.returncode, 2)
        self.assertIn("--gpus 5: only 4 GPUs available (0,1,2,3)\n", r.stderr)  # no GPU 5 to name

    def test_one_gpu_by_its_number(self):
        # `--gpus 3` is a count: GPU 3 alone could be had only through CUDA_VISIBLE_DEVICES.
        self.assertEqual(self.visible("--gpus", "device=3", env=self.gpu_env()), {0: "3"})

    @unittest.skipIf(os.path.exists("/dev/nvidiactl"), "this machine has a GPU driver")
    def test_no_gpu_names_nproc(self):
        r = self.dlrun("local", "--gpus", "2", "true")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no GPU on this machine", r.stderr)
        self.assertIn("use --nproc N to run CPU ranks", r.stderr)


class PythonDistributed(DlrunTestCase):
    def test_unmodified_env_script_does_a_gloo_allreduce(self):
        r = self.dlrun("local", "--nproc", "3", PYTHON, os.path.join(DATA, "allreduce.py"), timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        lines = sorted(r.stdout.splitlines())
        self.assertEqual(lines, [f"[{i}] rank {i} of 3 local {i} sum 6 expected 6" for i in range(3)])


if __name__ == "__main__":
    unittest.main()
