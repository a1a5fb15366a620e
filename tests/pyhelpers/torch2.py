"""Running things under a real torch 2.6 (tests/e2e/test_torch2_*.py).

Debian 12 has torch 1.13 only; scripts/torch2-rootfs makes (once, cached)
a Debian 13 rootfs with python3-torch 2.6, and scripts/torch2-run (scripts/rootfs-run) runs a
command in it with the source and build directories (and any --bind
folder, e.g. a test's tmp_path) at the same paths, in the host's network
and PID namespaces. So dtrun itself runs inside, as on a user's torch 2.x
machine, and ports and /proc are shared with the test.

    sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
    import torch2

    torch2.require()                      # skips (saying why) if it cannot exist here
    torch2.run([torch2.PYTHON, "-c", "..."], binds=[tmp_path])
    torch2.dtrun(["--standalone", ...], binds=[tmp_path])

Its TCPStore is the classic (non-libuv) server: Debian builds torch 2.6
without libuv, and the rootfs's start-up hook makes use_libuv False
(scripts/torch2-rootfs says why).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtrun_helpers as dh  # noqa: E402

ROOTFS = dh.SOURCE_DIR / "scripts" / "torch2-rootfs"
RUN = dh.SOURCE_DIR / "scripts" / "torch2-run"
PYTHON = "/usr/bin/python3"  # inside the rootfs: Python 3.13 with torch 2.6
TORCH_VERSION = "2.6"
STORE_BIN = dh.BUILD_DIR / "launcher" / "dtrun-store"
CANNOT = 77  # torch2-rootfs: this machine cannot make the rootfs

NON_LIBUV_NOTE = ("torch 2.6 here is Debian's, built without libuv: its TCPStore is the "
                  "classic (non-libuv) server")

_ready: str | None = None


def require() -> str:
    """The rootfs path, made if needed (a minute or two, once per machine).
    Skips the test, printing why, when this machine cannot make it (not
    root, no network to the Debian mirror); fails on any other error."""
    global _ready
    if _ready is None and os.geteuid() != 0:
        message = (f"no torch {TORCH_VERSION} rootfs: scripts/torch2-run needs root "
                   "(mount namespaces)")
        print(message)
        pytest.skip(message)
    if _ready is None:
        r = subprocess.run([str(ROOTFS)], capture_output=True, text=True, timeout=900)
        if r.returncode == CANNOT:
            message = f"no torch {TORCH_VERSION} rootfs on this machine: {r.stderr.strip()}"
            print(message)
            pytest.skip(message)
        assert r.returncode == 0, f"scripts/torch2-rootfs failed ({r.returncode}): {r.stderr}"
        _ready = r.stdout.strip()
    return _ready


def command(args: list, binds=()) -> list[str]:
    """argv that runs `args` inside the rootfs, with `binds` visible."""
    out = [str(RUN)]
    for b in binds:
        out += ["--bind", str(b)]
    return out + ["--", *map(str, args)]


def run(args: list, binds=(), env: dict[str, str] | None = None, timeout: float = 120,
        **kwargs) -> subprocess.CompletedProcess:
    """Runs `args` inside the rootfs to completion, capturing text output."""
    require()
    return subprocess.run(command(args, binds), env=env or dh.job_env(), timeout=timeout,
                          capture_output=True, text=True, **kwargs)


def popen(args: list, binds=(), env: dict[str, str] | None = None,
          **kwargs) -> subprocess.Popen:
    """Starts `args` inside the rootfs (text pipes as asked in kwargs)."""
    require()
    return subprocess.Popen(command(args, binds), env=env or dh.job_env(), text=True, **kwargs)


def dtrun(args: list, binds=(), env: dict[str, str] | None = None, timeout: float = 120,
          **kwargs) -> subprocess.CompletedProcess:
    """dtrun (this build) run inside the rootfs."""
    return run([dh.DTRUN, *args], binds, env, timeout, **kwargs)


def torchrun(args: list, binds=(), env: dict[str, str] | None = None, timeout: float = 120,
             **kwargs) -> subprocess.CompletedProcess:
    """torch 2.6's own torchrun (python -m torch.distributed.run) inside the
    rootfs. Its --standalone rendezvous is on localhost:0 (a free port)."""
    return run([PYTHON, "-m", "torch.distributed.run", *args], binds, env, timeout, **kwargs)


def store_cli(endpoint: str, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """One `dtrun-store` client verb run inside the rootfs (bytes output)."""
    require()
    return subprocess.run(command([STORE_BIN, "--endpoint", endpoint, "--connect-timeout", "10",
                                   *args]),
                          env=dh.job_env(), timeout=timeout, capture_output=True)

