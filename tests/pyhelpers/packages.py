"""The release artifacts scripts/package makes (tests/release/test_package_*.py).

Under CTest the fixture test `release.package` (tests/CMakeLists.txt) runs
scripts/package once for the whole run, before any test that needs its
artifacts, and sets DTRUN_PACKAGED=1 for them: those tests only find the
files. A test file run on its own (pytest tests/release/test_package_x.py)
runs scripts/package itself, once per process; scripts/package takes a
lock on its output folder, so two such runs at once take turns instead of
writing the same files together.

    sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
    import packages
    art = packages.artifacts()     # art.deb, art.wheel, art.tarball, art.sums, art.version
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dtrun_helpers as dh  # noqa: E402

DIST = dh.BUILD_DIR / "dist"
PACKAGE = dh.SOURCE_DIR / "scripts" / "package"


@dataclass
class release:
    version: str   # the project VERSION of CMakeLists.txt
    deb: Path
    wheel: Path
    tarball: Path
    sums: Path


def project_version() -> str:
    """VERSION of the top CMakeLists.txt's project(): the one place it is set."""
    text = (dh.SOURCE_DIR / "CMakeLists.txt").read_text()
    match = re.search(r"project\(dtrun\s+VERSION\s+([0-9.]+)", text)
    assert match, "no project(dtrun VERSION x.y.z) in CMakeLists.txt"
    return match.group(1)


def build_version() -> str:
    """What the build's dtrun --version prints, e.g. `dtrun 0.1.0 (abc1234)`."""
    return subprocess.run([str(dh.DTRUN), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _one(pattern: str) -> Path:
    found = sorted(DIST.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {DIST}, found {[p.name for p in found]}"
    return found[0]


_made = False


def artifacts() -> release:
    """The artifacts of this build, made first unless the CTest fixture did."""
    global _made
    if os.environ.get("DTRUN_PACKAGED") != "1" and not _made:
        r = subprocess.run([str(PACKAGE), "--build-dir", str(dh.BUILD_DIR)], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, f"scripts/package failed ({r.returncode}):\n{r.stderr}"
        _made = True
    # This version's: scripts/package leaves earlier versions' artifacts.
    version = project_version()
    return release(version=version, deb=_one(f"dtrun_{version}-*.deb"),
                   wheel=_one(f"dtrun-{version}-*.whl"),
                   tarball=_one(f"dtrun-{version}-linux-*.tar.gz"), sums=DIST / "SHA256SUMS")
