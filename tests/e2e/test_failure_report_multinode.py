"""The failure summary across hosts: a @record worker fails on one node, and
the summary on the other node names that node's host, node rank, the global
rank and the exception, read through the store. Both when the failing node
is group rank 1 (h2) and when it is the node that hosts the store (h1,
which must then stay until the other node has read the reports)."""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402
import netns_hosts  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the multi-node failure report test: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

PORT = 29400
NPROC = 2
FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"

# Local rank 1 on host FAIL_HOST raises inside torch's @record; every other
# worker waits to be stopped.
WORKER = """
import os, signal, sys
if (os.uname().nodename, os.environ["LOCAL_RANK"]) != (os.environ["FAIL_HOST"], "1"):
    signal.pause()
    sys.exit(0)
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    raise ValueError("boom 42 on " + os.uname().nodename)

main()
"""



@pytest.mark.parametrize("fail_host", ["h2", "h1"])
def test_failure_on_node_b_is_the_root_cause_on_node_a(tmp_path, fail_host):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = [str(dh.DTRUN), "--nnodes=2", f"--nproc-per-node={NPROC}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{PORT}", "--rdzv-id=report1",
            f"--rdzv-conf={FAST_RDZV}", "--max-restarts=0", "--python", dh.PYTHON, str(script)]
    with netns_hosts.Hosts(2) as hosts:
        env = dh.job_env(GLOO_SOCKET_IFNAME="eth0", FAIL_HOST=fail_host)
        procs = [hosts.start(i, args, env) for i in (1, 2)]
        outs = [p.communicate(timeout=180) for p in procs]
        codes = [p.returncode for p in procs]
    stderrs = [err for _, err in outs]
    # Which host got group rank 1 is the rendezvous' choice: read it.
    node_of = {}
    for host, err in zip(("h1", "h2"), stderrs):
        m = re.search(r"round 0: node (\d) of 2", err)
        assert m, err
        node_of[host] = int(m.group(1))
    b = fail_host
    a = next(h for h in node_of if h != b)
    by_host = dict(zip(("h1", "h2"), zip(codes, stderrs)))
    # Both agents fail: B with its worker's code, A with the root cause's.
    assert by_host[b][0] == 1, by_host[b][1]
    assert by_host[a][0] == 1, by_host[a][1]
    assert "the job failed on another node" in by_host[a][1]
    for host in (a, b):
        block = summary(by_host[host][1])
        assert field(block, "host") == f"{b} (node rank {node_of[b]})", block
        assert field(block, "rank") == f"{NPROC * node_of[b] + 1} (local_rank 1)", block
        assert field(block, "error") == f"ValueError: boom 42 on {b}", block
        assert field(block, "exit") == "exit code 1", block
        assert 'raise ValueError("boom 42 on " + os.uname().nodename)' in block, block
    # A's own workers were stopped by A, not failures.
    first = NPROC * node_of[a]
    assert f"stopped by dtrun (not failures): rank(s) {first}-{first + 1} on {a} " \
           f"(node rank {node_of[a]})" in summary(by_host[a][1])
    assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []
