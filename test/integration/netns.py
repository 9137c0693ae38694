"""Test hosts for the multi-host tests: network namespaces joined by a bridge, each with
its own address and a real OpenSSH server, sharing this machine's file system (so the
built dlrun and Python are there too). Needs root and iproute2; CI runs as root."""
import os
import shutil
import signal
import subprocess
import time


def run(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def why_unavailable():
    """None when namespaces can be made here, else the reason."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if not shutil.which("ip"):
        return "needs iproute2 (ip)"
    if not os.path.exists("/usr/sbin/sshd"):
        return "needs openssh-server (/usr/sbin/sshd)"
    probe = f"dlprobe{os.getpid()}"
    r = run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    run("ip", "netns", "del", probe, check=False)
    return None


class Cluster:
    """`count` hosts at 10.233.N.11, .12, …; this machine is 10.233.N.1 on the bridge."""

    made = 0  # clusters made by this process: the kernel removes a deleted namespace's veth late

    def __init__(self, count, tmp):
        self.tmp = tmp
        Cluster.made += 1
        tag = f"{os.getpid() % 100000}{Cluster.made % 10}"
        self.tag = tag
        self.net = 20 + os.getpid() % 200
        self.bridge = f"dlbr{tag}"
        self.namespaces = [f"dlh{tag}n{i}" for i in range(count)]
        self.addresses = [f"10.233.{self.net}.{11 + i}" for i in range(count)]
        self.sshd = {}
        self.ssh_config = os.path.join(tmp, "ssh_config")
        try:
            self._network()
            self._keys()
            for i in range(count):
                self.start_sshd(i)
        except BaseException:
            self.close()
            raise

    def _network(self):
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"10.233.{self.net}.1/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for i, ns in enumerate(self.namespaces):
            veth = f"dlv{self.tag}n{i}"
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            run("ip", "link", "set", veth, "master", self.bridge, "up")
            run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.addresses[i]}/24", "dev", "eth0")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def _keys(self):
        key = os.path.join(self.tmp, "id_test")
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key)
        run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.tmp, "host_key"))
        shutil.copy(key + ".pub", os.path.join(self.tmp, "authorized_keys"))
        with open(self.ssh_config, "w") as f:
            f.write(f"Host *\n  User root\n  IdentityFile {key}\n  IdentitiesOnly yes\n"
                    "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
        os.makedirs("/run/sshd", exist_ok=True)

    def start_sshd(self, i):
        self._start_sshd(i, self.addresses[i], 22, ["ip", "netns", "exec", self.namespaces[i]])

    def start_loopback_sshd(self, port):
        """An sshd of this machine (no namespace) at 127.0.0.1:port, as a host that an ssh alias
        or user@localhost reaches over loopback; stopped with the cluster. Its key is "lo"."""
        self._start_sshd("lo", "127.0.0.1", port, [])

    def _start_sshd(self, key, address, port, prefix):
        config = os.path.join(self.tmp, f"sshd_config_{key}")
        with open(config, "w") as f:
            f.write(f"Port {port}\nListenAddress {address}\nHostKey {self.tmp}/host_key\n"
                    f"AuthorizedKeysFile {self.tmp}/authorized_keys\nPidFile {self.tmp}/sshd_{key}.pid\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                    "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nLogLevel ERROR\n")
        self.sshd[key] = subprocess.Popen([*prefix, "/usr/sbin/sshd", "-D", "-e", "-f", config],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # It answers as soon as it is up; the limit is for a machine busy with other work (two
        # cores under load took more than 10 s once).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = run("ssh", "-F", self.ssh_config, "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "-p", str(port),
                    address, "true", check=False)
            if r.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"sshd on {address}:{port} did not come up")

    def stop_sshd(self, i):
        proc = self.sshd.pop(i, None)
        if proc:
            proc.terminate()
            proc.wait(timeout=10)

    def pids(self, i):
        """Every process in host i's network namespace."""
        r = run("ip", "netns", "pids", self.namespaces[i], check=False)
        return [int(p) for p in r.stdout.split()]

    def kill_host(self, i):
        """As if the machine died: every process in it killed, its link down."""
        for pid in self.pids(i):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sshd.pop(i, None)
        run("ip", "netns", "exec", self.namespaces[i], "ip", "link", "set", "eth0", "down", check=False)

    def revive(self, i):
        """Brings a killed host back: link up, sshd started."""
        run("ip", "netns", "exec", self.namespaces[i], "ip", "link", "set", "eth0", "up", check=False)
        self.start_sshd(i)

    def close(self):
        for i in list(self.sshd):
            self.stop_sshd(i)
        for i, ns in enumerate(self.namespaces):
            for pid in self.pids(i):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            run("ip", "netns", "del", ns, check=False)
        run("ip", "link", "del", self.bridge, check=False)
