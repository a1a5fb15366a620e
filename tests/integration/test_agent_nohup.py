"""A signal ignored when dtrun starts stays ignored: `nohup dtrun ...` keeps
running through SIGHUP, and its workers inherit SIGHUP ignored (as under
`nohup python train.py`). torchrun replaces the ignored disposition with its
own handler and stops (pytorch issue 76894). Without nohup, SIGHUP is
forwarded and stops the job as before."""

import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

WORKER = dh.SOURCE_DIR / "tests" / "pyhelpers" / "nohup_worker.py"


def start(tmp_path, prefix: list[str], preexec, *flags: str):
    events = dh.Fifo(tmp_path)
    go = [dh.Fifo(tmp_path, f"go_{rank}") for rank in range(2)]
    env = dh.job_env()
    proc = subprocess.Popen(
        [*prefix, str(dh.DTRUN), *flags, "--standalone", "--nproc-per-node=2", "--no-python",
         sys.executable, str(WORKER), str(events.path), str(tmp_path)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True, preexec_fn=preexec)
    return proc, events, go, env["DTRUN_TEST_MARK"]


def ignore_hup():
    dh.default_signals()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def ready(events) -> dict[int, tuple[int, str]]:
    """rank -> (pid, SIGHUP disposition) from the workers' ready lines."""
    out = {}
    for line in events.lines(2):
        _, rank, pid, hup = line.split()
        out[int(rank)] = (int(pid), hup)
    return out


def test_nohup_job_runs_through_sighup_to_agent_and_workers(tmp_path):
    proc, events, go, mark = start(tmp_path, ["nohup"], dh.default_signals)
    with dh.cleaned_up(proc, mark):
        workers = ready(events)
        assert {rank: hup for rank, (_, hup) in workers.items()} == {0: "ignored", 1: "ignored"}
        # A hang-up reaches the whole foreground group: the agent and its
        # orphan guard; and, should anyone send it, each worker's group.
        os.killpg(proc.pid, signal.SIGHUP)
        for pid, _ in workers.values():
            os.killpg(pid, signal.SIGHUP)
        for fifo in go:
            fifo.write("go\n")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert sorted(out.splitlines()) == ["rank 0 finished", "rank 1 finished"]
        assert "SIGHUP" not in err
        assert dh.gone_within(mark) == []


def test_sighup_ignored_by_the_caller_is_ignored_without_nohup_too(tmp_path):
    # `trap '' HUP` in a shell script, or a Python parent: the same as nohup.
    proc, events, go, mark = start(tmp_path, [], ignore_hup, "-v")
    with dh.cleaned_up(proc, mark):
        workers = ready(events)
        assert sorted(hup for _, hup in workers.values()) == ["ignored", "ignored"]
        proc.send_signal(signal.SIGHUP)
        for fifo in go:
            fifo.write("go\n")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert sorted(out.splitlines()) == ["rank 0 finished", "rank 1 finished"]
        assert "SIGHUP is ignored (as dtrun was started): not handled or forwarded" in err
        assert "SIGTERM is ignored" not in err


def test_sighup_not_ignored_is_forwarded_and_stops_the_job(tmp_path):
    proc, events, go, mark = start(tmp_path, [], dh.default_signals)
    with dh.cleaned_up(proc, mark):
        workers = ready(events)
        assert sorted(hup for _, hup in workers.values()) == ["not-ignored", "not-ignored"]
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
        # Forwarded: the workers die of it (default action) before finishing.
        assert proc.returncode == 128 + signal.SIGHUP, err
        assert "received SIGHUP; forwarding it to the workers" in err
        assert out == ""
        assert dh.gone_within(mark) == []
