"""A real one-node Slurm cluster for the tests: munged, slurmctld and slurmd from Debian's
slurm-wlm and munge, all configured and kept in a temporary directory, on free ports,
running as root. stop() ends every daemon it started."""
import os
import shutil
import signal
import socket
import subprocess
import time


def why_unavailable():
    if os.geteuid() != 0:
        return "needs root to run slurmd"
    for program in ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch"):
        if not os.path.exists(program):
            return f"needs {program} (apt-get install slurm-wlm munge)"
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, tmp):
        self.dir = tmp
        self.node = socket.gethostname().split(".")[0]
        self.conf = os.path.join(tmp, "slurm.conf")
        self.pids = []
        munge = os.path.join(tmp, "munge")
        os.makedirs(munge, mode=0o700)
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(tmp, sub))
        key = os.path.join(munge, "key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        self.socket = os.path.join(munge, "sock")
        try:
            self._daemon(["/usr/sbin/munged", "--force", f"--key-file={key}", f"--socket={self.socket}",
                          f"--pid-file={munge}/pid", f"--log-file={munge}/log", f"--seed-file={munge}/seed"],
                         f"{munge}/pid")
            self._write_conf()
            env = self.env(os.environ)
            self._daemon(["/usr/sbin/slurmctld", "-c"], os.path.join(tmp, "slurmctld.pid"), env)
            self._daemon(["/usr/sbin/slurmd"], os.path.join(tmp, "slurmd.pid"), env)
            self._wait_idle(env)
        except BaseException:
            self.stop()
            raise

    def env(self, base):
        env = dict(base)
        env["SLURM_CONF"] = self.conf
        return env

    def _write_conf(self):
        t = self.dir
        with open(self.conf, "w") as f:
            f.write(f"""ClusterName=dlruntest
SlurmctldHost={self.node}
SlurmUser=root
SlurmdUser=root
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={t}/state
SlurmdSpoolDir={t}/spool
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SlurmctldLogFile={t}/slurmctld.log
SlurmdLogFile={t}/slurmd.log
NodeName={self.node} CPUs={os.cpu_count()} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _daemon(self, argv, pid_file, env=None):
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {r.stderr.strip()}")
        # The daemon writes its pid file after forking, not atomically: wait for a pid in it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(pid_file) as f:
                    words = f.read().split()
                if words:
                    self.pids.append(int(words[0]))
                    return
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{argv[0]} wrote no pid to {pid_file} within 10 s")

    def _wait_idle(self, env):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            if r.stdout.strip() in ("idle", "mix"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Slurm node did not become idle: {r.stdout} {r.stderr}")

    def stop(self):
        # Also the daemons whose pid was not read yet (a start that failed half-way).
        for pid_file in ("munge/pid", "slurmctld.pid", "slurmd.pid"):
            try:
                with open(os.path.join(self.dir, pid_file)) as f:
                    words = f.read().split()
                if words and int(words[0]) not in self.pids:
                    self.pids.append(int(words[0]))
            except (FileNotFoundError, ValueError):
                pass
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for pid in self.pids:
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.pids = []
