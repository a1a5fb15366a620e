"""Smoke test of the store benchmark (scripts/bench/store --quick).

Not a measurement: it proves the benchmark still runs end to end against
both servers (dtrun-store and torch 1.13's), its load client reports no
error, and the Markdown table it prints is the one it writes to --out.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402


def test_quick_benchmark_prints_a_complete_table(tmp_path):
    load_bin = sh.BUILD_DIR / "scripts" / "bench" / "store_load"
    assert load_bin.exists(), f"{load_bin} was not built (is scripts/bench in the build?)"
    out_file = tmp_path / "table.md"
    r = subprocess.run(
        [str(sh.SOURCE_DIR / "scripts" / "bench" / "store"), "--quick", "--duration", "0.2",
         "--idle", "300", "--out", str(out_file)],
        capture_output=True, text=True, timeout=180,
        env={**os.environ, "DTRUN_BUILD_DIR": str(sh.BUILD_DIR)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert out_file.read_text() == r.stdout

    rows = [line for line in r.stdout.splitlines()
            if line.startswith("| dtrun-store |") or line.startswith("| torch 1.13 TCPStore |")]
    load_rows = [row for row in rows if "| setget |" in row or "| add |" in row]
    # 2 servers x 2 workloads x (3 connection counts + 8 active with 300 idle).
    assert len(load_rows) == 16, r.stdout
    for row in load_rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        server, workload, conns, ops, p50, p99, server_cpu, client_cpu, errors = cells
        assert errors == "0", row
        assert float(ops.replace(",", "")) > 0, row
        assert 0 < float(p50.replace(",", "")) <= float(p99.replace(",", "")), row
        assert float(server_cpu) > 0 and float(client_cpu) > 0, row
    idle_rows = [row for row in rows if "answered" in row]
    assert len(idle_rows) == 2 and all("ok (all 300 answered" in row for row in idle_rows), \
        r.stdout
    assert re.search(r"throughput setget [\d.]+x, add [\d.]+x", r.stdout), r.stdout
