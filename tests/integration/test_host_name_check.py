"""A multi-host job whose host names send gloo to loopback (agent/
host_name_check.h): each agent says so in one line once its first round
spans the hosts, naming its own host, instead of every rank failing later
inside gloo with 'connect [127.0.0.1]: Connection refused'. The test hosts'
names (h1, h2) resolve to nothing, as on a cluster without DNS entries."""

import os
import re
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402

NETNS_REASON = netns_hosts.unavailable_reason()


@pytest.mark.skipif(NETNS_REASON is not None, reason=NETNS_REASON or "")
def test_each_host_whose_name_does_not_resolve_is_named_in_one_warning():
    env = dh.job_env()
    env.pop("GLOO_SOCKET_IFNAME", None)
    with netns_hosts.Hosts(2) as hosts:
        nodes = [hosts.start(i, [dh.DTRUN, "--nnodes=2", "--nproc-per-node=1",
                                 "--rdzv-backend=c10d", f"--rdzv-endpoint={hosts.addr(1)}:29400",
                                 f"--rdzv-conf={dh.FAST_RDZV},is_host={int(i == 1)}",
                                 "--no-python", "/bin/sh", "-c", "exec sleep 1000"], env)
                 for i in (1, 2)]
        try:
            for i, node in zip((1, 2), nodes):
                line = dh.wait_for_stderr(node, "this host's name").rstrip("\n")
                assert re.fullmatch(
                    rf"dtrun: warning: this host's name 'h{i}' does not resolve to an address "
                    r"\(gloo then uses loopback\): gloo workers on the other nodes will try to "
                    r"reach this node's workers there and fail with 'Connection refused'; map "
                    r"the name to this host's address in /etc/hosts or DNS, or set "
                    r"GLOO_SOCKET_IFNAME to the interface the nodes share", line), line
            nodes[0].send_signal(signal.SIGINT)
            assert [n.wait(timeout=60) for n in nodes] == [130, 130]
            for node in nodes:
                assert node.stderr.read().count("this host's name") == 0  # said once
        finally:
            dh.kill_marked(env["DTRUN_TEST_MARK"])
