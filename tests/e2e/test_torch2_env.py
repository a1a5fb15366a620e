"""The worker environment under dtrun against torchrun 2.6's, variable by
variable: both run `--standalone --nproc-per-node=N` inside the torch 2.6
rootfs (tests/pyhelpers/torch2.py) with the same parent environment. The
only differences allowed are listed in DIFFERENCES (docs/agent.md says
why); anything else either sets, or a different value, fails."""

import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch2  # noqa: E402

DUMP_ENV = dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

# The documented differences from torchrun 2.6, each with why.
DIFFERENCES = {
    "MASTER_ADDR": "dtrun 127.0.0.1, torchrun localhost: dtrun's store listens on 127.0.0.1 "
                   "only, and localhost may resolve to ::1 first",
    "MASTER_PORT": "the agent's store port: a free port in both, so different",
    "TORCHELASTIC_RUN_ID": "a fresh uuid4 in both",
    "TORCHELASTIC_ERROR_FILE": "a temporary path in both: torchrun "
                               "<tmp>/torchelastic_<rand>/<run_id>_<rand>/attempt_N/<local_rank>/"
                               "error.json, dtrun <tmp>/<run_id>_<rand>/attempt_N/<local_rank>/"
                               "error.json",
}
# Set by dtrun, not by torchrun 2.6: torchrun >= 2.9 exports it (the
# --signals-to-handle text) and its workers inherit it.
DTRUN_ONLY = {"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT"}


def launch_env():
    env = dh.job_env()
    env.pop("OMP_NUM_THREADS", None)  # let the launchers decide, to compare that too
    for key in ("NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "TORCHELASTIC_SIGNALS_TO_HANDLE"):
        env.pop(key, None)
    return env


def envs_of(result, folder, nproc):
    assert result.returncode == 0, result.stderr
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.parametrize("nproc", [1, 2])
def test_same_as_torchrun_2_6(tmp_path, nproc):
    torch2.require()
    env = launch_env()
    ours_dir, theirs_dir = tmp_path / "dtrun", tmp_path / "torchrun"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    ours = envs_of(torch2.dtrun(["--standalone", f"--nproc-per-node={nproc}",
                                 "--python", torch2.PYTHON, DUMP_ENV, ours_dir],
                                binds=[tmp_path], env=env), ours_dir, nproc)
    theirs = envs_of(torch2.torchrun(["--standalone", f"--nproc-per-node={nproc}",
                                      DUMP_ENV, theirs_dir],
                                     binds=[tmp_path], env=env), theirs_dir, nproc)
    print(f"compared with torchrun {torch2.TORCH_VERSION}; documented differences:")
    for key, why in {**DIFFERENCES, **{k: "dtrun only" for k in DTRUN_ONLY}}.items():
        print(f"  {key}: {why}")
    for rank in range(nproc):
        # What each launcher added or changed on top of the parent environment
        # (the same for both, including what torch2-run's shell adds).
        added_ours = {k: v for k, v in ours[rank].items() if env.get(k) != v}
        added_theirs = {k: v for k, v in theirs[rank].items() if env.get(k) != v}
        assert set(added_ours) - set(added_theirs) == set(DTRUN_ONLY), rank
        assert set(added_theirs) - set(added_ours) == set(), rank
        for key, value in DTRUN_ONLY.items():
            assert ours[rank][key] == value
        for key in sorted(set(added_theirs) - set(DIFFERENCES)):
            assert ours[rank][key] == theirs[rank][key], (rank, key)
        # torchrun 2.x sets the TORCH_ name only; neither sets the old one.
        assert added_theirs["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert "NCCL_ASYNC_ERROR_HANDLING" not in ours[rank]
        assert "NCCL_ASYNC_ERROR_HANDLING" not in theirs[rank]
        assert theirs[rank]["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert theirs[rank]["RANK"] == ours[rank]["RANK"] == str(rank)
        # The documented differences are only these:
        assert ours[rank]["MASTER_ADDR"] == "127.0.0.1"
        assert theirs[rank]["MASTER_ADDR"] == "localhost"
        for e in (ours[rank], theirs[rank]):
            assert 0 < int(e["MASTER_PORT"]) < 65536
            assert UUID.match(e["TORCHELASTIC_RUN_ID"])
        assert re.fullmatch(rf"/tmp/{ours[rank]['TORCHELASTIC_RUN_ID']}_[^/]+/attempt_0/{rank}/"
                            r"error\.json", ours[rank]["TORCHELASTIC_ERROR_FILE"])
        assert re.fullmatch(rf"/tmp/torchelastic_[^/]+/{theirs[rank]['TORCHELASTIC_RUN_ID']}_"
                            rf"[^/]+/attempt_0/{rank}/error\.json",
                            theirs[rank]["TORCHELASTIC_ERROR_FILE"])
    # One store and one run per job.
    for envs in (ours, theirs):
        assert len({e["MASTER_PORT"] for e in envs}) == 1
        assert len({e["TORCHELASTIC_RUN_ID"] for e in envs}) == 1
    # As torchrun: one OpenMP thread per worker when several share the host.
    assert ours[0].get("OMP_NUM_THREADS") == theirs[0].get("OMP_NUM_THREADS") == (
        "1" if nproc > 1 else None)


def test_exported_values_pass_through_as_with_torchrun_2_6(tmp_path):
    """A value the user exported reaches the workers of both launchers: the
    old NCCL name (deprecated, so neither sets it), the new one, and
    OMP_NUM_THREADS; --signals-to-handle's text replaces an exported
    TORCHELASTIC_SIGNALS_TO_HANDLE, as torchrun >= 2.9 does."""
    torch2.require()
    env = launch_env()
    env.update(NCCL_ASYNC_ERROR_HANDLING="0", TORCH_NCCL_ASYNC_ERROR_HANDLING="3",
               OMP_NUM_THREADS="2", TORCHELASTIC_SIGNALS_TO_HANDLE="SIGTERM")
    ours_dir, theirs_dir = tmp_path / "dtrun", tmp_path / "torchrun"
    ours_dir.mkdir()
    theirs_dir.mkdir()
    ours = envs_of(torch2.dtrun(["--standalone", "--nproc-per-node=2",
                                 "--signals-to-handle=SIGUSR1", "--python", torch2.PYTHON,
                                 DUMP_ENV, ours_dir], binds=[tmp_path], env=env), ours_dir, 2)
    theirs = envs_of(torch2.torchrun(["--standalone", "--nproc-per-node=2", DUMP_ENV,
                                      theirs_dir], binds=[tmp_path], env=env), theirs_dir, 2)
    for e in ours + theirs:
        assert e["NCCL_ASYNC_ERROR_HANDLING"] == "0"
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
        assert e["OMP_NUM_THREADS"] == "2"
    for e in ours:
        assert e["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGUSR1"
    for e in theirs:  # 2.6 has no --signals-to-handle and leaves it as it is
        assert e["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM"


def test_dtrun_binaries_find_their_libraries_in_the_rootfs():
    """Built on Debian 12, run on Debian 13: every shared library of dtrun
    and dtrun-store (of this build, plain or ASan+UBSan) resolves there."""
    torch2.require()
    binaries = [dh.DTRUN, torch2.STORE_BIN]
    r = torch2.run(["ldd", *binaries])
    assert r.returncode == 0, r.stderr
    assert "not found" not in r.stdout, r.stdout
    assert "libc.so.6 => /" in r.stdout, r.stdout
    # A portable build needs glibc only; a dynamic one (ASan+UBSan) Debian
    # 12's libfmt, installed into the rootfs.
    if "libfmt.so.9" in subprocess.run(["readelf", "-d", str(dh.DTRUN)], capture_output=True,
                                        text=True, check=True).stdout:
        assert "libfmt.so.9 => /" in r.stdout, r.stdout
