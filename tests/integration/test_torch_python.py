"""scripts/torch-python, the one way to the contract's torch from PyPI:
what it prints, and its one-line failures (a version that is not X.Y.Z, no
room for the venv) that leave nothing half made. The install itself is
scripts/test's set-up stage; the torch 2.x e2e tests use what it made."""

import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

SCRIPT = dh.SOURCE_DIR / "scripts" / "torch-python"


def torch_python(*args, cache=None):
    env = dict(os.environ)
    if cache is not None:
        env["DTRUN_TORCH_CACHE"] = str(cache)
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          env=env)


def test_pin_prints_the_contracts_version_and_installs_nothing(tmp_path):
    r = torch_python("--pin", cache=tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"2\.\d+\.\d+\n", r.stdout), r.stdout
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("version", ["2.15", "latest", "2.15.0; rm -rf /"])
def test_a_version_that_is_not_a_release_number_is_one_line(tmp_path, version):
    r = torch_python(version, cache=tmp_path)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert "is not a torch release number such as 2." in r.stderr
    assert "give the full X.Y.Z" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_too_little_disk_is_one_line_before_any_download(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], check=True)
    try:
        r = torch_python("2.15.0", cache=small)
        assert r.returncode == 1
        assert r.stdout == ""
        lines = r.stderr.splitlines()
        assert len(lines) == 1, r.stderr
        assert re.fullmatch(r"torch-python: torch 2\.15\.0 needs about 8 GB free in \S+, and "
                            r"\d+ MB are; free some space or set DTRUN_TORCH_CACHE to a larger "
                            r"disk", lines[0]), lines[0]
        # Nothing half made: no venv, only the lock file.
        assert sorted(p.name for p in small.iterdir()) == ["torch-2.15.0.lock"]
    finally:
        subprocess.run(["umount", str(small)], check=True)
