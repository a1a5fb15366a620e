"""A job-wide checkpoint before a node goes away (docs/agent.md,
"Preemption"): network-namespace hosts, each its own address and hostname,
training real gloo DDP with the documented pattern
(tests/pyhelpers/preempt_train.py): the checkpoint signal sets a flag, the
ranks all-reduce it at the next step boundary, every rank saves that step.

h1 hosts the c10d store; the tests never stop it."""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import etcd_cluster  # noqa: E402
import netns_hosts  # noqa: E402
from netns_jobs import env  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the preemption tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

TRAIN = dh.SOURCE_DIR / "tests" / "pyhelpers" / "preempt_train.py"
NPROC = 2
PORT = 29400
PREEMPTED = 76
FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"
C10D = ["--rdzv-backend=c10d", f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{PORT}",
        f"--rdzv-conf={FAST_RDZV}"]


def args(nnodes, out, progress, flags=(), rdzv=C10D):
    return [str(dh.DTRUN), f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}", *rdzv,
            "--rdzv-id=job1", "--max-restarts=0",
            "--checkpoint-signal=SIGUSR1", "--stop-timeout=60", *flags,
            "--python", dh.PYTHON, str(TRAIN), "--out", str(out), "--progress", str(progress)]


def finish(p, timeout=240):
    _, stderr = p.communicate(timeout=timeout)
    return p.returncode, stderr


def signals_of_round(out, rnd, world):
    """Each rank's checkpoint signals in round `rnd`, as it wrote them."""
    got = {}
    for rank in range(world):
        f = out / f"signals-r{rnd}-rank{rank}"
        got[rank] = f.read_text().splitlines() if f.exists() else []
    return got


def saved_steps(out):
    """{step: [ranks]} of the checkpoint files."""
    steps = {}
    for f in (out / "ckpt").glob("step*-rank*.pt"):
        step, rank = f.stem[4:].split("-rank")
        steps.setdefault(int(step), []).append(int(rank))
    return steps


def test_sigterm_to_one_node_checkpoints_every_worker_and_the_others_resume_without_it(tmp_path):
    with netns_hosts.Hosts(3) as hosts:
        preempt_one_of_three(hosts, tmp_path, C10D)


ETCD_REASON = etcd_cluster.unavailable_reason()


@pytest.mark.skipif(ETCD_REASON is not None, reason=ETCD_REASON or "")
def test_the_same_through_etcd(tmp_path):
    conf = FAST_RDZV + ",lease_ttl=3,request_timeout=5"
    with netns_hosts.Hosts(3) as hosts, etcd_cluster.EtcdCluster(hosts, tmp_path) as etcd:
        preempt_one_of_three(hosts, tmp_path, ["--rdzv-backend=etcd-v3",
                                               f"--rdzv-endpoint={etcd.endpoints}",
                                               f"--rdzv-conf={conf}"])


def preempt_one_of_three(hosts, tmp_path, rdzv):
    """SIGTERM to h2 (not the c10d store's host) of three training nodes."""
    out = tmp_path / "out"
    out.mkdir()
    e = env()
    fifo = dh.Fifo(out)
    train = args("2:3", out, fifo.path, rdzv=rdzv)
    procs = [hosts.start(i, train, e) for i in (1, 2, 3)]
    for p in procs:
        dh.wait_for_stderr(p, "of 3, starting", timeout=120)
    fifo.lines(1, timeout=120)  # every rank trains: past the step the worker reported
    procs[1].send_signal(signal.SIGTERM)  # h2: not the store's host
    code2, err2 = finish(procs[1])
    assert code2 == PREEMPTED, err2
    assert "received SIGTERM: this node is preempted" in err2, err2
    assert "sending SIGUSR1 to the workers" in err2, err2
    assert f"left the job: preempted (exit {PREEMPTED}: requeue)" in err2, err2
    # The others spend no restart (--max-restarts=0): a new round of
    # two nodes resumes from the checkpoint and finishes.
    for p in (procs[0], procs[2]):
        code, err = finish(p)
        assert code == 0, err
        assert "left the job: preempted" in err, err
        assert "a checkpoint was asked for by node" in err, err
        assert "of 2, starting" in err, err
    # Every worker of every node got the checkpoint signal, once.
    got = signals_of_round(out, 0, 3 * NPROC)
    assert all(len(lines) == 1 for lines in got.values()), got
    # Every rank saved the same step: one step, on all six ranks.
    steps = saved_steps(out)
    assert len(steps) == 1, steps
    (step, ranks), = steps.items()
    assert sorted(ranks) == list(range(3 * NPROC)), steps
    # The resumed round (two nodes) started from that step on every rank,
    # with identical replicas.
    results = [dh.read_json_lines(out / f"result-rank{r}.json")[0]
               for r in range(2 * NPROC)]
    for r in results:
        assert r["world_size"] == 2 * NPROC, results
        assert r["start_step"] == step, results
        assert r["round"] >= 1, results
    assert len({r["param_checksum"] for r in results}) == 1, results


def test_a_notice_to_every_node_at_once_is_one_checkpoint_signal_per_worker(tmp_path):
    with netns_hosts.Hosts(2) as hosts:
        e = env()
        fifo = dh.Fifo(tmp_path)
        train = args("2", tmp_path, fifo.path, ["--preempt-notice=SIGUSR1"])
        procs = [hosts.start(i, train, e) for i in (1, 2)]
        for p in procs:
            dh.wait_for_stderr(p, "of 2, starting", timeout=120)
        fifo.lines(1, timeout=120)
        # As Slurm's --signal=USR1@300 does: every step's processes at once.
        for p in procs:
            p.send_signal(signal.SIGUSR1)
        for p in procs:
            code, err = finish(p)
            # The workers saved and exited 0 because of the notice: every
            # agent says preempted (requeue), not done.
            assert code == PREEMPTED, err
            assert "received SIGUSR1, the preemption notice" in err, err
            assert err.count("sending SIGUSR1 to the workers") == 1, err
    got = signals_of_round(tmp_path, 0, 2 * NPROC)
    assert all(len(lines) == 1 for lines in got.values()), got
    steps = saved_steps(tmp_path)
    assert len(steps) == 1 and sorted(next(iter(steps.values()))) == list(range(2 * NPROC)), steps
