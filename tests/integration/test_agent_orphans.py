"""No process of the job survives it: after a worker crash, SIGTERM, SIGINT
or SIGKILL to the agent, not the workers and not the grandchildren they
spawned (including ones that ignore SIGTERM, and, except when the agent is
SIGKILLed, ones that left the worker's process group with setsid).

Every process of a job carries DTRUN_TEST_MARK=<uuid> in its environment;
the test searches /proc for it."""

import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

NPROC = 3

# Each worker starts a grandchild that ignores SIGTERM (it only dies with
# its group's SIGKILL) and, when ESCAPE=1, one in a session of its own; it
# reports "ready" and waits on a "go" FIFO; rank 1 then exits 3.
WORKER = ('sh -c \'trap "" TERM INT; echo grandchild > $FIFO; exec sleep 1000\' & '
          '[ "$ESCAPE" = 1 ] && setsid sh -c \'echo escapee > $FIFO; exec sleep 1000\' & '
          'echo ready > $FIFO; '
          'read go < $GO; [ "$RANK" = 1 ] && exit 3; '
          'while :; do sleep 1000 & wait $!; done')


def launch(tmp_path, escape: bool):
    fifo = dh.Fifo(tmp_path)
    go = dh.Fifo(tmp_path, "go")
    env = dh.job_env(FIFO=str(fifo.path), GO=str(go.path), ESCAPE="1" if escape else "0")
    proc = dh.start(["--standalone", f"--nproc-per-node={NPROC}", "--stop-timeout=5",
                     "--no-python", "/bin/sh", "-c", WORKER], env)
    mark = env["DTRUN_TEST_MARK"]
    # Every worker and every grandchild has said it is there.
    lines = fifo.lines(NPROC * (3 if escape else 2))
    assert lines.count("grandchild") == NPROC
    assert lines.count("escapee") == (NPROC if escape else 0)
    return proc, go, mark


@pytest.mark.parametrize("escape", [False, True])
def test_worker_crash_leaves_nothing(tmp_path, escape):
    proc, go, mark = launch(tmp_path, escape)
    with dh.cleaned_up(proc, mark):
        go.write("go\n" * NPROC)
        assert proc.wait(timeout=30) == 3
        assert dh.gone_within(mark) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("escape", [False, True])
def test_signal_to_agent_leaves_nothing(tmp_path, sig, escape):
    proc, _, mark = launch(tmp_path, escape)
    with dh.cleaned_up(proc, mark):
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 128 + sig
        assert dh.gone_within(mark) == []


def test_sigkill_to_agent_leaves_nothing(tmp_path):
    # Workers die of their parent-death signal; the guardian kills their
    # process groups (the grandchildren). Escapees from the group are out of
    # reach once the agent is gone (see docs/agent.md).
    proc, _, mark = launch(tmp_path, escape=False)
    try:
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert dh.gone_within(mark) == []
    finally:
        dh.kill_marked(mark)
