"""The portable dtrun runs a real 2-worker job in a container-like root
that holds nothing but what `ldd` lists for dtrun, dtrun-store and /bin/sh
(glibc's libc, libm and loader): no Boost, fmt, hwloc, libudev or
libstdc++. The root is a temporary directory entered with chroot in a
private mount namespace that gets its own /proc, as a container would."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import release_job as rj  # noqa: E402


def ldd_files(exe: str) -> list[str]:
    """The files the loader maps for `exe`, as ldd lists them (the vDSO,
    which has no file, left out)."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True, check=True).stdout
    return sorted(set(re.findall(r"(/\S+)", out)))


def make_root(root: Path) -> None:
    shell = shutil.which("sh") or "/bin/sh"
    files = set()
    for exe in (str(rj.DTRUN), str(rj.STORE), shell):
        files.update(ldd_files(exe))
    for f in files:
        target = root / f.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, target)  # follows links: the loader's names become files
    (root / "bin").mkdir(exist_ok=True)
    shutil.copy(shell, root / "bin" / "sh")
    shutil.copy(rj.DTRUN, root / "bin" / "dtrun")
    shutil.copy(rj.STORE, root / "bin" / "dtrun-store")
    (root / "proc").mkdir()


def test_two_workers_in_a_bare_root(tmp_path: Path):
    if os.geteuid() != 0:
        message = "the bare-root job needs root (chroot, mount namespaces)"
        print(message)
        pytest.skip(message)
    root = tmp_path / "root"
    root.mkdir()
    make_root(root)
    contents = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert not [f for f in contents if re.search(r"boost|fmt|hwloc|udev|stdc\+\+|gcc_s", f)], \
        contents
    # A private mount namespace: the new /proc stays out of the host's mounts.
    r = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--fork", "--", "/bin/sh", "-c",
         'mount -t proc proc "$0/proc" && exec chroot "$0" /bin/dtrun "$@"', str(root),
         *rj.job_command("/bin/dtrun-store")],
        env=dh.job_env(), capture_output=True, text=True, timeout=120)
    rj.check_job(r)
