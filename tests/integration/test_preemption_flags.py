"""--checkpoint-signal and --preempt-notice on one node (docs/agent.md,
"Preemption"): the flags' checks, the dry-run plan, and SIGTERM or the
notice reaching real workers. Several nodes with real DDP:
tests/e2e/test_preemption.py."""

import json
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

PREEMPTED = 76

# Each worker says it is ready on the fifo, then waits for SIGUSR1 (a
# self-pipe, no polling), records it and exits 0, as a worker that saves
# on the checkpoint signal does.
WORKER = r"""
import os, select, signal, sys
out, fifo = sys.argv[1], sys.argv[2]
r, w = os.pipe()
os.set_blocking(w, False)
# The C handler writes to it whichever thread the signal lands on.
signal.set_wakeup_fd(w)
def on_usr1(signum, frame):
    with open(os.path.join(out, "usr1-rank" + os.environ["RANK"]), "a") as f:
        f.write("SIGUSR1\n")
signal.signal(signal.SIGUSR1, on_usr1)
with open(fifo, "w") as f:
    f.write("ready\n")
select.select([r], [], [], 120)
sys.exit(0)
"""


@pytest.mark.parametrize("flags, message", [
    (["--checkpoint-signal=SIGFOO"],
     "--checkpoint-signal: 'SIGFOO' is not a signal; name one like SIGUSR1"),
    (["--checkpoint-signal=KILL"],
     "--checkpoint-signal: SIGKILL cannot be caught or means something else; name a signal "
     "like SIGUSR1"),
    (["--checkpoint-signal=SIGTERM"],
     "--checkpoint-signal: SIGTERM already stops the workers; name a signal of its own, like "
     "SIGUSR1"),
    (["--preempt-notice=SIGUSR1"],
     "--preempt-notice needs --checkpoint-signal, the signal the workers get "
     "(e.g. --preempt-notice=SIGUSR1 --checkpoint-signal=SIGUSR1)"),
    (["--checkpoint-signal=USR1", "--preempt-notice=STOP"],
     "--preempt-notice: SIGSTOP cannot be caught or means something else; name a signal like "
     "SIGUSR1"),
])
def test_a_signal_that_cannot_serve_is_one_line_and_exit_2(flags, message):
    r = dh.run(["--standalone", *flags, "--no-python", "/bin/true"])
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"dtrun: error: {message}\n"


def test_the_plan_shows_both_signals_from_flags_or_pet_variables():
    r = dh.run(["--standalone", "--dry-run", "--checkpoint-signal=usr1", "--preempt-notice=12",
                "--no-python", "/bin/true"])
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["checkpoint_signal"] == "SIGUSR1"
    assert plan["preempt_notice"] == "SIGUSR2"
    assert "SIGUSR2" in plan["signals_to_handle"]  # the agent catches its notice
    env = dh.job_env(PET_CHECKPOINT_SIGNAL="SIGUSR2")
    plan = json.loads(dh.run(["--standalone", "--dry-run", "--no-python", "/bin/true"],
                             env=env).stdout)
    assert plan["checkpoint_signal"] == "SIGUSR2" and plan["preempt_notice"] is None
    plan = json.loads(dh.run(["--standalone", "--dry-run", "--no-python", "/bin/true"]).stdout)
    assert plan["checkpoint_signal"] is None


def start(tmp_path, fifo, flags):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return dh.start(["--standalone", "--nproc-per-node=2", "--stop-timeout=60",
                     f"--event-log={tmp_path / 'events.jsonl'}", *flags,
                     "--python", dh.PYTHON, str(script), str(tmp_path), str(fifo.path)],
                    dh.job_env())


def signals_received(tmp_path):
    return [(tmp_path / f"usr1-rank{r}").read_text() for r in range(2)]


def test_sigterm_sends_the_checkpoint_signal_and_ends_preempted(tmp_path):
    fifo = dh.Fifo(tmp_path)
    p = start(tmp_path, fifo, ["--checkpoint-signal=SIGUSR1"])
    fifo.lines(2, timeout=60)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == PREEMPTED, err
    assert signals_received(tmp_path) == ["SIGUSR1\n"] * 2
    assert f"left the job: preempted (exit {PREEMPTED}: requeue)" in err
    events = dh.read_json_lines(tmp_path / "events.jsonl")
    asked = [e for e in events if e["event"] == "checkpoint_requested"]
    assert len(asked) == 1
    assert asked[0]["by"] == "this node: was preempted (SIGTERM)"
    assert asked[0]["signal"] == "SIGUSR1"
    left = [e for e in events if e["event"] == "node_left"]
    assert [e["reason"] for e in left] == ["preempted"]
    # Saving and exiting 0 after the signal is no failure.
    assert not [e for e in events if e["event"] == "worker_failed"]


def test_the_notice_asks_once_and_workers_that_then_exit_0_end_preempted(tmp_path):
    fifo = dh.Fifo(tmp_path)
    p = start(tmp_path, fifo, ["--checkpoint-signal=SIGUSR1", "--preempt-notice=SIGUSR1"])
    fifo.lines(2, timeout=60)
    p.send_signal(signal.SIGUSR1)
    _, err = p.communicate(timeout=60)
    assert p.returncode == PREEMPTED, err
    assert signals_received(tmp_path) == ["SIGUSR1\n"] * 2
    assert "received SIGUSR1, the preemption notice" in err
    assert "the job was preempted (exit 76: requeue it to resume)" in err
