"""The store servers the store benchmarks (scripts/bench/store,
scripts/bench/store-barrier) measure, started the same way by both: each
prints its port on its first stdout line and serves until stopped.

  dtrun-store:  `dtrun-store serve --host 127.0.0.1 --port 0`, stopped by SIGTERM
  torch:        TCPStore(is_master=True) hosted by TORCH_HOST in a Python
                process (with torch 2.6: inside the Debian 13 rootfs, through
                scripts/torch2-run; with a PyPI torch such as 2.15: its
                venv's interpreter, pypi_torch_host(), whose default server
                is libuv's), stopped by closing its stdin
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Hosts torch's server; prints its port, serves until stdin closes. Raises
# its own descriptor limit: a server holding N connections needs N + ~50.
TORCH_HOST = r"""
import datetime, resource, sys
import torch.distributed as dist
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
store = dist.TCPStore("127.0.0.1", 0, is_master=True,
                      timeout=datetime.timedelta(seconds=600))
print(store.port, flush=True)
sys.stdin.read()
"""


def pypi_torch_host(version: str) -> tuple[str, list[str]]:
    """(X.Y.Z, the command that hosts its TCPStore server) for a PyPI torch
    (--torch 2.15), through scripts/torch-python as the anchor does. From
    2.4 TCPStore's server is libuv's by default, and TORCH_HOST keeps it."""
    import anchor  # beside this file
    full, python = anchor.pypi_python(version)
    return full, [python, "-c", TORCH_HOST]


def raise_fd_limit(needed: int, what: str) -> None:
    """The shell's `ulimit -n`, for this process and every child (servers
    and load clients inherit it); `what` says which measurement needs it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
            return
        except (ValueError, OSError):
            sys.exit(f"RLIMIT_NOFILE hard limit is {hard}, {needed} needed for {what}; "
                     f"raise it (ulimit -Hn {needed}, as root) or measure less")
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class Server:
    """One server process. `sigterm`: stopped by SIGTERM (dtrun-store);
    otherwise by closing its stdin (the torch hosts, which then exit on their
    own, letting scripts/rootfs-run unmount and clean up after itself)."""

    def __init__(self, name: str, cmd: list[str], sigterm: bool = False,
                 start_timeout_s: float = 120):
        self.name = name
        self.sigterm = sigterm
        self.stderr = tempfile.TemporaryFile()
        # A session of its own: a server that will not stop is killed with
        # everything it started (the rootfs's unshare and Python).
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, start_new_session=True)
        line = b""
        # A server that never prints its port (a hung rootfs) is killed.
        timer = threading.Timer(start_timeout_s, self.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line.strip():
            self.kill()
            raise RuntimeError(f"{name} did not print its port: {self.stderr_tail()}")
        self.port = int(line)

    def cpu_seconds(self) -> float:
        """CPU time (all threads) of every process in the server's session
        so far: the server and, for torch 2.6, the rootfs wrapper and the
        Python inside it (the server itself is not the process we started)."""
        total = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                # Fields after the command name: state ppid pgrp session ...
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[3]) != self.proc.pid:
                    continue
                for task in (proc / "task").iterdir():
                    total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a process or thread that just exited
        return total / 1e9

    def stderr_tail(self, chars: int = 300) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip()
        return " / ".join(text[-chars:].splitlines()) or "(nothing on stderr)"

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        try:
            self.proc.stdin.close()  # the torch host returns from stdin.read()
        except BrokenPipeError:
            pass
        if self.sigterm:
            self.proc.terminate()  # dtrun-store stops on SIGTERM
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
        self.stderr.close()

