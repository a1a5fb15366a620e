"""Helpers shared by the dtrun launcher/agent integration and e2e tests.

Run by /usr/bin/python3 (the interpreter that owns Debian's torch 1.13).
Import with:

    sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
    import dtrun_helpers as dh

Synchronisation is always on real events: workers write lines to a FIFO the
test reads (Fifo), the test waits for the agent's exit or for one of its
stderr lines. The only polling is the bounded /proc scan that confirms
processes are gone (gone_within), which has a deadline.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("DTRUN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("DTRUN_BUILD_DIR", SOURCE_DIR / "build"))
DTRUN = BUILD_DIR / "launcher" / "dtrun"
PYTHON = "/usr/bin/python3"  # the one with torch
EXAMPLES = SOURCE_DIR / "examples"

# The torchrun the comparisons run: the repository's own wrapper of Debian's
# torchrun 1.13 (scripts/bench/torchrun-anchor says what it fixes), always,
# so the tests do not depend on anything outside the checkout nor on the
# benchmarks' DTRUN_BENCH_TORCHRUN.
TORCHRUN = SOURCE_DIR / "scripts" / "bench" / "torchrun-anchor"
sys.path.insert(0, str(SOURCE_DIR / "scripts" / "bench"))
import anchor  # noqa: E402
import ports  # noqa: E402


def free_port() -> int:
    """A port for a test whose processes must all be told it in advance (a
    static rendezvous's MASTER_PORT), where no one process can bind port 0
    and report it. Drawn below the kernel's ephemeral range, so no other
    test's port-0 bind or connection can take it before the job binds it
    (scripts/bench/ports.py explains)."""
    return ports.free_port("")


def torchrun_standalone(*args: str) -> list[str]:
    """argv of `torchrun --standalone ARGS` without its fixed port 29400
    (two at once would share one store): the same c10d rendezvous on a
    port the kernel picks (scripts/bench/anchor.py explains)."""
    return [PYTHON, str(TORCHRUN), *anchor.standalone_flags(), *args]


def job_env(**extra: str) -> dict[str, str]:
    """The environment for a dtrun run: ours, a unique marker every process
    of the job inherits (so /proc can be searched for leftovers), and a
    fixed OMP_NUM_THREADS to keep the warning out of the way."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["DTRUN_TEST_MARK"] = uuid.uuid4().hex
    # PET_* from the caller's shell would change what the tests mean.
    for key in [k for k in env if k.startswith("PET_")]:
        del env[key]
    env.update(extra)
    return env


def run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60,
        **kwargs) -> subprocess.CompletedProcess:
    """Runs dtrun to completion, capturing text output."""
    return subprocess.run([str(DTRUN), *args], env=env or job_env(), timeout=timeout,
                          capture_output=True, text=True, **kwargs)


# Rendezvous timeouts for tests whose nodes all start at once: a second of
# last call, and a silent node noticed within seconds.
FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"


@dataclass
class node_run:
    pid: int
    returncode: int
    stderr: str
    endpoint_port: int  # the rendezvous store's


def run_two_local_nodes(flags: list[str], program: list[str], timeout: float = 120,
                        rdzv_conf: str = "") -> list[node_run]:
    """Runs a two-node c10d job on this machine: `dtrun --nnodes=2
    --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:<free port> FLAGS PROGRAM`
    twice, the first hosting the store (is_host=1), the second joining it.
    `rdzv_conf` ("k=v,...") is added to both nodes' --rdzv-conf.
    Returns each node's agent pid, exit code, stderr and the endpoint's
    port, host first. Afterwards no process of the job is left (kill_marked),
    also when the time runs out."""
    port = free_port()
    env = job_env()
    procs = []
    try:
        for is_host in (1, 0):
            procs.append(subprocess.Popen(
                [str(DTRUN), "--nnodes=2", "--rdzv-backend=c10d",
                 f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-conf={FAST_RDZV},is_host={is_host}" + (f",{rdzv_conf}" if rdzv_conf else ""),
                 *flags, *program],
                env=env, stderr=subprocess.PIPE, text=True))
        errs = [p.communicate(timeout=timeout)[1] for p in procs]
    finally:
        kill_all(procs, env["DTRUN_TEST_MARK"])
    return [node_run(p.pid, p.returncode, err, port) for p, err in zip(procs, errs)]


def kill_all(procs: list[subprocess.Popen], mark: str) -> None:
    """After a test with several agents, passed or failed: kills the ones
    still running, reaps them, then every process of the job (`mark`)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    kill_marked(mark)


def default_signals() -> None:
    """preexec_fn: the signals the tests send at their default disposition.
    dtrun keeps a signal ignored at its start ignored (nohup), so a test run
    under nohup, or as a script's background job (SIGINT, SIGQUIT ignored),
    would otherwise see it neither handled nor forwarded."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM,
                signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Starts dtrun in its own session (so signals we send reach only it),
    with stderr piped for wait_for_stderr."""
    return subprocess.Popen([str(DTRUN), *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_signals)


def wait_for_stderr(proc: subprocess.Popen, needle: str, timeout: float = 30) -> str:
    """Reads the agent's stderr until a line contains `needle`.

    Plain blocking readline, no select(): the text wrapper reads ahead, so
    a second line that arrived with the first sits in its buffer where
    select() cannot see it (a wait for it would time out by chance). The
    deadline is a timer that kills the agent (its workers follow through the
    parent-death signal), which ends the read with EOF."""
    lock = threading.Lock()
    state = {"done": False, "killed": False}

    def give_up():
        with lock:
            if not state["done"]:
                state["killed"] = True
                proc.kill()

    timer = threading.Timer(timeout, give_up)
    timer.start()
    seen = []
    try:
        for line in iter(proc.stderr.readline, ""):
            seen.append(line)
            if needle in line:
                return line
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
    why = f"within {timeout}s (killed it)" if state["killed"] else "before dtrun closed its stderr"
    raise AssertionError(f"no stderr line with {needle!r} {why}; got {seen!r}")


class Fifo:
    """A named pipe workers write one line to (`echo ready > $FIFO`). Opened
    read-write, so neither side's open() blocks and EOF never happens."""

    def __init__(self, directory: Path, name: str = "events"):
        self.path = directory / name
        os.mkfifo(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self._buf = b""

    def lines(self, count: int, timeout: float = 30) -> list[str]:
        """Blocks (select, with a deadline) until `count` lines arrived."""
        deadline = time.monotonic() + timeout
        while self._buf.count(b"\n") < count:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._fd], [], [], max(left, 0))
            if not ready:
                got = self._buf.count(b"\n")
                raise AssertionError(f"{self.path}: {got} of {count} lines within "
                                     f"{timeout}s: {self._buf!r}")
            self._buf += os.read(self._fd, 65536)
        out = []
        for _ in range(count):
            line, self._buf = self._buf.split(b"\n", 1)
            out.append(line.decode())
        return out

    def write(self, text: str) -> None:
        os.write(self._fd, text.encode())

    def close(self) -> None:
        os.close(self._fd)


def marked_pids(mark: str) -> list[int]:
    """Processes whose environment holds DTRUN_TEST_MARK=<mark>."""
    needle = f"DTRUN_TEST_MARK={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def describe_process(pid: int) -> str:
    """'pid ppid=P pgid=G state=S: command line', for a failed assertion to
    say which process survived."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"{pid} (gone)"
    state, ppid, pgid = fields[0].decode(), fields[1].decode(), fields[2].decode()
    return f"{pid} ppid={ppid} pgid={pgid} state={state}: {cmdline}"


def gone_within(mark: str, timeout: float = 10) -> list[str]:
    """Scans /proc until no live process carries `mark` (bounded: returns
    the survivors, described, after `timeout`). Killed processes take a
    moment to be torn down by the kernel, which no event tells us about."""
    deadline = time.monotonic() + timeout
    while True:
        left = marked_pids(mark)
        if not left or time.monotonic() > deadline:
            return [describe_process(pid) for pid in left]
        time.sleep(0.02)


def kill_marked(mark: str) -> None:
    """Cleanup after a failed test, so one failure does not leak into the
    next."""
    for pid in marked_pids(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


@contextmanager
def cleaned_up(proc: subprocess.Popen, mark: str):
    """Runs the body, then kills the agent and every process of its job
    (found by `mark`), whether the body passed or failed."""
    try:
        yield
    finally:
        proc.kill()
        kill_marked(mark)


def read_json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
