"""A TCP port for a benchmark whose processes must all be told it in
advance (several agents meeting at one endpoint, workers' MASTER_PORT),
where binding port 0 in the process that serves is not possible.

Why it is safe enough: the port is drawn at random from below the kernel's
ephemeral range (net.ipv4.ip_local_port_range), and checked free by binding
it. The kernel hands out ports to bind(0) and connect() only from the
ephemeral range, so nothing that asks for "any port" (dtrun's and
torchrun's stores on port 0, every client socket, every test server) can
take it between this check and the benchmark's own bind. Only a process
that names the same number explicitly can; for two of these draws at once
that is 1 in about 20,000, and the benchmark then fails with the bind
error rather than measuring something else.
"""

from __future__ import annotations

import random
import socket


def ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = map(int, f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "") -> int:
    """A port outside the ephemeral range that nothing listens on now
    (checked on `host`, every interface by default)."""
    low, high = ephemeral_range()
    # Below the ephemeral range and above most fixed service ports, leaving
    # out torchrun's defaults (someone's real job may be on them).
    span = range(10000, low) if low - 10000 >= 1000 else range(high + 1, 65536)
    candidates = [p for p in span if p not in (29400, 29500)]
    for port in random.sample(candidates, min(200, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port outside the ephemeral range")
