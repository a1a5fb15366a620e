"""Who may connect to a store dtrun hosts (docs/store.md, "Who may connect").

- The single-node store (--standalone) serves only the processes of the
  user running dtrun: a client running as `nobody` is closed before any
  reply, with one log line naming the opt-out; our own clients and the
  job's workers are served. --store-allow-any-user (or
  PET_STORE_ALLOW_ANY_USER=1) serves everyone.
- An allow-list of client networks (here `dtrun-store serve
  --allow-networks`, in network-namespace hosts): a listed client is
  served, an unlisted one refused with one log line, and this machine's
  own clients (loopback, its own address) are always served.
"""

import json
import os
import pwd
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
import store_helpers as sh  # noqa: E402

# A 2.x client: VALIDATE + PING, then everything the server sends until it
# answers the PING or closes. Prints "answered <hex>" or "closed <hex>".
PROBE = r'''
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=20)
got = b""
try:
    s.sendall(bytes.fromhex("00cef7853c") + bytes([13]) + struct.pack("<I", 0x5eed))
    while len(got) < 4:
        chunk = s.recv(4 - len(got))
        if not chunk:
            break
        got += chunk
except (ConnectionResetError, BrokenPipeError):
    pass
print(("answered " if len(got) == 4 else "closed ") + got.hex())
'''
ANSWER = "answered " + (0x5eed).to_bytes(4, "little").hex()


def root_reason():
    if os.geteuid() != 0:
        return "running a client as another user needs root"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "there is no user 'nobody' here"
    return None


def probe_as_nobody(port: int) -> str:
    r = subprocess.run([dh.PYTHON, "-c", PROBE, "127.0.0.1", str(port)], user="nobody",
                       group=pwd.getpwnam("nobody").pw_gid, extra_groups=[],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


class StandaloneJob:
    """`dtrun --standalone` whose one worker reports MASTER_PORT, waits for
    a line on the GO fifo, then uses the store itself (ADD) and exits."""

    def __init__(self, tmp_path, *flags, **env):
        self.events = dh.Fifo(tmp_path, "events")
        self.go = dh.Fifo(tmp_path, "go")
        self.out = tmp_path / "added"
        store_cli = dh.BUILD_DIR / "launcher" / "dtrun-store"
        worker = (f'echo "$MASTER_PORT" > {self.events.path}; read go < {self.go.path}; '
                  f'"{store_cli}" --endpoint 127.0.0.1:$MASTER_PORT add done 1 > {self.out}')
        self.env = dh.job_env(**env)
        self.proc = dh.start(["--standalone", *flags, "--no-python", "/bin/sh", "-c", worker],
                             self.env)
        self.port = int(self.events.lines(1)[0])

    def finish(self) -> str:
        self.go.write("go\n")
        _, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        assert self.out.read_text().strip() == "1"
        return err


@pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")
def test_standalone_store_serves_only_its_user(tmp_path):
    job = StandaloneJob(tmp_path)
    try:
        assert probe_as_nobody(job.port) == "closed"
        # Our own user is served, here and in the worker (finish()).
        sh.v2_connection(job.port).close()
        err = job.finish()
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
    refused = [line for line in err.splitlines() if "refused connection" in line]
    assert len(refused) == 1, err
    nobody, me = pwd.getpwnam("nobody").pw_uid, os.geteuid()
    assert re.search(r"refused connection from 127\.0\.0\.1:\d+: it belongs to uid "
                     rf"{nobody}, not to dtrun's user \(uid {me}\); --store-allow-any-user "
                     r"admits every user$", refused[0]), err


@pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")
@pytest.mark.parametrize("how", ["flag", "env"])
def test_allow_any_user_serves_other_users(tmp_path, how):
    flags = ["--store-allow-any-user"] if how == "flag" else []
    env = {"PET_STORE_ALLOW_ANY_USER": "1"} if how == "env" else {}
    job = StandaloneJob(tmp_path, *flags, **env)
    try:
        assert probe_as_nobody(job.port) == ANSWER
        err = job.finish()
        assert "refused connection" not in err
    finally:
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()


@pytest.mark.skipif(root_reason() is not None, reason=root_reason() or "")
def test_store_serve_same_user():
    with sh.StoreServer("--same-user") as server:
        assert probe_as_nobody(server.port) == "closed"
        sh.v2_connection(server.port).close()
        line = server.wait_for_log("refused connection")
    assert "leaving out --same-user admits every user" in line, line
    assert len([x for x in server.log_lines() if "refused" in x]) == 1


def dry_run(*flags):
    r = dh.run(["--dry-run", *flags, "--no-python", "/bin/true"])
    return r


def test_dry_run_shows_who_may_connect():
    r = dry_run("--standalone")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["store_access"] == {"same_user_only": True,
                                                    "allowed_networks": []}
    r = dry_run("--standalone", "--store_allow_any_user")
    assert json.loads(r.stdout)["store_access"]["same_user_only"] is False
    r = dry_run("--nnodes=2", "--rdzv-endpoint=10.0.0.1:29400", "--rdzv-backend=c10d",
                "--store-allow-networks", "10.0.0.0/8, fd00::/8,192.168.1.7")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["store_access"] == {
        "same_user_only": False, "allowed_networks": ["10.0.0.0/8", "fd00::/8",
                                                      "192.168.1.7/32"]}


def test_a_bad_network_is_a_usage_error():
    r = dry_run("--nnodes=2", "--rdzv-endpoint=10.0.0.1:29400",
                "--store-allow-networks=10.1.0.0/8")
    assert r.returncode == 2
    assert "--store-allow-networks: '10.1.0.0/8' is not a client network: bits are set after " \
           "the prefix; did you mean 10.0.0.0/8?" in r.stderr, r.stderr


NETNS_REASON = netns_hosts.unavailable_reason()


@pytest.mark.skipif(NETNS_REASON is not None, reason=NETNS_REASON or "")
def test_allow_list_serves_listed_networks_and_this_machine():
    with netns_hosts.Hosts(3) as hosts:
        server = hosts.start(1, [sh.STORE_BIN, "serve", "--host", "", "--port", "0",
                                 "--allow-networks", f"{hosts.addr(2)}/32,fd00::/8"],
                             dh.job_env())
        port = int(sh.read_line(server.stdout.fileno(), 30))

        def probe(index, target):
            r = subprocess.run(hosts.command(index, [dh.PYTHON, "-c", PROBE, target, port]),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout.strip()

        assert probe(2, hosts.addr(1)) == ANSWER   # a listed network
        assert probe(1, "127.0.0.1") == ANSWER     # this machine, over loopback
        assert probe(1, hosts.addr(1)) == ANSWER   # this machine, by its own address
        assert probe(3, hosts.addr(1)) == "closed"  # not listed
        server.terminate()
        _, err = server.communicate(timeout=30)
    # One line, for the one refused client (the dual-stack listener may
    # show it IPv4-mapped).
    refused = [line for line in err.splitlines() if "refused connection" in line]
    assert len(refused) == 1, err
    assert re.search(r"refused connection from (::ffff:)?10\.77\.0\.3:\d+: its address is "
                     r"outside --allow-networks 10\.77\.0\.2/32,fd00::/8$", refused[0]), err


@pytest.mark.skipif(NETNS_REASON is not None, reason=NETNS_REASON or "")
def test_multi_node_job_with_an_allow_list():
    """Two agents (h1 hosts the store, h2 listed) and their workers meet and
    finish; h3, not listed, is refused while the job waits for it."""
    with netns_hosts.Hosts(3) as hosts:
        store_cli = dh.BUILD_DIR / "launcher" / "dtrun-store"
        # Each worker uses this round's workers' store (MASTER_ADDR:MASTER_PORT,
        # on h1, under the same allow list), says so in the endpoint store,
        # then waits there for the probe's verdict before finishing.
        endpoint = f"{hosts.addr(1)}:29400"
        worker = (f'"{store_cli}" --endpoint "$MASTER_ADDR:$MASTER_PORT" set "w$RANK" ok && '
                  f'"{store_cli}" --endpoint "$MASTER_ADDR:$MASTER_PORT" get "w$RANK" && '
                  f'"{store_cli}" --endpoint {endpoint} set "w$RANK" ok && '
                  f'"{store_cli}" --endpoint {endpoint} --timeout 170 wait probed')
        args = [str(dh.DTRUN), "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={hosts.addr(1)}:29400", "--rdzv-id=allow1",
                f"--store-allow-networks={hosts.addr(2)}/32", "--no-python",
                "/bin/sh", "-c", worker]
        env = dh.job_env()
        procs = [hosts.start(i, args, env) for i in (1, 2)]
        # Every worker of both nodes has reached the store.
        r = subprocess.run(hosts.command(2, [store_cli, "--endpoint", endpoint, "--timeout",
                                             "120", "wait", "w0", "w1", "w2", "w3"]),
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        refused = subprocess.run(hosts.command(3, [dh.PYTHON, "-c", PROBE, hosts.addr(1),
                                                   "29400"]),
                                 capture_output=True, text=True, timeout=60)
        assert refused.stdout.strip() == "closed", refused.stderr
        # ADD, not SET: its reply leaves the store in the same turn that
        # wakes the workers, before the job can finish and close the store
        # (dtrun-store's SET needs a second round trip, which could meet a
        # store already gone).
        subprocess.run(hosts.command(2, [store_cli, "--endpoint", endpoint, "add", "probed",
                                         "1"]), check=True, capture_output=True, timeout=60)
        outs = [p.communicate(timeout=180) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    lines = [line for line in outs[0][1].splitlines() if "refused connection" in line]
    assert len(lines) == 1, outs[0][1]
    assert re.search(r"from (::ffff:)?10\.77\.0\.3:\d+: its address is outside "
                     r"--store-allow-networks 10\.77\.0\.2/32$", lines[0]), outs[0][1]
