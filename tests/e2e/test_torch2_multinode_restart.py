"""A multi-node (c10d) group restart with real torch 2.6 workers: two dtrun
agents on this machine, both in the torch 2.6 rootfs (tests/pyhelpers/
torch2.py), one hosting the endpoint store on 127.0.0.1, the other joining
it; four gloo DDP workers; rank 3 (on the second node of the rendezvous)
crashes once, the whole group restarts (--max-restarts=1), resumes from
the checkpoint and finishes.

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
import torch2  # noqa: E402
from ddp_checks import CRASH_EXIT_CODE, check_torch, results  # noqa: E402

NPROC = 2
WORLD = 2 * NPROC
EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"
FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"


def test_two_nodes_restart_the_group_after_a_crash_on_torch_2_6(tmp_path):
    torch2.require()
    port = dh.free_port()
    env = dh.job_env()
    procs = []
    try:
        for is_host in (1, 0):
            args = [dh.DTRUN, "--nnodes=2", f"--nproc-per-node={NPROC}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=t2restart",
                    f"--rdzv-conf={FAST_RDZV},is_host={is_host}", "--max-restarts=1",
                    "--python", torch2.PYTHON, EXAMPLE, "--out", tmp_path,
                    "--checkpoint", tmp_path / "ckpt.pt", "--resume",
                    # Step 6 is in epoch 1 (4 steps per epoch): epoch 0 is saved.
                    "--crash-at-step=6", "--crash-rank=3"]
            procs.append(torch2.popen(args, binds=[tmp_path], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        try:
            outs = [p.communicate(timeout=300)[1] for p in procs]
        except subprocess.TimeoutExpired:
            pytest.fail("the two-node torch 2.6 job did not finish within 300 s (a restarted "
                        "group stuck on the last round's store?)")
    finally:
        dh.kill_all(procs, env["DTRUN_TEST_MARK"])
    for p, err in zip(procs, outs):
        assert p.returncode == 0, err
        assert "restarting the workers (restart 1 of 1)" in err or "the group must restart" in err
    assert any(f"exited with code {CRASH_EXIT_CODE}" in err for err in outs), outs
    assert "round 1: the workers' store is on port" in outs[0]
    ranks = results(tmp_path, WORLD)
    check_torch(ranks, torch2.TORCH_VERSION)
    for x in ranks:
        assert x["world_size"] == WORLD
        assert x["restart_count"] == 1
        assert x["start_epoch"] == 1
        assert x["allreduce_sum"] == WORLD * (WORLD + 1) / 2
    # DDP keeps every replica identical, across both nodes.
    assert len({x["param_checksum"] for x in ranks}) == 1
