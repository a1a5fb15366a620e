"""One real etcd member (Debian's etcd-server) on 127.0.0.1 for tests that
need etcd's own behaviour (leases expiring, the keys they take along) but
no network namespaces. The peer URL binds port 0 (one member never dials
it). The client port cannot: etcd 3.4's JSON gateway dials the address it
listens on, and "127.0.0.1:0" is no address to dial. So the client port is
one the kernel just handed out for port 0 and released; if another process
took it meanwhile, etcd fails to bind, and we start it again on another
(never a fixed port, never a failure by chance).

    with LocalEtcd(tmp_path) as etcd:
        etcd.endpoint                  # "127.0.0.1:<port>"
        etcd.keys("/dtrun/")           # every key under a prefix
        etcd.wait_for_key(k)           # blocks until k is put
        etcd.wait_for_delete(k)        # blocks until k is deleted
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
from pathlib import Path

SERVING = re.compile(r"serving insecure client requests on (\S+?),")


def unavailable_reason() -> str | None:
    if shutil.which("etcd") is None or shutil.which("etcdctl") is None:
        return "etcd is not installed (scripts/setup-deps installs etcd-server and etcd-client)"
    return None


class LocalEtcd:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.endpoint = ""
        self.proc: subprocess.Popen | None = None
        self._ready = threading.Event()

    def __enter__(self) -> "LocalEtcd":
        for attempt in range(10):
            if self._start(attempt):
                return self
        raise AssertionError(f"etcd did not start; see {self.workdir / 'etcd.log'}")

    def _start(self, attempt: int) -> bool:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        client, peer = f"http://127.0.0.1:{port}", "http://127.0.0.1:0"
        self._ready = threading.Event()
        self.endpoint = ""
        self.proc = subprocess.Popen(
            ["etcd", "--name", "e1", "--data-dir", str(self.workdir / f"etcd{attempt}"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"e1={peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        threading.Thread(target=self._drain, daemon=True).start()
        # Ready or exited (a port taken meanwhile), whichever comes first.
        self._ready.wait(60)
        if self.endpoint:
            return True
        self.__exit__(None, None, None)
        return False

    def _drain(self) -> None:
        with open(self.workdir / "etcd.log", "a") as log:
            for line in self.proc.stderr:
                log.write(line)
                log.flush()
                m = SERVING.search(line)
                if m and not self.endpoint:
                    self.endpoint = m.group(1)
                    self._ready.set()
        self._ready.set()  # it exited: _start stops waiting

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def etcdctl(self, *args: str, timeout: float = 30) -> str:
        return subprocess.run(["etcdctl", f"--endpoints={self.endpoint}", *args],
                              capture_output=True, text=True, check=True,
                              timeout=timeout).stdout

    def keys(self, prefix: str) -> list[str]:
        out = self.etcdctl("get", "--prefix", "--keys-only", prefix)
        return [k for k in out.splitlines() if k]

    def _first_event(self, args: list[str], timeout: float) -> str:
        """The first line `etcdctl watch ARGS` prints (an event), or "" when
        none came within `timeout` (the watch is then killed)."""
        proc = subprocess.Popen(["etcdctl", f"--endpoints={self.endpoint}", "watch", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            return proc.stdout.readline().strip()
        finally:
            timer.cancel()
            proc.kill()
            proc.wait()

    def wait_for_key(self, key: str, timeout: float = 30) -> None:
        """From revision 1: a put before the watch started counts too."""
        event = self._first_event(["--rev=1", key], timeout)
        assert event == "PUT", f"{key} was not put within {timeout}s"

    def wait_for_delete(self, key: str, timeout: float) -> bool:
        """True once `key` was deleted (or is already gone), False when it
        still exists after `timeout`."""
        if not self.keys(key):
            return True
        # From the revision after the one read: a delete in between counts.
        revision = int(json.loads(self.etcdctl("get", key, "-w", "json"))["header"]["revision"])
        event = self._first_event([f"--rev={revision + 1}", key], timeout)
        return event == "DELETE"
