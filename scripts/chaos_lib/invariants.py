"""Invariants checked after every chaos run, as pure functions of what the
run left: dtrun's event log (every agent of every host appends to one file),
the workers' journal (worker.py), the agents' exits and the processes found
afterwards. Each check returns a list of violations (strings); empty = held.
tests/e2e/test_chaos.py feeds them hand-made violating records."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            # A host SIGKILLed mid-write cannot cut a line (one write()), so a
            # broken line is itself worth reporting.
            out.append({"kind": "unparsable", "event": "unparsable", "text": line[:200]})
    return out


def rounds_agree(events: list[dict]) -> list[str]:
    """Per round, every node that completed the rendezvous agrees on the
    world size and the node count, no two nodes hold one group rank, the
    global rank ranges are disjoint and inside the world, and when every
    member logged its round they cover 0..world-1 exactly."""
    bad = []
    by_round = defaultdict(list)
    for e in events:
        if e.get("event") == "rendezvous_completed":
            by_round[e["round"]].append(e)
    for r, es in sorted(by_round.items()):
        worlds = {e["world_size"] for e in es}
        nodes = {e["group_world_size"] for e in es}
        if len(worlds) > 1 or len(nodes) > 1:
            bad.append(f"round {r}: nodes disagree: world sizes {sorted(worlds)}, "
                       f"node counts {sorted(nodes)}")
            continue
        world, n = worlds.pop(), nodes.pop()
        ranks = [e["group_rank"] for e in es]
        if len(set(ranks)) != len(ranks):
            holders = defaultdict(list)
            for e in es:
                holders[e["group_rank"]].append(f"{e['host']}/{e['agent_pid']}")
            dup = {k: v for k, v in holders.items() if len(v) > 1}
            bad.append(f"round {r}: one group rank held by two nodes: {dup}")
        if any(not 0 <= g < n for g in ranks):
            bad.append(f"round {r}: group ranks {sorted(ranks)} outside 0..{n - 1}")
        spans = sorted(tuple(e["ranks"]) for e in es)
        covered = []
        for first, last in spans:
            covered.extend(range(first, last + 1))
        if len(set(covered)) != len(covered) or any(not 0 <= x < world for x in covered):
            bad.append(f"round {r}: global rank ranges {spans} overlap or leave 0..{world - 1}")
        elif len(es) == n and sorted(covered) != list(range(world)):
            bad.append(f"round {r}: global ranks {spans} are not a permutation of 0..{world - 1}")
    return bad


def workers_agree(journal: list[dict]) -> list[str]:
    """From the workers' own records: in every round that trained a step
    (a DDP step needs every rank), the ranks that started form a
    permutation of 0..world-1, all with that world size, and one group rank
    lives on one host only."""
    bad = []
    starts = defaultdict(list)
    trained = set()
    for j in journal:
        if j.get("kind") == "start":
            starts[j["round"]].append(j)
        elif j.get("kind") == "step":
            trained.add(j["round"])
    for r in sorted(trained):
        ss = starts[r]
        worlds = {s["world"] for s in ss}
        if len(worlds) != 1:
            bad.append(f"round {r}: workers disagree on the world size: {sorted(worlds)}")
            continue
        world = worlds.pop()
        ranks = sorted(s["rank"] for s in ss)
        if ranks != list(range(world)):
            bad.append(f"round {r}: the workers' ranks {ranks} are not a permutation of "
                       f"0..{world - 1}")
        host_of = defaultdict(set)
        for s in ss:
            host_of[s["group_rank"]].add(s["host"])
        shared = {g: sorted(h) for g, h in host_of.items() if len(h) > 1}
        if shared:
            bad.append(f"round {r}: one group rank on two hosts: {shared}")
    return bad


def restarts_consistent(events: list[dict], max_restarts: int) -> list[str]:
    """Restarts are spent on failures only, once per failed round, the same
    count on every node, never above --max-restarts."""
    bad = []
    by_round = defaultdict(set)
    failed_rounds = {e["round"] for e in events if e.get("event") == "worker_failed"}
    for e in events:
        if e.get("event") == "restart":
            by_round[e["after_round"]].add(e["count"])
    for r, counts in sorted(by_round.items()):
        if len(counts) > 1:
            bad.append(f"round {r}: nodes restarted under different counts {sorted(counts)}")
        if max(counts) > max_restarts:
            bad.append(f"round {r}: restart {max(counts)} exceeds --max-restarts={max_restarts}")
        if r not in failed_rounds:
            bad.append(f"round {r}: a restart was spent but no worker failed in it "
                       f"(a membership change must not count)")
    every = sorted(c for cs in by_round.values() for c in cs)
    if every and sorted(set(every)) != list(range(1, len(set(every)) + 1)):
        bad.append(f"restart counts {sorted(set(every))} skip a number (one failed round, "
                   f"one restart)")
    if len(set(every)) != len(by_round):
        bad.append(f"{len(by_round)} failed rounds spent {len(set(every))} distinct restarts")
    return bad


def training_monotone(journal: list[dict]) -> list[str]:
    """Checkpoints never go backward, and no worker resumes from before a
    checkpoint that had completed when it started (a step trained twice
    after it was saved)."""
    bad = []
    last_ckpt = 0
    for j in journal:
        if j.get("kind") == "ckpt":
            if j["step"] <= last_ckpt:
                bad.append(f"checkpoint went backward: step {j['step']} (round {j['round']}) "
                           f"after step {last_ckpt}")
            last_ckpt = max(last_ckpt, j["step"])
        elif j.get("kind") == "start" and j["resume"] < last_ckpt:
            bad.append(f"round {j['round']} rank {j['rank']} resumed from step {j['resume']} "
                       f"although step {last_ckpt} was checkpointed: steps trained twice")
    per_worker = defaultdict(list)
    for j in journal:
        if j.get("kind") == "step":
            per_worker[(j["round"], j["pid"])].append(j["step"])
    for (r, pid), steps in per_worker.items():
        if any(b != a + 1 for a, b in zip(steps, steps[1:])):
            bad.append(f"round {r} pid {pid}: steps not consecutive: {steps[:12]}")
    return bad


def event_time(e: dict) -> float:
    """An event's wall-clock time (its `time`, ISO 8601 UTC with ms)."""
    from datetime import datetime, timezone
    return datetime.strptime(e["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=timezone.utc).timestamp()


def node_loss_costs_no_restart(events: list[dict], kills: list[tuple[float, str]]) -> list[str]:
    """A node that dies is a membership change, not a failure
    (docs/agent.md: "Neither counts as a restart"): its connection closes,
    the store runs its last will, and the others stop their workers.
    `kills`: (wall time, host) of every agent or host the harness SIGKILLed.
    For each, the round its agent was running then must not have spent a
    restart, unless a worker had already failed in it before the kill."""
    bad = []
    for when, host in kills:
        mine = [e for e in events if e.get("host") == host and event_time(e) <= when]
        done = [e for e in mine if e.get("event") == "rendezvous_completed"]
        if not done:
            continue
        last = done[-1]
        r, pid = last["round"], last["agent_pid"]
        if any(e.get("event") in ("membership_change", "group_stopping", "restart",
                                  "job_failed", "job_succeeded")
               and e.get("agent_pid") == pid and e.get("round", e.get("after_round")) == r
               for e in mine):
            continue  # its round was already over when it died
        failed_before = any(e.get("event") == "worker_failed" and e.get("round") == r
                            and event_time(e) < when for e in events)
        spent = [e for e in events if e.get("event") == "restart" and e.get("after_round") == r]
        if spent and not failed_before:
            causes = sorted({f"{e['host']}: rank {e['rank']} {e.get('signal') or e['exit_code']}"
                             for e in events
                             if e.get("event") == "worker_failed" and e.get("round") == r})
            bad.append(f"round {r}: {host} (group rank {last['group_rank']}) was killed and the "
                       f"round spent restart {spent[0]['count']} (failures: {causes}); a node's "
                       f"death must end the round through its last will, as a membership change")
    return bad


# A failure's reason or root cause, and the faults that may explain it.
CAUSES = [
    ("store", {"store_kill"}),            # the rendezvous store (c10d) lost
    ("etcd", {"store_kill"}),
    ("lease", {"store_kill"}),
    ("rendezvous", {"store_kill"}),
    ("report the failure", {"kill_worker", "kill_all_workers", "link_down", "partition",
                            "loss", "stop_agent", "store_kill"}),
    ("restart", {"kill_worker", "kill_all_workers", "kill_agent", "kill_host", "stop_agent", "stop_worker",
                 "link_down", "partition", "loss", "store_kill", "disk_full"}),
    ("space", {"disk_full"}),
]


# --check reads records without a schedule: any fault may have happened.
CAUSE_KINDS = sorted({k for _, kinds in CAUSES for k in kinds})


def outcome_explained(outcome: dict, applied_kinds: set[str]) -> list[str]:
    """The job ended with success (every surviving agent exited 0 and the
    last step was trained) or with a failure whose reason names a cause
    that an injected fault explains; never by hanging past its bound."""
    if outcome.get("timed_out"):
        return [f"the job did not end within its bound of {outcome['bound']:.0f}s"]
    if outcome["success"]:
        if not outcome.get("finished_training"):
            return ["every agent exited 0 but training did not reach its last step"]
        return []
    reasons = " | ".join(outcome.get("reasons", [])).lower()
    # A summary that blames the restarts must have spent them (dtrun once
    # said "all 8 restart(s) used" with none spent, when the failure could
    # not be reported to the store: seeds 52 and 69).
    import re
    used = re.search(r"all (\d+) restart\(s\) used", reasons)
    if used and outcome.get("restarts_spent", 0) < int(used.group(1)):
        return [f"the failure summary says all {used.group(1)} restarts were used, but the "
                f"job spent {outcome.get('restarts_spent', 0)}: {reasons[:200]}"]
    for word, kinds in CAUSES:
        if word in reasons and kinds & applied_kinds:
            return []
    return [f"the job failed, unexplained by the faults injected ({sorted(applied_kinds)}): "
            f"{reasons[:300] or 'no reason logged'}"]


def check_all(events, journal, max_restarts, outcome, applied_kinds, leftovers,
              kills=(), etcd_keys=None) -> dict[str, list[str]]:
    out = {
        "node loss is no restart": node_loss_costs_no_restart(events, list(kills)),
        "rounds agree (event log)": rounds_agree(events),
        "ranks a permutation (workers)": workers_agree(journal),
        "restarts consistent": restarts_consistent(events, max_restarts),
        "training monotone": training_monotone(journal),
        "outcome explained": outcome_explained(outcome, applied_kinds),
        "no process left": [f"left running: {p}" for p in leftovers],
    }
    if etcd_keys is not None:
        out["no etcd key left"] = [f"key left in etcd: {k}" for k in etcd_keys]
    return out
