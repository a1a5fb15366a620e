"""Signals to the agent: forwarded to every worker's process group, then
the two-phase stop; dtrun exits 128+n. A second Ctrl-C kills at once."""

import os
import signal
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402


def start(tmp_path, worker: str, *flags: str, nproc: int = 2):
    fifo = dh.Fifo(tmp_path)
    env = dh.job_env(FIFO=str(fifo.path))
    proc = dh.start(["--standalone", f"--nproc-per-node={nproc}", *flags, "--no-python",
                     "/bin/sh", "-c", worker], env)
    return proc, fifo, env["DTRUN_TEST_MARK"]


# Reports which signal reached it, then exits 0 (so the 128+n is the agent's).
TRAPPING = ('for s in TERM INT HUP QUIT USR1 USR2; do trap "echo got $s $RANK > $FIFO; exit 0" $s; '
            'done; echo ready > $FIFO; while :; do sleep 1000 & wait $!; done')


def test_each_handled_signal_is_forwarded_and_sets_the_exit_code(tmp_path):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        (tmp_path / sig.name).mkdir()
        proc, fifo, mark = start(tmp_path / sig.name, TRAPPING)
        with dh.cleaned_up(proc, mark):
            fifo.lines(2)
            proc.send_signal(sig)
            got = sorted(fifo.lines(2))
            short = sig.name[3:]
            assert got == [f"got {short} 0", f"got {short} 1"]
            assert proc.wait(timeout=30) == 128 + sig
            assert dh.gone_within(mark) == []


def test_usr1_is_forwarded_when_listed_and_does_not_stop_the_workers(tmp_path):
    # SIGUSR1/2 are notices (Slurm's preemption warning): forwarded only; the
    # workers decide. These exit 0 on it, so the job succeeds.
    proc, fifo, mark = start(tmp_path, TRAPPING, "--signals-to-handle=SIGTERM,SIGUSR1")
    with dh.cleaned_up(proc, mark):
        fifo.lines(2)
        proc.send_signal(signal.SIGUSR1)
        assert sorted(fifo.lines(2)) == ["got USR1 0", "got USR1 1"]
        assert proc.wait(timeout=30) == 0


# Ignores the polite signals: only SIGKILL stops it.
STUBBORN = 'trap "" TERM INT; echo ready > $FIFO; while :; do sleep 1000 & wait $!; done'


def test_grace_period_then_sigkill(tmp_path):
    proc, fifo, mark = start(tmp_path, STUBBORN, "--stop-timeout=0.5")
    with dh.cleaned_up(proc, mark):
        fifo.lines(2)
        proc.send_signal(signal.SIGTERM)
        dh.wait_for_stderr(proc, "received SIGTERM")
        dh.wait_for_stderr(proc, "sending SIGKILL")
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert dh.gone_within(mark) == []


def test_second_ctrl_c_kills_at_once(tmp_path):
    proc, fifo, mark = start(tmp_path, STUBBORN, "--stop-timeout=600")
    with dh.cleaned_up(proc, mark):
        fifo.lines(2)
        proc.send_signal(signal.SIGINT)
        dh.wait_for_stderr(proc, "received SIGINT")
        proc.send_signal(signal.SIGINT)
        # Exiting within 30 s of a 600 s grace is the proof of "at once".
        assert proc.wait(timeout=30) == 128 + signal.SIGINT
        assert dh.gone_within(mark) == []
