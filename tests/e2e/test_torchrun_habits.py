"""What `python -m torch.distributed.run` users type, run by the real
torchrun (the contract's torch from PyPI, tests/pyhelpers/torch_pypi.py)
and by dtrun side by side: `--nnodes=1` without an endpoint, c10d on
`localhost:0`, the PET_* and TORCHELASTIC_* variables as that torchrun
reads them, `--nproc-per-node cpu` under taskset, and the exit codes. Each
test asserts what the workers saw under both launchers; where dtrun
differs, the difference docs/compatibility.md states.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402

DUMP_ENV = dh.SOURCE_DIR / "tests" / "pyhelpers" / "dump_env.py"
LAUNCHERS = {"torchrun": torch_pypi.torchrun, "dtrun": torch_pypi.dtrun}
# What both launchers must give the same job alike (ports, temporary paths
# and the error file's folder differ by design: docs/compatibility.md).
SAME = ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
        "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE"]


def clean_env(**extra: str) -> dict[str, str]:
    env = dh.job_env(**extra)
    for name in ("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
                 "TORCHELASTIC_RUN_ID"):
        if name not in extra:
            env.pop(name, None)
    return env


def worker_envs(tmp_path: Path, name: str, flags: list[str], nproc: int,
                env: dict[str, str] | None = None, prefix: list[str] = ()) -> list[dict]:
    """Runs DUMP_ENV under launcher `name` and returns each rank's
    environment (rank order)."""
    out = tmp_path / name
    out.mkdir(parents=True)
    args = [*flags, str(DUMP_ENV), str(out)]
    if prefix:
        # A command before the launcher (taskset): run through the venv.
        launcher = ([torch_pypi.require(), "-m", "torch.distributed.run"] if name == "torchrun"
                    else [str(dh.DTRUN)])
        r = torch_pypi.run([*prefix, *launcher, *args], env=env or clean_env(), timeout=300)
    else:
        r = LAUNCHERS[name](args, env=env or clean_env(), timeout=300)
    assert r.returncode == 0, f"{name}: {r.stderr}"
    envs = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(nproc)]
    assert len(list(out.glob("rank*.json"))) == nproc
    return envs


def both(tmp_path: Path, flags: list[str], nproc: int, **kw) -> dict[str, list[dict]]:
    torch_pypi.require()
    return {name: worker_envs(tmp_path, name, flags, nproc, **kw) for name in LAUNCHERS}


def same_part(envs: list[dict]) -> list[dict]:
    return [{k: e.get(k) for k in SAME} for e in envs]


def is_uuid4(text: str) -> bool:
    try:
        return uuid.UUID(text).version == 4 and str(uuid.UUID(text)) == text
    except ValueError:
        return False


def test_nnodes_1_without_an_endpoint_is_a_fresh_c10d_run_in_both(tmp_path):
    # torchrun 2.12+: static, no endpoint, no --master-port, one node ->
    # c10d on localhost:0 with a uuid4 run id (the workers' store on the
    # agent's); an explicit --master-port keeps the static backend and its
    # run id "none".
    seen = both(tmp_path / "c10d", ["--nnodes=1", "--nproc-per-node=2"], 2)
    assert same_part(seen["dtrun"]) == same_part(seen["torchrun"])
    for name, envs in seen.items():
        run_ids = {e["TORCHELASTIC_RUN_ID"] for e in envs}
        assert len(run_ids) == 1 and is_uuid4(run_ids.pop()), (name, envs[0])
        assert envs[0]["MASTER_PORT"] != "29500", name

    port = dh.free_port()
    seen = both(tmp_path / "static", ["--nnodes=1", "--nproc-per-node=2",
                                      f"--master-port={port}"], 2)
    assert same_part(seen["dtrun"]) == same_part(seen["torchrun"])
    for name, envs in seen.items():
        assert [(e["TORCHELASTIC_RUN_ID"], e["MASTER_PORT"]) for e in envs] == [
            ("none", str(port))] * 2, name


def test_c10d_on_localhost_port_0_with_pet_variables_is_the_same_in_both(tmp_path):
    # A private c10d store on a free port, the other flags from PET_*
    # (torchrun's env action: the variable is the default, the flag wins).
    env = clean_env(PET_RDZV_ID="petjob", PET_NPROC_PER_NODE="3", PET_MAX_RESTARTS="1",
                    PET_ROLE="petrole", PET_NNODES="1")
    seen = both(tmp_path, ["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0",
                           "--nproc-per-node=2"], 2, env=env)
    assert same_part(seen["dtrun"]) == same_part(seen["torchrun"])
    for name, envs in seen.items():
        e = envs[0]
        assert (e["WORLD_SIZE"], e["TORCHELASTIC_RUN_ID"], e["TORCHELASTIC_MAX_RESTARTS"],
                e["ROLE_NAME"]) == ("2", "petjob", "1", "petrole"), name
        assert int(e["MASTER_PORT"]) > 0, name


def tee_lines(name: str, env: dict[str, str], tmp_path: Path) -> list[str]:
    script = tmp_path / "hello.py"
    script.write_text("import os; print('hello from', os.environ['RANK'], flush=True)\n")
    r = LAUNCHERS[name](["--standalone", "--nproc-per-node=2", "--tee=3", str(script)],
                        env=env, timeout=300)
    assert r.returncode == 0, f"{name}: {r.stderr}"
    return sorted(line for line in r.stdout.splitlines() if "hello from" in line)


def test_the_line_prefix_template_comes_from_pet_over_torchelastic_in_both(tmp_path):
    # torchrun 2.14: --log-line-prefix-template (PET_LOG_LINE_PREFIX_TEMPLATE)
    # wins over TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, and ${hostname} is
    # the short host name (socket.gethostname()).
    torch_pypi.require()
    host = socket.gethostname()
    env = clean_env(TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="<${rank}> ",
                    PET_LOG_LINE_PREFIX_TEMPLATE="${hostname}|${rank}|")
    for name in LAUNCHERS:
        assert tee_lines(name, env, tmp_path) == [
            f"{host}|0|hello from 0", f"{host}|1|hello from 1"], name


@pytest.mark.skipif(shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
                    reason="needs taskset and two CPUs")
def test_nproc_per_node_cpu_counts_the_cpus_the_launcher_may_use_in_both(tmp_path):
    # torchrun 2.12: torch._utils.cpu_count(), i.e. sched_getaffinity.
    cpu = str(min(os.sched_getaffinity(0)))
    seen = both(tmp_path, ["--standalone", "--nproc-per-node=cpu"], 1,
                prefix=["taskset", "-c", cpu])
    for name, envs in seen.items():
        assert envs[0]["LOCAL_WORLD_SIZE"] == "1", name


def test_exit_codes_differ_as_the_page_says(tmp_path):
    # A failed worker: torchrun exits 1, dtrun with the worker's code.
    script = tmp_path / "fail.py"
    script.write_text("import sys; sys.exit(3)\n")
    torch_pypi.require()
    codes = {name: run(["--standalone", str(script)], env=clean_env(), timeout=300).returncode
             for name, run in LAUNCHERS.items()}
    assert codes == {"torchrun": 1, "dtrun": 3}
    # A negative --shutdown-timeout (torch 2.12's check): torchrun raises
    # ValueError (exit 1, a traceback), dtrun says it in one line, exit 2.
    t = torch_pypi.torchrun(["--standalone", "--shutdown-timeout=-1", str(script)],
                            env=clean_env(), timeout=300)
    assert t.returncode == 1
    assert "ValueError: shutdown_timeout must be non-negative, got -1" in t.stderr
    d = torch_pypi.dtrun(["--standalone", "--shutdown-timeout=-1", str(script)],
                         env=clean_env())
    assert d.returncode == 2
    assert len(d.stderr.splitlines()) == 1 and "--shutdown-timeout" in d.stderr, d.stderr
