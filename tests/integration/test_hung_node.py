"""A node that hangs with its connection open is found by the heartbeat
ring and the round restarts without it.

Two dtrun agents on this machine (c10d, the first hosts the store on
127.0.0.1), one held worker each. The second agent is stopped with SIGSTOP:
the kernel keeps its TCP connection open, so no last will fires; only its
ring predecessor, reading a counter that no longer moves, can tell. The
host must name the stopped node's group rank and go on alone in round 1
(--nnodes=1:2)."""

import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

# A short interval so the test takes seconds; 3 still intervals are a loss.
CONF = "join_timeout=60,last_call_timeout=1,keep_alive_interval=0.2,keep_alive_max_attempt=3"


def agent(port: int, is_host: int, env: dict[str, str]) -> subprocess.Popen:
    # -v: a round of one node is logged only as "rendezvous round R completed".
    return dh.start(["-v", "--nnodes=1:2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                     f"--rdzv-conf={CONF},is_host={is_host}", "--no-python", "sleep", "600"],
                    env)


def group_rank_of(rank_line: str) -> int:
    # "dtrun: round 0: node 1 of 2, starting 1 worker(s) as ranks 1..1"
    m = re.search(r"round 0: node (\d+) of 2,", rank_line)
    assert m, rank_line
    return int(m.group(1))


def test_a_stopped_node_is_found_by_its_ring_predecessor_and_left_behind():
    env = dh.job_env()
    port = dh.free_port()
    host = agent(port, 1, env)
    joiner = None
    try:
        joiner = agent(port, 0, env)
        host_rank = group_rank_of(dh.wait_for_stderr(host, "round 0: node"))
        joiner_rank = group_rank_of(dh.wait_for_stderr(joiner, "round 0: node"))
        assert {host_rank, joiner_rank} == {0, 1}
        os.kill(joiner.pid, signal.SIGSTOP)
        line = dh.wait_for_stderr(host, "the group must restart")
        assert f"node {joiner_rank} stopped sending heartbeats" in line, line
        # Round 1 closes with the host alone: the only node that can come.
        assert "node 0 of 1," in dh.wait_for_stderr(host, "rendezvous round 1 completed")
    finally:
        for p in (joiner, host):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
