"""What the release tests (tests/release) share: the libraries an
executable asks for, and a real 2-worker job whose workers use the store
through dtrun-store, run wherever the caller puts it (a bare chroot, a plain
Debian 13 root).

    sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
    import release_job as rj
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtrun_helpers as dh  # noqa: E402

DTRUN = dh.DTRUN
STORE = dh.BUILD_DIR / "launcher" / "dtrun-store"
EXECUTABLES = [DTRUN, STORE]


def needed(path: Path) -> list[str]:
    """The DT_NEEDED entries of an ELF file: the libraries the dynamic
    loader must find for it."""
    out = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def interpreter(path: Path) -> str:
    """The dynamic loader an ELF executable names (PT_INTERP), e.g.
    /lib64/ld-linux-x86-64.so.2 on x86-64."""
    out = subprocess.run(["readelf", "-l", "-W", str(path)], capture_output=True, text=True,
                         check=True).stdout
    found = re.search(r"Requesting program interpreter: ([^\]]+)\]", out)
    assert found, f"{path} names no program interpreter: not a dynamic executable"
    return found.group(1)


def job_command(store: Path | str) -> list[str]:
    """dtrun's argv (without dtrun itself) for a 2-worker standalone job
    whose workers each add 1 to a counter, publish a key, wait for the
    other's key, then print one line: their RANK, WORLD_SIZE, the other's
    value and the counter (2 once both have added; each adds before it
    publishes). `store` is dtrun-store's path where the job runs."""
    script = (
        f's="{store} --endpoint $MASTER_ADDR:$MASTER_PORT"\n'
        "other=$((1 - RANK))\n"
        "mine=$($s add release/counter 1) || exit 11\n"
        "$s set release/rank$RANK hello-$RANK || exit 12\n"
        "$s wait release/rank$other || exit 13\n"
        "peer=$($s get release/rank$other) || exit 14\n"
        "total=$($s add release/counter 0) || exit 15\n"
        'echo "rank=$RANK world=$WORLD_SIZE peer=$peer counter=$total"\n')
    return ["--standalone", "--nproc-per-node=2", "--no-python", "/bin/sh", "-c", script]


def check_job(result: subprocess.CompletedProcess) -> None:
    """Asserts on the job's outputs: it succeeded, and each rank saw the
    other's key and both additions."""
    assert result.returncode == 0, (
        f"the job failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank="))
    assert lines == ["rank=0 world=2 peer=hello-1 counter=2",
                     "rank=1 world=2 peer=hello-0 counter=2"], (
        f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
