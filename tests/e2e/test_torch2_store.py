"""dtrun's store and torch 2.15's TCPStore (PyPI, tests/pyhelpers/torch_pypi.py),
both ways:
- torch 2.15's TCPStore client against `dtrun-store serve` (one thread and
  --threads 3) and against the store a `dtrun --standalone` agent hosts
  for its workers: every public call the client has
  (tests/pyhelpers/tcpstore_calls.py; those added since 2.6 too: queue_push,
  queue_pop, queue_len, list_keys, barrier, clone), a gloo group on top, and
  bad input. The transcript of answers must equal the one torch 2.15's own
  (libuv) server gives to the same calls.
- dtrun-store's client verbs against torch 2.15's own server, the libuv one
  (2.15's default) and the classic one (use_libuv=False).
The torch 2.6 twin (its client without libuv, classic server) is
tests/e2e/test_torch26_store.py; torch 1.13's are
tests/integration/test_store_torch_{client,server}.py."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import store_helpers as sh  # noqa: E402
import torch_pypi  # noqa: E402

CALLS = dh.SOURCE_DIR / "tests" / "pyhelpers" / "tcpstore_calls.py"

# torch 2.15's own server, hosted by this script (argv[1]: "1" for libuv):
# prints its port and what it is, waits (as a client of itself) for a
# dtrun-store client to write `dtrun_done` when asked to (argv[2] == "1"),
# then prints what that client left in it; else serves until stdin closes.
TORCH_SERVER = r'''
import datetime, json, sys
import torch, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  use_libuv=sys.argv[1] == "1", timeout=datetime.timedelta(seconds=60))
print(json.dumps({"port": s.port, "libuv": s.libuvBackend, "torch": torch.__version__}),
      flush=True)
if sys.argv[2] != "1":
    sys.stdin.read()
    sys.exit(0)
s.set("from_torch", b"\x01\x02\xfe\xff")
s.add("counter", 5)
s.set("to_delete", "x")
print(json.dumps({"ready": True}), flush=True)
s.wait(["dtrun_done"])
print(json.dumps({"from_dtrun": s.get("from_dtrun").decode(), "counter": s.add("counter", 0),
                  "to_delete": s.check(["to_delete"])}), flush=True)
'''


class TorchServer:
    """torch 2.15's TCPStore server in a child process of the venv."""

    def __init__(self, tmp_path, libuv: bool, scripted: bool):
        script = tmp_path / "torch_server.py"
        script.write_text(TORCH_SERVER)
        self.proc = torch_pypi.popen([torch_pypi.PYTHON, script, int(libuv), int(scripted)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.hello = self.line()
        self.endpoint = f"127.0.0.1:{self.hello['port']}"

    def line(self) -> dict:
        return json.loads(sh.read_line(self.proc.stdout.fileno(), 120))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def run_calls(tmp_path, name: str, port: int) -> dict:
    """tcpstore_calls.py with torch 2.15 against 127.0.0.1:port."""
    out = tmp_path / f"{name}.json"
    r = torch_pypi.run([torch_pypi.PYTHON, CALLS, out, "127.0.0.1", port], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def check_transcript(got: dict, expected: dict) -> None:
    """Every public call covered, and the same answers, step by step, as
    torch 2.15's own server gave (a mismatch names its step)."""
    assert got["torch"].startswith(torch_pypi.TORCH_VERSION + "."), got["torch"]
    assert got["uncovered"] == [], "TCPStore calls no step makes: " + ", ".join(got["uncovered"])
    assert [name for name, _ in got["steps"]] == [name for name, _ in expected["steps"]]
    for (name, answer), (_, torch_answer) in zip(got["steps"], expected["steps"]):
        assert answer == torch_answer, f"{name}: dtrun answered {answer!r}, torch {torch_answer!r}"


@pytest.fixture(scope="module")
def torch_transcript(tmp_path_factory) -> dict:
    """The calls against torch 2.15's own libuv server: what dtrun's store
    must answer alike."""
    torch_pypi.require()
    tmp_path = tmp_path_factory.mktemp("torch_server")
    server = TorchServer(tmp_path, libuv=True, scripted=False)
    try:
        assert server.hello["libuv"] is True
        out = run_calls(tmp_path, "torch", server.hello["port"])
    finally:
        server.close()
    assert out["base_keys"] == 0
    return out


# --threads 3: the client's connections land on different server threads.
@pytest.mark.parametrize("serve_args", sh.SERVE_VARIANTS, ids=sh.SERVE_VARIANT_IDS)
def test_torch_2_15_client_against_dtrun_store_serve(tmp_path, serve_args, torch_transcript):
    with sh.StoreServer(*serve_args) as server:
        out = run_calls(tmp_path, "dtrun", server.port)
        check_transcript(out, torch_transcript)
        assert out["base_keys"] == 0
        # The bad barrier closed its own connection, with one log line.
        server.wait_for_log("BARRIER on key '/text'")
        assert server.alive()


def test_torch_2_15_client_against_the_agents_store(tmp_path, torch_transcript):
    # The worker connects to MASTER_ADDR:MASTER_PORT as a client only
    # (is_master=False) and never hosts a store: whoever answers there is
    # the dtrun agent (test_torch2_agent_store.py shows whose socket it is).
    out = tmp_path / "agent.json"
    r = torch_pypi.dtrun(["--standalone", "--nproc-per-node=1", "--python", torch_pypi.PYTHON,
                          CALLS, out], timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["host"] == "127.0.0.1"
    check_transcript(got, torch_transcript)


@pytest.mark.parametrize("libuv", [True, False], ids=["libuv", "classic"])
def test_dtrun_store_client_against_torch_2_15_server(tmp_path, libuv):
    torch_pypi.require()
    server = TorchServer(tmp_path, libuv=libuv, scripted=True)
    try:
        assert server.hello["torch"].startswith(torch_pypi.TORCH_VERSION + ".")
        assert server.hello["libuv"] is libuv
        assert server.line() == {"ready": True}
        endpoint = server.endpoint
        r = torch_pypi.store_cli(endpoint, "dialect")
        assert (r.returncode, r.stdout) == (0, b"v2\n"), r
        sh.check_verbs_against_torch_server(torch_pypi.store_cli, endpoint)
        r = torch_pypi.store_cli(endpoint, "wait", "from_torch", "from_dtrun")
        assert r.returncode == 0, r
        r = torch_pypi.store_cli(endpoint, "num-keys")
        assert (r.returncode, r.stdout) == (0, b"3\n"), r  # from_torch, counter, from_dtrun
        r = torch_pypi.store_cli(endpoint, "set", "dtrun_done", "1")
        assert r.returncode == 0, r

        seen = server.line()
        assert seen == {"from_dtrun": "caf\u00e9 \u2603", "counter": 8, "to_delete": False}
        assert server.proc.wait(timeout=60) == 0, server.proc.stderr.read()
    finally:
        server.close()
