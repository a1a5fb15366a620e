"""A real PyTorch 1.13 TCPStore client against dtrun's store server.

Everything here talks to `dtrun-store serve` through torch's own client
(torch.distributed.TCPStore(is_master=False)), and cross-checks with the
`dtrun-store` client verbs. The last test bootstraps a 4-rank gloo process
group through our server.
"""

import datetime
import json
import os
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def server():
    srv = sh.StoreServer()
    yield srv
    assert srv.stop() == 0, "dtrun-store serve should exit 0 on SIGTERM"


@pytest.fixture()
def store(server):
    return sh.torch_client(server.port)


def test_set_get_binary_values_and_overwrite(store):
    every_byte = bytes(range(256)) * 4
    store.set("bin", every_byte)
    assert store.get("bin") == every_byte
    store.set("bin", b"")
    assert store.get("bin") == b""
    store.set("bin", "text \u00e9")
    assert store.get("bin") == "text \u00e9".encode()


def test_add_counts_and_value_is_decimal_text(store):
    assert store.add("counter", 5) == 5
    assert store.add("counter", -7) == -2
    assert store.add("counter", 0) == -2
    assert store.get("counter") == b"-2"
    # ADD parses an existing value set as text.
    store.set("preset", "40")
    assert store.add("preset", 2) == 42


def test_compare_set_all_four_cases(store):
    # Missing key, empty expected: created with desired, desired returned.
    assert store.compare_set("cas_new", "", "first") == b"first"
    assert store.get("cas_new") == b"first"
    # Missing key, non-empty expected: nothing stored, expected returned.
    assert store.compare_set("cas_absent", "guess", "x") == b"guess"
    # Present and equal: replaced, desired returned.
    assert store.compare_set("cas_new", "first", "second") == b"second"
    assert store.get("cas_new") == b"second"
    # Present and different: unchanged, current value returned.
    assert store.compare_set("cas_new", "stale", "third") == b"second"
    assert store.get("cas_new") == b"second"
    # The absent key really was not created.
    r = sh.cli(f"{sh.HOST}:{store.port}", "check", "cas_absent")
    assert r.returncode == sh.EXIT_NOT_READY, r


def test_wait_times_out_within_its_timeout(server):
    # A fresh client: a 1.13 client that timed out may get a stray reply later.
    lonely = sh.torch_client(server.port)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="[Tt]imeout"):
        lonely.wait(["never_set"], datetime.timedelta(milliseconds=500))
    elapsed = time.monotonic() - start
    # Not before the timeout; the upper bound only catches a hang (a loaded
    # CI machine can be seconds late, so it is no performance check).
    assert 0.45 <= elapsed < 60, elapsed


# A 1.13 client cannot cancel a timed-out WAIT, so a later SET of that key
# leaves a stray STOP_WAITING on its connection; its next get() of a missing
# key reads that byte as the WAIT reply. The server drops such a 1.13
# connection (as torch's own server does), so the client raises instead of
# returning an empty value as the key's.
def test_stale_wait_reply_does_not_turn_into_a_silent_empty_get(server):
    timed_out, writer = sh.torch_client(server.port), sh.torch_client(server.port)
    with pytest.raises(RuntimeError, match="[Tt]imeout"):
        timed_out.wait(["stale"], datetime.timedelta(milliseconds=200))
    writer.set("stale", "1")
    assert writer.get("stale") == b"1"  # the stray reply has been sent by now
    with pytest.raises(RuntimeError):
        timed_out.get("never_set_anywhere")


def test_wait_for_present_keys_returns_at_once(store):
    store.set("present_a", "1")
    store.set("present_b", "2")
    # A server that waited for the keys anyway would raise at the timeout;
    # returning at all is the proof (no clock involved).
    store.wait(["present_a", "present_b"], datetime.timedelta(seconds=120))


def test_wait_completes_when_another_client_sets_later(server):
    waiter, writer = sh.torch_client(server.port), sh.torch_client(server.port)
    results = []

    def wait_then_get():
        waiter.wait(["late_a", "late_b"], datetime.timedelta(seconds=20))
        results.append(waiter.get("late_b"))

    thread = threading.Thread(target=wait_then_get)
    thread.start()
    writer.set("late_a", "A")
    # Half the keys are there: the waiter must still be blocked (one key
    # missing can never be satisfied by our server).
    assert thread.is_alive()
    writer.set("late_b", "B")
    thread.join(20)
    assert not thread.is_alive(), "wait did not complete after both keys were set"
    assert results == [b"B"]


def test_get_waits_for_a_key_set_later_by_the_cli(server, store):
    results = []
    thread = threading.Thread(target=lambda: results.append(store.get("from_cli_later")))
    thread.start()
    r = sh.cli(server.endpoint, "set", "from_cli_later", "hello")
    assert r.returncode == 0, r
    thread.join(20)
    assert results == [b"hello"]


def test_delete_key_and_num_keys(server):
    # A private server, so num_keys is exact.
    with sh.StoreServer() as srv:
        s = sh.torch_client(srv.port)
        assert s.num_keys() == 0
        s.set("a", "1")
        s.set("b", "2")
        s.add("c", 1)
        assert s.num_keys() == 3
        assert s.delete_key("a") is True
        assert s.delete_key("a") is False
        assert s.num_keys() == 2
        assert sh.cli(srv.endpoint, "num-keys").stdout == b"2\n"
        with pytest.raises(RuntimeError, match="[Tt]imeout"):
            sh.torch_client(srv.port).wait(["a"], datetime.timedelta(milliseconds=200))


def test_large_value_20_mib_round_trips(store):
    big = os.urandom(20 * 1024 * 1024)
    store.set("big", big)
    assert store.get("big") == big
    # A second client sees it too, and the connection is still usable.
    assert store.add("after_big", 1) == 1


def test_cli_and_torch_see_each_others_writes(server, store):
    store.set("k", "from torch")
    for dialect in ("v2", "v1.13"):
        r = sh.cli(server.endpoint, "get", "k", dialect=dialect)
        assert (r.returncode, r.stdout) == (0, b"from torch\n"), r
    # The wire key is "/k": --raw-keys must name it so. (Keys that exist get
    # the default --timeout: a short one only adds a way to fail under load.)
    assert sh.cli(server.endpoint, "get", "/k", raw_keys=True).stdout == \
        b"from torch\n"
    r = sh.cli(server.endpoint, "check", "k", raw_keys=True)
    assert r.returncode == sh.EXIT_NOT_READY, "raw key 'k' must not exist, only '/k'"

    assert sh.cli(server.endpoint, "set", "k2", "from cli").returncode == 0
    assert store.get("k2") == b"from cli"
    assert sh.cli(server.endpoint, "set", "/raw", "raw cli", raw_keys=True).returncode == 0
    assert store.get("raw") == b"raw cli"
    assert sh.cli(server.endpoint, "add", "shared_counter", "10",
                  dialect="v1.13").stdout == b"10\n"
    assert store.add("shared_counter", 1) == 11
    assert sh.cli(server.endpoint, "add", "shared_counter", "1").stdout == b"12\n"
    assert sh.cli(server.endpoint, "delete", "k2").returncode == 0
    assert sh.cli(server.endpoint, "delete", "k2").returncode == sh.EXIT_NOT_READY
    assert store.compare_set("k2", "", "recreated") == b"recreated"


def test_torch_1_13_client_bytes_on_the_wire(server):
    # Every byte the real 1.13 client sends and our server answers, through
    # a recording proxy: this pins the 1.13 dialect to what torch does.
    with sh.RecordingProxy(server.port) as proxy:
        t = sh.torch_client(proxy.port)
        t.set("wk", b"v\x00")
        assert t.get("wk") == b"v\x00"
        assert t.add("wc", 5) == 5
        assert t.compare_set("wk", b"v\x00", "w") == b"w"
        assert t.delete_key("wc") is True
        t.num_keys()
        # A 1.13 TCPStore has a second connection (for watch callbacks) that
        # stays idle: exactly one connection carries traffic.
        recorded = [r for r in proxy.recorded() if r != (b"", b"")]
        assert len(recorded) == 1, recorded

    assert recorded[0][0] == b"".join([
        bytes.fromhex("00 0300000000000000") + b"/wk" + bytes.fromhex("0200000000000000")
        + b"v\x00",                                              # SET /wk
        sh.u8(5) + sh.keys_field(["/wk"]),                       # get = WAIT /wk
        sh.u8(2) + sh.string("/wk"),                             #       + GET /wk
        sh.u8(3) + sh.string("/wc") + sh.i64(5),                 # ADD /wc 5
        sh.u8(1) + sh.string("/wk") + sh.string(b"v\x00") + sh.string("w"),  # COMPARE_SET
        sh.u8(8) + sh.string("/wc"),                             # DELETE_KEY /wc
        sh.u8(6),                                                # GETNUMKEYS
    ])
    replies = recorded[0][1]
    assert replies[:-8] == b"".join([
        b"\x00",                 # STOP_WAITING
        sh.string(b"v\x00"),      # GET
        sh.i64(5),                # ADD
        sh.string("w"),           # COMPARE_SET
        sh.i64(1),                # DELETE_KEY: deleted
    ])
    assert len(replies) == len(b"\x00") + 8 + 2 + 8 + 8 + 1 + 8 + 8  # + GETNUMKEYS


def test_gloo_process_group_through_our_store(server):
    check_gloo_process_group(server)


def test_gloo_process_group_through_a_threaded_store():
    """The same with `serve --threads 3`: the four ranks' connections (and
    the waits one rank's SET wakes) are spread over the server's threads."""
    with sh.StoreServer("--threads", "3") as server:
        check_gloo_process_group(server)
        assert server.alive()


def check_gloo_process_group(server):
    world = 4
    procs = [
        subprocess.Popen(
            [sh.PYTHON, str(sh.SOURCE_DIR / "tests" / "pyhelpers" / "gloo_store_worker.py"),
             sh.HOST, str(server.port), str(rank), str(world)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for rank in range(world)
    ]
    outputs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        outputs.append(json.loads(out.decode().strip().splitlines()[-1]))

    for rank, o in enumerate(outputs):
        assert o["rank"] == rank
        assert o["world_size"] == world
        assert o["floats"] == [10.0, 5.0, -15.0]  # 1+2+3+4, 0.5*(1+..+4), -(1+2+4+8)
        assert o["ints"] == [6, 1 + (1 << 8) + (1 << 16) + (1 << 24)]
        assert o["group_sum"] == (40 if rank in (1, 3) else None)  # 10*1 + 10*3

    # The bootstrap left its keys in our store (1.13 with an explicit store:
    # "<group>/<seq>/rank_<r>" under the client's "/"); list them with the
    # 2.x LIST command our server also speaks.
    with sh.v2_connection(server.port) as conn:
        conn.send(sh.u8(sh.V2["LIST"]))
        keys = {conn.recv_bytes() for _ in range(conn.recv_i64())}
    assert {f"/0/0/rank_{r}".encode() for r in range(world)} <= keys
    assert {b"/1/0/rank_0", b"/1/0/rank_1"} <= keys  # new_group([1, 3]) ranks 0, 1
    # Every rank joined the store-based barrier of both groups.
    for barrier in ("/store_based_barrier_key:1", "/store_based_barrier_key:2"):
        r = sh.cli(server.endpoint, "get", barrier, raw_keys=True)
        assert (r.returncode, r.stdout) == (0, b"4\n"), r
