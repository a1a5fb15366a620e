"""Scheduler environments end to end (docs/schedulers.md): dtrun --dry-run
inside a Slurm step and in Kubernetes pods (the operators' recorded
variables, tests/fixtures/kubernetes), SIGUSR1 reaching workers under
Slurm without stopping them, and torch.distributed.launch's --local-rank
argument parsed by a real PyTorch script."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

FIXTURES = dh.SOURCE_DIR / "tests" / "fixtures" / "kubernetes"


def clean_env(**extra):
    """job_env without anything a scheduler or a surrounding launcher set."""
    env = dh.job_env()
    for key in [k for k in env if k.startswith("SLURM_") or k in (
            "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_RANK",
            "TORCHELASTIC_RUN_ID", "KUBERNETES_SERVICE_HOST")]:
        del env[key]
    env.update(extra)
    return env


def slurm_step(node, ntasks_per_node=1, procid=None, localid=0):
    """What a task sees under srun -N2 in the Slurm test cluster
    (scripts/slurm-cluster, docs/slurm.md)."""
    tasks = 2 * ntasks_per_node
    return {
        "SLURM_JOB_ID": "2", "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "bash",
        "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NODELIST": "node[1-2]",
        "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2",
        "SLURM_STEP_NUM_NODES": "2", "SLURM_NTASKS": str(tasks), "SLURM_NPROCS": str(tasks),
        "SLURM_STEP_NUM_TASKS": str(tasks), "SLURM_NODEID": str(node),
        "SLURM_PROCID": str(node if procid is None else procid), "SLURM_LOCALID": str(localid),
        "SLURMD_NODENAME": f"node{node + 1}",
        "SLURM_TASKS_PER_NODE": f"{ntasks_per_node}(x2)",
        "SLURM_STEP_TASKS_PER_NODE": f"{ntasks_per_node}(x2)",
        "SLURM_NTASKS_PER_NODE": str(ntasks_per_node), "SLURM_CPUS_ON_NODE": "1",
        "SLURM_LAUNCH_NODE_IPADDR": "10.88.0.1", "SLURM_SRUN_COMM_HOST": "10.88.0.1",
        "SLURM_SUBMIT_HOST": "vm",
    }


def dry_run(env, *args):
    r = dh.run(["--dry-run", *args, "train.py"], env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def derived(config):
    return {d["setting"]: (d["value"], d["source"]) for d in config["derived"]}


@pytest.mark.parametrize("node", [0, 1])
def test_slurm_agent_per_node_derives_everything(node):
    config = dry_run(clean_env(**slurm_step(node)), "--nproc-per-node=2")
    assert config["scheduler"] == "slurm"
    assert config["scheduler_style"] == "agent-per-node"
    d = derived(config)
    assert d["nnodes"] == ("2", "SLURM_STEP_NUM_NODES")
    assert d["node-rank"] == (str(node), "SLURM_NODEID")
    assert d["rdzv-id"][0] == "2.0"
    assert d["rdzv-endpoint"][0] == "node1:20002"
    assert "nproc-per-node" not in d  # given
    assert config["nnodes"] == {"min": 2, "max": 2}
    assert config["run_id"] == "2.0"
    rdzv = config["rendezvous"]
    assert rdzv["backend"] == "c10d"
    assert rdzv["endpoint"] == "node1:20002"
    assert rdzv["node_rank"] == node
    assert rdzv["hosts_store"] is (node == 0)
    assert "SLURM_NODEID" in rdzv["hosts_store_because"]
    assert {"SIGUSR1", "SIGUSR2", "SIGTERM"} <= set(config["signals_to_handle"])
    ranks = [w["env"]["RANK"] for w in config["workers"]]
    assert ranks == [str(2 * node), str(2 * node + 1)]
    assert all(w["env"]["WORLD_SIZE"] == "4" for w in config["workers"])


@pytest.mark.parametrize("procid", [0, 1, 2, 3])
def test_slurm_task_per_worker_runs_this_tasks_worker(procid):
    env = clean_env(**slurm_step(procid // 2, ntasks_per_node=2, procid=procid,
                                 localid=procid % 2))
    config = dry_run(env)
    assert config["scheduler_style"] == "task-per-worker"
    assert config["nproc_per_node"] == 1
    assert config["nnodes"] == {"min": 4, "max": 4}
    assert config["rendezvous"]["backend"] == "static"
    assert config["rendezvous"]["endpoint"] == "node1:20002"
    assert config["rendezvous"]["hosts_store"] is (procid == 0)
    (worker,) = config["workers"]
    e = worker["env"]
    assert (e["RANK"], e["WORLD_SIZE"]) == (str(procid), "4")
    assert (e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) == (str(procid % 2), "2")
    assert (e["GROUP_RANK"], e["GROUP_WORLD_SIZE"]) == (str(procid // 2), "2")
    assert derived(config)["LOCAL_RANK"] == (str(procid % 2), "SLURM_LOCALID")


def test_slurm_explicit_flags_win_and_detection_can_be_turned_off():
    env = clean_env(**slurm_step(1))
    config = dry_run(env, "--rdzv-endpoint=head:7777", "--rdzv-id=mine", "--nnodes=2")
    assert config["rendezvous"]["endpoint"] == "head:7777"
    assert config["run_id"] == "mine"
    assert set(derived(config)) == {"node-rank"}
    config = dry_run(env, "--no-scheduler-detect")
    assert config["scheduler"] is None
    assert config["standalone"] is True
    assert config["derived"] == []


def test_inside_an_sbatch_script_without_a_step_nothing_is_derived():
    env = clean_env(**{k: v for k, v in slurm_step(0).items() if "STEP" not in k})
    config = dry_run(env)
    assert config["scheduler"] is None
    assert config["nnodes"] == {"min": 1, "max": 1}


def test_a_broken_slurm_variable_is_one_line_and_exit_2():
    env = clean_env(**slurm_step(0))
    env["SLURM_STEP_NODELIST"] = "node[1-"
    r = dh.run(["--dry-run", "train.py"], env=env)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1
    assert "SLURM_STEP_NODELIST" in r.stderr and "--no-scheduler-detect" in r.stderr


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_kubernetes_operator_env_drives_the_configuration(fixture):
    recorded = json.loads((FIXTURES / fixture).read_text())
    expect = recorded["expect"]
    config = dry_run(clean_env(**recorded["env"]), *expect["args"])
    nn = expect["nnodes"]
    lo, hi = (int(x) for x in nn.split(":")) if isinstance(nn, str) else (nn, nn)
    assert config["nnodes"] == {"min": lo, "max": hi}
    assert config["nproc_per_node"] == 2
    rdzv = config["rendezvous"]
    assert rdzv["backend"] == expect["backend"]
    assert rdzv["endpoint"] == expect["endpoint"]
    assert rdzv["node_rank"] == expect["node_rank"]
    assert rdzv["hosts_store"] is expect["hosts_store"]
    if expect["ranks"] is not None:
        assert [w["env"]["RANK"] for w in config["workers"]] == [str(r) for r in expect["ranks"]]
        assert {w["env"]["WORLD_SIZE"] for w in config["workers"]} == {str(expect["world_size"])}


def test_kubernetes_pet_variables_are_listed_with_their_source():
    recorded = json.loads((FIXTURES / "v1.7-static-1.json").read_text())
    config = dry_run(clean_env(**recorded["env"]))
    pet = {d["setting"]: d["source"] for d in config["from_pet_env"]}
    assert pet["nnodes"] == "PET_NNODES"
    assert pet["node-rank"] == "PET_NODE_RANK"
    assert pet["nproc-per-node"] == "PET_NPROC_PER_NODE"


def test_node_env_inside_a_torchrun_worker_is_not_taken_for_a_pod():
    env = clean_env(MASTER_ADDR="10.0.0.1", MASTER_PORT="29500", WORLD_SIZE="8", RANK="3",
                    LOCAL_RANK="1")
    config = dry_run(env)
    assert config["scheduler"] is None
    assert config["standalone"] is True


@pytest.mark.parametrize("ntasks_per_node", [1, 2])
def test_both_slurm_styles_run_real_agents(tmp_path, ntasks_per_node):
    """The tasks of a 2-node step, all on this machine (the node list names
    localhost): one agent per node with 2 workers each, or one worker per
    task; the workers must see the same ranks either way."""
    port = str(dh.free_port())  # not bind-0-and-close: see its comment
    procs = []
    for procid in range(2 * ntasks_per_node):
        node, localid = divmod(procid, ntasks_per_node)
        step = slurm_step(node, ntasks_per_node, procid=procid, localid=localid)
        step.update(SLURM_STEP_NODELIST="localhost", SLURM_JOB_NODELIST="localhost")
        env = clean_env(**step, MASTER_PORT=port, DTRUN_PYTHON=dh.PYTHON)
        nproc = ["--nproc-per-node=2"] if ntasks_per_node == 1 else []
        procs.append(subprocess.Popen(
            [str(dh.DTRUN), *nproc, str(dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py"),
             str(tmp_path)], env=env, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
    master_ports = set()
    for rank in range(4):
        e = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert e["WORLD_SIZE"] == "4"
        assert (e["LOCAL_RANK"], e["LOCAL_WORLD_SIZE"]) == (str(rank % 2), "2")
        assert e["GROUP_RANK"] == str(rank // 2)  # SLURM_NODEID, in both styles
        assert e["TORCHELASTIC_RUN_ID"] == "2.0"
        master_ports.add(e["MASTER_PORT"])
    # Task per worker is a static rendezvous: MASTER_PORT is the step's
    # port. Agent per node is c10d: the workers meet in the fresh store the
    # endpoint's host opened for the round (docs/rendezvous.md).
    assert len(master_ports) == 1
    assert (port in master_ports) == (ntasks_per_node == 2), master_ports


# Traps SIGUSR1/SIGUSR2 and goes on (a checkpoint would be written there);
# leaves on a signal once $DONE exists. The check is in the trap itself: a
# signal landing between the loop's test and its `wait` would otherwise be
# handled before the `wait` and leave the worker waiting forever.
CHECKPOINTING = ('trap "echo usr1 $RANK > $FIFO" USR1; '
                 'trap "echo usr2 $RANK > $FIFO; '
                 'if [ -e $DONE ]; then echo done $RANK > $FIFO; exit 0; fi" USR2; '
                 'echo ready > $FIFO; '
                 'while :; do sleep 1000 & wait $!; done')


def test_slurm_sigusr1_reaches_the_workers_and_does_not_stop_them(tmp_path):
    # A one-node step: SIGUSR1/2 are forwarded without --signals-to-handle.
    step = slurm_step(0)
    step.update(SLURM_NNODES="1", SLURM_STEP_NUM_NODES="1", SLURM_STEP_NODELIST="node1",
                SLURM_JOB_NODELIST="node1", SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1",
                SLURM_TASKS_PER_NODE="1", SLURM_STEP_TASKS_PER_NODE="1")
    fifo = dh.Fifo(tmp_path)
    done = tmp_path / "done"
    env = clean_env(**step, FIFO=str(fifo.path), DONE=str(done))
    proc = dh.start(["--nproc-per-node=2", "--no-python", "/bin/sh", "-c", CHECKPOINTING], env)
    with dh.cleaned_up(proc, env["DTRUN_TEST_MARK"]):
        assert fifo.lines(2) == ["ready", "ready"]
        proc.send_signal(signal.SIGUSR1)
        assert sorted(fifo.lines(2)) == ["usr1 0", "usr1 1"]
        # Still running: told they may finish, they leave on the next signal.
        done.touch()
        proc.send_signal(signal.SIGUSR2)
        assert sorted(fifo.lines(4)) == ["done 0", "done 1", "usr2 0", "usr2 1"]
        assert proc.wait(timeout=30) == 0
        assert "received SIGUSR1; forwarding it to the workers\n" in proc.stderr.read()


LOCAL_RANK_SCRIPT = """
import argparse, json, os, sys
import torch  # a real PyTorch script, as written for torch.distributed.launch
p = argparse.ArgumentParser()
p.add_argument({flag!r}, type=int, default=-1)
p.add_argument("--out", required=True)
p.add_argument("--process_index", type=int, default=-1)
p.add_argument("--process_num", type=int, default=-1)
a = p.parse_args()
rank = os.environ["RANK"]
json.dump({{"arg": vars(a), "LOCAL_RANK": os.environ["LOCAL_RANK"], "argv": sys.argv[1:],
           "torch": torch.__version__}}, open(os.path.join(a.out, "rank" + rank + ".json"), "w"))
"""


def run_legacy(tmp_path, flag, *dtrun_args, script_args=()):
    script = tmp_path / "legacy_train.py"
    script.write_text(LOCAL_RANK_SCRIPT.format(flag=flag))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    r = dh.run(["--standalone", "--nproc-per-node=2", "--python", dh.PYTHON, *dtrun_args,
                str(script), "--out", str(out), *script_args], env=clean_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads((out / f"rank{i}.json").read_text()) for i in range(2)]


def test_legacy_launch_passes_local_rank_as_torch_1_scripts_parse_it(tmp_path):
    got = run_legacy(tmp_path, "--local_rank", "--legacy-launch", "--local-rank-arg=underscore")
    for i, g in enumerate(got):
        assert g["arg"]["local_rank"] == i
        assert g["LOCAL_RANK"] == str(i)
        assert g["argv"][0] == f"--local_rank={i}"  # right after the script, as torch puts it


def test_legacy_launch_default_is_torch_2s_dash_spelling(tmp_path):
    got = run_legacy(tmp_path, "--local-rank", "--legacy-launch")
    assert [g["argv"][0] for g in got] == ["--local-rank=0", "--local-rank=1"]
    assert [g["arg"]["local_rank"] for g in got] == [0, 1]


def test_legacy_launch_with_use_env_passes_no_argument(tmp_path):
    got = run_legacy(tmp_path, "--local_rank", "--legacy-launch", "--use_env")
    for i, g in enumerate(got):
        assert g["arg"]["local_rank"] == -1
        assert g["LOCAL_RANK"] == str(i)
        assert not any(a.startswith("--local") for a in g["argv"])


def test_template_args_fill_in_each_workers_rank(tmp_path):
    got = run_legacy(tmp_path, "--local_rank", "--template-args",
                     script_args=["--process_index={rank}", "--process_num", "{world_size}"])
    for i, g in enumerate(got):
        assert (g["arg"]["process_index"], g["arg"]["process_num"]) == (i, 2)
        assert g["arg"]["local_rank"] == -1  # not a legacy launch


def test_legacy_launch_with_no_python_needs_use_env():
    r = dh.run(["--standalone", "--legacy-launch", "--no-python", "/bin/true"], env=clean_env())
    assert r.returncode == 2
    assert "--use-env" in r.stderr


def test_dry_run_shows_each_workers_own_argv():
    config = dry_run(clean_env(), "--standalone", "--nproc-per-node=2", "--legacy-launch",
                     "--local-rank-arg=underscore")
    assert [w["argv"][1:] for w in config["workers"]] == [
        ["-u", "train.py", "--local_rank=0"], ["-u", "train.py", "--local_rank=1"]]
