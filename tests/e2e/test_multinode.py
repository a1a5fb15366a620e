"""dtrun across real hosts: network namespaces joined by a bridge, each with
its own address and hostname, running real PyTorch DDP (gloo) workers.

Dynamic (c10d-style) and static rendezvous, a node killed mid-training, a
node added mid-training, a worker crash on one node restarting the others,
and an endpoint nobody hosts."""

import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import ddp_checks  # noqa: E402
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
from netns_jobs import env, finish, train_args  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the multi-node tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

NPROC = 2
PORT = 29400
FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"


def dynamic_args(nnodes, *extra):
    return [str(dh.DTRUN), f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{PORT}",
            "--rdzv-id=job1", f"--rdzv-conf={FAST_RDZV}", *extra]


check_trained = ddp_checks.check_trained


def train_on_two_hosts(args_for_host):
    """Runs dtrun on hosts 1 and 2 with args_for_host(i); both must exit 0."""
    with netns_hosts.Hosts(2) as hosts:
        e = env()
        procs = [hosts.start(i, args_for_host(i), e) for i in (1, 2)]
        for code, _, stderr in finish(procs):
            assert code == 0, stderr
            # The last node's goodbye reached the store's host (a lost one
            # costs the host close_timeout, and says so).
            assert "not every node confirmed the end" not in stderr, stderr


def test_dynamic_rendezvous_trains_across_two_hosts(tmp_path):
    train_on_two_hosts(lambda i: dynamic_args(2, *train_args(tmp_path, "--epochs", "2")))
    check_trained(tmp_path, 2 * NPROC)


def test_workers_can_host_their_own_store_as_with_torchrun(tmp_path):
    # worker_store=rank0: rank 0's worker hosts the TCPStore on a port its
    # agent reserved (TORCHELASTIC_USE_AGENT_STORE=False), torchrun 1.13's way.
    args = [a.replace(f"--rdzv-conf={FAST_RDZV}", f"--rdzv-conf={FAST_RDZV},worker_store=rank0")
            for a in dynamic_args(2, *train_args(tmp_path, "--epochs", "1"))]
    train_on_two_hosts(lambda i: args)
    check_trained(tmp_path, 2 * NPROC)


def test_static_rendezvous_trains_across_two_hosts(tmp_path):
    # Host 2 is node rank 0, so its workers must be global ranks 0..NPROC-1.
    train_on_two_hosts(lambda i: [
        str(dh.DTRUN), "--nnodes=2", f"--nproc-per-node={NPROC}", f"--node-rank={2 - i}",
        f"--master-addr={netns_hosts.Hosts.addr(2)}", "--master-port=29500",
        *train_args(tmp_path, "--epochs", "2")])
    rs = check_trained(tmp_path, 2 * NPROC)
    for r in rs:
        assert r["host"] == ("h2" if r["rank"] < NPROC else "h1"), rs


def test_worker_crash_on_one_node_restarts_every_node(tmp_path):
    with netns_hosts.Hosts(2) as hosts:
        e = env()
        # Global rank 3 lives on the second node of the rendezvous.
        extra = ["--max-restarts=1"]
        procs = [hosts.start(i, dynamic_args(2, *extra, *train_args(
            tmp_path, "--epochs", "2", "--crash-at-step=2", "--crash-rank=3")), e)
            for i in (1, 2)]
        outs = finish(procs)
        for code, _, stderr in outs:
            assert code == 0, stderr
    rs = check_trained(tmp_path, 2 * NPROC)
    # Every worker on both nodes ran again, under the same job-wide count.
    assert {r["restart_count"] for r in rs} == {1}


def test_max_restarts_is_counted_for_the_whole_job(tmp_path):
    with netns_hosts.Hosts(2) as hosts:
        e = env()
        procs = [hosts.start(i, dynamic_args(2, "--max-restarts=0", *train_args(
            tmp_path, "--epochs", "2", "--crash-at-step=2", "--crash-rank=3")), e)
            for i in (1, 2)]
        outs = finish(procs)
    codes = sorted(code for code, _, _ in outs)
    assert all(c != 0 for c in codes), outs
    assert 13 in codes  # the crashing worker's own code on its node


def test_node_killed_mid_training_survivors_finish_from_checkpoint(tmp_path):
    with netns_hosts.Hosts(3) as hosts:
        e = env()
        fifo = dh.Fifo(tmp_path)
        args = dynamic_args("2:3", "--max-restarts=3", *train_args(
            tmp_path, "--resume", "--epochs", "6", "--step-sleep", "0.05",
            "--progress", str(fifo.path)))
        procs = [hosts.start(i, args, e) for i in (1, 2, 3)]
        fifo.lines(1, timeout=120)  # epoch 0 is checkpointed
        killed_at = time.monotonic()
        os.kill(procs[2].pid, signal.SIGKILL)
        # The survivors' workers run again when their agents log round 1.
        for p in procs[:2]:
            dh.wait_for_stderr(p, "round 1: node", timeout=120)
        back_after = time.monotonic() - killed_at
        outs = finish(procs[:2])
        for code, _, stderr in outs:
            assert code == 0, stderr
        # Whichever noticed first (the lost node's last will, or a worker
        # whose peer vanished), the survivors met again in round 1 of 2 nodes;
        # later rounds (a restart) may follow, each of 2 nodes.
        for _, _, stderr in outs:
            assert "of 3" not in stderr.split("round 1:", 1)[-1], stderr
    rs = check_trained(tmp_path, 2 * NPROC)
    assert all(r["start_epoch"] >= 1 for r in rs)
    print(f"node loss: the survivors' workers ran again {back_after:.3f}s after the kill")


def test_node_added_mid_training_joins_the_group(tmp_path):
    with netns_hosts.Hosts(3) as hosts:
        e = env()
        fifo = dh.Fifo(tmp_path)
        # Rank 0 holds the first attempt after epoch 0 (the others wait in
        # its barrier) until the round ends, which only the new node's
        # arrival does: the two cannot finish before it comes, however
        # slowly it starts (under ASan on a loaded machine they did).
        hold = tmp_path / "hold"
        os.mkfifo(hold)
        args = dynamic_args("2:3", *train_args(
            tmp_path, "--resume", "--epochs", "6", "--step-sleep", "0.05",
            "--progress", str(fifo.path), "--hold", str(hold)))
        procs = [hosts.start(i, args, e) for i in (1, 2)]
        fifo.lines(1, timeout=120)  # two nodes are training
        procs.append(hosts.start(3, args, e))
        for code, _, stderr in finish(procs):
            assert code == 0, stderr
    check_trained(tmp_path, 3 * NPROC)


def test_unreachable_endpoint_fails_cleanly(tmp_path):
    with netns_hosts.Hosts(2) as hosts:
        e = env()
        # Nobody runs on host 1, so nobody hosts the store. join_timeout=2
        # must end it: finish() fails the test on a hang (its bound is far
        # above 2 s so that a loaded machine cannot fail it, and far below
        # the default join timeout of 600 s that a dtrun ignoring the flag
        # would wait).
        p = hosts.start(2, [str(dh.DTRUN), "--nnodes=2", "--nproc-per-node=1",
                            f"--rdzv-endpoint={hosts.addr(1)}:{PORT}",
                            "--rdzv-conf=join_timeout=2", "--no-python", "/bin/true"], e)
        (code, _, stderr), = finish([p], timeout=120)
    assert code != 0
    assert "could not reach the store" in stderr
    assert dh.gone_within(e["DTRUN_TEST_MARK"]) == []
