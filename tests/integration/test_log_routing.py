"""Worker output routing end to end: --redirects, --tee, --local-ranks-filter.

Real dtrun runs with real workers that write known bytes (whole lines, a
line split over two writes, binary bytes with CRLF, an unfinished last
line) to stdout and stderr. For each combination the test asserts the exact
set of log files and their contents, and that dtrun's stdout and stderr are
exactly an interleaving of what should be there: each worker write that
reaches the console directly, and each prefixed line the agent prints, whole
and in order, with nothing else.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

NPROC = 2

# Each write is one os.write (< PIPE_BUF, so atomic on a pipe).
WORKER = r"""
import os, sys
r = os.environ["LOCAL_RANK"]
for fd, chunk in [
    (1, f"out {r} one\n"), (2, f"err {r} one\n"), (1, f"out {r} par"), (1, "tial\n"),
    (1, b"bin \x00\xff\r\n"), (2, f"err {r} tail"), (1, f"out {r} tail"),
]:
    os.write(fd, chunk if isinstance(chunk, bytes) else chunk.encode())
"""


def writes(rank: int, stream: str) -> list[bytes]:
    """What WORKER writes, one element per write()."""
    if stream == "out":
        return [f"out {rank} one\n".encode(), f"out {rank} par".encode(), b"tial\n",
                b"bin \x00\xff\r\n", f"out {rank} tail".encode()]
    return [f"err {rank} one\n".encode(), f"err {rank} tail".encode()]


def prefixed_lines(rank: int, stream: str, prefix: bytes | None = None) -> list[bytes]:
    """What the agent prints for a tee'd stream: whole lines, prefixed, the
    unfinished last one ended with a newline."""
    prefix = prefix if prefix is not None else f"[default{rank}]:".encode()
    data = b"".join(writes(rank, stream))
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [prefix + line + b"\n" for line in lines]


def raw(rank, stream):
    return writes(rank, stream)


def tee(rank, stream):
    return prefixed_lines(rank, stream)


def is_interleaving(data: bytes, sources: list[list[bytes]]) -> bool:
    """Whether `data` is exactly the chunks of `sources`, each chunk whole,
    each source in its order, the sources merged in any way."""
    sources = [tuple(s) for s in sources if s]

    @functools.lru_cache(maxsize=None)
    def match(pos: int, taken: tuple[int, ...]) -> bool:
        if all(t == len(s) for t, s in zip(taken, sources)):
            return pos == len(data)
        for i, s in enumerate(sources):
            if taken[i] < len(s) and data.startswith(s[taken[i]], pos):
                nxt = taken[:i] + (taken[i] + 1,) + taken[i + 1:]
                if match(pos + len(s[taken[i]]), nxt):
                    return True
        return False

    return match(0, tuple(0 for _ in sources))


def run_dtrun(args: list[str], tmp_path: Path, nproc: int = NPROC, worker: str = WORKER,
              env: dict | None = None, log_dir: bool = True) -> subprocess.CompletedProcess:
    worker_file = tmp_path / "worker.py"
    worker_file.write_text(worker)
    flags = ["--nnodes=1", "--rdzv-id=logtest", f"--nproc-per-node={nproc}", *args]
    if log_dir:
        flags.append(f"--log-dir={tmp_path / 'logs'}")
    return subprocess.run([str(dh.DTRUN), *flags, "--no-python", dh.PYTHON, str(worker_file)],
                          env=env or dh.job_env(), capture_output=True, timeout=60)


def log_files(base: Path) -> dict[str, bytes]:
    """Every file of the run folder, as 'attempt_N/rank/name' -> contents."""
    runs = list(base.glob("logtest_*")) if base.exists() else []
    assert len(runs) <= 1, runs
    if not runs:
        return {}
    return {str(p.relative_to(runs[0])): p.read_bytes()
            for p in sorted(runs[0].rglob("*")) if p.is_file()}


def files_of(*entries: tuple[int, str]) -> dict[str, bytes]:
    names = {"out": "stdout.log", "err": "stderr.log"}
    return {f"attempt_0/{rank}/{names[stream]}": b"".join(writes(rank, stream))
            for rank, stream in entries}


ALL_FILES = files_of((0, "out"), (0, "err"), (1, "out"), (1, "err"))

# args, expected files, stdout sources, stderr sources
CASES = {
    "none": ([], {}, [raw(0, "out"), raw(1, "out")], [raw(0, "err"), raw(1, "err")]),
    "redirects 3": (["--redirects=3"], ALL_FILES, [], []),
    "redirects 1": (["--redirects", "1"], files_of((0, "out"), (1, "out")), [],
                    [raw(0, "err"), raw(1, "err")]),
    "redirects map": (["--redirects=0:3,1:2"], files_of((0, "out"), (0, "err"), (1, "err")),
                      [raw(1, "out")], []),
    "tee 3": (["--tee=3"], ALL_FILES, [tee(0, "out"), tee(1, "out")],
              [tee(0, "err"), tee(1, "err")]),
    "tee map": (["--tee=0:1,1:2"], files_of((0, "out"), (1, "err")),
                [tee(0, "out"), raw(1, "out")], [raw(0, "err"), tee(1, "err")]),
    "redirects 3 tee 1": (["-r", "3", "-t", "1"], ALL_FILES, [tee(0, "out"), tee(1, "out")], []),
    "filter 0": (["--local-ranks-filter=0"], {}, [tee(0, "out")], [tee(0, "err")]),
    "filter 1 tee 3": (["--local-ranks-filter=1", "--tee=3"], ALL_FILES, [tee(1, "out")],
                       [tee(1, "err")]),
    "filter 0 redirects 1 tee 2": (["--local-ranks-filter=0", "--redirects=1", "--tee=2"],
                                   ALL_FILES, [], [tee(0, "err")]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_routing(tmp_path, name):
    args, files, stdout_sources, stderr_sources = CASES[name]
    r = run_dtrun(args, tmp_path)
    assert r.returncode == 0, r.stderr
    assert log_files(tmp_path / "logs") == files
    assert is_interleaving(r.stdout, stdout_sources), r.stdout
    assert is_interleaving(r.stderr, stderr_sources), r.stderr


def test_the_checker_rejects_a_line_broken_by_another(tmp_path):
    a = [b"[a]:one\n"]
    b = [b"[b]:two\n"]
    assert is_interleaving(b"[b]:two\n[a]:one\n", [a, b])
    assert not is_interleaving(b"[a]:o[b]:two\nne\n", [a, b])
    assert not is_interleaving(b"[a]:one\n", [a, b])
    assert not is_interleaving(b"[a]:one\n[b]:two\nextra", [a, b])


def test_the_shared_console_is_left_blocking(tmp_path):
    """dtrun writes tee'd lines without blocking, through an open file of
    its own: the pipe it shares with us (and with its workers) must not
    turn non-blocking. Both streams on one pipe: still whole lines."""
    (tmp_path / "worker.py").write_text(WORKER)
    read_fd, write_fd = os.pipe()
    try:
        r = subprocess.run([str(dh.DTRUN), "--nnodes=1", "--nproc-per-node=2", "--tee=0:3",
                            f"--log-dir={tmp_path / 'logs'}", "--no-python", dh.PYTHON, str(tmp_path / "worker.py")],
                           env=dh.job_env(), stdout=write_fd, stderr=write_fd, timeout=60)
        assert r.returncode == 0
        assert fcntl.fcntl(write_fd, fcntl.F_GETFL) & os.O_NONBLOCK == 0
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        console = f.read()
    assert is_interleaving(console, [tee(0, "out"), tee(0, "err"), raw(1, "out"),
                                     raw(1, "err")]), console


def test_multi_digit_ranks_in_maps(tmp_path):
    """torchrun only accepts single-digit ranks in maps; dtrun any."""
    worker = 'printf "rank $LOCAL_RANK\\n"'
    r = subprocess.run([str(dh.DTRUN), "--nnodes=1", "--rdzv-id=logtest", "--nproc-per-node=11",
                        "--tee=10:1", f"--log-dir={tmp_path / 'logs'}", "--no-python",
                        "/bin/sh", "-c", worker], env=dh.job_env(), capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert log_files(tmp_path / "logs") == {"attempt_0/10/stdout.log": b"rank 10\n"}
    sources = [[f"rank {i}\n".encode()] for i in range(10)] + [[b"[default10]:rank 10\n"]]
    assert is_interleaving(r.stdout, sources), r.stdout
    assert r.stderr == b""


def test_prefix_template_and_role(tmp_path):
    env = dh.job_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${role_name} r$rank/$local_rank]: ")
    r = run_dtrun(["--tee=1", "--role=trainer"], tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert is_interleaving(r.stdout, [prefixed_lines(0, "out", b"[trainer r0/0]: "),
                                      prefixed_lines(1, "out", b"[trainer r1/1]: ")]), r.stdout


def test_files_without_log_dir_are_kept_and_named(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = run_dtrun(["--redirects=2"], tmp_path, env=dh.job_env(TMPDIR=str(tmp)), log_dir=False)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(rb"dtrun: worker logs: (\S+) \(kept; choose the folder with --log-dir\)\n",
                     r.stderr)
    assert m, r.stderr
    assert Path(m.group(1).decode()).parent == tmp
    assert log_files(tmp) == files_of((0, "err"), (1, "err"))
    assert is_interleaving(r.stdout, [raw(0, "out"), raw(1, "out")])


def test_restarts_get_their_own_files(tmp_path):
    """Each attempt writes attempt_<n>; a worker's last lines come before
    the agent reports its failure."""
    worker = ('import os, sys\n'
              'n = os.environ["TORCHELASTIC_RESTART_COUNT"]\n'
              'os.write(1, f"attempt {n}\\n".encode())\n'
              'os.write(2, f"err {n}".encode())\n'
              'sys.exit(3 if n == "0" else 0)\n')
    r = run_dtrun(["--tee=3", "--max-restarts=1"], tmp_path, nproc=1, worker=worker)
    assert r.returncode == 0, r.stderr
    assert log_files(tmp_path / "logs") == {
        "attempt_0/0/stdout.log": b"attempt 0\n", "attempt_0/0/stderr.log": b"err 0",
        "attempt_1/0/stdout.log": b"attempt 1\n", "attempt_1/0/stderr.log": b"err 1"}
    assert r.stdout == b"[default0]:attempt 0\n[default0]:attempt 1\n"
    lines = r.stderr.decode().splitlines()
    assert [line for line in lines if line.startswith("[")] == ["[default0]:err 0",
                                                                "[default0]:err 1"]
    # The agent's own messages about the failure come after the worker's last line.
    first_message = next(i for i, line in enumerate(lines) if line.startswith("dtrun:"))
    assert lines.index("[default0]:err 0") < first_message
    assert lines.index("[default0]:err 1") > first_message


def test_bad_values_are_one_line_usage_errors(tmp_path):
    for args, needle in [(["--redirects=4"], "--redirects=4 is not 0, 1, 2 or 3"),
                         (["--tee=0:1,x"], "--tee=0:1,x: 'x' is not LOCAL_RANK:VALUE"),
                         (["--tee=0:1,0:2"], "names local rank 0 twice"),
                         (["--local-ranks-filter=a"], "--local-ranks-filter=a: 'a' is not")]:
        r = run_dtrun(args, tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        lines = r.stderr.decode().splitlines()
        assert len(lines) == 1 and needle in lines[0], (args, lines)
        assert not (tmp_path / "logs").exists()


def test_ranks_beyond_the_node_are_a_warning(tmp_path):
    r = run_dtrun(["--tee=0:1,7:1"], tmp_path)
    assert r.returncode == 0, r.stderr
    warning = (b"dtrun: warning: --tee names local rank 7, but this node runs 2 worker(s) "
               b"(local ranks 0..1); ignored\n")
    assert r.stderr.startswith(warning)
    assert is_interleaving(r.stderr[len(warning):], [raw(0, "err"), raw(1, "err")])
    assert is_interleaving(r.stdout, [tee(0, "out"), raw(1, "out")])


BIG_WORKER = r"""
import os, sys
total = int(sys.argv[1])
line = b"x" * 99 + b"\n"
block = line * 10000  # 1 MB
for _ in range(total // len(block)):
    view = memoryview(block)
    while view:
        view = view[os.write(1, view):]
os.write(1, b"DONE\n")
# Hold on until the test has read the agent's memory high-water mark.
with open(os.environ["RELEASE_FIFO"]) as f:
    f.read()
"""


def agent_peak_rss(tmp_path: Path, megabytes: int) -> tuple[int, int, int]:
    """Runs one worker writing `megabytes` MB of 100-byte lines under
    --tee=1, reads dtrun's stdout to the end of the output, then the agent's
    VmHWM; returns (VmHWM kB, console bytes, log file bytes)."""
    fifo = tmp_path / f"release{megabytes}"
    os.mkfifo(fifo)
    worker = tmp_path / "big.py"
    worker.write_text(BIG_WORKER)
    logs = tmp_path / f"logs{megabytes}"
    proc = subprocess.Popen(
        [str(dh.DTRUN), "--nnodes=1", "--rdzv-id=logtest", "--tee=1", f"--log-dir={logs}",
         "--no-python", dh.PYTHON, str(worker), str(megabytes * 1_000_000)],
        env=dh.job_env(RELEASE_FIFO=str(fifo)), stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL)
    try:
        console = 0
        tail = b""
        while not tail.endswith(b"[default0]:DONE\n"):
            chunk = os.read(proc.stdout.fileno(), 1 << 20)
            assert chunk, f"dtrun's stdout ended after {console} bytes"
            console += len(chunk)
            tail = (tail + chunk)[-64:]
        with open(f"/proc/{proc.pid}/status") as f:
            hwm = int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))
        with open(fifo, "w") as f:
            f.write("go\n")
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    (log,) = logs.glob("logtest_*/attempt_0/0/stdout.log")
    return hwm, console, log.stat().st_size


def test_a_worker_writing_hundreds_of_megabytes_does_not_grow_the_agent(tmp_path):
    small_hwm, _, _ = agent_peak_rss(tmp_path, 1)
    big_hwm, console, file_size = agent_peak_rss(tmp_path, 300)
    lines = 300 * 10000
    assert file_size == lines * 100 + len(b"DONE\n")
    assert console == (lines + 1) * len(b"[default0]:") + file_size
    # Bounded buffers: 300 MB through the agent costs it (next to) nothing.
    assert big_hwm - small_hwm < 10 * 1024, (small_hwm, big_hwm)
    print(f"agent VmHWM: {small_hwm} kB after 1 MB, {big_hwm} kB after 300 MB")
