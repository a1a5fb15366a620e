"""dtrun's store and torch 2.6's TCPStore, both ways, in the torch 2.6
rootfs (tests/pyhelpers/torch2.py): the dtrun-store client against torch
2.6's own TCPStore server, and torch 2.6's TCPStore client (with a gloo
process group on top) against `dtrun-store serve`. Debian's torch 2.6 is
built without libuv, so its server here is the classic (non-libuv) one;
the test says so in its output. It stays on 2.6 for that: the store
against a 2.x client and server without libuv. The torch 2.15 twin (the
contract's torch, libuv, every call 2.15 has) is
tests/e2e/test_torch2_store.py; the torch 1.13 ones are
tests/integration/test_store_torch_{client,server}.py."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import store_helpers as sh  # noqa: E402
import torch2  # noqa: E402

# torch 2.6's server, hosted by this script: prints its port, then waits
# (as a client of itself) for the dtrun-store client to finish, and prints
# what that client left in it.
TORCH_SERVER = r'''
import datetime, json, sys
import torch, torch.distributed as dist
s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                  timeout=datetime.timedelta(seconds=60))
s.set("from_torch", b"\x01\x02\xfe\xff")
s.add("counter", 5)
s.set("to_delete", "x")
print(json.dumps({"port": s.port, "libuv": s.libuvBackend, "torch": torch.__version__}),
      flush=True)
s.wait(["dtrun_done"])
print(json.dumps({"from_dtrun": s.get("from_dtrun").decode(), "counter": s.add("counter", 0),
                  "to_delete": s.check(["to_delete"])}), flush=True)
'''

# torch 2.6's client against dtrun-store serve at argv[1]; asserts inside,
# prints a JSON summary.
TORCH_CLIENT = r'''
import datetime, json, sys, threading
import torch, torch.distributed as dist
port = int(sys.argv[1])
def client():
    return dist.TCPStore("127.0.0.1", port, is_master=False,
                         timeout=datetime.timedelta(seconds=30))
s = client()
every_byte = bytes(range(256)) * 4
s.set("bin", every_byte)
assert s.get("bin") == every_byte
assert s.add("counter", 5) == 5 and s.add("counter", -7) == -2
assert s.get("counter") == b"-2"
assert s.compare_set("cas", "", "first") == b"first"
assert s.compare_set("cas", "wrong", "second") == b"first"
assert s.compare_set("cas", "first", "second") == b"second"
s.multi_set(["m1", "m2"], ["v1", b"v2"])
assert s.multi_get(["m1", "m2"]) == [b"v1", b"v2"]
s.append("log", "a")
s.append("log", "bc")
assert s.get("log") == b"abc"
assert s.check(["bin", "m1"]) and not s.check(["missing"])
try:
    s.wait(["missing"], datetime.timedelta(milliseconds=200))
    raise AssertionError("wait for a missing key returned")
except dist.DistStoreError:
    pass
assert s.delete_key("m1") and not s.delete_key("m1")
keys = s.num_keys()
# A second client sees the same data, and a wait wakes on another's write.
other = client()
woke = []
waiter = threading.Thread(target=lambda: (other.wait(["late"]), woke.append(other.get("late"))))
waiter.start()
s.set("late", "here")
waiter.join(30)
assert woke == [b"here"], woke
# A gloo process group of two ranks (threads) bootstrapped on our server.
results = [None, None]
def rank(r):
    store = dist.PrefixStore("gloo_pg", client())
    pg = dist.ProcessGroupGloo(store, r, 2, datetime.timedelta(seconds=30))
    t = torch.tensor([float(r + 1)])
    pg.allreduce([t]).wait()
    results[r] = t.item()
threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
for t in threads: t.start()
for t in threads: t.join(60)
assert results == [3.0, 3.0], results
print(json.dumps({"torch": torch.__version__, "num_keys": keys, "allreduce": results}))
'''


def test_dtrun_store_client_against_torch_2_6_server(tmp_path):
    torch2.require()
    print(torch2.NON_LIBUV_NOTE)
    script = tmp_path / "server.py"
    script.write_text(TORCH_SERVER)
    server = torch2.popen([torch2.PYTHON, script], binds=[tmp_path], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
    try:
        hello = json.loads(sh.read_line(server.stdout.fileno(), 60))
        assert hello["torch"].startswith(torch2.TORCH_VERSION + ".")
        assert hello["libuv"] is False  # the classic server (see the note above)
        endpoint = f"127.0.0.1:{hello['port']}"

        sh.check_verbs_against_torch_server(torch2.store_cli, endpoint)
        r = torch2.store_cli(endpoint, "num-keys")
        assert r.returncode == 0 and int(r.stdout) >= 3, r
        r = torch2.store_cli(endpoint, "set", "dtrun_done", "1")
        assert r.returncode == 0, r

        seen = json.loads(sh.read_line(server.stdout.fileno(), 60))
        assert seen == {"from_dtrun": "caf\u00e9 \u2603", "counter": 8, "to_delete": False}
        assert server.wait(timeout=60) == 0, server.stderr.read()
    finally:
        server.kill()
        server.wait()


# --threads 3: the client's connections land on different server threads.
@pytest.mark.parametrize("serve_args", [[], ["--threads", "3"]], ids=["one-thread", "threads"])
def test_torch_2_6_client_against_dtrun_store_serve(tmp_path, serve_args):
    torch2.require()
    print("dtrun-store serve with torch 2.6's TCPStore client (" + torch2.NON_LIBUV_NOTE + ")")
    script = tmp_path / "client.py"
    script.write_text(TORCH_CLIENT)
    with sh.StoreServer(*serve_args) as server:
        r = torch2.run([torch2.PYTHON, script, server.port], binds=[tmp_path])
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["torch"].startswith(torch2.TORCH_VERSION + ".")
        assert out["allreduce"] == [3.0, 3.0]
        assert out["num_keys"] == 5  # bin, counter, cas, m2, log
        assert server.alive()
