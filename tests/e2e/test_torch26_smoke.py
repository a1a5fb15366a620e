"""torch 2.6 (Debian 13's, gloo on CPU, Python 3.13), kept as the one older
2.x beside the contract's 2.15 (test_torch2_*.py): dtrun itself runs in
the torch 2.6 rootfs (tests/pyhelpers/torch2.py), as on a user's Debian 13
machine. One DDP smoke test (four workers train and all-reduce under
--standalone), and dtrun's binaries, built on Debian 12, finding their
libraries there. Why this 2.6 and not PyPI's: it is a different build
(Debian's, without libuv, on Python 3.13), the store's non-libuv case is
tested on it (test_torch26_store.py), and it costs 1.2 GB, not 5.4."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch2  # noqa: E402
from ddp_checks import check_clean_run, results  # noqa: E402

NPROC = 4
EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"


def test_four_workers_train_and_all_reduce_on_torch_2_6(tmp_path):
    torch2.require()
    r = torch2.dtrun(["--standalone", f"--nproc-per-node={NPROC}", "--max-restarts=0",
                      "--python", torch2.PYTHON, EXAMPLE, "--out", tmp_path,
                      "--checkpoint", tmp_path / "ckpt.pt"], binds=[tmp_path], timeout=300)
    assert r.returncode == 0, r.stderr
    check_clean_run(results(tmp_path, NPROC), NPROC, torch2.TORCH_VERSION)


def test_dtrun_binaries_find_their_libraries_in_the_rootfs():
    """Built on Debian 12, run on Debian 13: every shared library of dtrun
    and dtrun-store (of this build, plain or ASan+UBSan) resolves there."""
    torch2.require()
    binaries = [dh.DTRUN, torch2.STORE_BIN]
    r = torch2.run(["ldd", *binaries])
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stdout, r.stdout
    assert "libc.so.6 => /" in r.stdout, r.stdout
    # A portable build needs glibc only; a dynamic one (ASan+UBSan) Debian
    # 12's libfmt, installed into the rootfs.
    if "libfmt.so.9" in subprocess.run(["readelf", "-d", str(dh.DTRUN)], capture_output=True,
                                        text=True, check=True).stdout:
        assert "libfmt.so.9 => /" in r.stdout, r.stdout
