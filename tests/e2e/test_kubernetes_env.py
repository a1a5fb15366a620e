"""A PyTorchJob's pod environment driving real runs on two hosts (network
namespaces): each host gets only what the Kubeflow operator sets in a pod
(tests/fixtures/kubernetes) and runs `dtrun script`, no flags."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the Kubernetes-environment runs: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

MASTER = netns_hosts.Hosts.addr(1)
PORT = "23456"


def pod_env(rank, operator):
    """A pod's environment: host 1 is the master pod (its service address is
    MASTER_ADDR), host 2 worker-0."""
    env = dh.job_env(GLOO_SOCKET_IFNAME="eth0", DTRUN_PYTHON=dh.PYTHON,
                     KUBERNETES_SERVICE_HOST="10.96.0.1", PYTHONUNBUFFERED="0",
                     MASTER_ADDR=MASTER, MASTER_PORT=PORT, RANK=str(rank))
    for key in [k for k in env if k.startswith("SLURM_")]:
        del env[key]
    if operator == "v1.7":  # WORLD_SIZE = pods x nprocPerNode, and PET_*
        env.update(WORLD_SIZE="4", PET_NNODES="2", PET_NPROC_PER_NODE="2",
                   PET_NODE_RANK=str(rank), PET_MASTER_ADDR=MASTER, PET_MASTER_PORT=PORT)
    else:  # before v1.7: WORLD_SIZE = pods, nothing else
        env.update(WORLD_SIZE="2")
    return env


def run_pods(operator, argv, extra_args=()):
    with netns_hosts.Hosts(2) as hosts:
        procs = [hosts.start(i, [str(dh.DTRUN), *extra_args, *argv], pod_env(i - 1, operator))
                 for i in (1, 2)]
        outs = [p.communicate(timeout=240) for p in procs]
        for p, (_, stderr) in zip(procs, outs):
            assert p.returncode == 0, stderr
        return [stderr for _, stderr in outs]


def test_v1_7_pods_train_ddp_with_no_flags(tmp_path):
    stderrs = run_pods("v1.7", [str(dh.EXAMPLES / "ddp_gloo.py"), "--checkpoint-dir",
                                str(tmp_path), "--epochs", "1"])
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    for r in results:
        assert r["world_size"] == 4
        assert r["allreduce_sum"] == 10
    # The master pod (host h1, PET_NODE_RANK=0) holds ranks 0 and 1.
    assert {r["rank"]: r["host"] for r in results} == {0: "h1", 1: "h1", 2: "h2", 3: "h2"}
    assert len({r["param_checksum"] for r in results}) == 1
    assert all("round 0: node" in s for s in stderrs)


def test_pre_v1_7_pods_give_workers_per_process_rank_and_world_size(tmp_path):
    # WORLD_SIZE=2 and RANK=<pod> are node-level: the workers must get their
    # own RANK 0..3 and WORLD_SIZE 4, never the pod's values.
    stderrs = run_pods("v1.6", [str(dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py"),
                                str(tmp_path)], ["--nproc-per-node=2"])
    envs = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)}
    for rank, e in envs.items():
        assert e["WORLD_SIZE"] == "4"
        assert e["LOCAL_RANK"] == str(rank % 2)
        assert e["GROUP_RANK"] == str(rank // 2)
        assert e["MASTER_ADDR"] == MASTER
    assert "nnodes=2 (WORLD_SIZE" in stderrs[0]
    assert "node-rank=1 (RANK" in stderrs[1]
