"""--hang-timeout and `dtrun stacks` on real gloo jobs, under torch 1.13
(Debian's) and torch 2.15 (the contract's, from PyPI: tests/pyhelpers/
torch_pypi.py): rank 1 blocks in
load_batch() while rank 0 waits in dist.barrier(). dtrun must notice within
the timeout plus the detection bound (docs/observability.md), name the
function, file and rank of each, keep both ranks' stacks in files (Python
threads and native frames), kill rank 1 as the root cause and exit 137
(tests/pyhelpers/hang_checks.py; the same under --preload:
tests/e2e/test_preload_ddp.py, test_torch2_preload.py)."""

import json
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402
from hang_checks import TIMEOUT_S, check_hang, check_queue_stacks, workers_ready  # noqa: E402

SCRIPT = dh.SOURCE_DIR / "tests" / "pyhelpers" / "hang_train.py"


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


def test_a_gloo_hang_is_found_and_named_under_torch_2_15(tmp_path):
    torch_pypi.require()
    events = tmp_path / "events.jsonl"
    out = tmp_path / "out"
    out.mkdir()
    started = time.monotonic()
    r = torch_pypi.dtrun(["--standalone", "--nproc-per-node=2", f"--hang-timeout={TIMEOUT_S}",
                          f"--log-dir={tmp_path / 'logs'}", f"--event-log={events}", "--python",
                          torch_pypi.PYTHON, SCRIPT, "--out", out], timeout=300)
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
        check_queue_stacks(reply)
        assert proc.poll() is None  # still running: capturing stops nothing
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        fifo.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
