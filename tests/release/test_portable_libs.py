"""The portable build's dtrun and dtrun-store ask the dynamic loader for
glibc only (libc, libm and the loader itself): Boost, fmt, hwloc, libudev,
libstdc++ and libgcc are linked in (docs/building.md). And the static hwloc
meets the host's hwloc plugins (libhwloc-plugins, which it cannot use)
without a word on stderr."""

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import release_job as rj  # noqa: E402
from fake_machine import cpu_set, fake_gpus  # noqa: E402

GLIBC = {"libc.so.6", "libm.so.6"}


@pytest.mark.parametrize("exe", rj.EXECUTABLES, ids=lambda p: p.name)
def test_needs_only_glibc(exe: Path):
    allowed = GLIBC | {Path(rj.interpreter(exe)).name}
    libraries = rj.needed(exe)
    extra = sorted(set(libraries) - allowed)
    assert not extra, f"{exe.name} needs {', '.join(extra)} beyond glibc ({sorted(allowed)})"
    assert "libc.so.6" in libraries


PLUGINS = Path("/usr/lib/x86_64-linux-gnu/hwloc")


def test_hwloc_plugins_stay_quiet(tmp_path: Path):
    """hwloc's plugin loader dlopen()s the installed plugins, which need
    hwloc's symbols from libhwloc.so and fail to load in a static binary:
    the topology is still read (here, this machine's, for --numa-binding)
    and nothing reaches stderr."""
    if not any(PLUGINS.glob("hwloc_*.so")):
        pytest.skip(f"no hwloc plugins in {PLUGINS} (libhwloc-plugins) on this machine")
    fake_gpus(tmp_path, [0, 0])  # two fake GPUs on NUMA node 0
    env = dh.job_env(DTRUN_SYSTEM_ROOT=str(tmp_path))
    for key in ("CUDA_VISIBLE_DEVICES", "HWLOC_SYNTHETIC", "HWLOC_XMLFILE",
                "HWLOC_PLUGINS_VERBOSE", "HWLOC_COMPONENTS_VERBOSE"):
        env.pop(key, None)
    r = dh.run(["--standalone", "--nproc-per-node=gpu", "--numa-binding=node", "--dry-run",
                "x.py"], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", f"stderr: {r.stderr!r}"
    plan = json.loads(r.stdout)
    assert [w["local_rank"] for w in plan["workers"]] == [0, 1]
    node0 = Path("/sys/devices/system/node/node0/cpulist")
    expected = os.sched_getaffinity(0)
    if node0.exists():  # a kernel without NUMA has no node directories: all CPUs
        expected &= cpu_set(node0.read_text())
    assert [cpu_set(w["cpus"]) for w in plan["workers"]] == [expected] * 2
