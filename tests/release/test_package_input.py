"""scripts/package given what a careless user gives it: a mistyped or
unconfigured --build-dir (refused, no build started in it), a sanitizer
build (refused: no release), an --out that is a file (refused), and an
--out that keeps an earlier release's artifacts (left alone)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import packages  # noqa: E402


def package(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(packages.PACKAGE), *args], capture_output=True, text=True,
                          timeout=600)


def one_line_error(r: subprocess.CompletedProcess, *words: str) -> None:
    assert r.returncode == 1, f"rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("package: "), r.stderr
    for word in words:
        assert word in lines[0], r.stderr


def test_a_missing_build_dir_is_refused_not_built(tmp_path):
    typo = tmp_path / "buld"
    one_line_error(package("--build-dir", str(typo)), str(typo), "no configured build")
    assert not typo.exists()


def test_an_unconfigured_build_dir_is_refused(tmp_path):
    one_line_error(package("--build-dir", str(tmp_path)), "no configured build")
    assert list(tmp_path.iterdir()) == []


def test_a_sanitizer_build_is_no_release(tmp_path):
    # What a configured ASan build's cache says (scripts/build asan).
    (tmp_path / "CMakeCache.txt").write_text(
        "CMAKE_BUILD_TYPE:STRING=Debug\nDTRUN_PORTABLE:BOOL=OFF\nDTRUN_SANITIZE:BOOL=ON\n")
    one_line_error(package("--build-dir", str(tmp_path)), "sanitizer", "release build")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["CMakeCache.txt"]


def test_an_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "dist"
    target.write_text("not a folder")
    one_line_error(package("--build-dir", str(dh.BUILD_DIR), "--out", str(target)),
                   "not a folder")
    assert target.read_text() == "not a folder"


def test_earlier_releases_in_out_are_kept(tmp_path):
    out = tmp_path / "releases"
    out.mkdir()
    old = [out / "dtrun_0.0.1-1_amd64.deb", out / "dtrun-0.0.1-linux-x86_64.tar.gz",
           out / "dtrun-0.0.1-py3-none-manylinux_2_36_x86_64.whl"]
    for path in old:
        path.write_text("an earlier release")
    r = package("--build-dir", str(dh.BUILD_DIR), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert all(path.read_text() == "an earlier release" for path in old)
    version = packages.project_version()
    made = sorted(p.name for p in out.iterdir() if version in p.name)
    assert len(made) == 3, made
    listed = sorted(line.split()[1] for line in (out / "SHA256SUMS").read_text().splitlines())
    assert listed == made
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    shutil.rmtree(out)


def test_a_fresh_checkout_is_built_as_a_user_build(tmp_path):
    """From a checkout without build/, scripts/package configures build/
    as a user's build: no -DDTRUN_WERROR=ON (scripts/build's developer
    setting), so a compiler that warns where ours does not still builds.
    Run from a copy of the scripts in an empty checkout, with a cmake on
    PATH that records what it is asked and fails the build step."""
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for script in ("package", "build"):
        shutil.copy2(dh.SOURCE_DIR / "scripts" / script, checkout / "scripts" / script)
    fake = tmp_path / "fakebin"
    fake.mkdir()
    log = tmp_path / "cmake.log"
    (fake / "cmake").write_text(f'#!/bin/sh\necho "$*" >>"{log}"\n'
                                'case " $* " in *" --build "*) exit 42 ;; esac\n')
    (fake / "cmake").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    r = subprocess.run([str(checkout / "scripts" / "package")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 42, f"rc {r.returncode}\n{r.stderr}"
    calls = log.read_text().splitlines()
    assert len(calls) == 2, calls
    configure, build = calls
    assert f"-S {checkout} -B {checkout}/build" in configure, configure
    assert "-DCMAKE_BUILD_TYPE=RelWithDebInfo" in configure
    assert "WERROR" not in configure, configure
    assert build == f"--build {checkout}/build"


def test_a_build_without_man_pages_is_not_packaged(tmp_path):
    """A build configured before help2man was installed has binaries but no
    man pages, and `cmake --build` does not add them: scripts/package says
    so instead of shipping packages without them (cmake here is a stand-in
    that builds nothing, as that build's would)."""
    build = tmp_path / "build"
    (build / "launcher").mkdir(parents=True)
    (build / "packaging" / "bash").mkdir(parents=True)
    (build / "CMakeCache.txt").write_text("DTRUN_PORTABLE:BOOL=ON\n")
    (build / "packaging" / "version").write_text(packages.project_version() + "\n")
    for tool in ("dtrun", "dtrun-store"):
        shutil.copy2(dh.BUILD_DIR / "launcher" / tool, build / "launcher" / tool)
        (build / "packaging" / "bash" / tool).write_text("# completion\n")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "cmake").write_text("#!/bin/sh\nexit 0\n")
    (fake / "cmake").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    r = subprocess.run([str(packages.PACKAGE), "--build-dir", str(build)], env=env,
                       capture_output=True, text=True, timeout=120)
    one_line_error(r, "packaging/man/dtrun.1.gz", "configure it again")
    assert list((build / "dist").iterdir()) == [build / "dist" / ".package.lock"]
