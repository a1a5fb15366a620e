"""The release binaries carry the hardening Debian builds programs with
(cmake/hardening.cmake): a position-independent executable, RELRO with
every symbol bound at start (BIND_NOW), the stack protector and
_FORTIFY_SOURCE's checked libc calls. Read from the ELF files with readelf,
as lintian and checksec do."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import release_job as rj  # noqa: E402


def readelf(*args: str) -> str:
    r = subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True)
    return r.stdout


def imported_symbols(exe: Path) -> set[str]:
    """The names of the undefined dynamic symbols (what libc provides)."""
    names = set()
    for line in readelf("--dyn-syms", str(exe)).splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[6] == "UND":
            names.add(fields[7].split("@")[0])
    return names


@pytest.mark.parametrize("exe", rj.EXECUTABLES, ids=lambda p: p.name)
def test_position_independent_with_full_relro(exe: Path):
    assert re.search(r"Type:\s+DYN", readelf("-h", str(exe))), f"{exe.name} is not a PIE"
    assert "GNU_RELRO" in readelf("-l", str(exe)), f"{exe.name} has no RELRO segment"
    dynamic = readelf("-d", str(exe))
    assert re.search(r"\(FLAGS\)\s.*BIND_NOW", dynamic) or re.search(
        r"\(FLAGS_1\)\s.*\bNOW\b", dynamic), f"{exe.name} is not bound at start (-z now)"


@pytest.mark.parametrize("exe", rj.EXECUTABLES, ids=lambda p: p.name)
def test_stack_protector_and_fortify(exe: Path):
    symbols = imported_symbols(exe)
    assert "__stack_chk_fail" in symbols, f"{exe.name}: no stack protector"
    checked = sorted(s for s in symbols if re.fullmatch(r"__\w+_chk", s))
    assert checked, f"{exe.name}: no _FORTIFY_SOURCE checked calls among {sorted(symbols)[:20]}"
