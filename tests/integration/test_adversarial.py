"""Adversarial pass (issue 12). The store: requests whose handling was
quadratic in what one connection sent, so that one client could stall the
whole store (and an agent hosting it) for minutes with a few megabytes.
The launcher: careless flags that gave a wrong or unclear error.

Each test runs the attack against a real `dtrun-store serve`, then checks
that the attacker got its answers and that a good client still gets
correct answers. The socket timeouts are liveness bounds (a stalled event
loop never answers in time), far above what the work costs when linear.
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import store_helpers as sh  # noqa: E402
from store_helpers import V1, V2, V2_HANDSHAKE, string, u8, u32, u64  # noqa: E402

N = 100_000
LIVENESS_S = 60


# Every attack also against a threaded server (sh.SERVE_VARIANTS).
@pytest.fixture(params=sh.SERVE_VARIANTS, ids=sh.SERVE_VARIANT_IDS)
def server(request):
    srv = sh.StoreServer(*request.param)
    yield srv
    assert srv.stop() == 0


def good_client_works(server: sh.StoreServer) -> None:
    assert server.alive(), "the server died"
    r = sh.cli(server.endpoint, "set", "good", "fine", timeout_s=LIVENESS_S)
    assert r.returncode == 0, r
    r = sh.cli(server.endpoint, "get", "good", timeout_s=LIVENESS_S)
    assert (r.returncode, r.stdout) == (0, b"fine\n"), r


def ping(conn: sh.RawConnection, nonce: int) -> None:
    """A 2.x round trip: every earlier request of `conn` has been handled."""
    conn.send(u8(V2["PING"]) + u32(nonce))
    assert conn.recv_u32() == nonce


def test_one_multi_set_waking_many_waits_of_one_connection(server):
    # The MULTI_SET arrives in many reads; each read used to re-parse it
    # from its start, and each wake-up scanned the connection's waits.
    with sh.RawConnection(server.port, timeout_s=LIVENESS_S) as c:
        c.send(V2_HANDSHAKE + b"".join(u8(V2["WAIT"]) + u64(1) + string(f"k{i}")
                                       for i in range(N)))
        ping(c, 1)
        c.send(u8(V2["MULTI_SET"]) + u64(N) +
               b"".join(string(f"k{i}") + string("v") for i in range(N)))
        assert c.recv_exact(N) == b"\x00" * N  # one STOP_WAITING per wait
        ping(c, 2)
    r = sh.cli(server.endpoint, "get", f"k{N - 1}", raw_keys=True, timeout_s=LIVENESS_S)
    assert (r.returncode, r.stdout) == (0, b"v\n"), r
    good_client_works(server)


def test_closing_a_connection_with_many_watches(server):
    with sh.RawConnection(server.port, timeout_s=LIVENESS_S) as c:
        c.send((u8(V1["WATCH_KEY"]) + string("k")) * N)
        assert c.recv_exact(N) == bytes([3]) * N  # WATCH_CALLBACK_REGISTERED
    good_client_works(server)
    # The watches are gone: a write to the key reaches no closed session.
    r = sh.cli(server.endpoint, "set", "k", "after", raw_keys=True, timeout_s=LIVENESS_S)
    assert r.returncode == 0, r
    good_client_works(server)


def test_closing_a_connection_with_many_waits_on_one_key(server):
    with sh.RawConnection(server.port, timeout_s=LIVENESS_S) as c:
        c.send(V2_HANDSHAKE + (u8(V2["WAIT"]) + u64(1) + string("k")) * N)
        ping(c, 1)
    # A waiter that stays must still be woken by the write.
    waiter = sh.cli_popen(server.endpoint, "--raw-keys", "wait", "k", timeout_s=LIVENESS_S)
    with sh.RawConnection(server.port, timeout_s=LIVENESS_S) as c2:
        c2.send(V2_HANDSHAKE)
        ping(c2, 3)
    r = sh.cli(server.endpoint, "set", "k", "v", raw_keys=True, timeout_s=LIVENESS_S)
    assert r.returncode == 0, r
    out, err = waiter.communicate(timeout=LIVENESS_S)
    assert waiter.returncode == 0, (out, err)
    good_client_works(server)


# --- careless flags --------------------------------------------------------

def test_a_repeated_flag_takes_the_last_value_like_torchrun():
    r = dh.run(["--standalone", "--nproc-per-node=1", "--nproc-per-node", "2", "--dry-run",
                "/bin/true"])
    assert r.returncode == 0, r.stderr
    assert '"nproc_per_node": 2' in r.stdout, r.stdout


def test_a_log_dir_that_is_a_file_is_a_one_line_error_naming_the_flag(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    r = dh.run(["--standalone", f"--log-dir={not_a_dir}", "/bin/true"])
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert lines == [f"dtrun: error: --log-dir: cannot create the folder {not_a_dir}: "
                     "Not a directory; give a folder you can write to"], r.stderr


def test_an_event_log_fifo_with_no_reader_fails_at_once_saying_why(tmp_path):
    fifo = tmp_path / "events"
    os.mkfifo(fifo)
    r = dh.run(["--standalone", f"--event-log={fifo}", "/bin/true"])
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        f"dtrun: error: cannot open the event log {fifo} (--event-log): it is a FIFO with no "
        "reader; start the reader first"], r.stderr


# --- two nodes on one machine ----------------------------------------------

def test_two_nodes_on_loopback_without_is_host_share_one_store(tmp_path):
    # Both nodes match the endpoint 127.0.0.1, so both decide to host; the
    # second used to fail with "the port is in use". torchrun joins as a
    # client then, and so does dtrun.
    script = tmp_path / "w.py"
    script.write_text("import os\nprint('rank', os.environ['RANK'], os.environ['WORLD_SIZE'])\n")
    port = dh.free_port()
    env = dh.job_env()
    nodes = [subprocess.Popen(
        [str(dh.DTRUN), "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
         f"--rdzv-endpoint=127.0.0.1:{port}", "--no-python", sys.executable, str(script)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=120) for p in nodes]
    for p, (out, err) in zip(nodes, results):
        assert p.returncode == 0, err
    outs = sorted(out.strip() for out, _ in results)
    assert outs == ["rank 0 2", "rank 1 2"], results
    errs = "".join(err for _, err in results)
    assert errs.count("hosting the rendezvous store") == 1, errs
    assert errs.count("joining it as a client") == 1, errs
