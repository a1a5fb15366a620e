"""--hang-timeout and `dtrun stacks` on real gloo jobs, under torch 1.13
(Python 3.11) and torch 2.6 (Python 3.13, in its rootfs): rank 1 blocks in
load_batch() while rank 0 waits in dist.barrier(). dtrun must notice within
the timeout plus the detection bound (docs/observability.md), name the
function, file and rank of each, keep both ranks' stacks in files (Python
threads and native frames), kill rank 1 as the root cause and exit 137."""

import json
import os
import re
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch2  # noqa: E402

SCRIPT = dh.SOURCE_DIR / "tests" / "pyhelpers" / "hang_train.py"
TIMEOUT_S = 3


def check_hang(r, events, started, ended):
    assert r.returncode == 137, r.stderr
    err = r.stderr
    assert "hang: no progress from any worker for" in err
    assert re.search(r"^dtrun: +rank 1: load_batch \(hang_train\.py:\d+\)$", err, re.M), err
    assert re.search(r"^dtrun: +rank 0: barrier \(distributed_c10d\.py:\d+\) called from "
                     r"train_step \(hang_train\.py:\d+\)$", err, re.M), err
    # Rank 1 is the root cause, killed after the hang; rank 0 was stopped.
    assert re.search(r"rank +: 1 \(local_rank 1\)", err), err
    assert "hang      : killed by dtrun after a hang (--hang-timeout): no progress" in err
    assert "it was in load_batch (hang_train.py:" in err
    hang = [e for e in dh.read_json_lines(events) if e["event"] == "hang_detected"]
    assert len(hang) == 1
    where = {w["rank"]: w["where"] for w in hang[0]["workers"]}
    assert where[1].startswith("load_batch (hang_train.py:")
    assert where[0].startswith("barrier (distributed_c10d.py:")
    # Each rank's stacks file: every Python thread, and the native frames
    # (eu-stack shows gloo's own threads).
    for w in hang[0]["workers"]:
        text = open(w["stacks"]).read()
        assert f"# dtrun stack capture: rank {w['rank']} " in text
        assert "(most recent call first)" in text
        assert re.search(r"^TID \d+:", text, re.M), text
        assert "gloo::" in text, text
    # Detected within the timeout plus two ticks (1.5 x), plus the job's
    # start and the capture: a hang bound, not a performance target.
    assert ended - started < 120


def workers_ready(out, n=2):
    return all((out / f"rank{i}.ready").exists() for i in range(n))


def test_a_gloo_hang_is_found_and_named_under_torch_1_13(tmp_path):
    events = tmp_path / "events.jsonl"
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    r = dh.run(["--standalone", "--nproc-per-node=2", f"--hang-timeout={TIMEOUT_S}",
                f"--log-dir={tmp_path / 'logs'}", f"--event-log={events}", "--python", dh.PYTHON,
                str(SCRIPT), "--out", str(out)], timeout=300)
    check_hang(r, events, started, time.monotonic())
    assert workers_ready(out), r.stderr


def test_a_gloo_hang_is_found_and_named_under_torch_2_6(tmp_path):
    torch2.require()
    events = tmp_path / "events.jsonl"
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    r = torch2.dtrun(["--standalone", "--nproc-per-node=2", f"--hang-timeout={TIMEOUT_S}",
                      f"--log-dir={tmp_path / 'logs'}", f"--event-log={events}", "--python",
                      torch2.PYTHON, SCRIPT, "--out", out], binds=[tmp_path], timeout=300)
    check_hang(r, events, started, time.monotonic())
    assert workers_ready(out), r.stderr


def test_dtrun_stacks_on_a_running_gloo_job_leaves_it_running(tmp_path):
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    out = tmp_path / "out"
    out.mkdir()
    fifo = dh.Fifo(tmp_path)
    # The workers say they are past the all-reduce through the FIFO.
    proc = dh.start(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON, str(SCRIPT),
                     "--out", str(out), "--ready", str(fifo.path), "--block-in-queue"], env)
    try:
        fifo.lines(2, timeout=120)
        r = dh.subprocess.run([str(dh.DTRUN), "stacks", "--json"], env=env,
                              capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        [reply] = json.loads(r.stdout)
        assert reply["ok"] is True
        summary = reply["summary"]
        assert re.search(r"^rank 0: wait \(threading\.py:\d+\) called from "
                         r"wait_for_peers_in_queue \(hang_train\.py:\d+\)$", summary, re.M), reply
        assert re.search(r"^rank 1: wait \(threading\.py:\d+\) called from "
                         r"load_batch_from_queue \(hang_train\.py:\d+\)$", summary, re.M), reply
        assert len(reply["files"]) == 2
        for f in reply["files"]:
            assert "(most recent call first)" in open(f).read()
        assert proc.poll() is None  # still running: capturing stops nothing
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        fifo.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
