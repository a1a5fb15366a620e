"""Signals to one node of a two-node job (docs/agent.md, "Signals on
several nodes"): Ctrl-C (SIGINT) on either node ends the job on both, each
exiting 130, the other saying which node stopped it; SIGTERM makes only that
node leave, and the node left waiting says what it waits for and how long."""

import os
import re
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

STOPPED = re.compile(r"^dtrun: the job was stopped on node (\d) \(host .+\) by SIGINT "
                     r"\(Ctrl-C there\); stopping the workers$", re.M)


def start_nodes(env, nnodes):
    """Two agents of an `nnodes`-node job, each in its own session (a
    signal reaches one only), the store's host first; each worker sleeps."""
    port = dh.free_port()
    return [dh.start([f"--nnodes={nnodes}", "--nproc-per-node=1", "--rdzv-backend=c10d",
                      f"--rdzv-endpoint=127.0.0.1:{port}",
                      f"--rdzv-conf={dh.FAST_RDZV},is_host={is_host}",
                      "--no-python", "/bin/sh", "-c", "exec sleep 1000"], env)
            for is_host in (1, 0)]


def start_two_nodes(env):
    """Both nodes of a two-node job started and running their worker."""
    nodes = start_nodes(env, 2)
    ranks = []
    for node in nodes:
        line = dh.wait_for_stderr(node, "starting 1 worker(s)")
        ranks.append(int(re.search(r"node (\d) of 2", line).group(1)))
    return nodes, ranks


@pytest.mark.parametrize("stopped", [0, 1], ids=["on the store's host", "on the other node"])
def test_ctrl_c_on_one_node_ends_the_job_on_every_node(stopped):
    env = dh.job_env()
    nodes, ranks = start_two_nodes(env)
    other = 1 - stopped
    try:
        nodes[stopped].send_signal(signal.SIGINT)
        assert nodes[stopped].wait(timeout=60) == 130
        assert nodes[other].wait(timeout=60) == 130
        said = nodes[other].stderr.read()
        found = STOPPED.findall(said)
        assert found == [str(ranks[stopped])], said
        assert "the group must restart" not in said
        assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []
    finally:
        for node in nodes:
            node.kill()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def test_sigterm_makes_one_node_leave_and_the_other_says_what_it_waits_for():
    env = dh.job_env()
    nodes, _ = start_two_nodes(env)
    try:
        nodes[1].send_signal(signal.SIGTERM)
        assert nodes[1].wait(timeout=60) == 128 + signal.SIGTERM
        dh.wait_for_stderr(nodes[0], "the group must restart")
        line = dh.wait_for_stderr(nodes[0], "node(s) here; waiting up to")
        assert re.search(r"dtrun: round \d+: 1 of at least 2 node\(s\) here; waiting up to 60 s "
                         r"for the others \(--rdzv-conf join_timeout\)$", line.rstrip("\n")), line
        assert nodes[0].poll() is None  # still waiting for a node to come back
    finally:
        for node in nodes:
            node.kill()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


@pytest.mark.parametrize("stopped", [0, 1], ids=["on the store's host", "on the other node"])
def test_ctrl_c_while_the_round_gathers_ends_the_node_that_joined_with_it(stopped):
    """Two of three nodes here, both waiting in round 0 for the third: the
    other node learns of the Ctrl-C at once (it used to wait out its join
    timeout, then fail as if the nodes had not come)."""
    env = dh.job_env()
    nodes = start_nodes(env, 3)
    other = 1 - stopped
    try:
        for node in nodes:
            dh.wait_for_stderr(node, "node(s) here; waiting up to")
        # Both have joined round 0 once both said so; the second's line says 2.
        nodes[stopped].send_signal(signal.SIGINT)
        assert nodes[stopped].wait(timeout=120) == 130
        assert nodes[other].wait(timeout=120) == 130
        said = nodes[other].stderr.read()
        assert re.search(r"^dtrun: the job was stopped on host .+ by SIGINT \(Ctrl-C there\); "
                         r"stopping the workers$", said, re.M), said
        assert "did not gather" not in said
        assert dh.gone_within(env["DTRUN_TEST_MARK"]) == []
    finally:
        for node in nodes:
            node.kill()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
