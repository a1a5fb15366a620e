"""The worker environment under dtrun against torchrun 2.15's (the
contract's torch from PyPI, tests/pyhelpers/torch_pypi.py), variable by
variable, on one node: --standalone, exported values, the static backend
and the round after a restart; two hosts are test_torch2_env_hosts.py.
Both launchers run the same job with the same parent environment and the
venv active. The only differences allowed are in torch_env_compare.py's
DIFFERENCES (docs/compatibility.md lists them and says why); anything else
either sets, or a different value, fails."""

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_env_compare as cmp  # noqa: E402
import torch_pypi  # noqa: E402

DUMP_ENV = dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py"


def both(tmp_path, flags, script_args=(), env=None, nproc=2, rounds=(0,)):
    """Runs the same job under dtrun and torchrun 2.15; each worker dumps
    its environment (once per round in `rounds`). Returns (ours, theirs,
    the parent environment), each a list per round of lists per rank."""
    torch_pypi.require()
    env = env or cmp.launch_env()
    out = {}
    for name, launcher in (("dtrun", torch_pypi.dtrun), ("torchrun", torch_pypi.torchrun)):
        folder = tmp_path / name
        folder.mkdir()
        r = launcher([*flags, f"--nproc-per-node={nproc}", cmp.DUMP_ROUNDS, folder,
                      *script_args], env=env, timeout=180)
        assert r.returncode == 0, (name, r.stderr)
        out[name] = [cmp.envs(folder, nproc, rnd) for rnd in rounds]
    return out["dtrun"], out["torchrun"], torch_pypi.venv_env(env)


@pytest.mark.parametrize("nproc", [1, 2])
def test_standalone_same_as_torchrun_2_15(tmp_path, nproc):
    [ours], [theirs], parent = both(tmp_path, ["--standalone"], nproc=nproc)
    cmp.same_but_documented(ours, theirs, parent)
    for rank in range(nproc):
        # torchrun 2.x sets the TORCH_ name only; neither sets the old one.
        assert theirs[rank]["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert "NCCL_ASYNC_ERROR_HANDLING" not in ours[rank]
        assert "NCCL_ASYNC_ERROR_HANDLING" not in theirs[rank]
        assert theirs[rank]["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        # torchrun >= 2.9 exports it too: the same default text.
        assert ours[rank]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
        assert ours[rank]["MASTER_ADDR"] == "127.0.0.1"
        assert theirs[rank]["MASTER_ADDR"] == "localhost"
        for e in (ours[rank], theirs[rank]):
            assert cmp.UUID.match(e["TORCHELASTIC_RUN_ID"])
        assert re.fullmatch(rf"/tmp/{ours[rank]['TORCHELASTIC_RUN_ID']}_[^/]+/attempt_0/{rank}/"
                            r"error\.json", ours[rank]["TORCHELASTIC_ERROR_FILE"])
        assert re.fullmatch(rf"/tmp/torchelastic_[^/]+/{theirs[rank]['TORCHELASTIC_RUN_ID']}_"
                            rf"[^/]+/attempt_0/{rank}/error\.json",
                            theirs[rank]["TORCHELASTIC_ERROR_FILE"])
    # As torchrun: one OpenMP thread per worker when several share the host.
    assert ours[0].get("OMP_NUM_THREADS") == theirs[0].get("OMP_NUM_THREADS") == (
        "1" if nproc > 1 else None)


def test_exported_values_pass_through_as_with_torchrun_2_15(tmp_path):
    """A value the user exported reaches the workers of both launchers: the
    old NCCL name (deprecated, so neither sets it), the new one, and
    OMP_NUM_THREADS; --signals-to-handle's text replaces an exported
    TORCHELASTIC_SIGNALS_TO_HANDLE in both."""
    env = cmp.launch_env()
    env.update(NCCL_ASYNC_ERROR_HANDLING="0", TORCH_NCCL_ASYNC_ERROR_HANDLING="3",
               OMP_NUM_THREADS="2", TORCHELASTIC_SIGNALS_TO_HANDLE="SIGTERM")
    [ours], [theirs], parent = both(tmp_path, ["--standalone", "--signals-to-handle=SIGUSR1"],
                                    env=env)
    cmp.same_but_documented(ours, theirs, parent)
    for e in ours + theirs:
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "0"
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
        assert e["OMP_NUM_THREADS"] == "2"
        assert e["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGUSR1"


def test_static_backend_same_as_torchrun_2_15(tmp_path):
    port = dh.free_port()
    flags = ["--nnodes=1", "--node-rank=0", "--rdzv-backend=static", "--master-addr=127.0.0.1",
             f"--master-port={port}", "--rdzv-id=static-job"]
    [ours], [theirs], parent = both(tmp_path, flags)
    cmp.same_but_documented(ours, theirs, parent, same_port=True)
    for e in ours + theirs:
        assert e["MASTER_ADDR"] == "127.0.0.1"
        assert e["MASTER_PORT"] == str(port)
        assert e["TORCHELASTIC_RUN_ID"] == "static-job"


def test_the_round_after_a_restart_same_as_torchrun_2_15(tmp_path):
    """Rank 1 exits 3 in round 0 (after dumping its environment): both
    launchers restart the group once; round 1's environment is the same
    (TORCHELASTIC_RESTART_COUNT 1 in both: one node, where dtrun's round
    number and torchrun's restarts spent agree)."""
    ours, theirs, parent = both(tmp_path, ["--standalone", "--max-restarts=1"],
                                script_args=["--fail-rank=1"], rounds=(0, 1))
    for rnd in (0, 1):
        cmp.same_but_documented(ours[rnd], theirs[rnd], parent, attempt=rnd)
        for e in ours[rnd] + theirs[rnd]:
            assert e["TORCHELASTIC_RESTART_COUNT"] == str(rnd)
            assert e["TORCHELASTIC_MAX_RESTARTS"] == "1"
    # The same run and store through the restart, in both.
    for envs in (ours, theirs):
        assert envs[0][0]["TORCHELASTIC_RUN_ID"] == envs[1][0]["TORCHELASTIC_RUN_ID"]
    print("round 1 (after the restart):", json.dumps(
        {k: ours[1][0][k] for k in sorted(ours[1][0]) if k.startswith("TORCHELASTIC_")}))
