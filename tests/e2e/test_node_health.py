"""Keeping bad nodes out of real multi-host training (docs/agent.md, "Node
health", "Quarantine"; docs/rendezvous.md, "Spare nodes"): network-namespace
hosts, each its own address and hostname, training real gloo DDP.

The health check is one command given to every node alike; it fails on a
host while a file named after it exists in the shared folder, as a real
check would fail on one sick machine."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import ddp_checks  # noqa: E402
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
from netns_jobs import env  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the multi-node health tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

EXAMPLE = dh.EXAMPLES / "ddp_gloo.py"
NPROC = 2
PORT = 29400
UNHEALTHY = 75
FAST_RDZV = "join_timeout=60,last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=3"


def sick_check(folder):
    # Fails on host hN while <folder>/sick-hN exists.
    return f'test ! -e {folder}/sick-$(hostname)'


def args(nnodes, folder, flags=(), script=()):
    return [str(dh.DTRUN), f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{PORT}",
            "--rdzv-id=job1", f"--rdzv-conf={FAST_RDZV}",
            f"--node-health-check={sick_check(folder)}", *flags,
            "--python", dh.PYTHON, str(EXAMPLE), "--checkpoint-dir", str(folder), *script]


def finish(p, timeout=240):
    stdout, stderr = p.communicate(timeout=timeout)
    return p.returncode, stderr


results = ddp_checks.check_trained


def test_a_node_whose_check_fails_is_never_ranked_and_the_job_trains_on_the_others(tmp_path):
    (tmp_path / "sick-h3").touch()
    with netns_hosts.Hosts(3) as hosts:
        e = env()
        procs = [hosts.start(i, args("2:3", tmp_path, script=["--epochs", "1"]), e) for i in (1, 2, 3)]
        code3, err3 = finish(procs[2])
        assert code3 == UNHEALTHY, err3
        assert (f"node health check failed: `{sick_check(tmp_path)}` exited with 1; this node "
                "does not join the job (exit 75)") in err3
        assert "round 0:" not in err3
        for p in procs[:2]:
            code, err = finish(p)
            assert code == 0, err
            assert "of 3" not in err, err
    for r in results(tmp_path, 2 * NPROC):
        assert r["host"] in ("h1", "h2")


def test_an_unhealthy_node_leaves_mid_training_and_a_spare_takes_its_group_rank(tmp_path):
    with netns_hosts.Hosts(3) as hosts:
        e = env()
        fifo = dh.Fifo(tmp_path)
        train = args("2", tmp_path, ["--node-health-check-interval=0.3", "--max-restarts=0"],
                     ["--resume", "--epochs", "6", "--step-sleep", "0.05",
                      "--progress", str(fifo.path)])
        # h1 (the endpoint, so group rank 0) and h2 (group rank 1) train.
        procs = [hosts.start(i, train, e) for i in (1, 2)]
        fifo.lines(1, timeout=120)  # epoch 0 is checkpointed
        # h3 arrives at a full job: a spare.
        procs.append(hosts.start(3, train, e))
        dh.wait_for_stderr(procs[2], "is full (2 nodes); waiting for the next one", timeout=60)
        (tmp_path / "sick-h2").touch()
        code2, err2 = finish(procs[1])
        assert code2 == UNHEALTHY, err2
        assert "stopping this node's workers and leaving the job" in err2
        for p in (procs[0], procs[2]):
            code, err = finish(p)
            assert code == 0, err
    rs = results(tmp_path, 2 * NPROC)
    # The survivor kept group rank 0 (global ranks 0, 1); the spare took the
    # leaver's group rank 1 (global ranks 2, 3); no restart was spent
    # (--max-restarts=0), and training resumed from the checkpoint.
    for r in rs:
        assert r["host"] == ("h1" if r["rank"] < NPROC else "h3"), rs
        assert r["start_epoch"] >= 1, rs


def test_quarantine_keeps_a_flapping_machine_out_through_its_cooldown(tmp_path):
    quarantine_file = tmp_path / "exclude"
    with netns_hosts.Hosts(3) as hosts:
        e = env()
        fifo = dh.Fifo(tmp_path)
        # Rank 0 holds the job after epoch 0: a two-node round until h3's
        # return ends it (the next round resumes past the hold), or, when
        # h3's cooldown ended before the others even formed round 0 (a
        # loaded machine), until the test releases it below. Either way the
        # job cannot finish without h3.
        hold = tmp_path / "hold"
        os.mkfifo(hold)
        train = args("2:3", tmp_path,
                     ["--node-health-check-interval=0.3", "--quarantine-after=1",
                      "--quarantine-cooldown=4", f"--quarantine-file={quarantine_file}"],
                     ["--resume", "--epochs", "4", "--step-sleep", "0.05",
                      "--progress", str(fifo.path), "--hold", str(hold)])
        (tmp_path / "sick-h3").touch()
        procs = [hosts.start(i, train, e) for i in (1, 2, 3)]
        dh.wait_for_stderr(procs[2], "quarantining this machine for 4 s", timeout=60)
        quarantined_at = time.monotonic()
        dh.wait_for_stderr(procs[2], f"--quarantine-file {quarantine_file}: 1 host(s) kept out")
        assert quarantine_file.read_text() == "h3\n"
        # Healthy again at once, the machine still stays out for its
        # cooldown (a later check may find it sick again and double it).
        (tmp_path / "sick-h3").unlink()
        dh.wait_for_stderr(procs[2], "of 3, starting", timeout=120)
        assert time.monotonic() - quarantined_at >= 4
        release = os.open(hold, os.O_RDWR | os.O_NONBLOCK)
        os.write(release, b"go\n")
        for p in procs:
            code, err = finish(p)
            assert code == 0, err
        os.close(release)
    rs = results(tmp_path, 3 * NPROC)
    assert {r["host"] for r in rs} == {"h1", "h2", "h3"}
