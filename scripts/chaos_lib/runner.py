"""One chaos run: H hosts in network namespaces (scripts/netns), one dtrun
agent per host training worker.py under the c10d backend, the fault
schedule applied against the running job, then the invariants.

The harness waits on real events only: rank 0's progress lines on a FIFO,
the agents' exits (pidfds), and the schedule's own deadlines; the job's
bound is an upper limit, never a wait."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import faults, invariants
from .schedule import Fault
from .settings import (ATTEMPTS, ETCD_CONF, HEALTH_INTERVAL, JOIN_TIMEOUT, KEEP_ALIVE, LEASE_TTL,
                       NETNS, PORT, PYTHON, RDZV_CONF, SOURCE_DIR, STOP_TIMEOUT, HERE, sh)

@dataclass
class Config:
    seed: int
    hosts: int = 3
    faults: int = 3
    duration: float = 20.0
    backend: str = "c10d"
    kinds: list[str] = field(default_factory=list)
    nproc: int = 1
    step_sleep: float = 0.3
    ckpt_every: int = 5
    max_restarts: int = 8
    workdir: Path = Path("/tmp")
    dtrun: Path = SOURCE_DIR / "build" / "launcher" / "dtrun"
    # The workers' interpreter: the contract's torch (scripts/chaos --python).
    python: str = PYTHON

    @property
    def steps(self) -> int:
        # Enough training to outlast the schedule, rounded to a checkpoint.
        n = int((self.duration + 8) / self.step_sleep)
        return max(self.ckpt_every, n - n % self.ckpt_every)

    @property
    def bound(self) -> float:
        """The job's time limit: its training, plus per fault the time to
        notice a lost node, stop the workers, meet again and restart torch
        (10 s on 2 busy cores), plus one join timeout for a store that is
        gone. Exceeding it is a violation (a hang), not a slow run."""
        per_fault = KEEP_ALIVE * ATTEMPTS + STOP_TIMEOUT + 6.0 + 25.0
        return (60.0 + self.duration + 2 * self.steps * self.step_sleep
                + self.faults * per_fault + JOIN_TIMEOUT)


@dataclass
class Agent:
    host: int
    proc: subprocess.Popen
    pidfd: int
    log: Path
    # Its end is the harness's doing (killed, or made to fail its health
    # check and leave), not the job's.
    killed_by_harness: bool = False
    exit_code: int | None = None


class _EtcdHosts:
    """What tests/pyhelpers/etcd_cluster.py needs of netns_hosts.Hosts."""

    def __init__(self, run: "Run"):
        self.name = run.name
        self.procs: list[subprocess.Popen] = []

    @staticmethod
    def addr(i: int) -> str:
        return f"10.77.0.{i}"

    def command(self, i: int, argv: list[str]) -> list[str]:
        return [str(NETNS), "exec", self.name, str(i), *map(str, argv)]


class Run:
    def __init__(self, cfg: Config, schedule: list[Fault]):
        self.cfg = cfg
        self.schedule = schedule
        self.name = f"ch{uuid.uuid4().hex[:7]}"
        self.dir = cfg.workdir
        self.logs = self.dir / "logs"
        self.events = self.dir / "events.jsonl"
        self.journal = self.dir / "journal.jsonl"
        self.agents: list[Agent] = []
        self.current: dict[int, Agent] = {}
        self.mark = uuid.uuid4().hex
        self.helpers: list[subprocess.Popen] = []
        self.results: list[dict] = []  # one per fault
        self.progress: list[tuple[float, int, int]] = []  # (monotonic, round, step)
        self.t_train = None
        self.mounted = False
        self.etcd = None
        # etcd members live on hosts of their own after the training hosts.
        self.total_hosts = cfg.hosts + (3 if cfg.backend == "etcd" else 0)

    # --- hosts and agents ---------------------------------------------------

    def addr(self, i: int) -> str:
        return f"10.77.0.{i}"

    def ns(self, i: int) -> str:
        return f"{self.name}-h{i}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PET_")}
        env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="eth0", CHAOS_MARK=self.mark)
        return env

    def start_agent(self, i: int) -> Agent:
        c = self.cfg
        n = sum(1 for a in self.agents if a.host == i)
        log = self.dir / f"agent-h{i}-{n}.log"
        if c.backend == "etcd":
            rdzv = ["--rdzv-backend=etcd-v3", f"--rdzv-endpoint={self.etcd.endpoints}",
                    f"--rdzv-conf={ETCD_CONF}"]
        else:
            rdzv = ["--rdzv-backend=c10d", f"--rdzv-endpoint={self.addr(1)}:{PORT}",
                    f"--rdzv-conf={RDZV_CONF}"]
        argv = [NETNS, "exec", self.name, i, c.dtrun, f"--nnodes=1:{c.hosts}",
                f"--nproc-per-node={c.nproc}", *rdzv, "--rdzv-id=chaos",
                f"--max-restarts={c.max_restarts}",
                f"--stop-timeout={STOP_TIMEOUT}", f"--event-log={self.events}",
                f"--node-health-check=test ! -e {self.unhealthy_marker(i)}",
                f"--node-health-check-interval={HEALTH_INTERVAL}",
                f"--log-dir={self.logs}/h{i}", "--redirects=3", "--python", c.python,
                HERE / "worker.py", "--journal", self.journal, "--ckpt-dir", self.dir,
                "--steps", c.steps, "--ckpt-every", c.ckpt_every, "--step-sleep", c.step_sleep,
                "--progress", self.fifo]
        with open(log, "w") as out:
            p = subprocess.Popen([str(a) for a in argv], env=self.env(), stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        a = Agent(i, p, os.pidfd_open(p.pid), log)
        self.agents.append(a)
        self.current[i] = a
        return a

    def unhealthy_marker(self, i: int) -> Path:
        """While this file exists, host i's health check fails."""
        return self.dir / f"unhealthy-h{i}"

    def live(self) -> list[Agent]:
        return [a for a in self.agents if a.exit_code is None]

    def reap(self, a: Agent) -> None:
        a.exit_code = a.proc.wait()
        os.close(a.pidfd)

    def workers_of(self, a: Agent) -> list[int]:
        try:
            kids = Path(f"/proc/{a.proc.pid}/task/{a.proc.pid}/children").read_text().split()
        except OSError:
            return []
        # The agent's children are its workers and its orphan guard (a
        # forked dtrun, docs/agent.md): only the workers are targets.
        out = []
        for k in kids:
            try:
                argv = Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0")
                # The guard's argv is dtrun's own, worker.py included.
                if not argv[0].endswith(b"dtrun") and any(a.endswith(b"worker.py") for a in argv):
                    out.append(int(k))
            except OSError:
                pass
        return sorted(out)

    def netns_pids(self, i: int) -> list[int]:
        r = sh("ip", "netns", "pids", self.ns(i))
        return [int(x) for x in r.stdout.split()]

    def job_ended(self) -> bool:
        """An agent that exited by itself means the job is over (success or
        failure); so does having no agent left."""
        return (any(a.exit_code is not None and not a.killed_by_harness for a in self.agents)
                or not self.live())

    # --- the run ----------------------------------------------------------------

    def setup(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        sh(NETNS, "create", self.name, self.total_hosts, check=True)
        if self.cfg.backend == "etcd":
            sys.path.insert(0, str(SOURCE_DIR / "tests" / "pyhelpers"))
            import etcd_cluster
            h = self.cfg.hosts
            self.etcd = etcd_cluster.EtcdCluster(_EtcdHosts(self), self.dir,
                                                 members=(h + 1, h + 2, h + 3))
            self.etcd.__enter__()
        # A small disk of its own for --log-dir, so disk_full fills it and
        # nothing else.
        if sh("mount", "-t", "tmpfs", "-o", "size=4m", "chaoslogs", self.logs).returncode == 0:
            self.mounted = True
        self.fifo = self.dir / "progress"
        os.mkfifo(self.fifo)
        self.fifo_fd = os.open(self.fifo, os.O_RDWR | os.O_NONBLOCK)

    def teardown(self) -> None:
        for a in self.live():
            try:
                os.kill(a.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.reap(a)
        for p in self.helpers:
            if p.poll() is None:
                p.kill()
            p.wait()
        if self.etcd is not None:
            self.etcd.__exit__(None, None, None)
        sh(NETNS, "destroy", self.name)
        if self.mounted:
            sh("umount", self.logs)
        os.close(self.fifo_fd)

    def read_progress(self) -> None:
        try:
            data = os.read(self.fifo_fd, 65536).decode()
        except BlockingIOError:
            return
        now = time.monotonic()
        for line in data.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "step":
                self.progress.append((now, int(parts[1]), int(parts[2])))
                if self.t_train is None:
                    self.t_train = now

    def main_loop(self) -> dict:
        cfg = self.cfg
        t0 = time.monotonic()
        deadline = t0 + cfg.bound
        pending: list[tuple[float, str, Fault]] = []  # (when, "apply"|"undo", fault)
        next_fault = 0
        busy_until = 0.0
        timed_out = False
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            # Faults fire on the schedule, one at a time: the next starts
            # once the previous one has been undone.
            if self.t_train is not None and next_fault < len(self.schedule) and not pending:
                f = self.schedule[next_fault]
                when = max(self.t_train + f.at, busy_until)
                pending.append((when, "apply", f))
                next_fault += 1
            due = [p for p in pending if p[0] <= now]
            for p in due:
                pending.remove(p)
                _, what, f = p
                if what == "apply":
                    if self.job_ended():
                        self.results.append({"fault": f, "status": "skipped: the job had ended"})
                        continue
                    why = faults.not_applicable(f.kind, cfg.backend)
                    if why is None:
                        try:
                            why = faults.apply(self, f)
                        except (OSError, subprocess.SubprocessError) as e:
                            # The harness's own failure: said, never taken
                            # for dtrun's, and the run goes on.
                            why = f"harness error: {e}"
                    t = time.monotonic()
                    self.results.append({"fault": f, "status": why or "applied", "t_apply": t,
                                         "wall": time.time(),
                                         "round_at": self.progress[-1][1] if self.progress else 0})
                    if why is None and f.hold:
                        pending.append((t + f.hold, "undo", f))
                        busy_until = t + f.hold
                    else:
                        busy_until = t
                else:
                    faults.undo(self, f)
                    for r in self.results:
                        if r["fault"] is f:
                            r["t_undo"] = time.monotonic()
            if not self.live() and not pending:
                if next_fault >= len(self.schedule) or self.job_ended():
                    # Faults left over meet a finished job.
                    for f in self.schedule[next_fault:]:
                        self.results.append({"fault": f, "status": "skipped: the job had ended"})
                    next_fault = len(self.schedule)
                    break
            waits = [deadline] + [p[0] for p in pending]
            timeout = max(0.0, min(waits) - time.monotonic())
            fds = [self.fifo_fd] + [a.pidfd for a in self.live()]
            ready, _, _ = select.select(fds, [], [], timeout)
            if self.fifo_fd in ready:
                self.read_progress()
            for a in self.live():
                if a.pidfd in ready:
                    self.reap(a)
        self.read_progress()
        return {"timed_out": timed_out, "elapsed": time.monotonic() - t0}

    def etcd_keys_left(self) -> list[str]:
        """Keys of the job still in etcd once every agent has exited. A
        finished job's last node deletes them at once; those on the lease
        of an agent that was killed go lease_ttl after its last renewal
        (docs/etcd.md), so the scan allows 2 x lease_ttl + 5 s."""
        end = time.monotonic() + 2 * LEASE_TTL + 5
        while True:
            try:
                keys = self.etcd.keys("/dtrun/")
            except (AssertionError, subprocess.TimeoutExpired) as e:
                return [f"(etcdctl failed: {str(e)[:200]})"]
            if not keys or time.monotonic() > end:
                return keys
            select.select([], [], [], 0.5)  # a bounded scan, not a synchronisation

    def leftovers(self) -> list[str]:
        """Processes still in a host's namespace once every agent has
        exited: each gets up to 10 s (an upper bound; the scan ends as soon
        as they are gone) to go, as the parent-death signal takes a moment."""
        for p in self.helpers:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        end = time.monotonic() + 10
        while True:
            left = {i: self.netns_pids(i) for i in range(1, self.cfg.hosts + 1)}
            left = {i: ps for i, ps in left.items() if ps}
            if not left or time.monotonic() > end:
                break
            select.select([], [], [], 0.1)  # a bounded scan of /proc, not a synchronisation
        out = []
        for i, ps in left.items():
            for pid in ps:
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                state = ""
                try:
                    state = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
                except (OSError, IndexError):
                    pass
                out.append(f"h{i} pid {pid} [{state}] {cmd[:120]}")
        return out


def execute(cfg: Config, schedule: list[Fault]) -> dict:
    """Runs one seed; returns its row for the report."""
    run = Run(cfg, schedule)
    run.setup()
    try:
        for i in range(1, cfg.hosts + 1):
            run.start_agent(i)
        loop = run.main_loop()
        # Undo whatever is still applied (a job that ended mid-fault).
        for r in run.results:
            if r["status"] == "applied" and r["fault"].hold and "t_undo" not in r:
                if r["fault"].kind not in ("kill_agent", "kill_host", "health_check"):
                    faults.undo(run, r["fault"])
                elif r["fault"].kind == "health_check":
                    run.unhealthy_marker(r["fault"].host).unlink(missing_ok=True)
        if loop["timed_out"]:
            for a in run.live():
                a.killed_by_harness = True
        left = run.leftovers() if not loop["timed_out"] else []
        etcd_keys = None
        if run.etcd is not None and not loop["timed_out"]:
            # Bring every member back first: a job over a dead member is
            # still a job over a cluster with quorum.
            etcd_keys = run.etcd_keys_left()
    finally:
        run.teardown()
    events = invariants.read_jsonl(run.events)
    journal = invariants.read_jsonl(run.journal)
    own = [a for a in run.agents if not a.killed_by_harness]
    reasons = []
    for e in events:
        if e.get("event") in ("job_failed", "rendezvous_failed"):
            reasons.append(str(e.get("reason", "")))
            rc = e.get("root_cause") or {}
            if rc:
                reasons.append(f"root cause: {rc.get('message') or ''} signal {rc.get('signal')}")
    steps = [j["step"] for j in journal if j.get("kind") == "done"]
    outcome = {
        "timed_out": loop["timed_out"], "bound": cfg.bound,
        "success": bool(own) and all(a.exit_code == 0 for a in own),
        "finished_training": bool(steps) and max(steps) == cfg.steps,
        "reasons": reasons,
        "restarts_spent": max([e["count"] for e in events if e.get("event") == "restart"],
                              default=0),
        "exit_codes": {f"h{a.host}#{i}": a.exit_code for i, a in enumerate(run.agents)},
    }
    applied = {r["fault"].kind for r in run.results if r["status"] == "applied"}
    kills = [(r["wall"], f"h{r['fault'].host}") for r in run.results
             if r["status"] == "applied" and r["fault"].kind in ("kill_agent", "kill_host")]
    checks = invariants.check_all(events, journal, cfg.max_restarts, outcome, applied, left,
                                  kills=kills, etcd_keys=etcd_keys)
    # Time to recover: the longest stall of training from the fault's start
    # to the first step trained after it was undone (or, for an instantaneous
    # fault, after it struck): how long the job did not train because of it.
    for r in run.results:
        if r["status"] != "applied":
            continue
        since = r.get("t_undo", r["t_apply"])
        after = [t for t, _, _ in run.progress if t > since]
        if not after:
            r["recovery_s"] = None
            continue
        ts = [r["t_apply"]] + [t for t, _, _ in run.progress if r["t_apply"] < t <= after[0]]
        r["recovery_s"] = round(max(b - a for a, b in zip(ts, ts[1:])), 2)
    rounds = sorted({e["round"] for e in events if e.get("event") == "rendezvous_completed"})
    restarts = max([e["count"] for e in events if e.get("event") == "restart"], default=0)
    return {"seed": cfg.seed, "faults": run.results, "checks": checks, "outcome": outcome,
            "rounds": len(rounds), "restarts": restarts, "elapsed": loop["elapsed"],
            "workdir": str(run.dir)}
