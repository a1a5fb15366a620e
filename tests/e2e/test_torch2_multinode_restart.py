"""A multi-node (c10d) group restart with real torch 2.15 workers (the
contract's torch from PyPI, tests/pyhelpers/torch_pypi.py) on two hosts
(network namespaces, tests/pyhelpers/netns_hosts.py): host 1 hosts the
endpoint store, host 2 joins it; four gloo DDP workers talk across the
hosts' own interfaces; rank 3 crashes once, the whole group restarts
(--max-restarts=1), resumes from the checkpoint and finishes.

torch 2.x workers do not prefix their store keys by round (torchrun 2.x
gives each round a new store), so if the restarted group met in the same
store as round 0, gloo would read round 0's peer addresses and fail
("Gloo connectFullMesh failed") or hang. dtrun's endpoint host opens a
fresh workers' store every round (docs/rendezvous.md, "Addresses")."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
import torch_pypi  # noqa: E402
from ddp_checks import CRASH_EXIT_CODE, check_torch, results  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the two-host torch 2.15 restart: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

NPROC = 2
WORLD = 2 * NPROC
EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"


def test_two_hosts_restart_the_group_after_a_crash_on_torch_2_15(tmp_path):
    torch_pypi.require()
    env = torch_pypi.venv_env(dh.job_env(GLOO_SOCKET_IFNAME="eth0"))
    with netns_hosts.Hosts(2) as hosts:
        args = [dh.DTRUN, "--nnodes=2", f"--nproc-per-node={NPROC}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={hosts.addr(1)}:29400", "--rdzv-id=t2restart",
                f"--rdzv-conf={dh.FAST_RDZV}", "--max-restarts=1",
                "--python", torch_pypi.PYTHON, EXAMPLE, "--out", tmp_path,
                "--checkpoint", tmp_path / "ckpt.pt", "--resume",
                # Step 6 is in epoch 1 (4 steps per epoch): epoch 0 is saved.
                "--crash-at-step=6", "--crash-rank=3"]
        procs = [hosts.start(i, args, env) for i in (1, 2)]
        try:
            outs = [p.communicate(timeout=300)[1] for p in procs]
        except subprocess.TimeoutExpired:
            pytest.fail("the two-host torch 2.15 job did not finish within 300 s (a restarted "
                        "group stuck on the last round's store?)")
    for p, err in zip(procs, outs):
        assert p.returncode == 0, err
        assert "restarting the workers (restart 1 of 1)" in err or "the group must restart" in err
    assert any(f"exited with code {CRASH_EXIT_CODE}" in err for err in outs), outs
    assert "round 1: the workers' store is on port" in outs[0]
    ranks = results(tmp_path, WORLD)
    check_torch(ranks, torch_pypi.TORCH_VERSION)
    for x in ranks:
        assert x["world_size"] == WORLD
        assert x["restart_count"] == 1
        assert x["start_epoch"] == 1
        assert x["allreduce_sum"] == WORLD * (WORLD + 1) / 2
    # DDP keeps every replica identical, across both hosts.
    assert len({x["param_checksum"] for x in ranks}) == 1
