"""`dlrun run`: one job across several hosts. The hosts are network namespaces with real
OpenSSH servers (netns.py); ranks do real gloo allreduces across them."""
import collections
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import DLRUN, PYTHON, DlrunTestCase, kill_quietly, pid_alive, processes, read_pids, read_words, wait_for
import netns

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
UNAVAILABLE = netns.why_unavailable()


def agent_processes(job_marker):
    """Pids of dlrun agents (and their ssh) whose command line mentions job_marker."""
    return processes(lambda argv: " agent " in " ".join(argv) and job_marker in " ".join(argv))


def rendezvous_marker(launcher_pid):
    """What marks the agents of one launcher's job: the port of its rendezvous, read from the
    command line of the ssh sessions it started (an agent's command line says only where to
    meet). None until they exist."""
    for pid in processes(lambda argv: " agent " in " ".join(argv)):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                joined = " ".join(f.read().decode(errors="replace").split("\0"))
        except (FileNotFoundError, ProcessLookupError):
            continue
        match = re.search(r"--rendezvous \S+(:\d+) ", joined + " ")
        if parent == launcher_pid and match:
            return match.group(1) + " "
    return None


class ClusterTestCase(DlrunTestCase):
    hosts = 3

    @classmethod
    def setUpClass(cls):
        if UNAVAILABLE:
            raise unittest.SkipTest(UNAVAILABLE)
        import tempfile
        cls.cluster_tmp = tempfile.mkdtemp(prefix="dlrun-cluster-")
        cls.cluster = netns.Cluster(cls.hosts, cls.cluster_tmp)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        import shutil
        shutil.rmtree(cls.cluster_tmp, ignore_errors=True)

    def run_args(self, hosts, *args):
        return ["run", "--ssh-config", self.cluster.ssh_config, "--connect-timeout", "3",
                "--hosts", ",".join(hosts), "--run-dir", self.run_dir(), *args]

    def host(self, i, slots=1):
        return f"{self.cluster.addresses[i]}:{slots}"

    def run_args_with_alias(self, alias, hosts, *args):
        """run_args() with an ssh configuration that also has `alias` (a Host block) in it."""
        config = os.path.join(self.tmp, "ssh_config")
        with open(config, "w") as f, open(self.cluster.ssh_config) as base:
            f.write(alias + "\n" + base.read())
        args = self.run_args(hosts, *args)
        args[args.index("--ssh-config") + 1] = config
        return args


class AcrossHosts(ClusterTestCase):
    def test_gloo_allreduce_across_three_hosts(self):
        r = self.dlrun(*self.run_args([self.host(0, 2), self.host(1), self.host(2)], PYTHON,
                                      os.path.join(DATA, "allreduce.py")), timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        a = self.cluster.addresses
        expected = sorted([f"[{a[0]}:0] rank 0 of 4 local 0 sum 10 expected 10",
                           f"[{a[0]}:1] rank 1 of 4 local 1 sum 10 expected 10",
                           f"[{a[1]}:2] rank 2 of 4 local 0 sum 10 expected 10",
                           f"[{a[2]}:3] rank 3 of 4 local 0 sum 10 expected 10"])
        self.assertEqual(sorted(r.stdout.splitlines()), expected)
        for rank in range(4):
            self.assertTrue(os.path.exists(os.path.join(self.run_dir(), f"rank-{rank}.log")))

    def test_ranks_get_global_numbers_and_a_reachable_master(self):
        r = self.dlrun(*self.run_args([self.host(0), self.host(1, 2)], "sh", "-c",
                                      "echo $RANK $LOCAL_RANK $WORLD_SIZE $NODE_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                                      "$GLOO_SOCKET_IFNAME"))
        self.assertEqual(r.returncode, 0, r.stderr)
        a = self.cluster.addresses
        rows = sorted(line.split("] ", 1)[1] for line in r.stdout.splitlines())
        self.assertEqual(rows, [f"0 0 3 0 1 {a[0]} eth0", f"1 0 3 1 2 {a[0]} eth0", f"2 1 3 1 2 {a[0]} eth0"])

    def test_a_host_named_only_in_the_ssh_configuration(self):
        # An alias (or a host behind a ProxyJump) does not resolve here: dlrun looked it up
        # itself to find where the host reaches the rendezvous, and refused it (exit 2).
        args = self.run_args_with_alias(f"Host trainer-a\n  HostName {self.cluster.addresses[0]}\n",
                                        ["trainer-a:1", self.host(1)], "sh", "-c", "echo $RANK $WORLD_SIZE $MASTER_ADDR")
        r = self.dlrun(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        a = self.cluster.addresses
        self.assertEqual(sorted(line.split("] ", 1)[1] for line in r.stdout.splitlines()),
                         [f"0 2 {a[0]}", f"1 2 {a[0]}"])

    def test_this_machine_reached_over_ssh_by_loopback_gives_the_others_a_master_they_reach(self):
        # An ssh alias for 127.0.0.1 (or user@localhost, or a name /etc/hosts maps to 127.0.1.1)
        # as node 0: its ranks got MASTER_ADDR=127.0.0.1 and GLOO_SOCKET_IFNAME=lo, and the
        # other hosts' ranks waited for torch's store timeout.
        port = 20000 + os.getpid() % 20000
        self.cluster.start_loopback_sshd(port)
        args = self.run_args_with_alias(f"Host me\n  HostName 127.0.0.1\n  Port {port}\n", ["me:1", self.host(0)],
                                        "sh", "-c", "echo $RANK $MASTER_ADDR")
        r = self.dlrun(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        here = self.cluster.addresses[0].rsplit(".", 1)[0] + ".1"  # this machine on the bridge
        self.assertEqual(sorted(line.split("] ", 1)[1] for line in r.stdout.splitlines()), [f"0 {here}", f"1 {here}"])
        args[-1] = f"{PYTHON} {os.path.join(DATA, 'allreduce.py')}"
        r = self.dlrun(*args, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(len([line for line in r.stdout.splitlines() if "sum 3 expected 3" in line]), 2, r.stdout)

    def test_x_gives_every_host_the_variables_it_names_and_nccl_ones_go_without_it(self):
        # Only the first host (this machine's shell) had them; the others' ranks ran with
        # dlrun's guess of the interface and without NCCL_DEBUG (horovodrun's -x).
        self.env.update({"NCCL_DEBUG": "INFO", "MYVAR": "hello", "WANDB_MODE": "offline", "GLOO_SOCKET_IFNAME": "eth0",
                         "UNNAMED": "stays"})
        args = self.run_args([self.host(0), self.host(1)], "-x", "MYVAR", "-x", "FOO=a b", "-x", "WANDB_*",
                             "--env", "GLOO_SOCKET_IFNAME", "sh", "-c",
                             'echo "$RANK $NCCL_DEBUG $MYVAR $FOO $WANDB_MODE $GLOO_SOCKET_IFNAME ${UNNAMED:-none}"')
        r = self.dlrun(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(line.split("] ", 1)[1] for line in r.stdout.splitlines()),
                         ["0 INFO hello a b offline eth0 none", "1 INFO hello a b offline eth0 none"])
        for bad, said in (("RANK=1", "dlrun sets RANK"), ("NOT_SET_HERE", "not set in this shell")):
            r = self.dlrun(*self.run_args([self.host(0)], "-x", bad, "true"))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(said, r.stderr)

    def test_hostfile_and_this_machine_without_ssh(self):
        hostfile = os.path.join(self.tmp, "hosts")
        with open(hostfile, "w") as f:
            f.write(f"# two machines\nlocalhost slots=1\n{self.cluster.addresses[1]} slots=1  # the second\n")
        args = self.run_args(["x"], "sh", "-c", "echo $RANK")
        i = args.index("--hosts")
        args[i:i + 2] = ["--hostfile", hostfile]
        r = self.dlrun(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.splitlines()), [f"[{self.cluster.addresses[1]}:1] 1", "[localhost:0] 0"])


class Submitted(ClusterTestCase):
    hosts = 2

    def test_job_file_with_ssh_scheduler(self):
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(f'name = "multi"\ncommand = ["{PYTHON}", "{os.path.join(DATA, "allreduce.py")}"]\n'
                    f'[scheduler]\nkind = "ssh"\nhosts = "{self.host(0)},{self.host(1)}"\n'
                    f'ssh_config = "{self.cluster.ssh_config}"\n'
                    f'[env]\nDLRUN_SSH_TEST = "1"\n')
        env = dict(self.env, DLRUN_CPU_SLOTS="1")
        r = self.dlrun("submit", "--wait", "--parsable", job, env=env, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        logs = self.dlrun("logs", job_id, env=env).stdout
        self.assertIn(f"[{self.cluster.addresses[1]}:1] rank 1 of 2 local 0 sum 3 expected 3", logs)
        status = self.dlrun("status", "--json", job_id, env=env)
        self.assertEqual(json.loads(status.stdout)["ranks"], 2)

    def test_what_the_job_file_gives_the_ranks_reaches_other_hosts(self):
        # [env], checkpoint_dir, export_env and log_dir reach the ranks on another host: ssh
        # carries no environment, the agent's plan does (issue 18: they were ignored there).
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write('command = ["sh", "-c", "echo job=$DLRUN_JOB_ID env=$GREETING kept=$MY_TOKEN '
                    'ckpt=$DLRUN_CHECKPOINT_DIR"]\n'
                    'checkpoint_dir = "ckpt"\nlog_dir = "logs"\nexport_env = ["MY_TOKEN"]\n'
                    f'[scheduler]\nkind = "ssh"\nhosts = "{self.host(1)}"\n'
                    f'ssh_config = "{self.cluster.ssh_config}"\n'
                    '[env]\nGREETING = "hello"\n')
        env = dict(self.env, DLRUN_CPU_SLOTS="1", MY_TOKEN="t0k3n")
        r = self.dlrun("submit", "--wait", "--parsable", job, env=env, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        line = f"job={job_id} env=hello kept=t0k3n ckpt={os.path.join(self.tmp, 'ckpt')}"
        self.assertIn(f"[{self.cluster.addresses[1]}:0] {line}", self.dlrun("logs", job_id, env=env).stdout)
        # The host shares this file system: its rank log is in log_dir/ID.
        with open(os.path.join(self.tmp, "logs", job_id, "rank-0.log")) as f:
            self.assertEqual(f.read(), line + "\n")


    def test_the_job_file_takes_dlrun_runs_host_options(self):
        # remote_dlrun, connect_timeout, join_timeout: a job that needed --remote-dlrun could not
        # be submitted. A missing ssh_config is refused at submit (it failed the queued job, 69).
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(f'command = ["true"]\n[scheduler]\nkind = "ssh"\nhosts = "{self.host(1)}"\n'
                    f'ssh_config = "{self.cluster.ssh_config}"\nremote_dlrun = "/nonexistent/dlrun"\n'
                    'connect_timeout = 5\njoin_timeout = 30\n')
        env = dict(self.env, DLRUN_CPU_SLOTS="1")
        r = self.dlrun("submit", "--wait", "--parsable", job, env=env, timeout=180)
        self.assertEqual(r.returncode, 69, r.stderr)
        logs = self.dlrun("logs", r.stdout.strip(), env=env)
        self.assertIn("the shell there found no /nonexistent/dlrun", logs.stdout + logs.stderr)
        with open(job, "w") as f:
            f.write(f'command = ["true"]\n[scheduler]\nkind = "ssh"\nhosts = "{self.host(1)}"\n'
                    f'ssh_config = "{self.tmp}/no-such-config"\n')
        r = self.dlrun("submit", job, env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f"ssh_config {self.tmp}/no-such-config: cannot read it: No such file or directory", r.stderr)


class Failures(ClusterTestCase):
    hosts = 2

    def test_unreachable_hosts_are_all_named_and_nothing_starts(self):
        self.cluster.stop_sshd(1)
        try:
            missing = f"10.233.{self.cluster.net}.99"
            start = time.monotonic()
            r = self.dlrun(*self.run_args([self.host(0), self.host(1), f"{missing}:1"], "true"), timeout=120)
            self.assertLess(time.monotonic() - start, 60)
            self.assertEqual(r.returncode, 69, r.stderr)
            self.assertIn("dlrun: error: cannot reach 2 of 3 hosts over ssh (nothing was started):", r.stderr)
            self.assertRegex(r.stderr, rf"{re.escape(self.cluster.addresses[1])}: .*(refused|closed)")
            self.assertRegex(r.stderr, rf"{re.escape(missing)}: .*(timed out|No route|unreachable|no answer)")
            self.assertNotIn(self.cluster.addresses[0] + ":", r.stderr.split("over ssh")[1])
        finally:
            self.cluster.start_sshd(1)

    def test_a_host_where_no_dlrun_agent_ran_fails_the_job(self):
        # What --remote-dlrun names is missing, or is not dlrun (it exited 0: the job had
        # succeeded with no rank run there).
        for remote, words in (("/bin/true", "what ran there ended with code 0 before it joined the job: /bin/true "
                                            "there is not dlrun's agent"),
                              ("/nonexistent/dlrun", "ssh exited with code 127 before it joined the job: the shell "
                                                     "there found no /nonexistent/dlrun")):
            r = self.dlrun(*self.run_args([self.host(0), self.host(1)], "--remote-dlrun", remote, "--join-timeout",
                                          "60", "true"), timeout=120)
            self.assertEqual(r.returncode, 69, r.stderr)
            self.assertIn(words, r.stderr)
            self.assertIn("so no rank ran on it (give the path of dlrun on the hosts with --remote-dlrun)", r.stderr)

    def test_failing_rank_stops_every_host(self):
        pids = os.path.join(self.tmp, "pids")
        script = self.script("fail.sh", f"""
if [ "$RANK" = 1 ]; then
  until [ -s {pids} ]; do sleep 0.02; done  # rank 0 is up: "every host stopped" checks its pid
  echo "bad batch" >&2; exit 7
fi
echo $$ >> {pids}
exec sleep 300
""")
        start = time.monotonic()
        r = self.dlrun(*self.run_args([self.host(0), self.host(1)], script), timeout=120)
        self.assertLess(time.monotonic() - start, 60)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertIn(f"dlrun[{self.cluster.addresses[1]}]: error: rank 1 exited with code 7", r.stderr)
        self.assertIn("bad batch", r.stderr)
        self.assertEqual(len(read_pids(pids)), 1)
        self.assertTrue(wait_for(lambda: not any(pid_alive(p) for p in read_pids(pids)), 30), "a rank survived")

    def test_a_ranks_own_exit_255_is_not_a_lost_host(self):
        r = self.dlrun(*self.run_args([self.host(0), self.host(1)], "sh", "-c", '[ "$RANK" = 1 ] && exit 255; sleep 300'),
                       timeout=120)
        self.assertEqual(r.returncode, 255, r.stderr)
        self.assertIn(f"dlrun[{self.cluster.addresses[1]}]: error: rank 1 exited with code 255", r.stderr)
        self.assertNotIn("lost host", r.stderr)

    def test_host_killed_mid_run_stops_the_others(self):
        pids = os.path.join(self.tmp, "pids")
        script = self.script("sleep.sh", f"echo $$ >> {pids}\nexec sleep 300\n")
        p = self.start(*self.run_args([self.host(0), self.host(1)], script))
        try:
            self.assertTrue(wait_for(lambda: len(read_pids(pids)) == 2, 30), "ranks did not start")
            start = time.monotonic()
            self.cluster.kill_host(1)
            out, err = p.communicate(timeout=60)
            self.assertLess(time.monotonic() - start, 30)
            # It read "host … exited with code 255; it wrote nothing to stderr" and exit 255,
            # which a rank's own exit 255 also reads as.
            self.assertEqual(p.returncode, 69, err)
            self.assertIn(f"lost host {self.cluster.addresses[1]} (node 1): its ssh session ended (exit 255)", err)
            self.assertTrue(wait_for(lambda: not any(pid_alive(pid) for pid in read_pids(pids)), 10))
        finally:
            kill_quietly(read_pids(pids))
            p.kill()
            p.communicate()
            self.cluster.revive(1)

    def test_agent_with_a_wrong_secret_is_refused(self):
        script = self.script("sleep.sh", "exec sleep 300\n")
        p = self.start(*self.run_args([self.host(0), self.host(1)], script))
        try:
            marker = wait_for(lambda: rendezvous_marker(p.pid), 30)
            self.assertTrue(marker)
            procs = wait_for(lambda: agent_processes(marker), 30)
            self.assertTrue(procs)
            with open(f"/proc/{procs[0]}/cmdline", "rb") as f:
                argv = f.read().decode().split("\0")
            joined = " ".join(argv)
            self.assertNotRegex(joined, r"[0-9a-f]{32}", "the secret is visible in a command line")
            endpoint = re.search(r"--rendezvous (\S+)", joined).group(1)
            address, port = endpoint.rsplit(":", 1)
            self.assertEqual(listening_addresses(int(port)), [address], "not only where the hosts reach it")
            # Its stdin stays open, as an ssh session's does (an agent whose stdin closes before
            # it joined ends at once: the launcher is gone).
            agent = subprocess.Popen([DLRUN, "agent", "--rendezvous", endpoint, "--node", "0"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
            agent.stdin.write("0123456789abcdef0123456789abcdef\n")
            agent.stdin.flush()
            try:
                agent.wait(timeout=60)
            finally:
                agent.stdin.close()
            stderr = agent.stderr.read()
            agent.stdout.close()
            agent.stderr.close()
            self.assertEqual(agent.returncode, 2, stderr)
            self.assertIn("the launcher's rendezvous refused this agent: wrong job secret", stderr)
        finally:
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=60)
        self.assertIn("rendezvous: refused an agent from", err)
        self.assertEqual(p.returncode, 130)


class Stopping(ClusterTestCase):
    hosts = 2

    def trap_script(self):
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        return marks, ready, self.script("trap.sh", f"""
trap 'echo $RANK-INT >> {marks}; exit 0' INT
trap 'echo $RANK-TERM >> {marks}; exit 0' TERM
echo $RANK >> {ready}
while true; do sleep 0.05; done
""")

    def test_ctrl_c_reaches_every_rank_on_every_host(self):
        marks, ready, script = self.trap_script()
        p = self.start(*self.run_args([self.host(0), self.host(1)], script))
        self.assertTrue(wait_for(lambda: len(read_words(ready)) == 2, 30))
        marker = rendezvous_marker(p.pid)
        self.assertTrue(marker and agent_processes(marker))
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertEqual(sorted(read_words(marks)), ["0-INT", "1-INT"])
        self.assertTrue(wait_for(lambda: agent_processes(marker) == [], 10), "an agent survived")

    def test_a_stop_while_the_hosts_start_up_reaches_their_ranks(self):
        # The agents join late (a slow ssh login): SIGTERM comes before any has joined. It used
        # to be lost: the ranks started after it and were killed only when --grace ran out.
        slow = self.script("slow-dlrun.sh", f'sleep 2\nexec {DLRUN} "$@"\n')
        marks, ready, script = self.trap_script()
        p = self.start(*self.run_args([self.host(0), self.host(1)], "--remote-dlrun", slow, "--grace", "60", script))
        line = p.stderr.readline()
        self.assertIn("logs in", line)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 143, line + err)
        self.assertNotIn("killing them", err)

    def test_a_stop_held_for_hosts_that_then_miss_the_join_timeout_ends_their_sessions(self):
        # The stop is held at the rendezvous for agents that have not joined; when they never do,
        # their ssh sessions are ended then (dlrun waited out --grace).
        slow = self.script("slower-dlrun.sh", f'sleep 30\nexec {DLRUN} "$@"\n')
        start = time.monotonic()
        p = self.start(*self.run_args([self.host(0), self.host(1)], "--remote-dlrun", slow, "--join-timeout", "3",
                                      "--grace", "60", "true"))
        line = p.stderr.readline()
        self.assertIn("logs in", line)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 143, line + err)
        self.assertIn("not every host joined the rendezvous within 3 s", err)
        self.assertNotIn("killing them", err)
        self.assertLess(time.monotonic() - start, 25)  # neither --grace (60 s) nor the agents' sleep (30 s)

    def test_ctrl_c_while_the_hosts_are_checked_is_a_stop(self):
        # A host that does not answer holds the ssh check for --connect-timeout; SIGINT then used
        # to kill dlrun outright, and the job was recorded as lost.
        missing = f"10.233.{self.cluster.net}.99:1"
        p = self.start(*self.run_args([self.host(0), missing], "true"))
        time.sleep(1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("stopped by SIGINT while the hosts were being checked: nothing was started", err)

    def test_hosts_that_cannot_join_leave_nothing_behind(self):
        # The rendezvous on an address the hosts cannot reach (loopback): their agents retry
        # connecting. At the join timeout dlrun ends their ssh at once (it waited --grace for
        # ranks that never ran), and the agents end with their ssh (they ran on for 30 s).
        start = time.monotonic()
        p = self.start(*self.run_args([self.host(0), self.host(1)], "--iface", "lo", "--join-timeout", "3",
                                      "--grace", "60", "true"))
        marker = None
        deadline = time.monotonic() + 30
        while marker is None and time.monotonic() < deadline and p.poll() is None:
            marker = rendezvous_marker(p.pid)
            time.sleep(0.05)
        self.assertIsNotNone(marker, "no agent was started")
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 69, err)
        self.assertIn("not every host joined the rendezvous within 3 s", err)
        self.assertNotIn("killing them", err)
        # Not when the agents gave up on their own (30 s of trying to connect), nor after --grace.
        self.assertLess(time.monotonic() - start, 25)
        self.assertTrue(wait_for(lambda: agent_processes(marker) == [], 10), "an agent survived")

    def test_kill_9_of_the_launcher_leaves_no_remote_process(self):
        pids = os.path.join(self.tmp, "pids")
        script = self.script("sleep.sh", f"echo $$ >> {pids}\nexec sleep 300\n")
        p = self.start(*self.run_args([self.host(0), self.host(1)], "--grace", "1", script))
        self.assertTrue(wait_for(lambda: len(read_pids(pids)) == 2, 30))
        marker = rendezvous_marker(p.pid)
        self.assertTrue(marker and agent_processes(marker))
        try:
            p.kill()
            p.wait()
            self.assertTrue(wait_for(lambda: not any(pid_alive(x) for x in read_pids(pids)), 20), "a rank survived")
            self.assertTrue(wait_for(lambda: agent_processes(marker) == [], 20), "an agent survived")
        finally:
            kill_quietly(read_pids(pids))


def listening_addresses(port):
    """The local addresses (dotted IPv4) with a TCP socket listening on `port`."""
    found = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(socket.inet_ntoa(int(address, 16).to_bytes(4, "little")))
    return found


def cpu_seconds(pid):
    """User plus system CPU time of one process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def closed_by_peer(sock):
    """True once the other end has closed (or reset) the connection; what it sent before
    (a refusal) is read and dropped."""
    try:
        while sock.recv(4096, socket.MSG_DONTWAIT):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def idle_connection(port):
    """A connection to the rendezvous that never says anything (its connect may still be
    under way: a server that stopped accepting leaves it in the backlog)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    return s


def wrong_secret(port):
    """Joins with a wrong secret; returns the server's answer (b"" when there was none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"JOIN 0123456789abcdef0123456789abcdef 0 0 127.0.0.1 1\n")
            return s.recv(200)
    except OSError:
        return b""


class LocalHosts(DlrunTestCase):
    """`dlrun run` options with this machine as the hosts (no ssh, no namespaces): each does
    what it says (issue 18: --color auto never coloured, -q let informational lines through)."""

    def test_a_cancelled_job_of_kind_ssh_says_who_cancelled_it(self):
        # Its reason read "dlrun run exited with code 143".
        job = os.path.join(self.tmp, "job.toml")
        with open(job, "w") as f:
            f.write(f'command = ["sh", "-c", "touch {self.tmp}/up; sleep 60"]\n'
                    '[scheduler]\nkind = "ssh"\nhosts = "localhost:1"\n')
        r = self.dlrun("submit", "--parsable", job)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip()
        self.assertTrue(wait_for(lambda: os.path.exists(os.path.join(self.tmp, "up")), 60))
        self.assertEqual(self.dlrun("cancel", job_id).returncode, 0)
        status = json.loads(self.dlrun("status", "--json", job_id).stdout)
        self.assertEqual((status["state"], status["reason"]), ("CANCELLED", "by dlrun cancel"))

    def test_color_auto_colours_on_the_launchers_terminal(self):
        import pty
        env = dict(self.env, TERM="xterm")
        env.pop("NO_COLOR")
        master, slave = pty.openpty()
        try:
            p = subprocess.run([DLRUN, "run", "-q", "--hosts", "localhost:1", "--run-dir", self.run_dir(),
                                "echo", "x"], stdout=slave, stderr=subprocess.PIPE, env=env, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(os.read(master, 4096).decode(), "\x1b[36m[localhost:0]\x1b[0m x\r\n")
        finally:
            os.close(master)
            os.close(slave)
        r = self.dlrun("run", "-q", "--hosts", "localhost:1", "--run-dir", self.run_dir(), "echo", "x")
        self.assertEqual(r.stdout, "[localhost:0] x\n")  # a pipe: no colour

    def test_sigusr1_reaches_every_rank_through_the_agents(self):
        marks = os.path.join(self.tmp, "marks")
        ready = os.path.join(self.tmp, "ready")
        script = self.script("usr.sh", f"""
trap "echo $RANK-USR1 >> {marks}" USR1
echo $RANK >> {ready}
while [ ! -s {marks} ] || [ $(wc -l < {marks}) -lt 3 ]; do sleep 0.05; done
""")
        p = self.start("run", "--hosts", "localhost:2,127.0.0.1:1", "--run-dir", self.run_dir(), script)
        # Early, before the agents have joined (it was sent to none of them) or their ranks exist.
        time.sleep(0.3)
        p.send_signal(signal.SIGUSR1)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(sorted(read_words(marks)), ["0-USR1", "1-USR1", "2-USR1"])
        self.assertIn("dlrun: got SIGUSR1: passing it on to the hosts' ranks (the job goes on)", err)

    def test_ssh_options_leave_the_program_alone(self):
        # --ssh-option took every word after it, the program's too ("no program given").
        r = self.dlrun("run", "-q", "--hosts", "localhost:1", "--ssh-option", "ConnectTimeout=5",
                       "--ssh-option=BatchMode=yes", "sh", "-c", "echo ok")
        self.assertEqual((r.returncode, r.stdout), (0, "[localhost:0] ok\n"), r.stderr)

    def test_an_ssh_option_that_ssh_refuses_is_a_usage_error_not_an_unreachable_host(self):
        # A misspelt option made every host "unreachable" (exit 69), as if the network were down.
        r = self.dlrun("run", "--hosts", "nosuch.invalid:1", "--ssh-option", "ServerAliveIntervl=5", "true")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("ssh refuses --ssh-option ServerAliveIntervl=5: ", r.stderr)
        self.assertIn("Bad configuration option", r.stderr)
        self.assertNotIn("cannot reach", r.stderr)

    def test_a_host_check_given_up_leaves_nothing_of_its_ssh_behind(self):
        # A host behind a ProxyCommand that never answers: the probe's ssh gave up (or was
        # killed) after the connect timeout, and its ProxyCommand lived on, its parent 1.
        marker = f"{37 + os.getpid() % 1000}.25"
        config = os.path.join(self.tmp, "ssh_config")
        with open(config, "w") as f:
            f.write(f"Host stalled\n  ProxyCommand sh -c 'sleep {marker}; exec true'\n  StrictHostKeyChecking no\n"
                    "  UserKnownHostsFile /dev/null\n")
        r = self.dlrun("run", "--hosts", "stalled:1", "--ssh-config", config, "--connect-timeout", "1", "true")
        self.assertEqual(r.returncode, 69, r.stderr)
        self.assertIn("stalled: ", r.stderr)
        self.assertTrue(wait_for(lambda: not processes(lambda argv: argv[:2] == ["sleep", marker]), 10),
                        "the ProxyCommand outlived the check")

    def test_a_resume_whose_hostfile_changed_says_the_new_size(self):
        # The hostfile is read again: an edit since changed the world size without a word.
        hostfile = os.path.join(self.tmp, "hosts")
        with open(hostfile, "w") as f:
            f.write("localhost slots=2\n")
        r = self.dlrun("run", "-q", "--hostfile", hostfile, "--name", "hf", "--run-dir", self.run_dir(), "sh", "-c",
                       "exit 3")
        self.assertEqual(r.returncode, 3, r.stderr)
        with open(hostfile, "w") as f:
            f.write("localhost slots=1\n")
        r = self.dlrun("run", "-q", "--resume", "hf")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn(f"ran 2 ranks; its hostfile {hostfile} now gives 1: it resumes with 1", r.stderr)

    def test_quiet_leaves_only_warnings_and_errors(self):
        r = self.dlrun("run", "-q", "--hosts", "localhost:1", "--run-dir", self.run_dir(), "--max-restarts", "1",
                       "sh", "-c", "[ $DLRUN_RESTART_COUNT = 1 ] || exit 3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("dlrun: job", r.stderr)
        self.assertIn("warning: restarting the host", r.stderr)

    def test_gpu_ids_on_every_host(self):
        env = dict(self.env, DLRUN_FAKE_GPUS="4")
        r = self.dlrun("run", "--hosts", "localhost:2", "--gpu-ids", "3,1", "--run-dir", self.run_dir(),
                       "sh", "-c", "echo $RANK $LOCAL_RANK $CUDA_VISIBLE_DEVICES", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(r.stdout.splitlines()), ["[localhost:0] 0 0 3", "[localhost:1] 1 1 1"])
        # A GPU a host does not have: that host says so, nothing runs.
        r = self.dlrun("run", "--hosts", "localhost:2", "--gpu-ids", "1,7", "--run-dir", self.run_dir(), "true",
                       env=env)
        self.assertEqual(r.returncode, 2, r.stderr)
        # The agent says it as its own, with its host (it read "dlrun: error: …", quoted again after).
        self.assertIn("host localhost (node 0) exited with code 2 (what it said is above", r.stderr)
        self.assertIn("dlrun[localhost]: error: --gpu-ids 1,7: GPU 7 does not exist: this machine has 4 GPUs (0,1,2,3)\n",
                      r.stderr)
        r = self.dlrun("run", "--hosts", "localhost:3", "--gpu-ids", "0,1", "true", env=env)
        self.assertEqual((r.returncode, r.stderr),
                         (2, "dlrun: error: --gpu-ids 0,1 names 2 GPUs, and host localhost has 3 slots (one rank "
                             "per GPU): give each host at most 2 slots, or name more GPUs\n"))

    def test_a_failed_rank_is_recorded_and_said_once_by_its_host(self):
        # More stderr than the tail keeps: the host's report still names the rank.
        r = self.dlrun("run", "--hosts", "localhost:2", "--run-dir", self.run_dir(), "sh", "-c",
                       "[ $RANK = 1 ] && { for i in $(seq 25); do echo boom$i >&2; done; exit 6; }; sleep 30")
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertIn("dlrun[localhost]: error: rank 1 exited with code 6; last 20 lines of its stderr", r.stderr)
        self.assertIn("dlrun: error: host localhost (node 0) exited with code 6 (what it said is above; all in ",
                      r.stderr)
        self.assertEqual(r.stderr.count("boom25"), 2, r.stderr)  # live, then in its host's report
        jobs = json.loads(self.dlrun("status", "--all", "--json").stdout)
        self.assertEqual(jobs[-1]["failed_rank"], 1)
        r = self.dlrun("logs", str(jobs[-1]["id"]), "--rank", "1")
        self.assertEqual(r.stdout.splitlines(), [f"boom{i}" for i in range(1, 26)])

    def test_hosts_and_hostfile_exclude_each_other(self):
        r = self.dlrun("run", "--hosts", "localhost:1", "--hostfile", os.path.join(self.tmp, "x"), "true")
        self.assertEqual((r.returncode, r.stderr.splitlines()[0]),
                         (2, "dlrun: error: --hosts and --hostfile both say where to run: give one of them, not both"))

    def test_watchdog(self):
        r = self.dlrun("run", "--watchdog", "3", "--grace", "0", "--hosts", "localhost:2", "--run-dir",
                       self.run_dir(), "sh", "-c", "[ $RANK = 1 ] && exec sleep 600; "
                       "while true; do touch $DLRUN_PROGRESS_FILE; sleep 0.1; done")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("dlrun[localhost]: error: rank 1 made no progress for 3 s (--watchdog)", r.stderr)


class RendezvousFlood(DlrunTestCase):
    """A job's rendezvous under hundreds of idle connections and a flood of wrong secrets,
    at a descriptor limit low enough that holding the idle connections would exhaust it.
    Local hosts only: no network namespaces needed."""

    NOFILE = 64
    REFUSAL_BURST, REFUSAL_INTERVAL = 5, 10.0  # docs/run.md: the refusal log's limit

    def start_held_job(self, *extra):
        """A one-host job whose rank in the first attempt waits for `go` and then fails, so
        the job restarts once; the second attempt prints `second attempt` with its
        DLRUN_RESTART_COUNT (1: an agent's ranks count the job's restarts) and succeeds."""
        ready, go = os.path.join(self.tmp, "ready"), os.path.join(self.tmp, "go")
        script = self.script("fail_once.sh", f"""
if [ ! -e {ready} ]; then
  echo $$ > {ready}
  while [ ! -e {go} ]; do sleep 0.05; done
  exit 3
fi
echo second attempt, restart count $DLRUN_RESTART_COUNT
""")
        limit = self.NOFILE
        p = self.start("run", "--hosts", "localhost:1", "--run-dir", self.run_dir(), "--max-restarts", "1",
                       *extra, script,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
        self.output = {"out": [], "err": []}
        # Read as it comes: a launcher that logs every refusal must not block on a full pipe.
        self.readers = [threading.Thread(target=lambda f=f, k=k: self.output[k].extend(f), daemon=True)
                        for f, k in ((p.stdout, "out"), (p.stderr, "err"))]
        for t in self.readers:
            t.start()
        self.assertTrue(wait_for(lambda: os.path.exists(ready), 60), "the first attempt's rank did not start")
        marker = wait_for(lambda: rendezvous_marker(p.pid), 30)
        self.assertTrue(marker, "no agent names the rendezvous")
        return p, int(marker.strip(" :")), go

    def finish(self, p):
        p.wait(timeout=120)
        for t in self.readers:
            t.join(timeout=30)
        return "".join(self.output["out"]), "".join(self.output["err"])

    def test_an_all_local_job_listens_on_loopback_only(self):
        p, port, go = self.start_held_job()
        self.assertEqual(listening_addresses(port), ["127.0.0.1"])
        open(go, "w").close()
        out, err = self.finish(p)
        self.assertEqual(p.returncode, 0, err[-3000:])

    def test_restart_succeeds_under_idle_connections_and_wrong_secrets(self):
        p, port, go = self.start_held_job()
        began = time.monotonic()
        refused = sum(wrong_secret(port).startswith(b"REFUSED wrong job secret") for _ in range(1000))
        self.assertGreater(refused, 0, "no wrong secret was answered")

        # Hundreds of connections that never speak: the server closes them all (the oldest
        # when too many wait, the rest when they stay silent too long) without spinning.
        cpu0, wall0 = cpu_seconds(p.pid), time.monotonic()
        idle = [idle_connection(port) for _ in range(300)]
        with self.subTest("idle connections are closed"):
            self.assertTrue(wait_for(lambda: all(closed_by_peer(s) for s in idle), 90),
                            f"{sum(not closed_by_peer(s) for s in idle)} of 300 idle connections still open")
        cpu = cpu_seconds(p.pid) - cpu0
        wall = time.monotonic() - wall0
        with self.subTest("the launcher does not spin"):
            self.assertLess(cpu, 0.25 * wall, f"the launcher used {cpu:.1f} s of CPU in {wall:.1f} s")

        # The restart happens while both floods go on (the first idle ones still open).
        done = threading.Event()

        def flood():
            kept = collections.deque()
            while not done.is_set():
                kept.append(idle_connection(port))
                if len(kept) > 300:
                    kept.popleft().close()
                wrong_secret(port)
            for s in kept:
                s.close()

        flooder = threading.Thread(target=flood)
        flooder.start()
        try:
            open(go, "w").close()
            out, err = self.finish(p)
        finally:
            done.set()
            flooder.join()
            for s in idle:
                s.close()
        elapsed = time.monotonic() - began
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn("second attempt, restart count 1", out)
        refusals = [line for line in err.splitlines() if "rendezvous: refused" in line]
        bound = (self.REFUSAL_BURST + 1) * (elapsed / self.REFUSAL_INTERVAL + 2)
        self.assertLessEqual(len(refusals), bound, f"{len(refusals)} refusal lines in {elapsed:.0f} s")


if __name__ == "__main__":
    unittest.main()
