"""What a hang of tests/pyhelpers/hang_train.py must look like in dtrun's
output, whatever torch and launch ran it (tests/e2e/test_hang_torch.py,
and with --preload tests/pyhelpers/preload_ddp.py): rank 1 blocked in
load_batch() while rank 0 waits in dist.barrier(); dtrun names the
function, file and rank of each, keeps both ranks' stacks in files (Python
threads and native frames), kills rank 1 as the root cause and exits 137."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtrun_helpers as dh  # noqa: E402

TIMEOUT_S = 3  # --hang-timeout


def check_hang(r, events: Path, started: float | None = None, ended: float | None = None):
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
    if started is not None and ended is not None:
        # Detected within the timeout plus two ticks (1.5 x), plus the
        # job's start and the capture: a hang bound, not a performance
        # target.
        assert ended - started < 120


def workers_ready(out: Path, n: int = 2) -> bool:
    return all((out / f"rank{i}.ready").exists() for i in range(n))


def check_queue_stacks(reply: dict) -> None:
    """One agent's `dtrun stacks --json` reply while hang_train.py
    --block-in-queue waits: rank 1 in load_batch_from_queue, rank 0 in
    wait_for_peers_in_queue, a stacks file for each."""
    assert reply["ok"] is True, reply
    summary = reply["summary"]
    assert re.search(r"^rank 0: wait \(threading\.py:\d+\) called from "
                     r"wait_for_peers_in_queue \(hang_train\.py:\d+\)$", summary, re.M), reply
    assert re.search(r"^rank 1: wait \(threading\.py:\d+\) called from "
                     r"load_batch_from_queue \(hang_train\.py:\d+\)$", summary, re.M), reply
    assert len(reply["files"]) == 2
    for f in reply["files"]:
        assert "(most recent call first)" in open(f).read()
