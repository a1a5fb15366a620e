"""The worker environment under dtrun against torchrun 2.15's on two hosts
(network namespaces, tests/pyhelpers/netns_hosts.py), with the contract's
torch from PyPI active on both (tests/pyhelpers/torch_pypi.py): the c10d
and the static backend, each job run once by each launcher, two workers a
host. The one-node cases and the rules of the comparison are in
test_torch2_env.py and tests/pyhelpers/torch_env_compare.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
import torch_env_compare as cmp  # noqa: E402
import torch_pypi  # noqa: E402

REASON = netns_hosts.unavailable_reason()
if REASON:
    print(f"skipping the two-host environment tests: {REASON}")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

NPROC = 2
WORLD = 2 * NPROC


def on_two_hosts(tmp_path, flags_for_host):
    """Runs the job under dtrun, then under torchrun 2.15, on hosts 1 and 2
    (flags_for_host(launcher, host) each); returns (ours, theirs, parent)."""
    torch_pypi.require()
    env = torch_pypi.venv_env(cmp.launch_env(GLOO_SOCKET_IFNAME="eth0"))
    out = {}
    # Named hosts: torchrun's c10d agents resolve each other's names
    # (socket.getfqdn, then getaddrinfo), so an unresolvable name fails it.
    with netns_hosts.Hosts(2, names=True) as hosts:
        for name in ("dtrun", "torchrun"):
            folder = tmp_path / name
            folder.mkdir()
            launcher = [dh.DTRUN] if name == "dtrun" else [torch_pypi.PYTHON, "-m",
                                                           "torch.distributed.run"]
            procs = [hosts.start(i, [*launcher, *flags_for_host(name, i),
                                     f"--nproc-per-node={NPROC}", cmp.DUMP_ROUNDS, folder], env)
                     for i in (1, 2)]
            for p in procs:
                _, stderr = p.communicate(timeout=180)
                assert p.returncode == 0, (name, stderr)
            out[name] = cmp.envs(folder, WORLD)
    return out["dtrun"], out["torchrun"], env


def test_c10d_on_two_hosts_same_as_torchrun_2_15(tmp_path):
    ports = {"dtrun": 29400, "torchrun": 29401}  # each job its own endpoint

    def flags(name, host):
        return ["--nnodes=2", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{ports[name]}",
                "--rdzv-id=env-c10d", f"--rdzv-conf={dh.FAST_RDZV}"]

    ours, theirs, parent = on_two_hosts(tmp_path, flags)
    cmp.same_but_documented(ours, theirs, parent, same_run_id=True)
    for e in ours + theirs:
        assert e["TORCHELASTIC_RUN_ID"] == "env-c10d"
        assert e["WORLD_SIZE"] == str(WORLD)
        assert e["GROUP_WORLD_SIZE"] == "2"
        assert e["GROUP_RANK"] == str(int(e["RANK"]) // NPROC)
    # The documented difference: the workers' store host, by address (dtrun:
    # the endpoint's host, which opens it) or by name (torchrun: group rank
    # 0's FQDN, which a worker elsewhere must be able to resolve).
    assert {e["MASTER_ADDR"] for e in ours} == {netns_hosts.Hosts.addr(1)}
    assert len({e["MASTER_ADDR"] for e in theirs}) == 1
    assert theirs[0]["MASTER_ADDR"] in ("h1", "h2")


def test_static_on_two_hosts_same_as_torchrun_2_15(tmp_path):
    ports = {"dtrun": dh.free_port(), "torchrun": dh.free_port()}

    def flags(name, host):
        return ["--nnodes=2", f"--node-rank={host - 1}", "--rdzv-backend=static",
                f"--master-addr={netns_hosts.Hosts.addr(1)}", f"--master-port={ports[name]}",
                "--rdzv-id=env-static"]

    ours, theirs, parent = on_two_hosts(tmp_path, flags)
    cmp.same_but_documented(ours, theirs, parent, same_addr=True, same_run_id=True)
    for launched, name in ((ours, "dtrun"), (theirs, "torchrun")):
        for e in launched:
            assert e["MASTER_ADDR"] == netns_hosts.Hosts.addr(1)
            assert e["MASTER_PORT"] == str(ports[name])
            assert e["GROUP_RANK"] == str(int(e["RANK"]) // NPROC)
