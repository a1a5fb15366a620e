"""Smoke test of the rendezvous scale benchmark (scripts/bench/rendezvous --quick).

Not a measurement: it proves the benchmark still runs end to end (in-process
`rendezvous_scale` and 8 real dtrun agents on loopback), that the table it
prints is the one it writes to --out, that every one of the 8 agents logged
its rank, and that the in-process round costs O(1) store requests per node
(at most 20; about 14 today).
"""

import os
import subprocess
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("DTRUN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("DTRUN_BUILD_DIR", SOURCE_DIR / "build"))

def sections(text):
    """{heading: [table rows as lists of cells]} for each '## ' section."""
    out, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = out.setdefault(line[3:], [])
        elif current is not None and line.startswith("|") and not line.startswith("|--") \
                and not line.startswith("|:") and not line.startswith("|-"):
            current.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def test_quick_benchmark_ranks_all_agents_with_constant_requests(tmp_path):
    for binary in (BUILD_DIR / "launcher" / "dtrun",
                   BUILD_DIR / "scripts" / "bench" / "rendezvous_scale"):
        assert binary.exists(), f"{binary} was not built"
    out_file = tmp_path / "table.md"
    r = subprocess.run(
        [str(SOURCE_DIR / "scripts" / "bench" / "rendezvous"), "--quick", "--out", str(out_file)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "DTRUN_BUILD_DIR": str(BUILD_DIR)})
    assert out_file.exists(), r.stdout + r.stderr
    assert out_file.read_text() == r.stdout

    secs = sections(r.stdout)
    inproc = next(rows for head, rows in secs.items() if head.startswith("1."))
    real = next(rows for head, rows in secs.items() if head.startswith("2."))
    assert not any(head.startswith("3.") for head in secs), "--quick runs no torchrun"

    # Section 1: header, then one row for 8 nodes.
    header, *rows = inproc
    row = dict(zip(header, next(x for x in rows if x[0] == "8")))
    assert row["failed"] == "0", r.stdout
    assert float(row["store requests / node"]) <= 20, r.stdout

    # Section 2: 8 real agents, all of them ranked, a finite time after the last start.
    header, *rows = real
    row = dict(zip(header, next(x for x in rows if x[0] == "8")))
    assert row["ranked"] == "8/8", r.stdout
    assert 0 < float(row["last start -> all ranked"]) < 60, r.stdout
    assert float(row["store requests / node"]) <= 20, r.stdout
    # Every agent also got through the exit barrier and exited 0: the store
    # host waits until every node has seen the end before it leaves.
    assert row["result"] == "ok", r.stdout
    assert r.returncode == 0, r.stdout + r.stderr
