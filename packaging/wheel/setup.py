"""Builds the dtrun wheel from a tree `cmake --install --strip` made.

scripts/package runs, in a scratch copy of this folder:

    DTRUN_STAGE=<install tree> DTRUN_VERSION=<project VERSION> \
        python3 -m build --wheel --no-isolation

The binaries go to the wheel's scripts (pip puts them in <venv>/bin, as
they are: no shebang rewriting), the man pages and completions to its data
(<venv>/share/...). One Python module, `dtrun` (agent/python/dtrun.py,
from <stage>/share/dtrun/python: dtrun.step() and dtrun.section(), which
do nothing outside a worker dtrun started). The tag is py3-none-<platform>, the
platform computed from the binaries (docs/packaging.md):
manylinux_2_<N>_<arch>, N the highest GLIBC_2.N symbol version they need,
when they need nothing but glibc (and libgcc_s, which glibc's own package
depends on); else linux_<arch>, which pip installs only on a matching
machine and PyPI refuses.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from distutils.command.build_scripts import build_scripts
from wheel.bdist_wheel import bdist_wheel

STAGE = Path(os.environ["DTRUN_STAGE"])
VERSION = os.environ["DTRUN_VERSION"]
BINARIES = [STAGE / "bin" / "dtrun", STAGE / "bin" / "dtrun-store"]
# setuptools takes modules from beside setup.py (this scratch copy).
shutil.copy(STAGE / "share" / "dtrun" / "python" / "dtrun.py", Path(__file__).parent / "dtrun.py")

# glibc's own libraries, and libgcc_s (libc6 depends on it).
BASE_LIBRARY = re.compile(r"(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl)\.so\.\d+"
                          r"|ld-linux[\w.-]*\.so\.\d+|libgcc_s\.so\.1")


def needs(binary: Path) -> tuple[set[str], set[tuple[int, int]]]:
    """The libraries `binary` loads (DT_NEEDED) and the GLIBC_x.y symbol
    versions it requires (its .gnu.version_r section)."""
    dynamic = subprocess.run(["readelf", "--dynamic", "--wide", str(binary)],
                             capture_output=True, text=True, check=True).stdout
    libraries = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    versions = subprocess.run(["readelf", "--version-info", "--wide", str(binary)],
                              capture_output=True, text=True, check=True).stdout
    glibc = {(int(a), int(b)) for a, b in re.findall(r"Name: GLIBC_(\d+)\.(\d+)", versions)}
    return libraries, glibc


def platform_tag() -> str:
    arch = platform.machine()
    libraries: set[str] = set()
    glibc: set[tuple[int, int]] = set()
    for binary in BINARIES:
        more_libraries, more_glibc = needs(binary)
        libraries |= more_libraries
        glibc |= more_glibc
    others = sorted(lib for lib in libraries if not BASE_LIBRARY.fullmatch(lib))
    if others or not glibc:
        print(f"dtrun wheel: linux_{arch}: the binaries need {', '.join(others) or 'no glibc?'}")
        return f"linux_{arch}"
    major, minor = max(glibc)
    return f"manylinux_{major}_{minor}_{arch}"


class copy_binaries(build_scripts):
    """Copies the scripts byte for byte: they are ELF executables, which
    distutils would try to read as Python source to fix their shebang."""

    def copy_scripts(self):
        self.mkpath(self.build_dir)
        outfiles = []
        for script in self.scripts:
            out = os.path.join(self.build_dir, os.path.basename(script))
            self.copy_file(script, out)
            outfiles.append(out)
        return outfiles, outfiles


class binary_wheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False  # binaries: platlib, and a platform tag

    def get_tag(self):
        return "py3", "none", platform_tag()


def data(folder: str) -> tuple[str, list[str]]:
    return folder, sorted(str(p) for p in (STAGE / folder).iterdir())


setup(
    name="dtrun",
    version=VERSION,
    description="Fast, torchrun-compatible launcher for distributed PyTorch",
    long_description=(STAGE / "share" / "doc" / "dtrun" / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license_files=[],
    packages=[],
    py_modules=["dtrun"],
    scripts=[str(b) for b in BINARIES],
    data_files=[data("share/man/man1"), data("share/bash-completion/completions"),
                data("share/zsh/vendor-completions")],
    python_requires=">=3",
    classifiers=["Operating System :: POSIX :: Linux", "Environment :: Console",
                 "Topic :: Scientific/Engineering :: Artificial Intelligence"],
    cmdclass={"build_scripts": copy_binaries, "bdist_wheel": binary_wheel},
    zip_safe=False,
)
