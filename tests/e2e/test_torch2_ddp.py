"""Real torch 2.15 (PyPI's, the contract: tests/pyhelpers/torch_pypi.py;
gloo on CPU) under dtrun --standalone: four DDP workers meet on the
agent's store (TORCHELASTIC_USE_AGENT_STORE, init_process_group env://),
train and all-reduce; a crash on the first
attempt is survived by one group restart (--max-restarts=1) that resumes
from the last checkpoint and ends with the parameters of a run without
the crash. The torch 1.13 twin is test_standalone_ddp.py; torch 2.6's
smoke test is test_torch26_smoke.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402
from ddp_checks import CRASH_EXIT_CODE, check_clean_run, check_resumed_run, results  # noqa: E402

NPROC = 4
EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"


def train(out, *extra, max_restarts=0):
    return torch_pypi.dtrun(["--standalone", f"--nproc-per-node={NPROC}",
                             f"--max-restarts={max_restarts}", "--python", torch_pypi.PYTHON,
                             EXAMPLE, "--out", out, "--checkpoint", out / "ckpt.pt", *extra],
                            timeout=300)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    torch_pypi.require()
    out = tmp_path_factory.mktemp("clean")
    r = train(out)
    assert r.returncode == 0, r.stderr
    return results(out, NPROC)


def test_four_workers_train_and_all_reduce_on_torch_2_15(clean_run):
    check_clean_run(clean_run, NPROC, torch_pypi.TORCH_VERSION)


def test_one_group_restart_resumes_from_the_checkpoint(tmp_path, clean_run):
    # Step 6 is in epoch 1 (4 steps per epoch): epoch 0 is checkpointed.
    r = train(tmp_path, "--resume", "--crash-at-step=6", max_restarts=1)
    assert r.returncode == 0, r.stderr
    assert f"exited with code {CRASH_EXIT_CODE}" in r.stderr
    assert "restarting the workers (restart 1 of 1)" in r.stderr
    check_resumed_run(results(tmp_path, NPROC), clean_run, NPROC, torch_pypi.TORCH_VERSION)
