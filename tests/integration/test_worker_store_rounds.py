"""A multi-node (c10d) job's workers get a fresh, empty store every round.

torch >= 2.x workers no longer prefix their store keys by round (torchrun
2.x opens a new store per round), so a restarted group that met in the
last round's store would read that round's gloo peer addresses. Two dtrun
agents on this machine (one hosts the endpoint store on 127.0.0.1, the
other joins it), one worker each, speaking to MASTER_ADDR:MASTER_PORT with
torch 1.13's TCPStore client and no prefix, as torch 2.x's workers do: in
round 0 rank 0 writes a key and rank 1 fails once it sees it; round 1 must
be on another port and must not see that key."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402


WORKER = """
import json, os, signal, sys
from datetime import timedelta
from torch.distributed import TCPStore
e = os.environ


def listening_sockets(pid):
    # TCP sockets in LISTEN that process `pid` (our agent) holds.
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            count += fields[3] == "0A" and fields[9] in inodes
    return count


rank, attempt = int(e["RANK"]), int(e["TORCHELASTIC_RESTART_COUNT"])
store = TCPStore(e["MASTER_ADDR"], int(e["MASTER_PORT"]), int(e["WORLD_SIZE"]), False,
                 timedelta(seconds=60))
# 1.13's client has no check(): compare_set with an expected value that
# is never stored answers the current value, or that value when absent.
seen = store.compare_set("peer_of_round_0", "absent", "absent") != b"absent"
with open(os.path.join(sys.argv[1], f"{attempt}.{rank}.json"), "w") as f:
    json.dump({"port": int(e["MASTER_PORT"]), "stale_key_seen": seen,
               "agent_listeners": listening_sockets(os.getppid()),
               "agent_threads": len(os.listdir(f"/proc/{os.getppid()}/task"))}, f)
if attempt == 0:
    if rank == 0:
        store.set("peer_of_round_0", "10.9.9.9:1234")
        signal.pause()
    store.wait(["peer_of_round_0"])  # written, so the next round could see it
    sys.exit(3)
"""


# store_threads=2: the host's stores (the endpoint's and each round's
# workers') run on threads of their own, and the last round's, threads
# and all, is gone when the next round starts.
@pytest.mark.parametrize("rdzv_conf", ["", "store_threads=2"], ids=["agent-loop", "store-threads"])
def test_each_round_gets_a_new_empty_worker_store(tmp_path, rdzv_conf):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    nodes = dh.run_two_local_nodes(
        ["--nproc-per-node=1", "--rdzv-id=wstore1", "--max-restarts=1"],
        ["--python", dh.PYTHON, str(script), str(tmp_path)], rdzv_conf=rdzv_conf)
    for node in nodes:
        assert node.returncode == 0, node.stderr
    seen = {(a, r): json.loads((tmp_path / f"{a}.{r}.json").read_text())
            for a in (0, 1) for r in (0, 1)}
    # Round 1 starts empty: the key of round 0 is gone.
    assert not seen[1, 0]["stale_key_seen"]
    assert not seen[1, 1]["stale_key_seen"]
    # One store per round for the whole group, neither the endpoint's.
    ports = {a: {seen[a, r]["port"] for r in (0, 1)} for a in (0, 1)}
    assert len(ports[0]) == 1 and len(ports[1]) == 1, ports
    assert ports[0] != ports[1]
    assert nodes[0].endpoint_port not in ports[0] | ports[1]
    # In each round the host listens on the endpoint and that round's
    # workers' store only (the last round's is closed), the other node on
    # nothing.
    for a in (0, 1):
        assert sorted(seen[a, r]["agent_listeners"] for r in (0, 1)) == [0, 2], seen
    assert "round 1: the workers' store is on port" in nodes[0].stderr
    # With store_threads=2 the host's two stores (the endpoint's, this
    # round's workers') run on 2 threads each, and only those: the last
    # round's are joined. The other node hosts nothing.
    extra = 4 if rdzv_conf else 0
    for a in (0, 1):
        other, host = sorted(seen[a, r]["agent_threads"] for r in (0, 1))
        assert host - other == extra, seen
