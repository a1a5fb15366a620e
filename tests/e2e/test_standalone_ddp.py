"""Real PyTorch (Debian's 1.13, gloo on CPU) under dtrun --standalone: four
DDP workers meet on the agent's store, train, all-reduce; a crash on the
first attempt is survived with --max-restarts=1 by resuming from the last
checkpoint, and ends with dtrun failing with the worker's code without."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from ddp_checks import CRASH_EXIT_CODE, check_clean_run, check_resumed_run, results  # noqa: E402

NPROC = 4
EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"


def train(out, *extra, max_restarts=0):
    return dh.run(["--standalone", f"--nproc-per-node={NPROC}", f"--max-restarts={max_restarts}",
                   "--python", dh.PYTHON, str(EXAMPLE), "--out", str(out),
                   "--checkpoint", str(out / "ckpt.pt"), *extra], timeout=300)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    r = train(out)
    assert r.returncode == 0, r.stderr
    return results(out, NPROC)


def test_four_workers_train_and_all_reduce(clean_run):
    check_clean_run(clean_run, NPROC)
    assert sorted(x["local_rank"] for x in clean_run) == list(range(NPROC))


def test_crash_restart_resumes_from_checkpoint(tmp_path, clean_run):
    # Step 6 is in epoch 1 (4 steps per epoch): epoch 0 is checkpointed.
    r = train(tmp_path, "--resume", "--crash-at-step=6", max_restarts=1)
    assert r.returncode == 0, r.stderr
    assert f"exited with code {CRASH_EXIT_CODE}" in r.stderr
    assert "restarting the workers (restart 1 of 1)" in r.stderr
    check_resumed_run(results(tmp_path, NPROC), clean_run, NPROC)


def test_crash_without_restarts_fails_with_the_workers_code(tmp_path):
    r = train(tmp_path, "--resume", "--crash-at-step=6", max_restarts=0)
    assert r.returncode == CRASH_EXIT_CODE
    assert "local_rank=1" in r.stderr
    assert not (tmp_path / "rank0.json").exists()
