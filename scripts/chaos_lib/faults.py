"""The faults: whether this machine can apply a kind, and applying and
undoing one against a running chaos job (runner.Run)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from typing import TYPE_CHECKING

from . import invariants
from .schedule import Fault
from .settings import HERE, NETNS, PORT, PYTHON, STOP_TIMEOUT, sh

if TYPE_CHECKING:
    from .runner import Run

_PROBES: dict[str, str | None] = {}


def not_applicable(kind: str, backend: str) -> str | None:
    """Why this machine cannot apply a fault kind, or None when it can
    (probed once, in a namespace of its own)."""
    if kind in ("partition", "loss"):
        if shutil.which("nft") is None:
            return "nft (nftables) is not installed"
        return None
    if kind == "disk_full" and os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if kind == "delay":
        if "delay" not in _PROBES:
            ns = f"chprobe{uuid.uuid4().hex[:6]}"
            sh("ip", "netns", "add", ns)
            r = sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root",
                   "netem", "delay", "10ms")
            sh("ip", "netns", "del", ns)
            _PROBES["delay"] = None if r.returncode == 0 else (
                "tc netem unavailable (the kernel has no sch_netem: "
                f"{(r.stderr.strip() or 'tc failed').splitlines()[0]})")
        return _PROBES["delay"]
    return None


def nft(run: "Run", i: int, rules: str) -> str | None:
    r = subprocess.run(["ip", "netns", "exec", run.ns(i), "nft", "-f", "-"], input=rules,
                       capture_output=True, text=True)
    return None if r.returncode == 0 else r.stderr.strip()

def apply(run: "Run", f: Fault) -> str | None:
    """Applies a fault; returns why it could not be, or None."""
    a = run.current.get(f.host)
    alive = a is not None and a.exit_code is None
    k = f.kind
    if k in ("kill_worker", "stop_worker"):
        if not alive:
            return "skipped: no agent on that host now"
        ws = run.workers_of(a)
        if not ws:
            return "skipped: no worker running at that moment (between rounds)"
        f._pid = ws[f.pick % len(ws)]
        os.kill(f._pid, signal.SIGKILL if k == "kill_worker" else signal.SIGSTOP)
    elif k == "kill_all_workers":
        # Every pid first, then the kills back to back: the failures
        # land on every node within a millisecond or so.
        pids = [w for x in run.live() for w in run.workers_of(x)]
        if not pids:
            return "skipped: no worker running at that moment (between rounds)"
        for w in pids:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass
    elif k in ("kill_agent", "stop_agent"):
        if not alive:
            return "skipped: no agent on that host now"
        f._pid = a.proc.pid
        if k == "kill_agent":
            a.killed_by_harness = True
        os.kill(a.proc.pid, signal.SIGKILL if k == "kill_agent" else signal.SIGSTOP)
    elif k == "store_kill" and run.cfg.backend == "etcd":
        run.etcd.kill(run.cfg.hosts + f.host)
    elif k in ("kill_host", "store_kill"):
        if a is not None:
            a.killed_by_harness = True
        for pid in run.netns_pids(f.host):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    elif k == "health_check":
        if not alive:
            return "skipped: no agent on that host now"
        # The node leaves the job once its check fails (docs/agent.md,
        # "Node health"): an end the harness caused.
        a.killed_by_harness = True
        run.unhealthy_marker(f.host).touch()
    elif k == "link_down":
        sh("ip", "-n", run.ns(f.host), "link", "set", "eth0", "down", check=True)
    elif k == "partition":
        return nft(run, f.host, "table inet chaos {\nchain in { type filter hook input "
                        f"priority 0; ip saddr {run.addr(f.peer)} drop; }}\n}}\n")
    elif k == "loss":
        rule = f"numgen random mod 100 < {f.percent} drop;"
        return nft(run, f.host, "table inet chaos {\n"
                        f"chain in {{ type filter hook input priority 0; {rule} }}\n"
                        f"chain out {{ type filter hook output priority 0; {rule} }}\n}}\n")
    elif k == "disk_full":
        # Unbuffered writes until ENOSPC: a buffered file would raise
        # it again from its close.
        fd = os.open(run.logs / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        chunk = b"\0" * 65536
        try:
            while True:
                os.write(fd, chunk)
        except OSError:
            pass  # ENOSPC: the disk is full, which is the point
        finally:
            os.close(fd)
    elif k == "hostile_clients":
        # c10d: the endpoint store; etcd: the workers' store on group
        # rank 0's host (etcd is not dtrun's code), from the event log.
        addr, port = run.addr(1), PORT
        if run.cfg.backend == "etcd":
            done = [e for e in invariants.read_jsonl(run.events)
                    if e.get("event") == "rendezvous_completed"]
            if not done:
                return "skipped: no round has completed yet"
            addr, port = done[-1]["master_addr"], done[-1]["master_port"]
        p = subprocess.Popen([str(NETNS), "exec", run.name, str(f.host), PYTHON,
                              str(HERE / "hostile.py"), addr, str(port),
                              str(f.hold), str(run.cfg.seed * 100 + f.index)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run.helpers.append(p)
    return None

def undo(run: "Run", f: Fault) -> None:
    k = f.kind
    if k in ("stop_worker", "stop_agent"):
        try:
            os.kill(f._pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
    elif k == "link_down":
        sh("ip", "-n", run.ns(f.host), "link", "set", "eth0", "up")
    elif k in ("partition", "loss"):
        sh("ip", "netns", "exec", run.ns(f.host), "nft", "delete", "table", "inet", "chaos")
    elif k == "disk_full":
        (run.logs / "filler").unlink(missing_ok=True)
    elif k == "store_kill" and run.cfg.backend == "etcd":
        # The member comes back from its data dir; not awaited (the loop
        # goes on serving the job's events meanwhile).
        run.etcd._start(run.cfg.hosts + f.host, "existing")
    elif k == "health_check":
        run.unhealthy_marker(f.host).unlink(missing_ok=True)
        revive_unhealthy(run, f)
    elif k in ("kill_agent", "kill_host"):
        # The host comes back: a new agent joins the running job (a
        # scale-up), unless the job has already ended.
        if run.job_ended():
            f._note = "not revived: the job had ended"
        else:
            run.start_agent(f.host)

def revive_unhealthy(run: "Run", f: Fault) -> None:
    """The host is healthy again: once the agent that left has exited
    (its workers' stop takes up to --stop-timeout), a new one joins
    the running job, as after kill_agent."""
    a = run.current.get(f.host)
    if a is not None and a.exit_code is None:
        try:
            a.exit_code = a.proc.wait(timeout=STOP_TIMEOUT + 10)
            os.close(a.pidfd)
        except subprocess.TimeoutExpired:
            f._note = "not revived: the unhealthy agent had not left"
            return
    if run.job_ended():
        f._note = "not revived: the job had ended"
    else:
        run.start_agent(f.host)
