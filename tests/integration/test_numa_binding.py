"""--numa-binding and --nproc-per-node=gpu end to end: GPUs are faked under
DTRUN_SYSTEM_ROOT (the driver's /proc and /sys files), the CPUs are this
machine's (for runs) or a synthetic hwloc topology (HWLOC_SYNTHETIC, for
--dry-run). The running workers' affinity is read from their own
/proc/self/status and checked against torch's rules recomputed here from
/sys, independently of hwloc."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from fake_machine import cpu_set, fake_gpus  # noqa: E402

SYNTHETIC = "package:2 numa:2 l3:2 core:4 pu:2"  # 64 CPUs, 16 per NUMA node


def env_for(root: Path, **extra: str) -> dict[str, str]:
    env = dh.job_env(DTRUN_SYSTEM_ROOT=str(root), **extra)
    for key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                "HWLOC_SYNTHETIC", "HWLOC_XMLFILE"):
        if key not in extra:
            env.pop(key, None)
    return env


def dry_run(args: list[str], env: dict[str, str]) -> dict:
    r = dh.run([*args, "--dry-run", "x.py"], env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def worker_cpus(out: Path, nproc: int, args: list[str], env: dict[str, str], **kwargs):
    """Runs `nproc` workers; each writes its own Cpus_allowed_list."""
    r = dh.run(["--standalone", f"--nproc-per-node={nproc}", *args, "--no-python", "/bin/sh",
                "-c", f'grep "^Cpus_allowed_list" /proc/self/status > {out}/$LOCAL_RANK'],
               env=env, **kwargs)
    assert r.returncode == 0, r.stderr
    return [cpu_set((out / str(rank)).read_text().split(":", 1)[1]) for rank in range(nproc)]


# This machine, read the way torch/numa/binding.py reads it.
ALLOWED = os.sched_getaffinity(0)


def first_numa_node() -> tuple[int, set[int]]:
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"),
                   key=lambda p: int(p.name[4:]))
    for node in nodes:
        cpus = cpu_set(node.joinpath("cpulist").read_text()) & ALLOWED
        if cpus:
            return int(node.name[4:]), cpus
    pytest.skip("no NUMA node with an allowed CPU under /sys/devices/system/node")


def physical_cores(cpus: set[int]) -> list[set[int]]:
    cores: dict[int, set[int]] = {}
    for cpu in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        cores.setdefault(min(cpu_set(path.read_text())), set()).add(cpu)
    return [cores[key] for key in sorted(cores)]


def test_node_binding_pins_each_worker_to_its_gpus_node(tmp_path):
    node, cpus = first_numa_node()
    fake_gpus(tmp_path / "root", [node, node])
    env = env_for(tmp_path / "root")
    plan = dry_run(["--nproc-per-node=gpu", "--numa-binding=node"], env)
    assert plan["numa_binding"] == "node"
    assert [cpu_set(w["cpus"]) for w in plan["workers"]] == [cpus, cpus]
    (tmp_path / "out").mkdir()
    assert worker_cpus(tmp_path / "out", 2, ["--numa-binding=node"], env) == [cpus, cpus]


def test_exclusive_binding_gives_workers_disjoint_cores(tmp_path):
    node, cpus = first_numa_node()
    cores = physical_cores(cpus)
    if len(cores) < 2:
        pytest.skip("needs two allowed physical cores on one NUMA node")
    fake_gpus(tmp_path / "root", [node, node])
    env = env_for(tmp_path / "root")
    half = (len(cores) + 1) // 2  # the first GPU gets the odd core
    expected = [set().union(*cores[:half]), set().union(*cores[half:])]
    (tmp_path / "out").mkdir()
    seen = worker_cpus(tmp_path / "out", 2, ["--numa-binding=exclusive"], env)
    assert seen == expected
    assert not seen[0] & seen[1]
    assert seen[0] < ALLOWED


def test_binding_stays_inside_the_agents_own_affinity(tmp_path):
    node, cpus = first_numa_node()
    last = max(cpus)
    fake_gpus(tmp_path / "root", [node])
    env = env_for(tmp_path / "root")
    (tmp_path / "out").mkdir()
    seen = worker_cpus(tmp_path / "out", 1, ["--numa-binding=node"], env,
                       preexec_fn=lambda: os.sched_setaffinity(0, {last}))
    assert seen == [{last}]


def test_without_binding_workers_keep_the_agents_affinity(tmp_path):
    fake_gpus(tmp_path / "root", [0])
    (tmp_path / "out").mkdir()
    assert worker_cpus(tmp_path / "out", 1, [], env_for(tmp_path / "root")) == [ALLOWED]


@pytest.mark.parametrize("mode, expected", [
    ("node", ["0-15", "16-31", "32-47", "48-63"]),
    ("socket", ["0-31", "0-31", "32-63", "32-63"]),
    ("exclusive", ["0-15", "16-31", "32-47", "48-63"]),
    ("core-complex", ["0-7", "16-23", "32-39", "48-55"]),
])
def test_dry_run_shows_each_ranks_cpus_on_a_synthetic_machine(tmp_path, mode, expected):
    fake_gpus(tmp_path, [0, 1, 2, 3])
    plan = dry_run(["--nproc-per-node=gpu", f"--numa_binding={mode}"],
                   env_for(tmp_path, HWLOC_SYNTHETIC=SYNTHETIC))
    assert plan["nproc_per_node"] == 4
    assert [w["cpus"] for w in plan["workers"]] == expected


def test_local_rank_n_takes_visible_gpu_n(tmp_path):
    fake_gpus(tmp_path, [0, 1, 2, 3])
    plan = dry_run(["--nproc-per-node=gpu", "--numa-binding=node"],
                   env_for(tmp_path, HWLOC_SYNTHETIC=SYNTHETIC,
                           CUDA_VISIBLE_DEVICES="3,GPU-0000,1"))
    assert [w["cpus"] for w in plan["workers"]] == ["48-63"]
    plan = dry_run(["--nproc-per-node=gpu", "--numa-binding=node"],
                   env_for(tmp_path, HWLOC_SYNTHETIC=SYNTHETIC,
                           CUDA_VISIBLE_DEVICES="GPU-0002,GPU-0000"))
    assert [w["cpus"] for w in plan["workers"]] == ["32-47", "0-15"]


def test_no_binding_shows_no_cpus(tmp_path):
    plan = dry_run(["--nproc-per-node=2"], env_for(tmp_path))
    assert plan["numa_binding"] is None
    assert all("cpus" not in w for w in plan["workers"])


@pytest.mark.parametrize("args, gpus, extra, message", [
    (["--numa-binding=node", "--nproc-per-node=2"], [], {},
     "--numa-binding=node binds local rank n near GPU n, but no GPU is visible; drop "
     "--numa-binding on machines without GPUs"),
    (["--numa-binding=node", "--nproc-per-node=3"], [0, 1], {"HWLOC_SYNTHETIC": SYNTHETIC},
     "--numa-binding=node: local rank 2 has no GPU 2 (2 visible); run at most 2 workers "
     "(--nproc-per-node=gpu) or drop --numa-binding"),
    (["--numa-binding=socket", "--nproc-per-node=1"], [1], {"HWLOC_SYNTHETIC": "numa:2 pu:2"},
     "--numa-binding=socket: the topology set by HWLOC_SYNTHETIC or HWLOC_XMLFILE has no socket "
     "(package) level; use --numa-binding=node"),
    (["--numa-binding=exclusive", "--nproc-per-node=1"], [0, 0, 0],
     {"HWLOC_SYNTHETIC": "numa:1 core:2 pu:2"},
     "--numa-binding=exclusive: NUMA node 0 has 2 allowed physical core(s) for 3 GPUs; use "
     "--numa-binding=node or give dtrun more CPUs"),
    (["--nproc-per-node=gpu"], [0, 1], {"CUDA_VISIBLE_DEVICES": ""},
     "--nproc-per-node=gpu but no GPU is visible (CUDA_VISIBLE_DEVICES=''); give a number or "
     "'cpu'"),
    (["--numa-binding=nodes"], [0], {},
     "--numa-binding: nodes not in {node,socket,exclusive,core-complex} (run 'dtrun --help')"),
])
def test_impossible_requests_are_one_line_and_exit_2(tmp_path, args, gpus, extra, message):
    fake_gpus(tmp_path, gpus)
    r = dh.run([*args, "x.py"], env=env_for(tmp_path, **extra))
    assert r.returncode == 2
    assert r.stderr == f"dtrun: error: {message}\n"


def test_nproc_gpu_counts_what_cuda_visible_devices_leaves(tmp_path):
    fake_gpus(tmp_path, [0, 0, 1, 1])
    count = lambda **extra: dry_run(["--nproc-per-node=gpu"],  # noqa: E731
                                    env_for(tmp_path, **extra))["nproc_per_node"]
    assert count() == 4
    assert count(CUDA_VISIBLE_DEVICES="1,3") == 2
    assert count(CUDA_VISIBLE_DEVICES="0,1,9,2") == 2
    assert count(CUDA_VISIBLE_DEVICES="GPU-0003") == 1
    assert dry_run(["--nproc-per-node=auto"], env_for(tmp_path))["nproc_per_node"] == 4
