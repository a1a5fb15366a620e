"""What scripts/package makes: names and versions from the one project
VERSION, checksums, the .deb's control fields and file list, the tarball's
layout, stripped binaries, and the wheel's platform tag computed from the
binaries (docs/packaging.md)."""

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import packages  # noqa: E402

GLIBC_LIBRARY = re.compile(r"(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl)\.so\.\d+"
                           r"|ld-linux[\w.-]*\.so\.\d+|libgcc_s\.so\.1")
SHIPPED = ["bin/dtrun", "bin/dtrun-store", "share/man/man1/dtrun.1.gz",
           "share/man/man1/dtrun-store.1.gz", "share/bash-completion/completions/dtrun",
           "share/bash-completion/completions/dtrun-store", "share/zsh/vendor-completions/_dtrun",
           "share/zsh/vendor-completions/_dtrun-store", "share/doc/dtrun/README.md",
           "share/doc/dtrun/agent.md", "share/doc/dtrun/store.md", "share/dtrun/python/dtrun.py"]


def arch() -> str:
    return os.uname().machine


def test_names_carry_the_cmake_version_and_the_build_is_that_version():
    art = packages.artifacts()
    v = art.version
    deb_arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert art.deb.name == f"dtrun_{v}-1_{deb_arch}.deb"
    assert art.tarball.name == f"dtrun-{v}-linux-{arch()}.tar.gz"
    assert art.wheel.name.startswith(f"dtrun-{v}-py3-none-")
    assert re.fullmatch(rf"dtrun {re.escape(v)} \([0-9a-f]+(-dirty)?\)", packages.build_version())


def test_sha256sums_covers_every_artifact_and_verifies():
    art = packages.artifacts()
    listed = [line.split()[1] for line in art.sums.read_text().splitlines()]
    assert sorted(listed) == sorted([art.deb.name, art.wheel.name, art.tarball.name])
    r = subprocess.run(["sha256sum", "--check", "--strict", art.sums.name], cwd=art.sums.parent,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_deb_control_fields():
    art = packages.artifacts()

    def field(name):
        return subprocess.run(["dpkg-deb", "--field", str(art.deb), name], capture_output=True,
                              text=True, check=True).stdout.strip()

    assert field("Package") == "dtrun"
    assert field("Version") == f"{art.version}-1"
    assert field("Section") == "utils"
    assert field("Priority") == "optional"
    assert "@" in field("Maintainer")
    assert "torchrun" in field("Description")
    # dpkg-shlibdeps: at least glibc, with a minimum version.
    assert re.search(r"\blibc6 \(>= 2\.\d+\)", field("Depends")), field("Depends")


def test_deb_holds_the_binaries_man_pages_completions_and_docs_under_usr(tmp_path):
    art = packages.artifacts()
    subprocess.run(["dpkg-deb", "--extract", str(art.deb), str(tmp_path)], check=True)
    for path in SHIPPED:
        assert (tmp_path / "usr" / path).is_file(), f"/usr/{path} missing from {art.deb.name}"
    for tool in ("dtrun", "dtrun-store"):
        assert_stripped(tmp_path / "usr" / "bin" / tool)
        assert os.access(tmp_path / "usr" / "bin" / tool, os.X_OK)


def test_tarball_layout_and_its_dtrun_runs(tmp_path):
    art = packages.artifacts()
    top = f"dtrun-{art.version}-linux-{arch()}"
    with tarfile.open(art.tarball) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path)
    for path in SHIPPED:
        assert f"{top}/{path}" in names, f"{path} missing from {art.tarball.name}"
    assert all(n == top or n.startswith(top + "/") for n in names), names
    dtrun = tmp_path / top / "bin" / "dtrun"
    assert_stripped(dtrun)
    out = subprocess.run([str(dtrun), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == packages.build_version()


def test_wheel_platform_tag_is_computed_from_the_binaries(tmp_path):
    art = packages.artifacts()
    with zipfile.ZipFile(art.wheel) as whl:
        names = whl.namelist()
        whl.extractall(tmp_path)
        wheel_meta = whl.read(f"dtrun-{art.version}.dist-info/WHEEL").decode()
    data = f"dtrun-{art.version}.data"
    for tool in ("dtrun", "dtrun-store"):
        assert f"{data}/scripts/{tool}" in names
    assert f"{data}/data/share/man/man1/dtrun.1.gz" in names
    assert "Root-Is-Purelib: false" in wheel_meta
    tag = art.wheel.name[:-len(".whl")].split("-", 2)[2]
    assert f"Tag: {tag}" in wheel_meta
    py, abi, platform = tag.split("-")
    assert (py, abi) == ("py3", "none")

    libraries, glibc = set(), set()
    for tool in ("dtrun", "dtrun-store"):
        binary = tmp_path / data / "scripts" / tool
        dynamic = readelf("--dynamic", binary)
        libraries |= set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
        glibc |= {(int(a), int(b)) for a, b in
                  re.findall(r"Name: GLIBC_(\d+)\.(\d+)", readelf("--version-info", binary))}
    beyond = sorted(lib for lib in libraries if not GLIBC_LIBRARY.fullmatch(lib))
    if beyond:
        assert platform == f"linux_{arch()}", f"needs {beyond}, so not manylinux: {platform}"
    else:
        major, minor = max(glibc)
        assert platform == f"manylinux_{major}_{minor}_{arch()}"


def readelf(option: str, binary: Path) -> str:
    return subprocess.run(["readelf", option, "--wide", str(binary)], capture_output=True,
                          text=True, check=True).stdout


def assert_stripped(binary: Path) -> None:
    sections = readelf("--section-headers", binary)
    assert ".symtab" not in sections and ".debug_info" not in sections, f"{binary} not stripped"


def test_cmake_install_with_destdir_installs_what_the_deb_holds(tmp_path):
    art = packages.artifacts()
    staged, unpacked = tmp_path / "destdir", tmp_path / "deb"
    r = subprocess.run(["cmake", "--install", str(dh.BUILD_DIR), "--prefix", "/usr",
                        "--strip"], env=dict(os.environ, DESTDIR=str(staged)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    subprocess.run(["dpkg-deb", "--extract", str(art.deb), str(unpacked)], check=True)

    def files(root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    assert files(staged) == files(unpacked)
    assert "usr/bin/dtrun" in files(staged)
    assert_stripped(staged / "usr" / "bin" / "dtrun")
