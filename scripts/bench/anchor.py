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
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository's own wrapper (Debian's torchrun 1.13 made to run on
# Python 3.11); DTRUN_BENCH_TORCHRUN / DTRUN_BENCH_PYTHON measure another
# torchrun (e.g. a venv's newer one).
TORCHRUN = Path(os.environ.get("DTRUN_BENCH_TORCHRUN", HERE / "torchrun-anchor"))
PYTHON = os.environ.get("DTRUN_BENCH_PYTHON", "/usr/bin/python3")


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
