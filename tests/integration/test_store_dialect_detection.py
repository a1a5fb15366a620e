"""`dtrun-store` finds the server's dialect (--dialect auto, the default):
the 2.x handshake first, answered by dtrun's store; torch 1.13's server
drops the connection on it without allocating (the nonce makes the length
it reads over std::vector's max_size) and then answers 1.13's GETNUMKEYS.
Neither probe changes or loses the server's keys; --dialect still forces one."""

import os
import sys
import threading

import pytest

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402
import dtrun_helpers as dh  # noqa: E402


@pytest.fixture(scope="module")
def torch_master():
    pytest.importorskip("torch")
    return sh.torch_server()


@pytest.fixture(scope="module")
def dtrun_server():
    srv = sh.StoreServer()
    yield srv
    assert srv.stop() == 0


def test_a_torch_113_server_is_found_and_keeps_its_keys(torch_master):
    endpoint = f"{sh.HOST}:{torch_master.port}"
    torch_master.set("detect/before", "kept")
    keys_before = torch_master.num_keys()
    r = sh.cli(endpoint, "dialect")
    assert (r.returncode, r.stdout, r.stderr) == (0, b"v1.13\n", b""), r
    assert torch_master.num_keys() == keys_before  # the probes wrote nothing
    assert torch_master.get("detect/before") == b"kept"
    # Every verb works without --dialect, both ways with torch's own client.
    assert sh.cli(endpoint, "set", "detect/ours", "v").returncode == 0
    assert torch_master.get("detect/ours") == b"v"
    r = sh.cli(endpoint, "get", "detect/before")
    assert (r.returncode, r.stdout) == (0, b"kept\n"), r
    r = sh.cli(endpoint, "add", "detect/n", "5")
    assert (r.returncode, r.stdout) == (0, b"5\n"), r
    assert sh.cli(endpoint, "check", "detect/ours", "detect/n").returncode == 0
    assert sh.cli(endpoint, "delete", "detect/ours").returncode == 0
    assert torch_master.num_keys() == keys_before + 1  # detect/n


def test_a_torch_waiter_is_woken_by_a_detecting_client(torch_master):
    endpoint = f"{sh.HOST}:{torch_master.port}"
    got = []
    waiter = threading.Thread(target=lambda: got.append(torch_master.get("detect/later")))
    waiter.start()
    assert sh.cli(endpoint, "set", "detect/later", "hi").returncode == 0
    waiter.join(30)
    assert got == [b"hi"]


def test_dtruns_store_is_found_speaking_2x(dtrun_server):
    assert sh.cli(dtrun_server.endpoint, "set", "k", "v").returncode == 0
    r = sh.cli(dtrun_server.endpoint, "dialect")
    assert (r.returncode, r.stdout) == (0, b"v2\n"), r
    r = sh.cli(dtrun_server.endpoint, "num-keys")
    assert (r.returncode, r.stdout) == (0, b"1\n"), r


def test_the_dialect_can_still_be_forced(dtrun_server, torch_master):
    r = sh.cli(dtrun_server.endpoint, "dialect", dialect="v1.13")
    assert (r.returncode, r.stdout) == (0, b"v1.13\n"), r
    r = sh.cli(dtrun_server.endpoint, "get", "k", dialect="v1.13")
    assert (r.returncode, r.stdout) == (0, b"v\n"), r
    r = sh.cli(f"{sh.HOST}:{torch_master.port}", "num-keys", dialect="v2")
    assert r.returncode == sh.EXIT_UNREACHABLE, r
    assert b"--dialect v1.13 or auto" in r.stderr, r


def test_the_store_of_a_running_dtrun_job_is_found_speaking_2x():
    # A worker asks the store its agent hosts (same user: admitted).
    r = dh.run(["--standalone", "--nproc-per-node=1", "--no-python", "/bin/sh", "-c",
                'exec "$0" --endpoint "$MASTER_ADDR:$MASTER_PORT" dialect', str(sh.STORE_BIN)],
               dh.job_env())
    assert (r.returncode, r.stdout) == (0, "v2\n"), r.stderr


class _NotAStore:
    """A TCP server on a free port that is not a store: `echo` sends back
    what it reads, `garbage` sends bytes no store would, `silent` never
    answers. Counts connections."""

    def __init__(self, kind):
        import socket
        self.kind, self.connections = kind, 0
        self.sock = socket.create_server((sh.HOST, 0))
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.held.append(conn)
            if self.kind == "garbage":
                conn.sendall(b"\xde\xad\xbe\xef" * 64)
            elif self.kind == "echo":
                threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn):
        try:
            while data := conn.recv(4096):
                conn.sendall(data)
        except OSError:
            pass

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("kind", ["echo", "garbage"])
def test_a_server_that_is_not_a_store_is_named_at_once(kind):
    # It answered, so trying again until --connect-timeout cannot help: one
    # connection, one line saying what it is, exit 3 (unreachable).
    server = _NotAStore(kind)
    try:
        r = sh.cli(f"{sh.HOST}:{server.port}", "set", "k", "v", connect_timeout_s=20)
    finally:
        server.close()
    assert r.returncode == sh.EXIT_UNREACHABLE, r
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and "it is not a TCPStore" in lines[0], r
    assert "check that the host is up" not in lines[0]
    assert server.connections == 1


def test_a_server_that_never_answers_is_not_called_unreachable():
    # It took the connection: the host is up; what is wrong is the port.
    server = _NotAStore("silent")
    try:
        r = sh.cli(f"{sh.HOST}:{server.port}", "get", "k", connect_timeout_s=1)
    finally:
        server.close()
    assert r.returncode == sh.EXIT_UNREACHABLE, r
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1, r
    assert "took the connection but did not answer the PyTorch 2.x handshake" in lines[0], r
    assert "check that the host is up" not in lines[0]
