"""dtrun's store client against a real PyTorch 1.13 TCPStore server.

The server is torch's own (TCPStore(is_master=True), hosted in this test
process on a daemon thread); the client is `dtrun-store --dialect v1.13`,
interleaved with torch clients on the same server.
"""

import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402

pytest.importorskip("torch")

DIALECT = "v1.13"


@pytest.fixture(scope="module")
def master():
    return sh.torch_server()


@pytest.fixture(scope="module")
def endpoint(master):
    return f"{sh.HOST}:{master.port}"


@pytest.fixture()
def peer(master):
    """A second torch client (is_master=False) on torch's server."""
    return sh.torch_client(master.port)


def ours(endpoint, *args, **kw):
    return sh.cli(endpoint, *args, dialect=DIALECT, **kw)


def set_and_sync(store, key, value):
    """SET has no reply, so another connection may overtake it; a GET on
    the same connection proves the server has applied it."""
    store.set(key, value)
    assert store.get(key) == (value.encode() if isinstance(value, str) else value)


def test_set_and_get_both_ways(master, endpoint, peer):
    r = ours(endpoint, "set", "from_dtrun", "caf\u00e9 \u2603")
    assert r.returncode == 0, r
    assert peer.get("from_dtrun") == "caf\u00e9 \u2603".encode()
    assert master.get("from_dtrun") == "caf\u00e9 \u2603".encode()

    peer.set("from_torch", b"\x01\x02\xfe\xff")
    r = ours(endpoint, "get", "from_torch")
    assert (r.returncode, r.stdout) == (0, b"\x01\x02\xfe\xff\n"), r


def test_raw_keys_address_the_wire_key(endpoint, peer):
    peer.set("raw_k", "v")
    assert ours(endpoint, "get", "/raw_k", raw_keys=True).stdout == b"v\n"
    assert ours(endpoint, "check", "raw_k", raw_keys=True).returncode == sh.EXIT_NOT_READY


def test_large_value_set_by_torch_read_by_dtrun(endpoint, peer):
    big = os.urandom(20 * 1024 * 1024)
    peer.set("big", big)
    r = ours(endpoint, "get", "big")
    assert r.returncode == 0, r.stderr
    assert r.stdout == big + b"\n"


def test_add_interleaved_with_torch(endpoint, peer):
    assert ours(endpoint, "add", "ctr", "5").stdout == b"5\n"
    assert peer.add("ctr", 2) == 7
    assert ours(endpoint, "add", "ctr", "-10").stdout == b"-3\n"
    assert peer.get("ctr") == b"-3"
    assert ours(endpoint, "add", "ctr", "0").stdout == b"-3\n"


def test_check_ready_and_not_ready(endpoint, peer):
    set_and_sync(peer, "chk_a", "1")
    r = ours(endpoint, "check", "chk_a")
    assert (r.returncode, r.stdout) == (0, b"ready\n")
    r = ours(endpoint, "check", "chk_a", "chk_missing")
    assert (r.returncode, r.stdout) == (sh.EXIT_NOT_READY, b"not ready\n")


def test_delete_and_num_keys_agree_with_torch(master, endpoint, peer):
    set_and_sync(peer, "del_me", "x")
    before = master.num_keys()
    r = ours(endpoint, "num-keys")
    assert (r.returncode, r.stdout) == (0, f"{before}\n".encode())
    r = ours(endpoint, "delete", "del_me")
    assert (r.returncode, r.stdout) == (0, b"deleted\n")
    assert master.num_keys() == before - 1
    r = ours(endpoint, "delete", "del_me")
    assert (r.returncode, r.stdout) == (sh.EXIT_NOT_READY, b"not found\n")
    assert peer.delete_key("del_me") is False


def test_wait_times_out_with_exit_code_4(endpoint):
    start = time.monotonic()
    r = ours(endpoint, "wait", "never_set", timeout_s=0.5)
    elapsed = time.monotonic() - start
    assert r.returncode == sh.EXIT_TIMEOUT, r
    assert b"never_set" in r.stderr and b"timed out" in r.stderr
    assert 0.5 <= elapsed < 60, elapsed  # the upper bound only catches a hang
    # get = wait + get: the same timeout.
    assert ours(endpoint, "get", "never_set", timeout_s=0.3).returncode == sh.EXIT_TIMEOUT


def test_dtrun_wait_woken_by_torch_set(endpoint, peer):
    waiter = sh.cli_popen(endpoint, "wait", "go_1", "go_2", dialect=DIALECT, timeout_s=30)
    peer.set("go_1", "1")
    assert waiter.poll() is None, "wait returned before its second key existed"
    peer.set("go_2", "2")
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err


def test_torch_wait_woken_by_dtrun_set(master, endpoint):
    results = []
    thread = threading.Thread(target=lambda: results.append(master.get("from_cli_later")))
    thread.start()
    assert ours(endpoint, "set", "from_cli_later", "hi").returncode == 0
    thread.join(30)
    assert results == [b"hi"]


def test_v2_dialect_against_a_1_13_server_fails_cleanly(master, endpoint):
    # A 2.x handshake means SET with a huge key length to 1.13; torch's
    # server drops the connection and must keep serving everyone else.
    r = sh.cli(endpoint, "num-keys", dialect="v2", connect_timeout_s=1, timeout_s=1)
    assert r.returncode in (sh.EXIT_UNREACHABLE, sh.EXIT_TIMEOUT), r
    master.set("still_alive", "yes")
    assert ours(endpoint, "get", "still_alive").stdout == b"yes\n"


def test_the_2x_dialect_against_a_113_server_says_which_dialect_to_use(endpoint):
    # A connect timeout of 10 minutes: returning well before it shows the
    # refusal was reported at once, not retried until the deadline.
    start = time.monotonic()
    r = sh.cli(endpoint, "get", "anything", dialect="v2", connect_timeout_s=600,
               run_timeout_s=300)
    assert r.returncode == 3, r  # connection refused by the protocol, not a timeout
    assert b"--dialect v1.13" in r.stderr, r
    assert time.monotonic() - start < 300
