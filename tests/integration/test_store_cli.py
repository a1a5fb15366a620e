"""`dtrun-store`'s exit codes as documented (README "Using the pieces"):
0 ok, 1 check/delete negative, 2 usage (CLI11's parse errors and every
number out of range included), 3 unreachable, 4 timeout, 5 other. Each
usage error is one line naming the flag and what it accepts."""

import os
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ.get("DTRUN_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..")), "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402


def store_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(sh.STORE_BIN), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def server():
    srv = sh.StoreServer()
    yield srv
    assert srv.stop() == 0


@pytest.mark.parametrize("args, message", [
    (["add", "k", "99999999999999999999"],
     "add DELTA: '99999999999999999999' is not a whole number from -9223372036854775808 to "
     "9223372036854775807"),
    (["add", "k", "1e3"], "add DELTA: '1e3' is not a whole number"),
    (["--timeout", "nan", "get", "k"],
     "--timeout: 'nan' is not a number of seconds from 0.001 to 315360000 (10 years)"),
    (["--timeout", "0", "wait", "k"], "--timeout: '0' is not a number of seconds from 0.001"),
    (["--connect-timeout", "1e300", "get", "k"], "--connect-timeout: '1e300' is not a number"),
    (["--endpoint", "127.0.0.1:70000", "get", "k"], "--endpoint: '127.0.0.1:70000' is not"),
    (["serve", "--max-value-bytes", "-1"],
     "--max-value-bytes: '-1' is not a whole number from 1 to 1073741824"),
    (["serve", "--max-value-bytes", "0"], "--max-value-bytes: '0' is not a whole number"),
    (["serve", "--port", "65536"], "--port: '65536' is not a whole number from 0 to 65535"),
    (["serve", "--threads", "0"], "--threads: '0' is not a whole number from 1 to 1024"),
    (["serve", "--threads", "1025"], "--threads: '1025' is not a whole number from 1 to 1024"),
    (["--dialect", "v3", "get", "k"], "--dialect: v3 not in {auto,v2,v1.13}"),
    (["get"], "key is required"),
    ([], "A subcommand is required"),
    (["--bogus", "get", "k"], "--bogus"),
    # "--flag=" is an empty value (as getopt reads it), never the next token.
    (["--endpoint=", "set", "k", "v"], "--endpoint: '' is not host:port"),
    (["--endpoint=", "--connect-timeout=1", "get", "k"], "--endpoint: '' is not host:port"),
    (["serve", "--port=", "--max-value-bytes=8"], "--port: '' is not a whole number"),
])
def test_usage_errors_exit_2_with_one_line(args, message):
    r = store_cli(*args)
    assert r.returncode == sh.EXIT_USAGE, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("dtrun-store: error: "), lines[0]
    assert message in lines[0], lines[0]
    assert lines[0].endswith("(run 'dtrun-store --help')"), lines[0]


def test_help_exits_0():
    r = store_cli("--help")
    assert r.returncode == 0, r
    assert "serve" in r.stdout


def test_an_out_of_range_delta_changes_nothing(server):
    r = sh.cli(server.endpoint, "add", "counter", "99999999999999999999")
    assert r.returncode == sh.EXIT_USAGE, r
    assert sh.cli(server.endpoint, "check", "counter").returncode == sh.EXIT_NOT_READY
    r = sh.cli(server.endpoint, "add", "counter", "-9223372036854775808")
    assert (r.returncode, r.stdout) == (0, b"-9223372036854775808\n"), r


def test_a_refused_connection_exits_3():
    # Bound but not listening: the port stays ours (no other test can take
    # it) and every connection to it is refused.
    with socket.socket() as s:
        s.bind((sh.HOST, 0))
        port = s.getsockname()[1]
        r = sh.cli(f"{sh.HOST}:{port}", "get", "k", connect_timeout_s=0.5)
    assert r.returncode == sh.EXIT_UNREACHABLE, r
    assert b"could not reach the store" in r.stderr, r
    assert len(r.stderr.strip().splitlines()) == 1, r


def test_a_wait_that_times_out_exits_4(server):
    r = sh.cli(server.endpoint, "wait", "never_set", timeout_s=0.3)
    assert r.returncode == sh.EXIT_TIMEOUT, r
    assert b"timed out" in r.stderr, r


def test_serve_that_cannot_listen_exits_5(server):
    r = store_cli("serve", "--port", str(server.port))
    assert r.returncode == sh.EXIT_STORE_ERROR, r
    assert "the port is in use" in r.stderr, r
