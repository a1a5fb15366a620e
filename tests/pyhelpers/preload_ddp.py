"""dtrun --preload under real gloo DDP, shared by the torch 1.13 test
(tests/e2e/test_preload_ddp.py, /usr/bin/python3) and the torch 2.15 one
(tests/e2e/test_torch2_preload.py, the contract's torch from PyPI:
tests/pyhelpers/torch_pypi.py). A `launcher` says how to run dtrun for
one of them:

    launcher(args, workdir, env, timeout) -> CompletedProcess (text)
    popen(args, workdir, env)             -> Popen, stderr piped (text)

`workdir` is the test's folder (a launcher that runs dtrun in a rootfs
binds it there).

Each run is two workers of tests/pyhelpers/preload_train.py with one
restart: rank 1 raises inside its @record main in round 0, round 1 trains
(preload_train.py says what each rank writes). A run with --preload is
compared with the same run without it: the failure summary (the @record
error file's message and traceback) and the per-rank log files must be the
same, pids, times and folders aside."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtrun_helpers as dh  # noqa: E402
import hang_checks  # noqa: E402
from failure_summary import field, summary  # noqa: E402

TRAIN = dh.SOURCE_DIR / "tests" / "pyhelpers" / "preload_train.py"
HANG = dh.SOURCE_DIR / "tests" / "pyhelpers" / "hang_train.py"
NPROC = 2
RAISED = "RuntimeError: rank 1 fails in round 0 at step 1"


@dataclass
class job:
    result: subprocess.CompletedProcess
    out: Path        # the workers' result files
    logs: Path       # --log-dir
    events: list[dict]
    left: list[str]  # processes of the job still alive after it ended


def train(launcher, python: str, workdir: Path, name: str, preload: str | None,
          *flags: str, max_restarts: int = 1) -> job:
    """One run of preload_train.py: two workers, one restart (with
    max_restarts=0 the job fails with round 0), the workers' output as
    `flags` route it (--tee, --redirects) into a --log-dir of its own."""
    base = workdir / name
    out, logs = base / "out", base / "logs"
    out.mkdir(parents=True)
    events = base / "events.jsonl"
    env = dh.job_env()
    args = ["--standalone", f"--nproc-per-node={NPROC}", f"--max-restarts={max_restarts}",
            f"--log-dir={logs}", f"--event-log={events}", *flags]
    if preload:
        args.append(f"--preload={preload}")
    r = launcher([*args, "--python", python, str(TRAIN), str(out)], workdir, env, 300)
    left = dh.gone_within(env["DTRUN_TEST_MARK"])
    dh.kill_marked(env["DTRUN_TEST_MARK"])
    return job(r, out, logs, dh.read_json_lines(events) if events.exists() else [], left)


def check_trained(j: job, torch_version: str) -> list[dict]:
    """The job ended 0 after one restart, round 1 trained on both ranks
    (all-reduced, identical DDP replicas) and nothing of it is left."""
    r = j.result
    assert r.returncode == 0, r.stderr
    assert "restarting the workers (restart 1 of 1)" in r.stderr, r.stderr
    assert j.left == [], j.left
    ranks = [json.loads((j.out / f"rank{i}.json").read_text()) for i in range(NPROC)]
    for x in ranks:
        assert x["torch"].startswith(torch_version + "."), x["torch"]
        assert x["restart_count"] == 1
        assert x["world_size"] == NPROC
        assert x["allreduce_sum"] == NPROC * (NPROC + 1) / 2
    assert ranks[0]["params"] == ranks[1]["params"]  # DDP keeps replicas identical
    return ranks


def starts(j: job) -> dict[tuple[int, int], dict]:
    """What each worker of each round wrote at its start: (round, rank) -> it."""
    found = {}
    for p in j.out.glob("start*.*.json"):
        rnd, rank = p.name[len("start"):-len(".json")].split(".")
        found[(int(rnd), int(rank))] = json.loads(p.read_text())
    return found


def check_forked(j: job, preloaded: list[str], rounds: int = 2) -> None:
    """Every worker of every round found the modules `preloaded` imported at
    its first line (none for [], a plain start) and had the agent as its
    parent from then on: the dtrun whose pid the event log names, the one
    that reported the worker's pid as started. Each drew its own torch
    random seed."""
    s = starts(j)
    assert sorted(s) == [(r, i) for r in range(rounds) for i in range(NPROC)], sorted(s)
    agent = {e["agent_pid"] for e in j.events}
    assert len(agent) == 1, agent
    [agent_pid] = agent
    started = {(e["round"], e["rank"]): e["pid"]
               for e in j.events if e["event"] == "worker_started"}
    for key, x in s.items():
        if preloaded:
            assert set(preloaded) <= set(x["preloaded"]), (key, x)
        else:
            assert x["preloaded"] == [], (key, x)
        assert x["ppid"] == agent_pid, (key, x, agent_pid)
        assert Path(x["parent_exe"]).name == "dtrun", x
        assert started[key] == x["pid"], (key, started)
    # Each worker's torch random state its own, as after a plain start's
    # import (not the warm interpreter's, copied into every worker).
    seeds = [x["torch_seed"] for x in s.values()]
    assert len(set(seeds)) == len(seeds), seeds
    assert not fell_back(j.result.stderr), j.result.stderr
    # The warm interpreter's own output (its stderr): nothing went wrong there.
    warm = run_folder(j) / "preload.log"
    if preloaded:
        assert warm.read_text() == "", warm.read_text()
    else:
        assert not warm.exists()


def fell_back(stderr: str) -> bool:
    """Whether dtrun said --preload failed (a worker started plainly)."""
    return bool(re.search(r"warning: .*--preload|without --preload", stderr))


def check_same_start(plain: job, preloaded: job) -> None:
    """Each worker of each round saw the same start as without --preload:
    its arguments, sys.path, folder, the names of its environment
    variables, __file__ and its stdio streams' settings."""
    keys = ("argv", "orig_argv", "path", "cwd", "environ", "main", "stdio")
    a, b = starts(plain), starts(preloaded)
    assert sorted(a) == sorted(b)
    for key in a:
        mine = {k: json.loads(neutral(preloaded, json.dumps(b[key][k]))) for k in keys}
        theirs = {k: json.loads(neutral(plain, json.dumps(a[key][k]))) for k in keys}
        assert mine == theirs, key


def neutral(j: job, text: str) -> str:
    """`text` with pids, times, durations, ports, the run's id and folders made
    neutral: what differs between two runs of the same job."""
    text = text.replace(str(j.out.parent), "<base>")
    text = text.replace(run_folder(j).name, "<run>")
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<id>",
                  text)  # --standalone's run id
    text = re.sub(r"\bpid(\s*[=:]?\s*)\d+", r"pid\1<n>", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z?", "<time>", text)
    text = re.sub(r"\b\d+(\.\d+)?\s?(ms|s)\b", "<dur>", text)
    text = re.sub(r":\d{2,5}\b", ":<port>", text)
    return text


def run_folder(j: job) -> Path:
    """The run's folder in --log-dir (--standalone names it by a random id)."""
    runs = list(j.logs.iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def log_files(j: job) -> dict[str, bytes]:
    """The per-rank log files: 'attempt_N/rank/name' -> contents."""
    base = run_folder(j)
    return {str(p.relative_to(base)): p.read_bytes()
            for p in sorted(base.glob("attempt_*/*/std*.log"))}


def error_file(j: job, attempt: int, local_rank: int) -> dict:
    """The @record error file torch wrote, its time left out."""
    data = json.loads((run_folder(j) / f"attempt_{attempt}" / str(local_rank) / "error.json")
                      .read_text())
    data["message"]["extraInfo"].pop("timestamp")
    return data


def dtrun_lines(j: job) -> list[str]:
    """dtrun's own lines on stderr, made neutral."""
    return [neutral(j, line) for line in j.result.stderr.splitlines()
            if line.startswith("dtrun:")]


def failures(j: job) -> list[dict]:
    """The event log's worker_failed events, pids and times left out, the
    error file's path made neutral."""
    found = []
    for e in j.events:
        if e["event"] == "worker_failed":
            e = {k: v for k, v in e.items() if k not in ("time", "exit_time", "pid", "agent_pid")}
            e["error_file"] = neutral(j, e["error_file"])
            found.append(e)
    return found


def tee_lines(text: str) -> list[str]:
    """The workers' lines dtrun prefixed ([default<N>]:), in order per rank."""
    return [line for line in text.splitlines() if re.match(r"\[default\d+\]:", line)]


def check_same_round_0_failure(plain: job, preloaded: job) -> None:
    """Round 0's failure, rank 1's exception in its @record main, is
    reported as without --preload: the same error file, the same dtrun
    lines (the error file's message among them) and events."""
    assert error_file(preloaded, 0, 1) == error_file(plain, 0, 1)
    # And the hook's note of the exception (the failure's class).
    note = run_folder(preloaded) / "attempt_0" / "1" / "exception.txt"
    assert note.read_text() == f"{RAISED}\n"
    assert note.read_text() == (run_folder(plain) / "attempt_0" / "1" / "exception.txt").read_text()
    record = error_file(preloaded, 0, 1)["message"]
    assert record["message"] == RAISED, record
    assert 'raise RuntimeError("rank 1 fails in round 0' in record["extraInfo"]["py_callstack"]
    assert not (run_folder(preloaded) / "attempt_0" / "0" / "error.json").exists()
    assert dtrun_lines(preloaded) == dtrun_lines(plain)
    assert (f"exited with code 1: {RAISED}; stopping the other workers"
            in preloaded.result.stderr), preloaded.result.stderr
    assert failures(preloaded) == failures(plain)
    [failed] = [e for e in preloaded.events if e["event"] == "worker_failed" and e["rank"] == 1]
    assert (failed["rank"], failed["message"], failed["class"]) == (1, RAISED, "exception")
    assert failed["error_file"].endswith("/attempt_0/1/error.json"), failed


def check_same_summary(plain: job, preloaded: job) -> None:
    """A job that ends with round 0's failure (no restart left): the same
    failure summary, the error file's message and traceback in it."""
    assert plain.result.returncode == 1, plain.result.stderr
    assert preloaded.result.returncode == 1, preloaded.result.stderr
    assert plain.left == [] and preloaded.left == [], (plain.left, preloaded.left)
    block = summary(preloaded.result.stderr)
    assert neutral(preloaded, block) == neutral(plain, summary(plain.result.stderr))
    assert field(block, "rank") == "1 (local_rank 1)", block
    assert field(block, "error") == RAISED, block
    assert re.search(r"attempt_0/1/error\.json$", field(block, "error_file")), block
    assert re.search(r'^dtrun:       File ".*preload_train\.py", line \d+, in main$', block,
                     re.M), block
    assert 'dtrun:         raise RuntimeError("rank 1 fails in round 0 at step 1")' in block
    assert "stopped by dtrun (not failures): rank(s) 0" in block


def check_same_logs(plain: job, preloaded: job) -> None:
    """The per-rank log files of both rounds hold the same bytes."""
    files = log_files(preloaded)
    assert sorted(files) == [f"attempt_{a}/{r}/std{s}.log" for a in (0, 1) for r in (0, 1)
                             for s in ("err", "out")], sorted(files)
    assert files == log_files(plain)
    assert b"rank 1 attempt 1: done\n" in files["attempt_1/1/stdout.log"]
    assert RAISED.encode() in files["attempt_0/1/stderr.log"]


def check_tee_and_redirects(runs: dict) -> None:
    """--tee and --redirects wrote each rank's files as without --preload;
    --tee also printed every line of them, prefixed, as without --preload;
    --redirects printed none."""
    for name in ("tee", "redirects"):
        check_same_logs(runs["plain"], runs[name])
    for stream in ("stdout", "stderr"):
        tee = sorted(tee_lines(getattr(runs["tee"].result, stream)))
        assert tee and tee == sorted(tee_lines(getattr(runs["plain"].result, stream)))
        assert tee_lines(getattr(runs["redirects"].result, stream)) == []


# --- hang detection and dtrun stacks under --preload (hang_train.py) ---

def hang(launcher, python: str, workdir: Path, preload: str) -> None:
    """test_hang_torch's hang, with --preload: rank 1 blocks in load_batch()
    while rank 0 waits in a barrier; dtrun finds it and names both."""
    events = workdir / "events.jsonl"
    out = workdir / "out"
    out.mkdir()
    env = dh.job_env()
    r = launcher(["--standalone", f"--nproc-per-node={NPROC}",
                  f"--hang-timeout={hang_checks.TIMEOUT_S}", f"--log-dir={workdir / 'logs'}",
                  f"--event-log={events}", f"--preload={preload}", "--python", python,
                  str(HANG), "--out", str(out)], workdir, env, 300)
    left = dh.gone_within(env["DTRUN_TEST_MARK"])
    dh.kill_marked(env["DTRUN_TEST_MARK"])
    hang_checks.check_hang(r, events)
    assert hang_checks.workers_ready(out), r.stderr
    assert not fell_back(r.stderr), r.stderr
    [agent_pid] = {e["agent_pid"] for e in dh.read_json_lines(events)}
    for rank in range(NPROC):
        start = json.loads((out / f"rank{rank}.start").read_text())
        assert start == {"preloaded": True, "ppid": agent_pid}, start
    assert left == [], left


def stacks(popen, stacks_cli, python: str, workdir: Path, preload: str) -> None:
    """`dtrun stacks` on a running job whose workers were forked from the
    warm interpreter: both ranks' Python stacks, the job left running."""
    env = dh.job_env(DTRUN_CONTROL_DIR=str(workdir / "control"))
    out = workdir / "out"
    out.mkdir()
    fifo = dh.Fifo(workdir)
    proc = popen(["--standalone", f"--nproc-per-node={NPROC}", f"--log-dir={workdir / 'logs'}",
                  f"--preload={preload}", "--python", python, str(HANG), "--out", str(out),
                  "--ready", str(fifo.path), "--block-in-queue"], workdir, env)
    err = ""
    try:
        fifo.lines(NPROC, timeout=120)
        r = stacks_cli(["stacks", "--json"], workdir, env, 120)
        assert r.returncode == 0, r.stderr
        [reply] = json.loads(r.stdout)
        hang_checks.check_queue_stacks(reply)
        assert proc.poll() is None  # still running: capturing stops nothing
        began = [json.loads((out / f"rank{i}.start").read_text()) for i in range(NPROC)]
        assert [x["preloaded"] for x in began] == [True] * NPROC, began
        # Stopped as a user would stop it: SIGTERM to dtrun, the workers'
        # parent (for torch 2.6 `proc` is the rootfs wrapper around it).
        [agent] = {x["ppid"] for x in began}
        assert Path(os.readlink(f"/proc/{agent}/exe")).name == "dtrun"
        os.kill(agent, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        fifo.close()
        left = dh.gone_within(env["DTRUN_TEST_MARK"])
        dh.kill_marked(env["DTRUN_TEST_MARK"])
    assert left == [], left
    assert not fell_back(err), err
