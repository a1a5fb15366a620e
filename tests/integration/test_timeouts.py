"""Tiny and zero rendezvous timeouts end a run cleanly: either the round
completes and the program runs, or dtrun exits with a one-line error (or a
usage error, where the launcher refuses the value); never a crash.

`--rdzv-conf=close_timeout=0` used to segfault in 7 of 10 runs: a store
operation's timeout, queued just as its reply was read, acted on whatever
operation came next, or on an empty queue.

The join tests' endpoint is 127.0.0.1:0: 127.0.0.1 names this machine, so
the node hosts the store itself, on a port the kernel picks. The close
timeout tests need a store in another process (the host's requests to its
own store never time out: they can be slow, not lost), so they start
`dtrun-store serve` on port 0, which prints the port it got, and give each
run its own rendezvous id. No fixed or probed port, so no race with other
tests. The refused-connection case needs a port
nobody listens on; it binds port 0, closes it and passes that port, and its
assertions hold even if another process takes the port meanwhile."""

import os
import socket
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

RUNS = 30

# Exit codes of a crash: SIGSEGV/SIGABRT/SIGBUS as a shell reports them, or
# as subprocess reports a signal death (negative).
CRASH_CODES = {128 + 11, 128 + 6, 128 + 7}


def run_node(conf: str, endpoint: str = "127.0.0.1:0", run_id: str = "z"):
    return dh.run(["--nnodes=1:2", f"--rdzv-id={run_id}", f"--rdzv-endpoint={endpoint}",
                   f"--rdzv-conf={conf}", "--no-python", "true"], timeout=120)


@pytest.fixture(scope="module")
def store_endpoint():
    """host:port of a dtrun-store in a process of its own, for this module."""
    store = subprocess.Popen([str(dh.BUILD_DIR / "launcher" / "dtrun-store"), "serve",
                              "--host", "127.0.0.1", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(store.stdout.readline())
        yield f"127.0.0.1:{port}"
    finally:
        store.kill()
        store.wait()


def run_node_on(endpoint: str, conf: str):
    """A node that is not the store's host, in a rendezvous of its own."""
    return run_node(f"{conf},is_host=0", endpoint, run_id=uuid.uuid4().hex)


def check_clean_end(r, failure_words: tuple[str, ...]) -> str:
    """Asserts the run ended cleanly; returns which way it ended."""
    context = f"rc={r.returncode} stderr={r.stderr!r}"
    assert r.returncode >= 0 and r.returncode not in CRASH_CODES, context
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, context
    if r.returncode == 0:
        return "completed"
    if r.returncode == 2:  # the launcher refuses the value: one line
        assert len(r.stderr.strip().splitlines()) == 1, context
        return "usage error"
    assert r.returncode == 1, context
    # The rendezvous failure is the last line, one line, saying what happened.
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("dtrun: rendezvous failed: "), context
    assert any(w in last for w in failure_words), context
    return "rendezvous failed"


@pytest.mark.parametrize("close_timeout", ["0", "0.001", "0.002"])
def test_tiny_close_timeouts_end_cleanly_every_time(store_endpoint, close_timeout):
    # last_call_timeout is short too, so a run whose requests beat the
    # timeout completes at once instead of waiting 30 s for a second node.
    conf = f"close_timeout={close_timeout},last_call_timeout=0.001"
    outcomes = [check_clean_end(run_node_on(store_endpoint, conf),
                                ("did not answer", "timed out", "closed"))
                for _ in range(RUNS)]
    print(close_timeout, {o: outcomes.count(o) for o in set(outcomes)})


def test_the_reported_command_never_crashes():
    # The command from the report, as given (close_timeout=0 only): a run
    # whose requests all beat the 0 ms timeout waits out the default 30 s
    # last call, so only a few runs.
    for _ in range(3):
        r = dh.run(["--nnodes=1:2", "--rdzv-id=z", "--rdzv-endpoint=127.0.0.1:0",
                    "--rdzv-conf=close_timeout=0", "--no-python", "true"], timeout=120)
        check_clean_end(r, ("did not answer", "timed out", "closed"))


@pytest.mark.parametrize("join_timeout", ["0", "0.001", "0.002"])
def test_tiny_join_timeouts_end_cleanly_every_time(join_timeout):
    conf = f"join_timeout={join_timeout},last_call_timeout=0.001"
    outcomes = [check_clean_end(run_node(conf), ("join timeout", "could not reach", "timed out",
                                                 "did not answer"))
                for _ in range(RUNS)]
    print(join_timeout, {o: outcomes.count(o) for o in set(outcomes)})


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("join_timeout", ["0", "0.001", "0.005"])
def test_refused_connections_with_tiny_join_timeouts_fail_clearly(join_timeout):
    # Not the host: connection attempts are refused and retried on the
    # client's retry timer until join_timeout.
    conf = f"is_host=0,join_timeout={join_timeout},last_call_timeout=0.001"
    for _ in range(RUNS):
        r = run_node(conf, f"127.0.0.1:{unused_port()}")
        outcome = check_clean_end(r, ("could not reach", "join timeout", "timed out",
                                      "did not answer"))
        if outcome == "rendezvous failed":
            assert "could not reach the store" in r.stderr, r.stderr
