"""A real etcd cluster (Debian's etcd-server) for the etcd rendezvous tests:
one member per network-namespace host, each on its host's own address, so
the fixed ports 2379/2380 are private to the test.

    with netns_hosts.Hosts(3) as hosts, EtcdCluster(hosts, tmp_path) as etcd:
        etcd.endpoints          # "10.77.0.1:2379,10.77.0.2:2379,10.77.0.3:2379"
        etcd.leader()           # host index of the current leader
        etcd.kill(i)            # SIGKILL member i
        etcd.restart(i)         # the same member again, from its data dir
        etcd.wait_for_key(k)    # blocks until key k is put (etcdctl watch)

EtcdCluster(hosts, tmp_path, tls=True) serves clients over https with a
certificate from a CA made for the test (etcd.ca: its file).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

CLIENT_PORT = 2379
PEER_PORT = 2380


def unavailable_reason() -> str | None:
    if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
        return "etcd is not installed (scripts/setup-deps installs etcd-server and etcd-client)"
    return None


class Member:
    """One etcd process and its log, read by a thread (the pipe never fills;
    readiness is a line in the log, not a guess)."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        self.proc = proc
        self.log = log
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        with open(self.log, "a") as out:
            for line in self.proc.stderr:
                out.write(line)
                out.flush()
                # A member is serving once it published itself through raft,
                # which needs a leader: the cluster works.
                if "published" in line:
                    self.ready.set()


class EtcdCluster:
    def __init__(self, hosts, workdir: Path, members=(1, 2, 3), tls: bool = False):
        self.hosts = hosts
        self.workdir = Path(workdir)
        self.indexes = list(members)
        self.members: dict[int, Member] = {}
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.ca = self.workdir / "etcd-ca.pem"
        if tls:
            self._make_certificates()

    def _make_certificates(self) -> None:
        """A CA, and a server certificate for every member's address."""
        d = self.workdir
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        sans = ",".join(f"IP:{self.hosts.addr(i)}" for i in self.indexes)
        (d / "etcd-san.ext").write_text(f"subjectAltName={sans}\n")
        for argv in (
            ["openssl", "req", "-x509", *ec, "-keyout", d / "etcd-ca.key", "-out", self.ca,
             "-days", "2", "-subj", "/CN=dtrun test CA"],
            ["openssl", "req", *ec, "-keyout", d / "etcd-server.key", "-out",
             d / "etcd-server.csr", "-subj", "/CN=etcd"],
            ["openssl", "x509", "-req", "-in", d / "etcd-server.csr", "-CA", self.ca,
             "-CAkey", d / "etcd-ca.key", "-CAcreateserial", "-out", d / "etcd-server.pem",
             "-days", "2", "-extfile", d / "etcd-san.ext"],
        ):
            subprocess.run([str(a) for a in argv], check=True, capture_output=True)

    @property
    def endpoints(self) -> str:
        prefix = "https://" if self.tls else ""
        return ",".join(f"{prefix}{self.hosts.addr(i)}:{CLIENT_PORT}" for i in self.indexes)

    def _argv(self, i: int, state: str) -> list[str]:
        addr = self.hosts.addr(i)
        cluster = ",".join(f"e{j}=http://{self.hosts.addr(j)}:{PEER_PORT}" for j in self.indexes)
        tls = []
        if self.tls:
            tls = ["--cert-file", str(self.workdir / "etcd-server.pem"),
                   "--key-file", str(self.workdir / "etcd-server.key")]
        return ["etcd", "--name", f"e{i}", "--data-dir", str(self.workdir / f"etcd{i}"), *tls,
                "--listen-client-urls", f"{self.scheme}://{addr}:{CLIENT_PORT}",
                "--advertise-client-urls", f"{self.scheme}://{addr}:{CLIENT_PORT}",
                "--listen-peer-urls", f"http://{addr}:{PEER_PORT}",
                "--initial-advertise-peer-urls", f"http://{addr}:{PEER_PORT}",
                "--initial-cluster", cluster, "--initial-cluster-token", self.hosts.name,
                "--initial-cluster-state", state]

    def _start(self, i: int, state: str) -> Member:
        proc = subprocess.Popen(self.hosts.command(i, self._argv(i, state)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.hosts.procs.append(proc)
        member = Member(proc, self.workdir / f"etcd{i}.log")
        self.members[i] = member
        return member

    def __enter__(self) -> "EtcdCluster":
        for i in self.indexes:
            self._start(i, "new")
        for i in self.indexes:
            self._await_ready(i)
        return self

    def _await_ready(self, i: int, timeout: float = 60) -> None:
        member = self.members[i]
        if not member.ready.wait(timeout):
            raise AssertionError(f"etcd member e{i} did not join its cluster within {timeout} s; "
                                 f"its log:\n{member.log.read_text()[-3000:]}")

    def __exit__(self, *exc) -> None:
        for m in self.members.values():
            if m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait()

    def etcdctl(self, *args: str, via: int | None = None, timeout: float = 30) -> str:
        """etcdctl inside a live member's host, against every member."""
        host = via if via is not None else self.alive()[0]
        tls = [f"--cacert={self.ca}"] if self.tls else []
        r = subprocess.run(self.hosts.command(host, ["etcdctl", f"--endpoints={self.endpoints}",
                                                     *tls, *args]),
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 and "--write-out=json" not in args:
            raise AssertionError(f"etcdctl {' '.join(args)}: {r.stderr}")
        return r.stdout

    def alive(self) -> list[int]:
        return [i for i, m in self.members.items() if m.proc.poll() is None]

    def leader(self) -> int:
        status = json.loads(self.etcdctl("endpoint", "status", "--write-out=json"))
        for entry in status:
            s = entry["Status"]
            if s["header"]["member_id"] == s["leader"]:
                addr = entry["Endpoint"].rsplit(":", 1)[0]
                return int(addr.rsplit(".", 1)[1])
        raise AssertionError(f"no etcd member is the leader: {status}")

    def kill(self, i: int) -> float:
        """SIGKILLs member i; returns when (time.monotonic()) it was killed."""
        m = self.members[i]
        at = time.monotonic()
        m.proc.kill()
        m.proc.wait()
        return at

    def restart(self, i: int) -> None:
        self._start(i, "existing")
        self._await_ready(i)

    def keys(self, prefix: str) -> list[str]:
        out = self.etcdctl("get", "--prefix", "--keys-only", prefix)
        return [line for line in out.splitlines() if line]

    def wait_for_key(self, key: str, timeout: float = 60) -> None:
        """Blocks until `key` exists: `etcdctl watch` from revision 1 prints
        its first put, whether it happened before or after we started."""
        host = self.alive()[0]
        proc = subprocess.Popen(
            self.hosts.command(host, ["etcdctl", f"--endpoints={self.endpoints}", "watch",
                                      "--rev=1", key]),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            first = proc.stdout.readline()
        finally:
            timer.cancel()
            proc.kill()
            proc.wait()
        if not first:
            raise AssertionError(f"{key} did not appear in etcd within {timeout} s")

    def wait_for_delete(self, prefix: str, timeout: float = 60) -> str:
        """Blocks until a key under `prefix` is deleted (a lease that expired
        takes its keys with a DELETE); returns that key. From revision 1, so
        a delete before the call counts too."""
        host = self.alive()[0]
        proc = subprocess.Popen(
            self.hosts.command(host, ["etcdctl", f"--endpoints={self.endpoints}", "watch",
                                      "--rev=1", "--prefix", prefix]),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            # Events come as "PUT\nkey\nvalue\n" and "DELETE\nkey\n".
            for line in proc.stdout:
                if line.rstrip("\n") == "DELETE":
                    return proc.stdout.readline().rstrip("\n")
        finally:
            timer.cancel()
            proc.kill()
            proc.wait()
        raise AssertionError(f"no key under {prefix} was deleted within {timeout} s")
