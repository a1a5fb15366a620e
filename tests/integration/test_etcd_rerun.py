"""A job's state in etcd has an owner and an end (docs/etcd.md, Clean-up),
against one real etcd member on 127.0.0.1 (tests/pyhelpers/etcd_member.py):

- a lone agent whose join times out drops the job's keys at once, and a
  rerun with the same --rdzv-id starts afresh;
- a lone agent SIGKILLed leaves nothing once the job's lease expires (one
  lease_ttl), and a rerun starts afresh;
- an agent killed and restarted in place while the other still runs rejoins
  the live job as a newcomer: the job's keys outlive the agent that created
  them, and the job finishes.
"""

import os
import signal
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import etcd_member  # noqa: E402

REASON = etcd_member.unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

TTL = 2


@pytest.fixture
def etcd(tmp_path):
    with etcd_member.LocalEtcd(tmp_path) as e:
        yield e


def agent_args(etcd, run_id, *program, join_timeout=60, nnodes="2", restarts=0):
    conf = (f"lease_ttl={TTL},join_timeout={join_timeout},last_call_timeout=1,"
            "keep_alive_interval=1,keep_alive_max_attempt=3,request_timeout=5")
    return [f"--nnodes={nnodes}", "--nproc-per-node=1", f"--max-restarts={restarts}",
            "--rdzv-backend=etcd-v3", f"--rdzv-endpoint={etcd.endpoint}",
            f"--rdzv-id={run_id}", f"--rdzv-conf={conf}", "--no-python",
            *(program or ["/bin/true"])]


def job_keys(etcd, run_id):
    return [k for k in etcd.keys("/dtrun/") if f"/{run_id}/" in k]


def run_two(etcd, run_id):
    env = dh.job_env()
    procs = [dh.start(agent_args(etcd, run_id), env) for _ in range(2)]
    try:
        return [(p.wait(timeout=60), p.stderr.read()) for p in procs]
    finally:
        for p in procs:
            p.kill()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def test_a_rerun_after_a_join_timeout_starts_afresh(etcd):
    run_id = uuid.uuid4().hex[:8]
    lone = dh.run(agent_args(etcd, run_id, join_timeout=2))
    assert lone.returncode != 0
    assert "did not gather 2 node(s)" in lone.stderr, lone.stderr
    # The job never started: its keys went with the agent that gave up.
    assert job_keys(etcd, run_id) == []
    for code, err in run_two(etcd, run_id):
        assert code == 0, err
        assert "is full" not in err, err
    assert job_keys(etcd, run_id) == []


def test_a_lone_agent_killed_leaves_nothing_after_one_lease_ttl(etcd):
    run_id = uuid.uuid4().hex[:8]
    env = dh.job_env()
    lone = dh.start(agent_args(etcd, run_id), env)
    with dh.cleaned_up(lone, env["DTRUN_TEST_MARK"]):
        etcd.wait_for_key(f"/dtrun/{run_id}/r/0/joined")
        lone.send_signal(signal.SIGKILL)
        lone.wait()
    assert job_keys(etcd, run_id) != []
    # The job's lease (its key lives on it) ends one TTL after its last renewal.
    assert etcd.wait_for_delete(f"/dtrun/{run_id}/lease", timeout=3 * TTL), job_keys(etcd, run_id)
    assert job_keys(etcd, run_id) == []
    for code, err in run_two(etcd, run_id):
        assert code == 0, err


def test_an_agent_restarted_in_place_rejoins_the_live_job_and_wipes_nothing(etcd):
    run_id = uuid.uuid4().hex[:8]
    env = dh.job_env()
    # Round 0's workers run until stopped; a restarted round's finish.
    program = ["/bin/sh", "-c", '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 120; exit 0']
    args = agent_args(etcd, run_id, *program, restarts=1)
    first = dh.start(args, env)  # grants the job's lease
    etcd.wait_for_key(f"/dtrun/{run_id}/lease")
    other = dh.start(args, env)
    procs = [first, other]
    try:
        etcd.wait_for_key(f"/dtrun/{run_id}/r/0/closed")
        first.send_signal(signal.SIGKILL)
        first.wait()
        # The same agent again, as a pod restarted in place would be.
        again = dh.start(args, env)
        procs.append(again)
        dh.wait_for_stderr(again, "is full (2 nodes); waiting for the next one")
        # Its creator is gone, the job's keys are not: the other agent renews them.
        assert f"/dtrun/{run_id}/r/0/closed" in job_keys(etcd, run_id)
        for p in (other, again):
            assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        for p in procs:
            p.kill()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
    assert job_keys(etcd, run_id) == []


def test_ctrl_c_on_one_agent_stops_both_and_a_rerun_starts_afresh(etcd):
    # docs/agent.md, "Signals on several nodes": the stop is in etcd only
    # until every node of the round has seen it.
    run_id = uuid.uuid4().hex[:8]
    env = dh.job_env()
    procs = [dh.start(agent_args(etcd, run_id, "/bin/sh", "-c", "exec sleep 1000"), env)
             for _ in range(2)]
    try:
        for p in procs:
            dh.wait_for_stderr(p, "starting 1 worker(s)")
        procs[1].send_signal(signal.SIGINT)
        assert [p.wait(timeout=60) for p in procs] == [130, 130]
        assert "by SIGINT (Ctrl-C there); stopping the workers" in procs[0].stderr.read()
    finally:
        for p in procs:
            p.kill()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
    assert job_keys(etcd, run_id) == []
    for code, err in run_two(etcd, run_id):
        assert code == 0, err
