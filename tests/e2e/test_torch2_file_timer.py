"""The file-timer watchdog with torch 2.15's own FileTimerClient and
expires() in the workers (the contract's torch from PyPI,
tests/pyhelpers/torch_pypi.py): dtrun kills the worker past its deadline as
torchrun 2.15 does, and leaves a worker that released its deadline alone."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402

WORKER = dh.SOURCE_DIR / "tests" / "pyhelpers" / "file_timer_worker.py"


def launch(launcher, tmp_path, mode):
    out = tmp_path / "out"
    out.mkdir()
    env = dh.job_env(TORCHELASTIC_ENABLE_FILE_TIMER="1")
    env.pop("TORCHELASTIC_TIMER_FILE", None)
    r = launcher(["--standalone", "--nproc-per-node=1", *(
        ["--python", torch_pypi.PYTHON] if launcher is torch_pypi.dtrun else []), WORKER, mode,
        out], env=env)
    seen = json.loads((out / "rank0.json").read_text()) if (out / "rank0.json").exists() else {}
    return r, seen


def test_dtrun_kills_a_torch2_worker_past_its_deadline(tmp_path):
    r, seen = launch(torch_pypi.dtrun, tmp_path, "hang")
    assert r.returncode == 137, r.stderr
    assert "watchdog  : killed by dtrun's file-timer watchdog" in r.stderr
    assert seen["path"].endswith("/watchdog_timer")


def test_torchrun_2_15_kills_it_and_then_itself(tmp_path):
    """The reference behaviour, and the documented difference: torchrun
    2.15's watchdog (`_run_watchdog`) kills the worker and then sends the
    same signal to its own process, so torchrun dies by SIGKILL with no
    failure summary and no restart (2.6 reported the worker's SIGKILL and
    exited 1). dtrun reports and restarts as for any failure (above)."""
    r, seen = launch(torch_pypi.torchrun, tmp_path, "hang")
    assert r.returncode == -9, r.stderr
    assert "Signal 9 (SIGKILL)" not in r.stderr  # no failure summary: it was killed
    assert os.path.basename(seen["path"]).startswith("watchdog_timer_")


def test_dtrun_leaves_a_released_torch2_worker_alone(tmp_path):
    r, _ = launch(torch_pypi.dtrun, tmp_path, "quick")
    assert r.returncode == 0, r.stderr
    assert "released" in r.stdout
    assert "watchdog" not in r.stderr
