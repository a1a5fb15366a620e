"""The CUDA toolkit's libraries change nothing dtrun says on a machine
without a GPU (issue 46): what uses NVML (the built-in health checks with
--node-health-check=builtin, the GPU reclaim after a failed round, the GPU
figures of `dtrun status`) and --nproc-per-node=gpu say the same, line for
line, whether the toolkit's library folders (stubs included, and any
folder holding a stub libnvidia-ml) are on LD_LIBRARY_PATH or not, as
they are in the environment of many CUDA users.

The toolkit on the project's machines (CUDA 13.0) has no stub
libnvidia-ml (its lib64/stubs holds libcuda.so only), nor has NVIDIA's
nvml.h package (docs/building.md, "NVML's header"); where one appears, it
is put on the path too. Skipped, saying why, without a toolkit, and on a
machine with an NVIDIA GPU (the stubs would then shadow the driver: not
the case this is about)."""

import glob
import json
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

TOOLKIT_LIBRARY_FOLDERS = ["/usr/local/cuda*/lib64", "/usr/local/cuda*/lib64/stubs",
                           "/usr/local/cuda*/targets/*/lib", "/usr/local/cuda*/targets/*/lib/stubs"]
STUB_NVML_SEARCH = ["/usr/local/cuda*/lib64/**/libnvidia-ml*",
                    "/usr/local/cuda*/targets/*/lib/**/libnvidia-ml*",
                    "/usr/local/cuda*/compat/libnvidia-ml*",
                    "/var/cache/dtrun/nvml-dev/**/libnvidia-ml*"]


def toolkit_library_folders() -> list[str]:
    """The toolkit's library folders, and any folder holding a stub
    libnvidia-ml, each once (the glob's /usr/local/cuda and cuda-13.0 are
    one folder)."""
    folders = [f for pattern in TOOLKIT_LIBRARY_FOLDERS for f in glob.glob(pattern)]
    folders += [os.path.dirname(f) for pattern in STUB_NVML_SEARCH
                for f in glob.glob(pattern, recursive=True)]
    unique = {}
    for folder in folders:
        if os.path.isdir(folder):
            unique.setdefault(os.path.realpath(folder), folder)
    return sorted(unique)


FOLDERS = toolkit_library_folders()
pytestmark = [
    pytest.mark.skipif(not FOLDERS, reason="no CUDA toolkit under /usr/local/cuda*"),
    pytest.mark.skipif(bool(glob.glob("/proc/driver/nvidia/gpus/*")),
                       reason="this machine has NVIDIA GPUs; the test is about one without"),
]


def normalised(text: str, tmp_path: Path) -> list[str]:
    """dtrun's own lines, with what differs between two runs of the same
    job (the folder, pids, ports, times, run ids) replaced."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("dtrun"):
            continue
        line = line.replace(str(tmp_path), "TMP")
        line = re.sub(r"[0-9a-f]{8,}", "H", line)
        lines.append(re.sub(r"\d+(\.\d+)?", "N", line))
    return lines


def with_toolkit(env: dict[str, str]) -> dict[str, str]:
    env = dict(env)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        FOLDERS + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else []))
    return env


def test_the_toolkit_folders_are_what_the_test_puts_on_the_path():
    # What the other tests compare with: say it, so a run's log shows it.
    print("toolkit library folders:", FOLDERS)
    assert all(os.path.isdir(f) for f in FOLDERS)


def test_nproc_per_node_gpu_says_the_same(tmp_path):
    def run(env):
        r = dh.run(["--standalone", "--nproc-per-node=gpu", "--no-python", "true"], env=env,
                   cwd=tmp_path)
        return r.returncode, normalised(r.stderr, tmp_path)

    env = dh.job_env()
    assert run(with_toolkit(env)) == run(env)


def gpu_job(tmp_path: Path, env: dict[str, str]) -> tuple[int, list[str], list]:
    """A job whose first round fails (the GPU reclaim runs before the
    second) and whose second asks `dtrun status` for the GPU figures; with
    the built-in checks keeping the node out, and debug lines."""
    folder = tmp_path / ("toolkit" if "LD_LIBRARY_PATH" in env else "plain")
    folder.mkdir()
    env = dict(env, DTRUN_CONTROL_DIR=str(folder / "control"))
    script = (f"if [ ! -e failed ]; then touch failed; exit 1; fi; "
              f"{dh.DTRUN} status --json > status.json")
    r = dh.run(["-v", "--standalone", "--node-health-check=builtin", "--max-restarts=1",
                "--gpu-reclaim-timeout=5", "--nproc-per-node=1", "--no-python",
                "/bin/sh", "-c", script], env=env, cwd=folder)
    status = json.loads((folder / "status.json").read_text())
    gpu_figures = [{k: v for k, v in worker.items() if k.startswith("gpu")}
                   for job in status for worker in job["workers"]]
    return r.returncode, normalised(r.stderr, folder), gpu_figures


def test_health_checks_reclaim_and_status_say_the_same(tmp_path):
    env = {k: v for k, v in dh.job_env().items() if k != "LD_LIBRARY_PATH"}
    plain = gpu_job(tmp_path, env)
    toolkit = gpu_job(tmp_path, with_toolkit(env))
    assert plain[0] == 0, plain
    assert toolkit == plain
    # What it says is that there is no GPU, through NVML's absence.
    assert any("NVML" in line for line in plain[1]), plain[1]
