"""--rdzv-backend=etcd-v3 against a real 3-member etcd cluster (Debian's
etcd-server), one member per network-namespace host, with real PyTorch DDP
(gloo) workers: no node is special.

- the etcd leader killed while a rendezvous waits for its second node;
- the leader killed during training, then a worker killed: the restart round
  goes through the two surviving members and the job finishes;
- the host running group rank 0 lost (its agent and its etcd member): the
  survivors meet again, a new rank 0 hosts the workers' store, training
  resumes from the checkpoint;
- an agent stopped past its lease's TTL: counted gone, then back on a new lease;
- quorum lost: one clear error on every node, workers stopped, nothing left;
- TLS: members on https with a test CA; a wrong CA is one clear error.
"""

import json
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import ddp_checks  # noqa: E402
import dtrun_helpers as dh  # noqa: E402
import etcd_cluster  # noqa: E402
import netns_hosts  # noqa: E402
from netns_jobs import env, finish, train_args  # noqa: E402

REASON = netns_hosts.unavailable_reason() or etcd_cluster.unavailable_reason()
if REASON:
    print(f"skipping the etcd rendezvous tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

NPROC = 2
# Short timers so that losses are seen in seconds; lease_ttl is etcd's
# minimum that is safe with its 1 s election timeout.
FAST = ("join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3,"
        "lease_ttl=3,request_timeout=5")


def dtrun_args(etcd, nnodes, run_id, *extra, conf=FAST):
    return [str(dh.DTRUN), f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}",
            "--rdzv-backend=etcd-v3", f"--rdzv-endpoint={etcd.endpoints}",
            f"--rdzv-id={run_id}", f"--rdzv-conf={conf}", *extra]


check_trained = ddp_checks.check_trained


def worker_pids(mark):
    """The training workers (not the agents) of the job marked `mark`."""
    pids = []
    for pid in dh.marked_pids(mark):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        # The agent's own command line names the script too: python only.
        if b"python" in os.path.basename(cmdline[0]) and any(
                part.endswith(b"ddp_gloo.py") for part in cmdline):
            pids.append(pid)
    return pids


def test_leader_lost_during_a_rendezvous_the_job_still_trains(tmp_path):
    with netns_hosts.Hosts(3) as hosts, etcd_cluster.EtcdCluster(hosts, tmp_path) as etcd:
        e = env()
        args = dtrun_args(etcd, 2, "leader-rdzv", *train_args(tmp_path, "--epochs", "2"))
        first = hosts.start(1, args, e)
        # Node 1 has joined round 0 and waits for a second node.
        etcd.wait_for_key("/dtrun/leader-rdzv/r/0/node/1")
        leader = etcd.leader()
        etcd.kill(leader)
        second = hosts.start(2, args, e)
        for code, _, stderr in finish([first, second]):
            assert code == 0, stderr
        check_trained(tmp_path, 2 * NPROC)
        # A finished job leaves nothing behind in etcd: a new run with the same
        # id starts afresh.
        assert etcd.keys("/dtrun/leader-rdzv/") == []


def test_leader_lost_during_training_then_a_worker_failure_restarts_through_survivors(tmp_path):
    with netns_hosts.Hosts(3) as hosts, etcd_cluster.EtcdCluster(hosts, tmp_path) as etcd:
        e = env()
        fifo = dh.Fifo(tmp_path)
        args = dtrun_args(etcd, 2, "leader-train", "--max-restarts=1", *train_args(
            tmp_path, "--resume", "--epochs", "6", "--step-sleep", "0.05",
            "--progress", str(fifo.path)))
        procs = [hosts.start(i, args, e) for i in (1, 2)]
        fifo.lines(1, timeout=120)  # epoch 0 is checkpointed: training runs
        etcd.kill(etcd.leader())
        victim = worker_pids(e["DTRUN_TEST_MARK"])[0]
        os.kill(victim, signal.SIGKILL)
        outs = finish(procs)
        for code, _, _ in outs:
            assert code == 0, [stderr for _, _, stderr in outs]
        # The failure cost one restart: round 1 ran with both nodes.
        for _, _, stderr in outs:
            assert "round 1: node" in stderr, stderr
        assert len(etcd.alive()) == 2
    rs = check_trained(tmp_path, 2 * NPROC)
    assert all(r["restart_count"] == 1 for r in rs)


def test_losing_the_host_of_group_rank_0_is_an_ordinary_node_loss(tmp_path):
    with netns_hosts.Hosts(3) as hosts, etcd_cluster.EtcdCluster(hosts, tmp_path) as etcd:
        e = env()
        fifo = dh.Fifo(tmp_path)
        args = dtrun_args(etcd, "2:3", "rank0-lost", "--max-restarts=3", *train_args(
            tmp_path, "--resume", "--epochs", "6", "--step-sleep", "0.05",
            "--progress", str(fifo.path)))
        procs = {i: hosts.start(i, args, e) for i in (1, 2, 3)}
        fifo.lines(1, timeout=120)
        # Which host runs group rank 0 (and so the workers' store)?
        rank0 = next(i for i, p in procs.items()
                     if "node 0 of 3" in dh.wait_for_stderr(p, "round 0: node", timeout=30))
        # The whole host goes: its agent (its workers follow) and its etcd member.
        os.kill(procs[rank0].pid, signal.SIGKILL)
        etcd.kill(rank0)
        survivors = [p for i, p in procs.items() if i != rank0]
        outs = finish(survivors)
        for code, _, _ in outs:
            assert code == 0, [stderr for _, _, stderr in outs]
        # One of the survivors became group rank 0 and hosted the new store.
        assert sum("hosts the workers' store" in stderr.split("round 1:", 1)[-1]
                   for _, _, stderr in outs) >= 1, outs
    rs = check_trained(tmp_path, 2 * NPROC)
    assert all(r["start_epoch"] >= 1 for r in rs)
    assert all(r["host"] != f"h{rank0}" for r in rs)


def test_an_agent_whose_own_lease_expired_takes_a_new_one_and_rejoins(tmp_path):
    """An agent stopped past its lease's TTL (a suspended VM, a long stall)
    is rightly counted gone by the others; once it runs again it takes a
    new lease and rejoins, spending no restart (--max-restarts=0). Which of
    its paths it takes (its lease lost while its round ran, or while it
    joined the next) depends on which it learns first; the second is
    pinned by dynamic_rendezvous_session_test.cpp."""
    with netns_hosts.Hosts(3) as hosts, etcd_cluster.EtcdCluster(hosts, tmp_path) as etcd:
        e = env()
        fifo = dh.Fifo(tmp_path)
        args = dtrun_args(etcd, 2, "own-lease", "--max-restarts=0", *train_args(
            tmp_path, "--resume", "--epochs", "8", "--step-sleep", "0.05",
            "--progress", str(fifo.path)))
        first = hosts.start(1, args, e)
        second = hosts.start(2, args, e)
        fifo.lines(1, timeout=120)  # epoch 0 is checkpointed: training runs
        os.kill(second.pid, signal.SIGSTOP)
        try:
            # Host 2's lease expires (TTL 3 s) and takes its will with it
            # (a will withdrawn is emptied, never deleted).
            etcd.wait_for_delete("/dtrun/will/own-lease/0/")
        finally:
            os.kill(second.pid, signal.SIGCONT)
        outs = finish([first, second])
        for code, _, stderr in outs:
            assert code == 0, [err for _, _, err in outs]
        stderr = outs[1][2]
        # It learnt that its lease was gone, and rejoined on a new one.
        assert "etcd let this agent's lease expire" in stderr, stderr
        assert "round 1: node" in stderr, stderr
    # Both exited 0 under --max-restarts=0: no restart was spent.
    # (restart_count is the round in dtrun: 1 here; docs/compatibility.md.)
    check_trained(tmp_path, 2 * NPROC)


def test_quorum_lost_stops_the_job_with_a_clear_error(tmp_path):
    with netns_hosts.Hosts(3) as hosts, etcd_cluster.EtcdCluster(hosts, tmp_path) as etcd:
        e = env()
        fifo = dh.Fifo(tmp_path)
        conf = FAST.replace("join_timeout=60", "join_timeout=10")
        args = dtrun_args(etcd, 2, "quorum", *train_args(
            tmp_path, "--epochs", "1000", "--step-sleep", "0.05", "--progress", str(fifo.path)),
            conf=conf)
        procs = [hosts.start(i, args, e) for i in (1, 2)]
        fifo.lines(1, timeout=120)
        lost_at = time.monotonic()
        etcd.kill(2)
        etcd.kill(3)
        outs = finish(procs, timeout=120)
        stopped_after = time.monotonic() - lost_at
        # The agent that learns of the lost quorum first stops its workers;
        # the other node's workers may then fail on the broken collective
        # before their own agent learns it (a race of the lease timers, not
        # a defect: a fresh-clone run saw it once). Each node ends one of
        # two ways, both with a clear reason, and the first to learn always
        # ends the first way.
        learnt = 0
        for code, _, stderr in outs:
            assert code != 0, stderr
            assert "lost its quorum or cannot be reached" in stderr, stderr
            last = stderr.strip().splitlines()[-1]
            if "could not reach the rendezvous to report the failure; not restarting" in stderr:
                # Its workers failed first: the failure could not be counted.
                assert "exited with code" in stderr, stderr
                assert ("(run quorum, round 0; the failure could not be reported to the "
                        "rendezvous, so no restart could be counted)") in stderr, stderr
                assert last == "dtrun: " + "=" * 72, stderr
                continue
            # First why the round ended, then why no new one could start.
            assert last.startswith("dtrun: rendezvous failed: cannot get a lease from etcd"), stderr
            assert "no quorum" in last, stderr
            learnt += 1
        assert learnt >= 1, outs
        assert dh.gone_within(e["DTRUN_TEST_MARK"]) == []
    print(f"quorum lost: every agent stopped its workers and exited {stopped_after:.1f}s later")


def test_tls_members_with_the_right_ca_and_a_clear_error_with_the_wrong_one(tmp_path):
    with netns_hosts.Hosts(3) as hosts, \
            etcd_cluster.EtcdCluster(hosts, tmp_path, members=(1, 2), tls=True) as etcd:
        e = env()
        dump = [str(dh.PYTHON), str(dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py")]
        out = tmp_path / "env"
        out.mkdir()
        args = dtrun_args(etcd, 2, "tls",
                          conf=f"{FAST},cacert={etcd.ca}")
        args += ["--no-python", *dump, str(out)]
        procs = [hosts.start(i, args, e) for i in (1, 2)]
        for code, _, stderr in finish(procs):
            assert code == 0, stderr
        ranks = sorted(json.loads(f.read_text())["RANK"] for f in out.glob("*.json"))
        assert ranks == ["0", "1", "2", "3"]

        # The system's trust store does not know the test CA.
        wrong = hosts.start(3, dtrun_args(etcd, 1, "tls-wrong-ca", conf="join_timeout=3,request_timeout=2")
                            + ["--no-python", "/bin/true"], e)
        (code, _, stderr), = finish([wrong])
        assert code != 0
        assert "TLS handshake" in stderr and "certificate verify failed" in stderr, stderr
