"""The PNG of scripts/bench/all: restart latency (dtrun vs torchrun) and
rendezvous time vs N (log x), drawn with Debian's python3-matplotlib."""

from __future__ import annotations

import statistics
from pathlib import Path

import summary


def draw(samples: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    fig.suptitle(title, fontsize=10)

    # Left: restart latency, median bar with min-max whiskers, log y.
    names = [("dtrun", "dtrun"), ("torchrun", "torchrun\n0.1 s poll"),
             ("torchrun-default", "torchrun\n5 s poll")]
    bars = [(label, summary.stats(summary.pick(samples, "restart", "crash_to_last_replacement",
                                               subject)))
            for subject, label in names]
    bars = [(label, s) for label, s in bars if s]
    xs = range(len(bars))
    medians = [s[0] for _, s in bars]
    errs = [[s[0] - s[1] for _, s in bars], [s[2] - s[0] for _, s in bars]]
    left.bar(xs, medians, yerr=errs, capsize=6,
             color=["tab:blue", "tab:orange", "tab:red"][:len(bars)])
    left.set_xticks(list(xs), [label for label, _ in bars])
    for x, (_, st) in zip(xs, bars):  # the median's value above the whisker
        left.annotate(f"{st[0]:.1f} ms", (x, st[2]), textcoords="offset points", xytext=(0, 4),
                      ha="center", fontsize=9)
    left.set_yscale("log")
    if medians:
        left.set_ylim(bottom=1 if min(medians) > 2 else 0.1)  # bars from a fixed floor
    left.set_ylabel("ms (median, whiskers min-max)")
    left.set_title("Restart: worker crash -> last of 4 replacements running")

    # Right: rendezvous time vs N.
    def series(metric, subject, **where):
        pts = sorted((s["nodes"], statistics.median(s["values"])) for s in samples
                     if s["bench"] == "rendezvous" and s["metric"] == metric
                     and s["subject"] == subject and all(s.get(k) == v for k, v in where.items()))
        return [n for n, _ in pts], [v for _, v in pts]

    lines = [(series("inprocess_seconds", "dtrun"), "dtrun, in-process handlers", "o-"),
             (series("real_last_start_to_all_ranked", "dtrun", worker="held"),
              "dtrun agents, last start -> all ranked (held workers)", "s-"),
             (series("real_last_start_to_all_ranked", "dtrun", worker="true"),
              "dtrun agents, last start -> all ranked (/bin/true)", "^--"),
             (series("last_start_to_all_workers", "torchrun"),
              "torchrun agents, last start -> all workers ran", "D-"),
             (series("last_start_to_all_workers", "dtrun"),
              "dtrun agents, last start -> all workers ran", "v:")]
    for (ns, vs), label, style in lines:
        if ns:
            right.plot(ns, vs, style, label=label)
    right.axhline(1.0, color="grey", linewidth=0.8, linestyle=":",
                  label="target: 1,024 agents < 1 s")
    right.set_xscale("log", base=2)
    right.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    right.set_yscale("log")
    right.set_xlabel("N (agents on loopback)")
    right.set_ylabel("seconds (median)")
    right.set_title("Rendezvous at scale")
    right.legend(fontsize=7, loc="lower right")
    right.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
