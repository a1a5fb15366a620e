"""The benchmark suite's smoke run (scripts/bench/all --quick) against the
build under test: every benchmark runs once with tiny sizes, so none of them
can rot. Not a measurement: no timing is asserted, only that each benchmark
ran, produced a numeric result for dtrun (and for its anchor where --quick
measures one), and that the table and the plot were written.

Replaces the store and rendezvous benchmarks' own smoke tests: the store's
load client reports no error (the store benchmark exits non-zero otherwise),
every real agent of the rendezvous got its rank and exited 0, and the
in-process round costs O(1) store requests per node.

torchrun is only a comparison here: when it fails (the benchmark prints
"anchor torchrun failed: ..."), the failure is printed, its anchor cells
must then read "-" (not measured), and dtrun's results are still checked.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("DTRUN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("DTRUN_BUILD_DIR", SOURCE_DIR / "build"))
sys.path.insert(0, str(SOURCE_DIR / "tests" / "pyhelpers"))
import netns_hosts  # noqa: E402
import torch_pypi  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ANCHOR_FAILED = "anchor torchrun failed:"


def bench_env(**extra: str) -> dict:
    """Our environment without the benchmarks' anchor overrides
    (DTRUN_BENCH_TORCHRUN/_PYTHON): the suite measures the repository's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTRUN_BENCH_")}
    env.update(extra)
    return env


def anchor_failures(stderr: str, bench: str) -> list[str]:
    """What one benchmark said of its anchor's failures, from
    "anchor torchrun failed:" on (bench/all prefixes each benchmark's lines
    with "[name]")."""
    return [line[line.index(ANCHOR_FAILED):].strip() for line in stderr.splitlines()
            if f"[{bench}]" in line and ANCHOR_FAILED in line]


def table(text: str, heading: str) -> list[dict]:
    """The first Markdown table under `## heading`, as dicts keyed by its header."""
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    # The first table only: it ends at the first line that is not a row.
    first = section[section.index("|"):].split("\n\n", 1)[0].splitlines()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in first]
    assert lines and len(rows) >= 2, section
    header, _rule, *body = rows
    return [dict(zip(header, r)) for r in body]


def restart_storm(md: str) -> dict:
    """The restart benchmark's import storm tables: column -> {row: count}
    (the first number of a cell: "1,251 (29)" is 1,251 opens, 29 failed)."""
    section = md.split("## Details: restart\n", 1)[1].split("\n## ", 1)[0]
    columns: dict = {}
    for block in section.split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("|")]
        if not lines or "file-system work" not in lines[0] and "one import" not in lines[0]:
            continue
        header = [c.strip() for c in lines[0].strip("|").split("|")]
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            label = cells[0].split(" (")[0].split(":")[0]
            for name, value in zip(header[1:], cells[1:]):
                name = "one import" if name == "count" else name
                columns.setdefault(name, {})[label] = number(value.split()[0])
    return columns


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def find(rows: list[dict], benchmark: str, metric_start: str) -> dict:
    hits = [r for r in rows if r["benchmark"] == benchmark and r["metric"].startswith(metric_start)]
    assert hits, f"no '{benchmark}: {metric_start}...' row in {[r['metric'] for r in rows]}"
    return hits[0]


def test_quick_suite_writes_every_benchmarks_row_and_the_plot(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run([str(SOURCE_DIR / "scripts" / "bench" / "all"), "--quick", "--no-build",
                        "--build-dir", str(BUILD_DIR), "--out", str(out)],
                       capture_output=True, text=True, timeout=400, env=bench_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    md = (out / "bench-results.md").read_text()
    assert md.strip() == r.stdout.strip()  # what it printed is what it wrote

    # The header names the machine and the load.
    for field in ("| CPU |", "| kernel |", "| g++ |", "| Boost |", "| torch |",
                  "| load average"):
        assert field in md, md[:2000]

    # Every benchmark ran (node loss may only be skipped where namespaces cannot be made).
    status = {row["benchmark"]: row["status"] for row in table(md, "Benchmarks run")}
    no_netns = netns_hosts.unavailable_reason()
    expected = {"launch", "store", "store-barrier", "rendezvous", "realjob", "restart",
                "nodeloss"}
    assert set(status) == expected, status
    for name, text in status.items():
        if name == "nodeloss" and no_netns:
            print(f"node loss skipped: {no_netns}")
            assert text.startswith("skipped"), status
        else:
            assert text == "ok", (name, status, (out / f"{name}.log").read_text()[-3000:])

    # --quick runs torchrun in the launch benchmark only.
    torchrun_failed = anchor_failures(r.stderr, "launch")
    for line in torchrun_failed:
        print(line)
    assert all(line in md for line in torchrun_failed), md  # listed in the results too

    rows = table(md, "Summary")
    # (benchmark, metric prefix, anchor measured in --quick too); "torchrun":
    # measured unless the anchor torchrun failed.
    torchrun = "torchrun"
    wanted = [("launch", "4 x /bin/true, wall; vs torchrun", torchrun),
              ("launch", "same; vs fork/exec floor", True),
              ("restart", "crash -> last replacement running", torchrun),
              ("agent memory", "agent peak RSS", torchrun),
              ("real job", "4-rank gloo DDP, wall; vs Python-import floor", True),
              # --quick runs dtrun and dtrun --preload, not torchrun.
              ("real restart", "2-rank gloo DDP: crash -> every replacement in the script",
               False),
              ("real restart", "crash -> first step after the restart, --preload", True),
              ("store", "set+get ops/s @ 1 conns", True),
              ("store", "set+get p50 latency @ 8 conns", True),
              ("store", "set+get p99 latency @ 8 conns", True),
              ("store", "200 idle connections held", True),
              # torch 1.13's server is always there; 2.6's only where its rootfs is.
              ("store barrier", "256-rank init + barrier, wall (1.13 clients)", True),
              ("store barrier", "256-rank init + barrier, wall; vs torch 2.6", False),
              ("store barrier", "256-rank p99", False),
              ("rendezvous", "in-process round, N = 4", False),
              ("rendezvous", "store requests per node, N = 4", False),
              ("rendezvous", "4 real agents: last start -> all ranked", False)]
    if not no_netns:
        wanted += [("node loss", "node killed -> survivors training again", False),
                   ("node loss", "node killed -> survivors' workers restarted", False)]
    for bench, metric, anchored in wanted:
        row = find(rows, bench, metric)
        assert number(row["dtrun median"]) > 0, row
        assert row["n"] == "1", row  # --quick: one measured run
        if anchored == torchrun and torchrun_failed:
            assert row["anchor median"] == "-", row  # not measured, not made up
        elif anchored:
            assert number(row["anchor median"]) > 0, row
            assert re.fullmatch(r"[\d.]+x (faster|slower|higher|lower|smaller|larger)",
                                row["dtrun vs anchor"]), row
        if row["target"] != "-":
            assert row["met?"] in ("yes", "**no**") or row["met?"].startswith("- (N ="), row
    # Rendezvous: O(1) store requests per node (about 15 today).
    assert number(find(rows, "rendezvous", "store requests per node")["dtrun median"]) <= 20
    # Store: every idle connection was answered by both servers.
    idle = find(rows, "store", "200 idle connections held")
    assert number(idle["dtrun median"]) == 200 and number(idle["anchor median"]) == 200, idle

    # Store barrier: every dtrun-store cell is a number, not "timeout" or
    # "errors: ..." (the benchmark also exits 1 on any dtrun-store error,
    # which the "ok" status above rules out).
    barrier = table(md, "Details: store-barrier")
    assert [row["N"] for row in barrier] == ["64", "256"], barrier
    for row in barrier:
        for column in ("dtrun-store wall s", "dtrun p99 ms", "dtrun-store, 1.13 clients: wall s"):
            assert number(row[column]) > 0, (column, row)
        assert number(row["torch 1.13 wall s"]) > 0, row

    # Restart: both subjects' replacements reached the script and trained
    # (the times are numbers); the import storm was counted, and the
    # restart under --preload asked far less of the file system than one
    # import, where a plain restart re-imports on every worker.
    restart = {row["subject"]: row for row in table(md, "Details: restart")}
    assert set(restart) == {"dtrun", "dtrun-preload"}, restart
    for row in restart.values():
        for column in list(row)[1:]:
            assert number(row[column].split()[0]) > 0, (column, row)
    if "strace is not installed" not in r.stderr:
        storm = restart_storm(md)
        one = storm["one import"]
        assert one["opens"] > 100 and one["bytes read from files"] > 1_000_000, one
        assert storm["dtrun, restart"]["opens"] >= one["opens"], storm
        assert storm["dtrun --preload, restart"]["opens"] < one["opens"] / 2, storm
        assert storm["dtrun --preload, restart"]["bytes read from files"] < \
            one["bytes read from files"] / 2, storm

    # The raw repetitions are there, one JSON object per line.
    raw = [json.loads(line) for line in (out / "raw.jsonl").read_text().splitlines()]
    assert {s["bench"] for s in raw} >= {"launch", "restart", "rss", "store", "store-barrier",
                                         "rendezvous", "realjob"}
    assert all(s["values"] for s in raw)

    png = (out / "bench-results.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 10_000, png[:16]


def test_a_failing_anchor_is_reported_and_dtrun_still_measured(tmp_path):
    """The launch benchmark with a torchrun that cannot start: it says so in
    one line, exits 0, and records dtrun's numbers and no torchrun ones."""
    broken = tmp_path / "broken-torchrun"
    broken.write_text("import sys\nsys.exit('torchrun broken on purpose')\n")
    raw = tmp_path / "raw.jsonl"
    r = subprocess.run([str(SOURCE_DIR / "scripts" / "bench" / "launch"), "--quick",
                        "--build-dir", str(BUILD_DIR), "--json", str(raw)],
                       capture_output=True, text=True, timeout=300,
                       env=bench_env(DTRUN_BENCH_TORCHRUN=str(broken),
                                     DTRUN_BENCH_PYTHON="/usr/bin/python3"))
    assert r.returncode == 0, r.stderr
    failed = [line for line in r.stderr.splitlines() if ANCHOR_FAILED in line]
    assert len(failed) == 1 and "torchrun broken on purpose" in failed[0], r.stderr
    assert "dtrun's results are still checked" in failed[0]
    samples = [json.loads(line) for line in raw.read_text().splitlines()]
    subjects = {(s["bench"], s["subject"]) for s in samples}
    assert {("launch", "dtrun"), ("restart", "dtrun"), ("rss", "dtrun")} <= subjects, subjects
    assert not any(subject.startswith("torchrun") for _, subject in subjects), subjects
    assert all(s["values"] and min(s["values"]) > 0 for s in samples), samples


def test_the_torch_2_15_anchor_runs_side_by_side(tmp_path):
    """--torch 2.15 (the contract's torch, scripts/torch-python): the launch
    benchmark measures the real torchrun 2.15 next to dtrun in one quick run,
    and the store barrier measures torch 2.15's own (libuv) server next to
    dtrun-store. One run of each, no timing asserted."""
    torch_pypi.require()
    version = torch_pypi.TORCH_VERSION
    raw = tmp_path / "raw.jsonl"
    r = subprocess.run([str(SOURCE_DIR / "scripts" / "bench" / "launch"), "--quick",
                        "--build-dir", str(BUILD_DIR), "--json", str(raw), "--torch", version],
                       capture_output=True, text=True, timeout=300, env=bench_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert ANCHOR_FAILED not in r.stderr, r.stderr[-3000:]
    assert f"torchrun {torch_pypi.TORCH_VERSION_FULL}" in r.stdout, r.stdout
    samples = [json.loads(line) for line in raw.read_text().splitlines()]
    subjects = {(s["bench"], s["subject"]) for s in samples}
    for bench in ("launch", "restart", "rss"):
        assert {(bench, "dtrun"), (bench, "torchrun")} <= subjects, subjects
    # torch 2.x polls at 0.1 s by default: no run at a "default interval".
    assert not any(subject == "torchrun-default" for _, subject in subjects), subjects

    r = subprocess.run([str(SOURCE_DIR / "scripts" / "bench" / "store-barrier"), "--quick",
                        "--build-dir", str(BUILD_DIR), "--ranks", "64", "--servers", "dtrun",
                        "--torch", version],
                       capture_output=True, text=True, timeout=300, env=bench_env())
    assert r.returncode == 0, r.stderr[-3000:]
    label = f"torch {torch_pypi.TORCH_VERSION_FULL} (libuv)"
    rows = [row for row in r.stdout.split(f"dtrun-store against {label}", 1)[1].splitlines()
            if row.startswith("| 64 |")]
    assert len(rows) == 1, r.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert all(number(c) > 0 for c in cells[1:7]), rows[0]
    assert re.fullmatch(r"[\d.]+x", cells[7]), rows[0]
