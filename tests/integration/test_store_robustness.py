"""dtrun's store server under bad input, vanishing and idle clients, and
the 2.x dialect proven byte for byte with a hand-written client.

One server serves the whole module. Data written at the start must stay
intact, and after every abuse a good client (torch 1.13, a long-lived torch
connection opened before the abuse, and the dtrun-store CLI) still gets
correct answers.
"""

import os
import random
import resource
import socket
import struct
import sys
import threading

import pytest

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402
from store_helpers import V1, V2, i64, keys_field, string, u8, u32, u64  # noqa: E402

pytest.importorskip("torch")

SENTINEL = bytes(range(256)) + b"\x00sentinel\xff"


class Health:
    """What a good client must keep seeing."""

    def __init__(self, server):
        self.server = server
        self.long_lived = sh.torch_client(server.port)
        self.long_lived.set("sentinel", SENTINEL)
        self.counter = 0

    def check(self):
        assert self.server.alive(), "the server died"
        fresh = sh.torch_client(self.server.port)
        assert fresh.get("sentinel") == SENTINEL
        assert self.long_lived.get("sentinel") == SENTINEL
        self.counter += 1
        assert fresh.add("health", 1) == self.counter
        r = sh.cli(self.server.endpoint, "get", "sentinel")
        assert (r.returncode, r.stdout) == (0, SENTINEL + b"\n"), r
        r = sh.cli(self.server.endpoint, "add", "health", "0", dialect="v1.13")
        assert r.stdout == f"{self.counter}\n".encode(), r


# Every attack also against a threaded server (sh.SERVE_VARIANTS).
@pytest.fixture(scope="module", params=sh.SERVE_VARIANTS, ids=sh.SERVE_VARIANT_IDS)
def server(request):
    srv = sh.StoreServer(*request.param)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def health(server):
    return Health(server)


def peer_of(conn):
    """How the server names this connection in its log."""
    return f"127.0.0.1:{conn.sock.getsockname()[1]}"


def expect_rejected(server, conn, reason):
    """The server closes `conn` and logs one line naming it and `reason`."""
    conn.wait_closed_by_server()
    line = server.wait_for_log(peer_of(conn))
    assert reason in line, line


# --- garbage -------------------------------------------------------------

def test_random_bytes(server, health):
    rejected_for_first_byte = 0
    for seed in range(16):
        garbage = random.Random(seed).randbytes(64 * 1024)
        v2 = seed % 4 == 0
        data = sh.V2_HANDSHAKE + garbage if v2 else garbage  # garbage after a good handshake
        with sh.RawConnection(server.port) as conn:
            try:
                conn.send(data)
                # Whatever it parsed, the connection ends: bad input or our EOF.
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server closed it while we were still sending: fine
            conn.wait_closed_by_server()
            # A first command byte neither dialect knows is always logged.
            if garbage[0] >= (len(V2) if v2 else len(V1)):
                line = server.wait_for_log(peer_of(conn))
                assert f"unknown command byte {garbage[0]}" in line, line
                rejected_for_first_byte += 1
    assert rejected_for_first_byte >= 8  # most random first bytes are unknown
    health.check()


def test_truncated_request_then_close(server, health):
    # SET "/trunc" with a 100-byte value of which only 10 bytes arrive.
    with sh.RawConnection(server.port) as conn:
        conn.send(u8(V1["SET"]) + string("/trunc") + u64(100) + b"0123456789")
    with sh.RawConnection(server.port) as conn:  # the same in the 2.x dialect
        conn.send(sh.V2_HANDSHAKE + u8(V2["SET"]) + string("/trunc") + u64(100) + b"x")
    # Half a command byte's fields (ADD without its delta).
    with sh.RawConnection(server.port) as conn:
        conn.send(u8(V1["ADD"]) + string("/trunc") + b"\x01\x00")
    health.check()
    r = sh.cli(server.endpoint, "check", "trunc")
    assert r.returncode == sh.EXIT_NOT_READY, "a truncated SET/ADD must store nothing"


@pytest.mark.parametrize("request_bytes, reason", [
    pytest.param(u8(V1["SET"]) + u64(1 << 40) + b"abc", "SET: key of 1099511627776",
                 id="key length 2^40"),
    pytest.param(u8(V1["SET"]) + string("/v") + u64(1 << 63), "SET: value of",
                 id="value length 2^63"),
    pytest.param(u8(V1["WAIT"]) + u64(1 << 60), "WAIT: key count",
                 id="wait on 2^60 keys"),
    pytest.param(sh.V2_HANDSHAKE + u8(V2["GET"]) + u64(1 << 40), "GET: key of 1099511627776",
                 id="2.x key length 2^40"),
])
def test_oversized_length_closes_only_that_connection(server, health, request_bytes, reason):
    with sh.RawConnection(server.port) as conn:
        conn.send(request_bytes)
        expect_rejected(server, conn, reason)
    health.check()


@pytest.mark.parametrize("request_bytes, reason", [
    pytest.param(u8(9) + string("/k") + string("v"), "unknown command byte 9",
                 id="1.13 byte 9 (APPEND only exists in 2.x)"),
    pytest.param(b"\xff" * 16, "unknown command byte 255",
                 id="1.13 byte 0xff"),
    pytest.param(u8(V2["PING"]) + u32(7), "unknown command byte 13",
                 id="2.x PING without the handshake"),
    # 18 is BARRIER (torch 2.15's newest command): the first byte past it.
    pytest.param(sh.V2_HANDSHAKE + u8(19), "unknown command byte 19",
                 id="2.x byte 19 after the handshake"),
    pytest.param(sh.V2_HANDSHAKE * 2, "VALIDATE sent twice",
                 id="2.x VALIDATE twice"),
    # A wrong magic is not a 2.x handshake: as 1.13 it is SET with a key
    # length made of the magic and what follows, far over the cap.
    pytest.param(bytes.fromhex("00cef7853d") + u8(V2["PING"]) + u32(1) + b"\0" * 8,
                 "SET: key of", id="VALIDATE with a wrong magic"),
])
def test_unknown_or_misplaced_command(server, health, request_bytes, reason):
    with sh.RawConnection(server.port) as conn:
        conn.send(request_bytes)
        expect_rejected(server, conn, reason)
    health.check()


def test_add_on_a_non_numeric_value_drops_only_that_connection(server, health):
    with sh.RawConnection(server.port) as conn:
        conn.send(u8(V1["SET"]) + string("/text") + string("abc"))
        conn.send(u8(V1["ADD"]) + string("/text") + i64(1))
        expect_rejected(server, conn, "not a number")
    assert sh.torch_client(server.port).get("text") == b"abc"
    health.check()


def test_fragmented_and_pipelined_requests(server):
    # One byte per send: the server must reassemble every field.
    request = (u8(V1["SET"]) + string("/frag") + string("pieces")
               + u8(V1["GET"]) + string("/frag"))
    with sh.RawConnection(server.port) as conn:
        for b in request:
            conn.send(bytes([b]))
        assert conn.recv_bytes() == b"pieces"
    # Many requests in one send: answered in order.
    with sh.RawConnection(server.port) as conn:
        conn.send(b"".join(u8(V1["ADD"]) + string("/pipe") + i64(1) for _ in range(500)))
        assert [conn.recv_i64() for _ in range(500)] == list(range(1, 501))


def server_rss_mib(server):
    status = open(f"/proc/{server.proc.pid}/status").read()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def test_client_that_does_not_read_its_replies(server, health):
    # 64 pipelined GETs of a 4 MiB value (256 MiB of replies) while not
    # reading: the server must hold back instead of buffering them all, keep
    # serving the others, and answer every GET once the client reads.
    big = b"B" * (4 << 20)
    health.long_lived.set("big_unread", big)
    assert health.long_lived.get("big_unread") == big  # applied before the GETs below
    with sh.RawConnection(server.port, timeout_s=60) as hog:
        hog.send((u8(V1["GET"]) + string("/big_unread")) * 64)
        health.check()
        assert server_rss_mib(server) < 160, "replies to a client that does not read pile up"
        for i in range(64):
            assert hog.recv_bytes() == big, f"reply {i}"
    health.check()


# --- vanishing waiters ---------------------------------------------------

def test_clients_vanishing_mid_wait_do_not_block_others(server, health):
    vanishers = []
    for i in range(10):
        conn = sh.RawConnection(server.port)
        # WAIT then a GETNUMKEYS: its answer proves the WAIT was registered.
        conn.send(u8(V1["WAIT"]) + keys_field(["/vanish"]) + u8(V1["GETNUMKEYS"]))
        conn.recv_i64()
        vanishers.append(conn)
    for i in range(10):
        conn = sh.v2_connection(server.port, nonce=i)
        conn.send(u8(V2["WAIT"]) + keys_field(["/vanish", "/other"]) + u8(V2["PING"]) + u32(99))
        assert conn.recv_u32() == 99
        vanishers.append(conn)
    for i, conn in enumerate(vanishers):
        if i % 2:
            # RST instead of FIN.
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    # Good waiters: a raw 2.x one (registered for sure) and a torch one.
    survivor = sh.v2_connection(server.port)
    survivor.send(u8(V2["WAIT"]) + keys_field(["/vanish"]) + u8(V2["PING"]) + u32(5))
    assert survivor.recv_u32() == 5
    torch_waiter = sh.torch_client(server.port)
    got = []
    thread = threading.Thread(target=lambda: got.append(torch_waiter.get("vanish")))
    thread.start()

    health.long_lived.set("vanish", "now")
    assert survivor.recv_u8() == 0  # STOP_WAITING
    thread.join(20)
    assert got == [b"now"]
    health.long_lived.set("other", "too")  # would wake the closed 2.x waiters
    survivor.send(u8(V2["PING"]) + u32(6))
    assert survivor.recv_u32() == 6, "no stray bytes after the wake-up"
    survivor.close()
    health.check()


# --- many idle connections ----------------------------------------------

def test_two_thousand_idle_connections(server, health):
    n = 2000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n + 1024)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    assert want >= n + 256, f"RLIMIT_NOFILE hard limit {hard} is too low for this test"

    idle = [sh.RawConnection(server.port) for _ in range(n)]
    try:
        # All held open; good clients still work.
        health.check()
        # And every idle connection is live: ask each for the key count.
        expected = sh.torch_client(server.port).num_keys()
        for conn in idle:
            conn.send(u8(V1["GETNUMKEYS"]))
        counts = [conn.recv_i64() for conn in idle]
        assert counts == [expected] * n
    finally:
        for conn in idle:
            conn.close()
    health.check()


# --- the 2.x dialect, byte for byte ---------------------------------------

def test_v2_dialect_byte_for_byte():
    with sh.StoreServer() as srv, sh.RawConnection(srv.port) as c:
        # Handshake and ping: VALIDATE has no reply, PING echoes its nonce.
        c.send(bytes.fromhex("00cef7853c") + bytes.fromhex("0defbeadde"))
        assert c.recv_exact(4) == bytes.fromhex("efbeadde")

        # SET (1) has no reply; GET (3) answers u64 length + bytes.
        c.send(bytes.fromhex("01") + string("/k") + string(b"hello\x00"))
        c.send(bytes.fromhex("03") + string("/k"))
        assert c.recv_exact(14) == bytes.fromhex("0600000000000000") + b"hello\x00"

        # ADD (4): i64 result.
        c.send(bytes.fromhex("04") + string("/n") + i64(7))
        assert c.recv_exact(8) == bytes.fromhex("0700000000000000")
        c.send(bytes.fromhex("04") + string("/n") + i64(-9))
        assert c.recv_exact(8) == bytes.fromhex("feffffffffffffff")

        # COMPARE_SET (2), the four cases.
        def cas(key, expected, desired):
            c.send(bytes.fromhex("02") + string(key) + string(expected) + string(desired))
            return c.recv_bytes()
        assert cas("/cas", "", "v1") == b"v1"       # missing, empty expected: created
        assert cas("/cas_x", "exp", "v") == b"exp"  # missing, expected given: not created
        assert cas("/cas", "v1", "v2") == b"v2"     # equal: replaced
        assert cas("/cas", "zz", "v3") == b"v2"     # different: current value

        # CHECK (5): u8 0 ready, 1 not ready.
        c.send(bytes.fromhex("05") + keys_field(["/k", "/n"]))
        assert c.recv_exact(1) == b"\x00"
        c.send(bytes.fromhex("05") + keys_field(["/k", "/cas_x"]))
        assert c.recv_exact(1) == b"\x01"

        # WAIT (6) on present keys: STOP_WAITING at once.
        c.send(bytes.fromhex("06") + keys_field(["/k", "/cas"]))
        assert c.recv_exact(1) == b"\x00"

        # GETNUMKEYS (7): /k /n /cas.
        c.send(bytes.fromhex("07"))
        assert c.recv_exact(8) == i64(3)

        # DELETE_KEY (8): i64 1, then 0.
        c.send(bytes.fromhex("08") + string("/n"))
        assert c.recv_exact(8) == i64(1)
        c.send(bytes.fromhex("08") + string("/n"))
        assert c.recv_exact(8) == i64(0)

        # APPEND (9): no reply; creates, then extends.
        c.send(bytes.fromhex("09") + string("/app") + string("ab"))
        c.send(bytes.fromhex("09") + string("/app") + string("cd"))
        c.send(bytes.fromhex("03") + string("/app"))
        assert c.recv_exact(12) == u64(4) + b"abcd"

        # MULTI_SET (11): no reply. MULTI_GET (10): one vector per key,
        # empty for a missing one.
        c.send(bytes.fromhex("0b") + u64(3) + string("/m1") + string("one")
               + string("/m2") + string("") + string("/m3") + string("three"))
        c.send(bytes.fromhex("0a") + keys_field(["/m3", "/m2", "/m1", "/missing"]))
        expected = string("three") + string("") + string("one") + string("")
        assert c.recv_exact(len(expected)) == expected

        # CANCEL_WAIT (12) with nothing pending: u8 1 anyway.
        c.send(bytes.fromhex("0c"))
        assert c.recv_exact(1) == b"\x01"
        # WAIT on a missing key, CANCEL_WAIT: only WAIT_CANCELED comes back,
        # and setting the key later sends nothing stray.
        c.send(bytes.fromhex("06") + keys_field(["/later"]) + bytes.fromhex("0c"))
        assert c.recv_exact(1) == b"\x01"
        with sh.v2_connection(srv.port) as other:
            other.send(bytes.fromhex("01") + string("/later") + string("x"))
            other.send(bytes.fromhex("0d") + u32(1))  # round trip: SET applied
            assert other.recv_u32() == 1
        c.send(bytes.fromhex("0d") + u32(0x01020304))
        assert c.recv_exact(4) == bytes.fromhex("04030201")

        # Queues: QUEUE_PUSH (14) no reply; QUEUE_LEN (16) i64; QUEUE_POP
        # (15) i64 length before the pop, then the value if it was > 0.
        c.send(bytes.fromhex("0e") + string("/q") + string("first"))
        c.send(bytes.fromhex("0e") + string("/q") + string("second"))
        c.send(bytes.fromhex("10") + string("/q"))
        assert c.recv_exact(8) == i64(2)
        c.send(bytes.fromhex("0f") + string("/q"))
        assert c.recv_exact(8 + 8 + 5) == i64(2) + string("first")
        c.send(bytes.fromhex("0f") + string("/q"))
        assert c.recv_exact(8 + 8 + 6) == i64(1) + string("second")
        c.send(bytes.fromhex("0f") + string("/q") + bytes.fromhex("0d") + u32(9))
        assert c.recv_exact(8 + 4) == i64(0) + u32(9)  # empty pop: just the length

        # QUEUE_PUSH wakes a waiter, and CHECK sees a non-empty queue.
        with sh.v2_connection(srv.port) as waiter:
            waiter.send(bytes.fromhex("06") + keys_field(["/q2"]) + bytes.fromhex("0d") + u32(3))
            assert waiter.recv_u32() == 3  # the WAIT is registered
            c.send(bytes.fromhex("0e") + string("/q2") + string("job"))
            assert waiter.recv_exact(1) == b"\x00"
        c.send(bytes.fromhex("05") + keys_field(["/q2"]))
        assert c.recv_exact(1) == b"\x00"

        # LIST (17): i64 count, then the keys (values only, not queues).
        c.send(bytes.fromhex("11"))
        count = c.recv_i64()
        listed = sorted(c.recv_bytes() for _ in range(count))
        assert listed == sorted([b"/k", b"/cas", b"/app", b"/m1", b"/m2", b"/m3", b"/later"])

        # The same data through the 1.13 dialect and torch's client.
        t = sh.torch_client(srv.port)
        assert t.get("k") == b"hello\x00"
        assert t.get("m2") == b""
        assert t.num_keys() == 7
        t.set("from_torch", "t")
        assert t.get("from_torch") == b"t"  # applied before c asks for it
        c.send(bytes.fromhex("03") + string("/from_torch"))
        assert c.recv_bytes() == b"t"
