"""Running things under the real torch from PyPI that dtrun is proven
against (the contract: the newest release, pinned in scripts/torch-python).

scripts/torch-python makes (once per machine, cached outside the clone) a
virtual environment of Debian 12's Python 3.11 with that torch and numpy
alone; this module runs dtrun and torch's own torchrun with it, on this
machine, as a user whose venv is active would: its bin/ first on PATH, so
`python3` is the venv's. No rootfs: the tests' processes, ports and /proc
are the machine's.

    sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
    import torch_pypi

    torch_pypi.require()                  # the interpreter, installed if needed
    torch_pypi.run([torch_pypi.PYTHON, "-c", "..."])
    torch_pypi.dtrun(["--standalone", ...])
    torch_pypi.torchrun(["--standalone", ...])   # torch's own run.py

The same calls as tests/pyhelpers/torch2.py (torch 2.6 in a rootfs), so a
test moves between the two by its import; `binds` is accepted and unused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtrun_helpers as dh  # noqa: E402

TORCH_PYTHON = dh.SOURCE_DIR / "scripts" / "torch-python"
STORE_BIN = dh.BUILD_DIR / "launcher" / "dtrun-store"

# The pinned version, read from the one place it is written.
TORCH_VERSION_FULL = subprocess.run([str(TORCH_PYTHON), "--pin"], capture_output=True,
                                    text=True, check=True).stdout.strip()
TORCH_VERSION = ".".join(TORCH_VERSION_FULL.split(".")[:2])  # "2.15", as tests name it
CACHE = Path(os.environ.get("DTRUN_TORCH_CACHE", "/var/cache/dtrun"))
# Where scripts/torch-python puts it; usable once require() returned.
PYTHON = str(CACHE / f"torch-{TORCH_VERSION_FULL}" / "bin" / "python")

_python: str | None = None


def require() -> str:
    """The venv's interpreter, installed if needed (scripts/test's set-up
    stage already did; a minute or two and about 3 GB otherwise). Skips,
    saying why, only where this machine cannot have it: not root and no
    cache of one's own (DTRUN_TORCH_CACHE). Any other failure fails."""
    global _python
    if _python is None:
        if os.geteuid() != 0 and not os.access(CACHE if CACHE.exists() else CACHE.parent,
                                               os.W_OK):
            message = (f"no torch {TORCH_VERSION_FULL} venv: {CACHE} is not writable; run "
                       "scripts/torch-python as root or set DTRUN_TORCH_CACHE")
            print(message)
            pytest.skip(message)
        r = subprocess.run([str(TORCH_PYTHON)], capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, f"scripts/torch-python failed: {r.stderr.strip()}"
        _python = r.stdout.strip()
        assert _python == PYTHON, (_python, PYTHON)
    return _python


def venv_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (or a fresh job environment) with the venv active: its bin/
    first on PATH and VIRTUAL_ENV set, as `source venv/bin/activate`."""
    out = dict(env or dh.job_env())
    venv_bin = str(Path(require()).parent)
    out["PATH"] = f"{venv_bin}:{out.get('PATH', '')}"
    out["VIRTUAL_ENV"] = str(Path(venv_bin).parent)
    return out


def command(args: list, binds=()) -> list[str]:
    """argv that runs `args` with the venv (here: `args` as they are)."""
    del binds  # nothing to bind: the venv runs on this machine
    return [str(a) for a in args]


def run(args: list, binds=(), env: dict[str, str] | None = None, timeout: float = 120,
        **kwargs) -> subprocess.CompletedProcess:
    """Runs `args` with the venv active to completion, capturing text output."""
    return subprocess.run(command(args, binds), env=venv_env(env), timeout=timeout,
                          capture_output=True, text=True, **kwargs)


def popen(args: list, binds=(), env: dict[str, str] | None = None,
          **kwargs) -> subprocess.Popen:
    """Starts `args` with the venv active (text pipes as asked in kwargs)."""
    return subprocess.Popen(command(args, binds), env=venv_env(env), text=True, **kwargs)


def dtrun(args: list, binds=(), env: dict[str, str] | None = None, timeout: float = 120,
          **kwargs) -> subprocess.CompletedProcess:
    """dtrun (this build) with the venv active: its workers' `python3`
    is the venv's."""
    return run([dh.DTRUN, *args], binds, env, timeout, **kwargs)


def torchrun(args: list, binds=(), env: dict[str, str] | None = None, timeout: float = 120,
             **kwargs) -> subprocess.CompletedProcess:
    """torch's own torchrun (python -m torch.distributed.run) of the venv.
    Its --standalone rendezvous is on localhost:0 (a free port)."""
    require()
    return run([PYTHON, "-m", "torch.distributed.run", *args], binds, env, timeout, **kwargs)


def store_cli(endpoint: str, *args, timeout: float = 60) -> subprocess.CompletedProcess:
    """One `dtrun-store` client verb (bytes output)."""
    return subprocess.run([str(STORE_BIN), "--endpoint", endpoint, "--connect-timeout", "10",
                           *map(str, args)], env=dh.job_env(), timeout=timeout,
                          capture_output=True)
