"""The torchrun anchor, one definition for the benchmarks and the tests:
which torchrun, which Python runs it, and how a single-node run is started
without a fixed port.

Why not `--standalone`: torchrun 1.13's --standalone always hosts its
rendezvous store on port 29400. Two such runs at once (two tests under
`ctest -j 2`, a benchmark beside a test) collide: the second cannot bind,
falls back to being a *client* of the first one's store (torch's
_create_tcp_store retries with is_server=False) and joins the wrong job.
standalone_flags() is what --standalone sets (c10d backend, a fresh uuid4
run id, nnodes 1, torchrun 2.x's --standalone does the same) with the
endpoint's port 0: the store binds a port the kernel picks, so no two runs
can ever share one and there is no pick-then-bind race. torch 1.13 supports
it: the hosting agent is the only store client (workers get their own
MASTER_PORT), and TCPStore connects to the port it actually bound. The
worker environment is the same as under --standalone except the run id
and MASTER_PORT, which differ between any two runs anyway.

torchrun itself still picks its workers' MASTER_PORT by binding port 0 and
closing it; only workers that host a store on it (a real DDP job, not the
tests' env dumps or /bin/true) can race there, and that is torchrun's own
behaviour, part of what is measured.

Two anchors (select(), each benchmark's and scripts/bench/all's --torch):
  1.13 (default)  Debian's torchrun through scripts/bench/torchrun-anchor,
                  run by /usr/bin/python3 (DTRUN_BENCH_TORCHRUN and
                  DTRUN_BENCH_PYTHON name another);
  2.15 (or any X.Y.Z on PyPI)  the real torchrun of that torch, from the
                  venv scripts/torch-python makes (the one way to reach it;
                  the first call installs it, minutes). The environment
                  variables are then ignored.
PYTHON is also the interpreter dtrun's Python workers run with (--python),
so both launchers' workers import the same torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository's own wrapper (Debian's torchrun 1.13 made to run on
# Python 3.11); DTRUN_BENCH_TORCHRUN / DTRUN_BENCH_PYTHON measure another
# torchrun (e.g. a venv's newer one).
TORCHRUN = Path(os.environ.get("DTRUN_BENCH_TORCHRUN", HERE / "torchrun-anchor"))
PYTHON = os.environ.get("DTRUN_BENCH_PYTHON", "/usr/bin/python3")
DEBIAN = "1.13"
VERSION = DEBIAN  # which torch the anchor is: "1.13" or PyPI's "X.Y.Z"
TORCH_PYTHON = HERE.parents[1] / "scripts" / "torch-python"


def add_option(parser) -> None:
    """The benchmarks' --torch option (select() reads it)."""
    parser.add_argument(
        "--torch", metavar="VERSION", default=DEBIAN,
        help="the anchor: 1.13 (Debian's torchrun, default) or a PyPI torch such as 2.15 "
             "(its real torchrun from scripts/torch-python's venv; dtrun's Python workers "
             "run with the same interpreter)")


def pypi_version(version: str) -> str:
    """X.Y.Z for --torch X.Y or X.Y.Z: X.Y means scripts/torch-python's pin
    when that is an X.Y release."""
    if version.count(".") >= 2:
        return version
    pin = subprocess.run([str(TORCH_PYTHON), "--pin"], capture_output=True, text=True,
                         check=True).stdout.strip()
    if pin.rsplit(".", 1)[0] != version:
        sys.exit(f"--torch {version}: scripts/torch-python pins {pin}; give the full X.Y.Z "
                 "of another release")
    return pin


def pypi_python(version: str) -> tuple[str, str]:
    """(X.Y.Z, the interpreter of its venv) for --torch X.Y[.Z], through
    scripts/torch-python (installing it the first time); exits with one
    line when it cannot be installed."""
    full = pypi_version(version)
    print(f"anchor: torch {full} from scripts/torch-python (the first call installs it)",
          file=sys.stderr, flush=True)
    r = subprocess.run([str(TORCH_PYTHON), full], stdout=subprocess.PIPE, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        sys.exit(f"--torch {version}: scripts/torch-python {full} failed (above)")
    return full, r.stdout.strip()


def select(version: str | None) -> None:
    """Makes `version` the anchor of this process (TORCHRUN, PYTHON,
    VERSION); 1.13 (or None) keeps Debian's."""
    global TORCHRUN, PYTHON, VERSION
    if not version or version == DEBIAN:
        return
    VERSION, PYTHON = pypi_python(version)
    TORCHRUN = Path(PYTHON).parent / "torchrun"


def label() -> str:
    """The anchor's name in tables: "torchrun 1.13", "torchrun 2.15.0"."""
    return f"torchrun {VERSION}"


def slow_default_interval() -> bool:
    """torchrun 1.13 polls its workers every 5 s by default; 2.x every 0.1 s,
    which the benchmarks pass anyway (a run at the default is then moot)."""
    return VERSION == DEBIAN


def standalone_flags() -> list[str]:
    """torchrun flags equivalent to --standalone, on a kernel-chosen port."""
    return ["--nnodes=1", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
            f"--rdzv_id={uuid.uuid4()}"]


def command(*flags: str) -> list[str]:
    """argv that runs the anchor torchrun with `flags`."""
    return [PYTHON, str(TORCHRUN), *flags]


def failed(what: str, detail: str) -> str:
    """The one line a benchmark prints when the anchor (not dtrun) fails:
    the run goes on and reports dtrun's results; the tests look for it."""
    detail = " ".join(detail.split())[-400:]
    return f"anchor torchrun failed: {what}: {detail}; dtrun's results are still checked"
