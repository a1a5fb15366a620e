"""The fault schedule: drawn from random.Random(seed) and the flags only,
never from the machine, so a seed replays the same faults anywhere (a
fault this machine cannot apply is still drawn, and reported as not
applicable)."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

# Every kind, in the order --kinds lists them. `host` faults pick a training
# host that is not the store's (c10d: host 1 hosts the endpoint store, and
# losing it ends the job by design; that is store_kill's subject).
KINDS = [
    "kill_worker",    # SIGKILL one worker
    "kill_agent",     # SIGKILL one agent (its workers follow by parent-death signal); revived
    "kill_host",      # SIGKILL everything in a host's namespace; revived
    "stop_agent",     # SIGSTOP an agent for `hold` s, then SIGCONT
    "stop_worker",    # SIGSTOP a worker for `hold` s, then SIGCONT
    "link_down",      # the host's eth0 down for `hold` s, then up
    "partition",      # one direction only: packets from `peer` to the host dropped (nftables)
    "loss",           # `percent`% of the host's packets dropped both ways (nftables numgen)
    "delay",          # tc netem delay (needs sch_netem in the kernel)
    "store_kill",     # c10d: the endpoint store's host killed (the job must fail, and say so);
                      # etcd: one etcd member killed, then restarted
    "disk_full",      # the tmpfs under --log-dir filled for `hold` s, then emptied
    "hostile_clients",  # a burst of clients sending garbage and cut frames to the store
    "health_check",   # the host's --node-health-check fails for `hold` s: the node leaves; revived
    "kill_all_workers",  # every worker of every host SIGKILLed at once (all ranks hitting
                         # the same bug at the same step); opt-in, see DEFAULT_KINDS
]

# What --kinds defaults to. kill_all_workers came after the published
# 100-seed bench and is opt-in, so that a seed keeps drawing the schedule
# it drew there (a longer list would change every rng.choice).
DEFAULT_KINDS = [k for k in KINDS if k != "kill_all_workers"]

# Faults that end the job by design when they hit: drawn last.
TERMINAL = {"store_kill"}


@dataclass
class Fault:
    index: int
    at: float          # seconds after training started
    kind: str
    host: int          # the host it hits (1-based)
    hold: float        # seconds until it is undone (0: instantaneous)
    peer: int = 0      # partition: the host whose packets are dropped
    pick: int = 0      # which worker (index into the host's live workers, mod their count)
    percent: int = 0   # loss
    member: bool = False  # store_kill on etcd: `host` is the etcd member's index


    def describe(self) -> str:
        extra = {"partition": f" from h{self.peer}", "loss": f" {self.percent}%",
                 "kill_worker": f" worker #{self.pick}", "stop_worker": f" worker #{self.pick}"}
        hold = f" for {self.hold:.1f}s" if self.hold else ""
        target = (f"etcd member e{self.host}" if self.member else
                  "every host" if self.kind == "kill_all_workers" else f"h{self.host}")
        return f"t+{self.at:5.1f}s {self.kind} {target}{extra.get(self.kind, '')}{hold}"

    def to_json(self) -> dict:
        return asdict(self)


def draw(seed: int, hosts: int, faults: int, duration: float, kinds: list[str],
         backend: str) -> list[Fault]:
    """`faults` faults at increasing times within `duration` seconds of
    training, each kind and target from the seed."""
    rng = random.Random(seed)
    times = sorted(rng.uniform(1.0, max(duration, 1.0)) for _ in range(faults))
    chosen = [rng.choice(kinds) for _ in range(faults)]
    # A fault that ends the job by design goes last, so the others still
    # meet a running job.
    chosen.sort(key=lambda k: k in TERMINAL and backend == "c10d")
    out = []
    for i, (at, kind) in enumerate(zip(times, chosen)):
        victims = list(range(2, hosts + 1)) if backend == "c10d" else list(range(1, hosts + 1))
        host = rng.choice(victims or [1])
        if kind == "store_kill":
            host = 1 if backend == "c10d" else rng.randint(1, 3)  # etcd: member index
        hold = (round(rng.uniform(2.0, 6.0), 1)
                if kind not in ("kill_worker", "store_kill", "kill_all_workers") else 0.0)
        if kind == "store_kill" and backend != "c10d":
            hold = round(rng.uniform(2.0, 6.0), 1)
        peer = rng.choice([h for h in range(1, hosts + 1) if h != host] or [host])
        out.append(Fault(index=i, at=round(at, 1), kind=kind, host=host, hold=hold, peer=peer,
                         pick=rng.randrange(8), percent=rng.choice([10, 30, 50]),
                         member=kind == "store_kill" and backend != "c10d"))
    return out
