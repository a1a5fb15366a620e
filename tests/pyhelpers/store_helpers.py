"""Helpers shared by the store integration tests.

Run by /usr/bin/python3 (the interpreter that owns Debian's torch 1.13).
Import with:

    sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
    import store_helpers as sh

What is here:
- StoreServer: a `dtrun-store serve` child on 127.0.0.1, port 0; its port is
  read from the line it prints, its stderr is collected so a test can wait
  for a log line (a real event, never a sleep).
- cli(): one `dtrun-store` client verb, returning the finished process.
- torch_client() / torch_server(): PyTorch 1.13 TCPStore objects.
- RawConnection and the encoders: byte-exact requests for both dialects.
"""

from __future__ import annotations

import datetime
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

SOURCE_DIR = Path(os.environ.get("DTRUN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("DTRUN_BUILD_DIR", SOURCE_DIR / "build"))
STORE_BIN = BUILD_DIR / "launcher" / "dtrun-store"
# `dtrun-store serve` arguments a test runs under each of (pytest params):
# one thread, and --threads 3, where the test's connections (an attacker's
# and the good clients') land on different server threads.
SERVE_VARIANTS = ([], ["--threads", "3"])
SERVE_VARIANT_IDS = ("one-thread", "threads")
PYTHON = "/usr/bin/python3"  # the one with torch
HOST = "127.0.0.1"

# Exit codes of `dtrun-store` client verbs.
EXIT_OK = 0
EXIT_NOT_READY = 1  # check found a key missing / delete found nothing
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_TIMEOUT = 4
EXIT_STORE_ERROR = 5


def read_line(fd: int, timeout_s: float) -> str:
    """Reads one line from a raw pipe fd, failing after timeout_s."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no complete line within {timeout_s} s (got {data!r})")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            raise EOFError(f"pipe closed before a full line (got {data!r})")
        data += chunk
    return data.decode().rstrip("\n")


class StoreServer:
    """`dtrun-store serve` on 127.0.0.1 with a kernel-chosen port."""

    def __init__(self, *extra_args: str, startup_timeout_s: float = 30):
        self.proc = subprocess.Popen(
            [str(STORE_BIN), "serve", "--host", HOST, "--port", "0", *extra_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            self.port = int(read_line(self.proc.stdout.fileno(), startup_timeout_s))
        except Exception:
            self.proc.kill()
            self.proc.wait()
            raise
        self._log: list[str] = []
        self._log_cond = threading.Condition()
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()

    @property
    def endpoint(self) -> str:
        return f"{HOST}:{self.port}"

    def _drain_stderr(self) -> None:
        for raw in self.proc.stderr:
            with self._log_cond:
                self._log.append(raw.decode(errors="replace").rstrip("\n"))
                self._log_cond.notify_all()

    def log_lines(self) -> list[str]:
        with self._log_cond:
            return list(self._log)

    def wait_for_log(self, substring: str, timeout_s: float = 10, start: int = 0) -> str:
        """Returns the first stderr line (from index `start`) containing substring."""
        deadline = time.monotonic() + timeout_s
        with self._log_cond:
            while True:
                for line in self._log[start:]:
                    if substring in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"server never logged {substring!r}; its log:\n" + "\n".join(self._log))
                self._log_cond.wait(left)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 10) -> int:
        """SIGTERM, then the exit status (0 for a clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("dtrun-store serve did not stop on SIGTERM")
        self._stderr_thread.join(timeout_s)
        return rc

    def __enter__(self) -> "StoreServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def check_verbs_against_torch_server(store_cli, endpoint: str) -> None:
    """dtrun-store's verbs (run by `store_cli(endpoint, *args)`) against a
    torch TCPStore server that holds from_torch = 01 02 fe ff, counter = 5
    and to_delete (tests/e2e/test_torch2*_store.py): what each verb reads,
    writes and exits with. Leaves from_dtrun and counter = 8 there."""
    r = store_cli(endpoint, "get", "from_torch")
    assert (r.returncode, r.stdout) == (0, b"\x01\x02\xfe\xff\n"), r
    r = store_cli(endpoint, "set", "from_dtrun", "caf\u00e9 \u2603")
    assert r.returncode == 0, r
    r = store_cli(endpoint, "add", "counter", "3")
    assert (r.returncode, r.stdout) == (0, b"8\n"), r
    r = store_cli(endpoint, "delete", "to_delete")
    assert r.returncode == 0, r
    r = store_cli(endpoint, "delete", "to_delete")
    assert r.returncode == EXIT_NOT_READY, r
    r = store_cli(endpoint, "check", "from_dtrun", "counter")
    assert r.returncode == 0, r
    r = store_cli(endpoint, "check", "missing")
    assert r.returncode == EXIT_NOT_READY, r
    r = store_cli(endpoint, "--timeout", "0.2", "wait", "missing")
    assert r.returncode == EXIT_TIMEOUT, r


def cli(endpoint: str, *args, dialect: str | None = None, raw_keys: bool = False,
        timeout_s: float | None = None, connect_timeout_s: float = 5,
        run_timeout_s: float = 60) -> subprocess.CompletedProcess:
    """Runs one `dtrun-store` client verb; stdout/stderr are bytes."""
    cmd = [str(STORE_BIN), "--endpoint", endpoint, "--connect-timeout", str(connect_timeout_s)]
    if dialect:
        cmd += ["--dialect", dialect]
    if raw_keys:
        cmd.append("--raw-keys")
    if timeout_s is not None:
        cmd += ["--timeout", str(timeout_s)]
    cmd += [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run(cmd, capture_output=True, timeout=run_timeout_s)


def cli_popen(endpoint: str, *args, dialect: str | None = None,
              timeout_s: float | None = None) -> subprocess.Popen:
    """Starts a `dtrun-store` client verb in the background (for waits)."""
    cmd = [str(STORE_BIN), "--endpoint", endpoint]
    if dialect:
        cmd += ["--dialect", dialect]
    if timeout_s is not None:
        cmd += ["--timeout", str(timeout_s)]
    cmd += [str(a) for a in args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def torch_client(port: int, timeout_s: float = 15):
    """A PyTorch 1.13 TCPStore client (it opens two connections)."""
    import torch.distributed as dist

    return dist.TCPStore(HOST, port, is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s))


def torch_server(timeout_s: float = 15):
    """A PyTorch 1.13 TCPStore server hosted in this process, on a free port."""
    import torch.distributed as dist

    return dist.TCPStore(HOST, 0, is_master=True, timeout=datetime.timedelta(seconds=timeout_s))


# --- byte-exact wire encoding -------------------------------------------

V2_HANDSHAKE = bytes.fromhex("00cef7853c")  # VALIDATE + magic 0x3C85F7CE

# Command bytes (see rendezvous/store/wire_codec.cpp).
V1 = dict(SET=0, COMPARE_SET=1, GET=2, ADD=3, CHECK=4, WAIT=5, GETNUMKEYS=6,
          WATCH_KEY=7, DELETE_KEY=8)
V2 = dict(VALIDATE=0, SET=1, COMPARE_SET=2, GET=3, ADD=4, CHECK=5, WAIT=6, GETNUMKEYS=7,
          DELETE_KEY=8, APPEND=9, MULTI_GET=10, MULTI_SET=11, CANCEL_WAIT=12, PING=13,
          QUEUE_PUSH=14, QUEUE_POP=15, QUEUE_LEN=16, LIST=17)


def u8(v: int) -> bytes:
    return struct.pack("<B", v)


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def i64(v: int) -> bytes:
    return struct.pack("<q", v)


def string(b: bytes | str) -> bytes:
    """A wire string: u64 length, then the bytes."""
    if isinstance(b, str):
        b = b.encode()
    return u64(len(b)) + b


def keys_field(keys) -> bytes:
    return u64(len(keys)) + b"".join(string(k) for k in keys)


class ConnectionClosed(Exception):
    pass


class RawConnection:
    """A plain TCP connection for hand-made requests; every read is bounded."""

    def __init__(self, port: int, timeout_s: float = 10, host: str = HOST):
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ConnectionClosed(f"server closed after {got} of {n} bytes")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def recv_u8(self) -> int:
        return self.recv_exact(1)[0]

    def recv_u32(self) -> int:
        return struct.unpack("<I", self.recv_exact(4))[0]

    def recv_i64(self) -> int:
        return struct.unpack("<q", self.recv_exact(8))[0]

    def recv_bytes(self) -> bytes:
        n = struct.unpack("<Q", self.recv_exact(8))[0]
        return self.recv_exact(n)

    def wait_closed_by_server(self) -> bytes:
        """Reads until the server closes (EOF or reset); returns what came first.

        Raises socket.timeout if the server keeps the connection open."""
        received = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def v2_connection(port: int, nonce: int = 0x1234, timeout_s: float = 10) -> RawConnection:
    """A raw connection that did the 2.x handshake (VALIDATE, then PING)."""
    conn = RawConnection(port, timeout_s)
    conn.send(V2_HANDSHAKE + u8(V2["PING"]) + u32(nonce))
    echoed = conn.recv_exact(4)
    assert echoed == u32(nonce), f"PING echoed {echoed.hex()} for nonce {nonce:#x}"
    return conn


class RecordingProxy:
    """A TCP proxy on 127.0.0.1 that records every byte both ways.

    connections[i] = (client_to_server: bytearray, server_to_client:
    bytearray), in accept order. Used to pin the bytes a real client sends.
    """

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server((HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[tuple[bytearray, bytearray]] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept_thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # listener closed
            upstream = socket.create_connection((HOST, self.target_port))
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            record = (bytearray(), bytearray())
            with self._lock:
                self.connections.append(record)
            for src, dst, log in ((client, upstream, record[0]), (upstream, client, record[1])):
                t = threading.Thread(target=self._pump, args=(src, dst, log), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, log: bytearray) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    log.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def recorded(self) -> list[tuple[bytes, bytes]]:
        with self._lock:
            return [(bytes(a), bytes(b)) for a, b in self.connections]

    def close(self) -> None:
        self.listener.close()

    def __enter__(self) -> "RecordingProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
