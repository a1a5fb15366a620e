"""The one table of scripts/bench/all: for every benchmark, dtrun's median
and spread, its anchor's, the ratio, and whether the issue's target is met.

Input: the JSON lines the benchmark scripts wrote (samples.py). Spread is
min-max over the measured repetitions (after the warm-up).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass
class Target:
    text: str
    max_value: float | None = None    # dtrun's median at most this
    min_value: float | None = None    # dtrun's median at least this
    min_advantage: float | None = None  # dtrun at least this many times better
    max_ratio: float | None = None    # dtrun / anchor at most this (dtrun may be slower)
    only_nodes: int | None = None     # judged only at this N (rendezvous)


@dataclass
class Row:
    bench: str
    label: str
    unit: str
    lower_is_better: bool
    dtrun: list[float] | None
    anchor_name: str = ""
    anchor: list[float] | None = None
    target: Target | None = None
    nodes: int | None = None


def stats(values: list[float] | None) -> tuple[float, float, float] | None:
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def advantage(row: Row) -> float | None:
    """How many times better dtrun is than the anchor (> 1: better)."""
    d, a = stats(row.dtrun), stats(row.anchor)
    if not d or not a or d[0] == 0 or a[0] == 0:
        return None  # ratio_text says why
    return a[0] / d[0] if row.lower_is_better else d[0] / a[0]


def ratio_text(row: Row) -> str:
    adv = advantage(row)
    d, a = stats(row.dtrun), stats(row.anchor)
    if adv is None and d and a and a[0] == 0 and d[0] > 0 and not row.lower_is_better:
        return "anchor: 0"
    if adv is None:
        return "-"
    if row.lower_is_better and row.unit in ("ms", "s", "us"):
        return f"{adv:.1f}x faster" if adv >= 1 else f"{1 / adv:.2f}x slower"
    if row.lower_is_better:
        return f"{adv:.1f}x smaller" if adv >= 1 else f"{1 / adv:.2f}x larger"
    return f"{adv:.2f}x higher" if adv >= 1 else f"{1 / adv:.2f}x lower"


def verdict(row: Row) -> str:
    """'yes', 'no', or '-' (no target, or not measurable in this run)."""
    t = row.target
    d = stats(row.dtrun)
    if t is None or d is None:
        return "-" if t is None else "no (not measured)"
    if t.only_nodes is not None and row.nodes != t.only_nodes:
        return f"- (N = {row.nodes} here)"
    ok = True
    if t.max_value is not None:
        ok &= d[0] <= t.max_value
    if t.min_value is not None:
        ok &= d[0] >= t.min_value
    adv = advantage(row)
    if t.min_advantage is not None:
        ok &= adv is not None and adv >= t.min_advantage
    if t.max_ratio is not None:
        ok &= adv is not None and 1 / adv <= t.max_ratio
    return "yes" if ok else "**no**"


def pick(samples: list[dict], bench: str, metric: str, subject: str, **where) -> list[float] | None:
    for s in samples:
        if (s["bench"], s["metric"], s["subject"]) == (bench, metric, subject) and \
                all(s.get(k) == v for k, v in where.items()):
            return s["values"]
    return None


def cells(samples: list[dict], bench: str, metric: str, key: str, **where) -> list:
    return sorted({s.get(key) for s in samples if s["bench"] == bench and s["metric"] == metric
                   and all(s.get(k) == v for k, v in where.items()) and s.get(key) is not None})


def build_rows(samples: list[dict]) -> list[Row]:
    rows = []
    p = lambda *a, **k: pick(samples, *a, **k)  # noqa: E731
    dt = "dtrun"
    # 1. launch
    launch_t = Target("<= 30 ms and >= 60x faster than torchrun (0.1 s)", max_value=30,
                      min_advantage=60)
    rows.append(Row("launch", "4 x /bin/true, wall; vs torchrun 0.1 s", "ms", True,
                    p("launch", "wall", dt), "torchrun (0.1 s)", p("launch", "wall", "torchrun"),
                    launch_t))
    rows.append(Row("launch", "same; vs torchrun default interval", "ms", True,
                    p("launch", "wall", dt), "torchrun (5 s)",
                    p("launch", "wall", "torchrun-default")))
    rows.append(Row("launch", "same; vs fork/exec floor", "ms", True, p("launch", "wall", dt),
                    "fork_floor", p("launch", "wall", "floor")))
    # 2. restart
    m = "crash_to_last_replacement"
    rows.append(Row("restart", "crash -> last replacement running; vs torchrun 0.1 s", "ms", True,
                    p("restart", m, dt), "torchrun (0.1 s)", p("restart", m, "torchrun"),
                    Target("<= 20 ms and >= 20x faster", max_value=20, min_advantage=20)))
    rows.append(Row("restart", "same; vs torchrun default interval", "ms", True,
                    p("restart", m, dt), "torchrun (5 s)", p("restart", m, "torchrun-default")))
    # 3. agent memory
    rows.append(Row("agent memory", "agent peak RSS", "MB", True, p("rss", "agent_peak_rss", dt),
                    "torchrun", p("rss", "agent_peak_rss", "torchrun"),
                    Target("<= 10 MB", max_value=10)))
    # 4. real job
    rows.append(Row("real job", "4-rank gloo DDP, wall; vs Python-import floor", "s", True,
                    p("realjob", "wall", dt), "import floor", p("realjob", "wall", "import-floor"),
                    Target("within 1.2x of the import floor", max_ratio=1.2)))
    rows.append(Row("real job", "same; vs no launcher (ranks started by hand)", "s", True,
                    p("realjob", "wall", dt), "no launcher", p("realjob", "wall", "no-launcher")))
    rows.append(Row("real job", "same; vs torchrun 0.1 s", "s", True, p("realjob", "wall", dt),
                    "torchrun (0.1 s)", p("realjob", "wall", "torchrun")))
    # 4b. real restart: a 2-rank gloo job's worker crash (scripts/bench/restart)
    b, pre = "restart", "dtrun-preload"
    m = "crash_to_in_script"
    rows.append(Row("real restart", "2-rank gloo DDP: crash -> every replacement in the "
                    "script, --preload torch; vs torchrun 0.1 s", "ms", True, p(b, m, pre),
                    "torchrun (0.1 s)", p(b, m, "torchrun"), Target("< 50 ms", max_value=50)))
    rows.append(Row("real restart", "same; vs dtrun without --preload", "ms", True, p(b, m, pre),
                    "dtrun (plain start)", p(b, m, dt)))
    m = "crash_to_first_step"
    rows.append(Row("real restart", "crash -> first step after the restart, --preload torch; "
                    "vs dtrun without --preload", "ms", True, p(b, m, pre), "dtrun (plain start)",
                    p(b, m, dt), Target("< half of a plain start's", max_ratio=0.5)))
    rows.append(Row("real restart", "same; vs torchrun 0.1 s", "ms", True, p(b, m, pre),
                    "torchrun (0.1 s)", p(b, m, "torchrun")))
    rows.append(Row("real restart", "same; vs Python-import floor", "ms", True, p(b, m, pre),
                    "import floor (2 x import torch)", p(b, "wall", "import-floor")))
    # 5. store
    conns = cells(samples, "store", "setget_ops_per_s", "connections", idle=0)
    top = max(conns) if conns else None
    for c in conns:
        for metric, label, unit, lower in (("setget_ops_per_s", "set+get ops/s", "ops/s", False),
                                           ("setget_p50_us", "set+get p50 latency", "us", True),
                                           ("setget_p99_us", "set+get p99 latency", "us", True)):
            target = None
            if metric == "setget_ops_per_s" and c == 1024:
                target = Target(">= 2x torch's at 1,024 connections", min_advantage=2)
            if metric == "setget_p99_us" and c == 1024:
                target = Target("no worse than torch's at 1,024 connections", max_ratio=1)
            rows.append(Row("store", f"{label} @ {c:,} conns", unit, lower,
                            p("store", metric, dt, connections=c, idle=0), "torch TCPStore",
                            p("store", metric, "torch", connections=c, idle=0), target))
    if top is not None:
        rows.append(Row("store", f"add ops/s @ {top:,} conns", "ops/s", False,
                        p("store", "add_ops_per_s", dt, connections=top, idle=0),
                        "torch TCPStore", p("store", "add_ops_per_s", "torch", connections=top,
                                            idle=0)))
    for c, idle in {(s["connections"], s["idle"]) for s in samples
                    if s["metric"] == "setget_ops_per_s" and s.get("idle")}:
        rows.append(Row("store", f"set+get ops/s @ {c:,} conns + {idle:,} idle", "ops/s", False,
                        p("store", "setget_ops_per_s", dt, connections=c, idle=idle),
                        "torch TCPStore",
                        p("store", "setget_ops_per_s", "torch", connections=c, idle=idle)))
    for idle in cells(samples, "store", "idle_answered", "idle"):
        rows.append(Row("store", f"{idle:,} idle connections held, answered", "conns", False,
                        p("store", "idle_answered", dt, idle=idle), "torch TCPStore",
                        p("store", "idle_answered", "torch", idle=idle),
                        Target(f"all {idle:,} answered", min_value=idle)))
    # 5b. store barrier: N ranks' init_process_group + barrier (largest N)
    ns = cells(samples, "store-barrier", "wall_s", "ranks")
    if ns:
        n = max(ns)
        b = "store-barrier"
        rows.append(Row("store barrier", f"{n:,}-rank init + barrier, wall; vs torch 2.6", "s",
                        True, p(b, "wall_s", dt, ranks=n), "torch 2.6 TCPStore (classic)",
                        p(b, "wall_s", "torch-2.6", ranks=n),
                        Target(">= 2x faster than torch 2.x's at 16,000 ranks", min_advantage=2,
                               only_nodes=16000), nodes=n))
        threaded = p(b, "wall_s", "dtrun-threads", ranks=n)
        if threaded:
            rows.append(Row("store barrier", f"{n:,}-rank init + barrier, wall, "
                            "dtrun-store --threads (the CPUs); vs torch 2.6", "s", True,
                            threaded, "torch 2.6 TCPStore (classic)",
                            p(b, "wall_s", "torch-2.6", ranks=n), nodes=n))
        rows.append(Row("store barrier", f"{n:,}-rank init + barrier, wall (1.13 clients); "
                        "vs torch 1.13", "s", True, p(b, "wall_s", "dtrun-1.13", ranks=n),
                        "torch 1.13 TCPStore", p(b, "wall_s", "torch", ranks=n)))
        rows.append(Row("store barrier", f"{n:,}-rank p99 go -> master's address; vs torch 2.6",
                        "ms", True, p(b, "p99_ms", dt, ranks=n), "torch 2.6 TCPStore (classic)",
                        p(b, "p99_ms", "torch-2.6", ranks=n)))
        rows.append(Row("store barrier", f"{n:,}-rank server CPU; vs torch 2.6", "s", True,
                        p(b, "server_cpu_s", dt, ranks=n), "torch 2.6 TCPStore (classic)",
                        p(b, "server_cpu_s", "torch-2.6", ranks=n)))
        # A PyPI torch's own server (--torch 2.15: libuv's), same 2.x clients.
        for subject in sorted({s["subject"] for s in samples if s["bench"] == b
                               and s["subject"].startswith("torch-")
                               and s["subject"] != "torch-2.6"}):
            version = subject.split("-", 1)[1]
            for metric, what, unit in (("wall_s", "init + barrier, wall", "s"),
                                       ("server_cpu_s", "server CPU", "s")):
                rows.append(Row("store barrier", f"{n:,}-rank {what}; vs torch {version}", unit,
                                True, p(b, metric, dt, ranks=n),
                                f"torch {version} TCPStore (libuv)",
                                p(b, metric, subject, ranks=n), nodes=n))
    # 6. rendezvous
    ns = cells(samples, "rendezvous", "inprocess_seconds", "nodes")
    if ns:
        n = max(ns)
        rows.append(Row("rendezvous", f"in-process round, N = {n:,}", "s", True,
                        p("rendezvous", "inprocess_seconds", dt, nodes=n), nodes=n))
        rows.append(Row("rendezvous", f"store requests per node, N = {n:,}", "requests", True,
                        p("rendezvous", "requests_per_node", dt, nodes=n), nodes=n))
    real = cells(samples, "rendezvous", "real_last_start_to_all_ranked", "nodes")
    if real:
        n = max(real)
        for worker in ("held", "true"):
            v = p("rendezvous", "real_last_start_to_all_ranked", dt, nodes=n, worker=worker)
            if v:
                rows.append(Row("rendezvous", f"{n:,} real agents: last start -> all ranked "
                                f"({'held' if worker == 'held' else '/bin/true'} workers)",
                                "s", True, v, target=Target("< 1 s at N = 1,024", max_value=1.0,
                                                            only_nodes=1024), nodes=n))
    versus = cells(samples, "rendezvous", "last_start_to_all_workers", "nodes")
    for n in versus:
        rows.append(Row("rendezvous", f"{n} agents: last start -> all workers ran; vs torchrun",
                        "s", True, p("rendezvous", "last_start_to_all_workers", dt, nodes=n),
                        "torchrun (0.1 s)",
                        p("rendezvous", "last_start_to_all_workers", "torchrun", nodes=n)))
    # 7. node loss
    v = p("nodeloss", "kill_to_training_again", dt)
    if v is not None or any(s["bench"] == "nodeloss" for s in samples):
        rows.append(Row("node loss", "node killed -> survivors training again", "s", True, v,
                        "torchrun (0.1 s)", p("nodeloss", "kill_to_training_again", "torchrun")))
        rows.append(Row("node loss", "node killed -> survivors' workers restarted", "s", True,
                        p("nodeloss", "kill_to_workers_restarted", dt)))
    # A comparison row whose anchor this run did not measure (e.g. --quick)
    # says nothing the row above it does not.
    return [r for r in rows if r.anchor or r.target or not r.label.startswith("same;")]


def name_anchor(rows: list[Row], anchor: str) -> None:
    """Names the torchrun anchor in the rows ("torchrun (0.1 s)" ->
    "torchrun 2.15.0 (0.1 s)") when it is not Debian's 1.13."""
    if anchor == "torchrun 1.13":
        return
    for r in rows:
        if r.anchor_name.startswith("torchrun"):
            r.anchor_name = anchor + r.anchor_name[len("torchrun"):]


def render_table(rows: list[Row]) -> list[str]:
    out = ["| benchmark | metric | unit | dtrun median | dtrun min-max | n | anchor "
           "| anchor median | anchor min-max | dtrun vs anchor | target | met? |",
           "|---|---|---|---:|---:|---:|---|---:|---:|---|---|---|"]
    for r in rows:
        d, a = stats(r.dtrun), stats(r.anchor)
        met = verdict(r)
        out.append(
            f"| {r.bench} | {r.label} | {r.unit} "
            f"| {fmt(d[0]) if d else 'not measured'} "
            f"| {f'{fmt(d[1])}-{fmt(d[2])}' if d else '-'} | {len(r.dtrun or [])} "
            f"| {r.anchor_name or '-'} | {fmt(a[0]) if a else '-'} "
            f"| {f'{fmt(a[1])}-{fmt(a[2])}' if a else '-'} | {ratio_text(r)} "
            f"| {r.target.text if r.target else '-'} | {met} |")
    return out


def missed(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.target is not None and verdict(r).startswith(("**no", "no"))]
