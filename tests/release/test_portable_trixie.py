"""The portable dtrun in a plain Debian 13 root with nothing added
(scripts/trixie-rootfs: minbase, no Boost, fmt, hwloc or libstdc++ of
Debian 12's versions; the dynamic build fails there with "libhwloc.so.15:
cannot open shared object file"): a real 2-worker job using the store
through dtrun-store, and --numa-binding on this machine's topology read by
the static hwloc there. scripts/rootfs-run shows the build directory at the
same path inside; it exits 77 when this machine cannot make the root, and
the tests then skip, saying why."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import release_job as rj  # noqa: E402
from fake_machine import cpu_set, fake_gpus  # noqa: E402

ROOTFS = dh.SOURCE_DIR / "scripts" / "trixie-rootfs"
RUN = dh.SOURCE_DIR / "scripts" / "rootfs-run"
CANNOT = 77


@pytest.fixture(scope="module")
def trixie() -> None:
    """Makes the rootfs if needed (once per machine), or skips saying why."""
    if os.geteuid() != 0:
        message = "no Debian 13 rootfs: scripts/rootfs-run needs root (mount namespaces)"
        print(message)
        pytest.skip(message)
    r = subprocess.run([str(ROOTFS)], capture_output=True, text=True, timeout=900)
    if r.returncode == CANNOT:
        message = f"no Debian 13 rootfs on this machine: {r.stderr.strip()}"
        print(message)
        pytest.skip(message)
    assert r.returncode == 0, f"scripts/trixie-rootfs failed ({r.returncode}): {r.stderr}"


def in_trixie(args: list, env: dict[str, str], binds=()) -> subprocess.CompletedProcess:
    argv = [str(RUN), "--rootfs=trixie"]
    for b in binds:
        argv += ["--bind", str(b)]
    r = subprocess.run([*argv, "--", *map(str, args)], env=env, capture_output=True,
                       text=True, timeout=120)
    if r.returncode == CANNOT:
        message = f"scripts/rootfs-run cannot run here: {r.stderr.strip()}"
        print(message)
        pytest.skip(message)
    return r


def test_no_debian12_libraries_inside(trixie):
    """The root really lacks what the dynamic build needs."""
    r = in_trixie(["/bin/sh", "-c", "ls /usr/lib/x86_64-linux-gnu/ /lib/x86_64-linux-gnu/"],
                  dh.job_env())
    assert r.returncode == 0, r.stderr
    names = r.stdout.split()
    assert "libc.so.6" in names
    assert not [n for n in names if n.startswith(("libhwloc", "libfmt", "libboost"))], names


def test_two_workers(trixie):
    rj.check_job(in_trixie([rj.DTRUN, *rj.job_command(rj.STORE)], dh.job_env()))


def numa_env(root: Path) -> dict[str, str]:
    env = dh.job_env(DTRUN_SYSTEM_ROOT=str(root))
    for key in ("CUDA_VISIBLE_DEVICES", "HWLOC_SYNTHETIC", "HWLOC_XMLFILE"):
        env.pop(key, None)
    return env


def node0_cpus() -> set[int]:
    """The CPUs --numa-binding=node gives a GPU on node 0 here: node 0's
    CPUs that this process may use (all of them on a kernel without NUMA)."""
    cpus = os.sched_getaffinity(0)
    node0 = Path("/sys/devices/system/node/node0/cpulist")
    return cpus & cpu_set(node0.read_text()) if node0.exists() else cpus


def test_numa_binding_dry_run(trixie, tmp_path: Path):
    fake_gpus(tmp_path, [0, 0])
    r = in_trixie([rj.DTRUN, "--standalone", "--nproc-per-node=gpu", "--numa-binding=node",
                   "--dry-run", "x.py"], numa_env(tmp_path), binds=[tmp_path])
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", f"stderr: {r.stderr!r}"
    plan = json.loads(r.stdout)
    assert plan["numa_binding"] == "node"
    assert [cpu_set(w["cpus"]) for w in plan["workers"]] == [node0_cpus()] * 2


def test_numa_binding_run(trixie, tmp_path: Path):
    """Workers started there run on node 0's CPUs, read from their own
    /proc/self/status."""
    fake_gpus(tmp_path, [0, 0])
    r = in_trixie([rj.DTRUN, "--standalone", "--nproc-per-node=gpu", "--numa-binding=node",
                   "--no-python", "/bin/sh", "-c",
                   'echo "rank=$RANK $(grep ^Cpus_allowed_list: /proc/self/status)"'],
                  numa_env(tmp_path), binds=[tmp_path])
    assert r.returncode == 0, r.stderr
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank="))
    assert [line.split()[0] for line in lines] == ["rank=0", "rank=1"], r.stdout
    assert [cpu_set(line.split()[-1]) for line in lines] == [node0_cpus()] * 2, r.stdout
