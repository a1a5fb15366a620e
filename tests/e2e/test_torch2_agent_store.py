"""Workers use the agent's store as under torchrun 2.x: dtrun sets
TORCHELASTIC_USE_AGENT_STORE=True, so torch 2.15's init_process_group
(env://) connects to MASTER_ADDR:MASTER_PORT as a client only, and that
store is the one dtrun itself hosts (the listening socket belongs to the
workers' parent, the dtrun agent). Runs with the contract's torch from
PyPI (tests/pyhelpers/torch_pypi.py)."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import torch_pypi  # noqa: E402

NPROC = 3

WORKER = r'''
import json, os, sys
import torch
import torch.distributed as dist

def listener_inodes(port):
    """Inodes of the sockets listening on `port` (any address)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    found.add(cols[9])
    return found

def socket_inodes(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out

port = int(os.environ["MASTER_PORT"])
dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
# Under TORCHELASTIC_USE_AGENT_STORE=True torch 2.x builds a client-only
# TCPStore: whoever listens on MASTER_PORT is the agent.
listeners = listener_inodes(port)
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"torch": torch.__version__, "world": world, "sum": total.item(),
               "use_agent_store": os.environ["TORCHELASTIC_USE_AGENT_STORE"],
               "master": f"{os.environ['MASTER_ADDR']}:{port}",
               "listeners": len(listeners),
               "listener_is_parents": bool(listeners) and listeners <= socket_inodes(os.getppid()),
               "listener_is_mine": bool(listeners & socket_inodes(os.getpid())),
               "parent": open(f"/proc/{os.getppid()}/comm").read().strip()}, f)
dist.destroy_process_group()
'''


def test_init_process_group_uses_the_agents_store(tmp_path):
    torch_pypi.require()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    r = torch_pypi.dtrun(["--standalone", f"--nproc-per-node={NPROC}", "--python",
                          torch_pypi.PYTHON, script, tmp_path])
    assert r.returncode == 0, r.stderr
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(NPROC)]
    assert len({x["master"] for x in results}) == 1
    for x in results:
        assert x["torch"].startswith(torch_pypi.TORCH_VERSION + ".")
        assert x["use_agent_store"] == "True"
        assert x["world"] == NPROC
        assert x["sum"] == NPROC * (NPROC + 1) / 2
        assert x["master"].startswith("127.0.0.1:")
        # One listener on MASTER_PORT, a socket of dtrun (the parent), none
        # of a worker's own (torch did not host a store of its own).
        assert x["listeners"] == 1
        assert x["parent"] == "dtrun"
        assert x["listener_is_parents"] is True
        assert x["listener_is_mine"] is False
