"""What every part of the chaos harness shares: where things are, the
job's rendezvous and stop settings, and running a command."""

from __future__ import annotations

import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE_DIR = HERE.parents[1]
NETNS = SOURCE_DIR / "scripts" / "netns"
PYTHON = "/usr/bin/python3"
PORT = 29400
# Fast rendezvous timeouts, as in the multi-node tests: a silent node is
# noticed within 3 s; join_timeout bounds a job whose store is gone.
KEEP_ALIVE, ATTEMPTS, JOIN_TIMEOUT = 1, 3, 30
RDZV_CONF = (f"join_timeout={JOIN_TIMEOUT},last_call_timeout=1,keep_alive_interval={KEEP_ALIVE},"
             f"keep_alive_max_attempt={ATTEMPTS},close_timeout=10")
STOP_TIMEOUT = 5
# --node-health-check on every agent: a command that fails while the
# harness's marker file for its host exists (the health_check fault), run
# every HEALTH_INTERVAL s while the workers run.
HEALTH_INTERVAL = 1
# etcd: lease_ttl 3 s is the least that is safe with etcd's 1 s election
# timeout (tests/e2e/test_etcd_rendezvous.py).
LEASE_TTL = 3
ETCD_CONF = RDZV_CONF + f",lease_ttl={LEASE_TTL},request_timeout=5"


def sh(*argv, check=False) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=check)
