"""Summary of many chaos runs (the --json lines of scripts/chaos), as the
markdown table scripts/bench/chaos publishes in docs/benchmarks.md."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]  # nearest rank


def summarize(lines: list[dict]) -> str:
    runs = len(lines)
    by_kind = defaultdict(lambda: {"drawn": 0, "applied": 0, "na": set(), "skipped": 0,
                                   "rec": []})
    outcomes = defaultdict(int)
    violations = 0
    bad_seeds = []
    for row in lines:
        violations += row["violations"]
        if row["violations"]:
            bad_seeds.append(row["seed"])
        outcomes["success" if row["success"] else "timed out" if row["timed_out"]
                 else "failed"] += 1
        for f in row["faults"]:
            k = by_kind[f["kind"]]
            k["drawn"] += 1
            if f["status"] == "applied":
                k["applied"] += 1
                if f["recovery_s"] is not None:
                    k["rec"].append(f["recovery_s"])
            elif f["status"].startswith("skipped"):
                k["skipped"] += 1
            else:
                k["na"].add(f["status"])
    out = [f"{runs} runs, {sum(k['applied'] for k in by_kind.values())} faults applied, "
           f"{violations} violations; outcomes: "
           + ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())), "",
           "| fault | drawn | applied | skipped (job over / no target) | training stalled: median | p90 | max |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for kind, k in sorted(by_kind.items()):
        if k["na"]:
            out.append(f"| {kind} | {k['drawn']} | not applicable here: "
                       f"{'; '.join(sorted(k['na']))} | | | | |")
            continue
        rec = k["rec"]
        stats = (f"{statistics.median(rec):.2f}s | {pct(rec, 0.9):.2f}s | {max(rec):.2f}s"
                 if rec else "- | - | -")
        out.append(f"| {kind} | {k['drawn']} | {k['applied']} | {k['skipped']} | {stats} |")
    rec = [f["recovery_s"] for row in lines for f in row["faults"]
           if f["status"] == "applied" and f["recovery_s"] is not None]
    if rec:
        out += ["", f"Training stalled after a fault (all kinds, {len(rec)} faults): median "
                f"{statistics.median(rec):.2f}s, p90 {pct(rec, 0.9):.2f}s, max {max(rec):.2f}s."]
    if bad_seeds:
        out += ["", f"Seeds with violations: {', '.join(map(str, bad_seeds))}"]
    return "\n".join(out)


def load(path: Path) -> list[dict]:
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
