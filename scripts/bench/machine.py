"""The machine a benchmark run measured, for the header of bench-results.md:
cores, memory, kernel, CPU model, tool versions and the load average (the
numbers are only comparable between runs on an idle machine)."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from pathlib import Path


def _first_line(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_gib(key: str) -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 2**20
    return 0.0


def _boost() -> str:
    try:
        text = Path("/usr/include/boost/version.hpp").read_text()
        return re.search(r'BOOST_LIB_VERSION "([\d_]+)"', text).group(1).replace("_", ".")
    except (OSError, AttributeError):
        return "unknown"


def _deb_version(package: str) -> str:
    return _first_line(["dpkg-query", "-W", "-f=${Version}", package])


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def describe(root: Path) -> dict:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gib": round(_mem_gib("MemTotal"), 1),
        "memory_available_gib": round(_mem_gib("MemAvailable"), 1),
        "kernel": platform.release(),
        "gxx": _first_line(["g++", "--version"]),
        "boost": _boost(),
        "python": _first_line(["/usr/bin/python3", "--version"]),
        "torch": _deb_version("python3-torch"),
        "dtrun_commit": _first_line(["git", "-C", str(root), "rev-parse", "--short", "HEAD"]),
        "load_average_start": load_average(),
    }
