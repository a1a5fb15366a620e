"""Test hosts in network namespaces (scripts/netns), as a context manager
that always removes them, even when the test fails.

    with netns_hosts.Hosts(3) as hosts:
        p = hosts.start(1, [dtrun, ...], env)     # runs in host h1, 10.77.0.1
        hosts.addr(1)                             # "10.77.0.1"

Each host has its own network stack (eth0 = 10.77.0.<i>) and hostname (h<i>);
they share the file system, so a checkpoint directory is shared like an NFS
mount would be in a cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("DTRUN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
NETNS = SOURCE_DIR / "scripts" / "netns"


def unavailable_reason() -> str | None:
    """Why this machine cannot make test hosts, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "iproute2 (ip) or util-linux (unshare) is missing"
    probe = f"dtprobe{uuid.uuid4().hex[:6]}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Hosts:
    def __init__(self, count: int, names: bool = False):
        """`names`: every host resolves h1..hN (scripts/netns --names), as
        a cluster's DNS would; torchrun needs that, dtrun does not."""
        self.count = count
        self.names = names
        self.name = f"dt{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Hosts":
        subprocess.run([str(NETNS), "create", self.name, str(self.count),
                        *(["--names"] if self.names else [])], check=True,
                       capture_output=True, text=True)
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run([str(NETNS), "destroy", self.name], capture_output=True)

    @staticmethod
    def addr(index: int) -> str:
        return f"10.77.0.{index}"

    def command(self, index: int, argv: list[str]) -> list[str]:
        # ip netns exec, unshare and sh all exec: the Popen's pid is argv's.
        return [str(NETNS), "exec", self.name, str(index), *map(str, argv)]

    def start(self, index: int, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        p = subprocess.Popen(self.command(index, argv), env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(p)
        return p
