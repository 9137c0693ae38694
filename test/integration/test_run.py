"""`dlrun run`: one job across several hosts. The hosts are network namespaces with real
OpenSSH servers (netns.py); ranks do real gloo allreduces across them."""
import json
import os
import re
import signal
import subprocess
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
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(f"host {self.cluster.addresses[1]} (node 1)", err)
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
            r = subprocess.run([DLRUN, "agent", "--rendezvous", endpoint, "--node", "0"],
                               input="0123456789abcdef0123456789abcdef\n", capture_output=True, text=True,
                               timeout=60, env=self.env)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("the launcher's rendezvous refused this agent: wrong job secret", r.stderr)
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


if __name__ == "__main__":
    unittest.main()
