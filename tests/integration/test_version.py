"""`dtrun --version` and `dtrun-store --version`: the project's VERSION from
CMakeLists.txt and the git commit the build came from ("-dirty" when
tracked files had changes, "unknown" outside a git checkout)."""

import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

STORE = dh.BUILD_DIR / "launcher" / "dtrun-store"
SCRIPT = dh.SOURCE_DIR / "cmake" / "write_build_version.cmake"


def project_version() -> str:
    text = (dh.SOURCE_DIR / "CMakeLists.txt").read_text()
    return re.search(r"project\(dtrun VERSION (\S+)", text).group(1)


def git(directory, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True)


def expected_commit(directory) -> str:
    """What the build script should have found in `directory`."""
    top = git(directory, "rev-parse", "--show-toplevel")
    if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(directory):
        return "unknown"
    head = git(directory, "rev-parse", "--short", "HEAD").stdout.strip()
    dirty = git(directory, "status", "--porcelain", "--untracked-files=no").stdout != ""
    return head + ("-dirty" if dirty else "")


def test_dtrun_version_alone_exits_0_with_version_and_commit():
    out = subprocess.run([str(dh.DTRUN), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"dtrun {project_version()} ({expected_commit(dh.SOURCE_DIR)})\n"
    assert out.stderr == ""


def test_dtrun_version_with_a_script_prints_the_version_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    out = subprocess.run([str(dh.DTRUN), "--version", "--no-python", "touch", str(marker)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"dtrun {project_version()} (")
    assert not marker.exists()


def test_dtrun_store_version_exits_0_with_version_and_commit():
    out = subprocess.run([str(STORE), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"dtrun-store {project_version()} ({expected_commit(dh.SOURCE_DIR)})\n"


def generate(source_dir, output) -> str:
    subprocess.run(["cmake", "-DVERSION=9.8.7", f"-DSOURCE_DIR={source_dir}",
                    f"-DOUTPUT={output}", "-P", str(SCRIPT)], check=True, timeout=60)
    return re.search(r'return "([^"]*)"', output.read_text()).group(1)


def commit_all(directory) -> None:
    subprocess.run(["git", "-C", str(directory), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "-a", "-m", "c"], check=True)


def test_the_generated_file_follows_the_commit_and_is_rewritten_only_when_it_changes(tmp_path):
    repo = tmp_path / "src"
    repo.mkdir()
    (repo / "a.txt").write_text("one\n")
    assert git(repo, "init", "-q").returncode == 0
    assert git(repo, "add", "a.txt").returncode == 0
    commit_all(repo)
    output = tmp_path / "build_version.cpp"
    head = git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    assert generate(repo, output) == f"9.8.7 ({head})"
    before = output.stat().st_mtime_ns
    assert generate(repo, output) == f"9.8.7 ({head})"
    assert output.stat().st_mtime_ns == before  # same commit: nothing to recompile
    (repo / "a.txt").write_text("two\n")
    assert generate(repo, output) == f"9.8.7 ({head}-dirty)"
    (repo / "untracked.txt").write_text("x\n")
    commit_all(repo)
    new_head = git(repo, "rev-parse", "--short", "HEAD").stdout.strip()
    assert new_head != head
    assert generate(repo, output) == f"9.8.7 ({new_head})"  # untracked files are not "dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path):
    tarball = tmp_path / "dtrun-0.1.0"
    tarball.mkdir()
    assert generate(tarball, tmp_path / "out.cpp") == "9.8.7 (unknown)"
    # Unpacked inside some other repository: that repository's commit is not ours.
    outer = tmp_path / "outer"
    outer.mkdir()
    assert git(outer, "init", "-q").returncode == 0
    (outer / "f").write_text("f\n")
    assert git(outer, "add", "f").returncode == 0
    commit_all(outer)
    shutil.copytree(tarball, outer / "dtrun-0.1.0")
    assert generate(outer / "dtrun-0.1.0", tmp_path / "out2.cpp") == "9.8.7 (unknown)"
