"""Comparing the environment dtrun's workers get with torchrun's, variable
by variable (tests/e2e/test_torch2_env*.py). Each launcher's workers run
dump_rounds.py; what a launcher added or changed on top of the parent
environment must be the same in both, but for DIFFERENCES, which
docs/compatibility.md lists and explains."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dtrun_helpers as dh

DUMP_ROUNDS = Path(__file__).resolve().parent / "dump_rounds.py"
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

# The documented differences from torchrun 2.15, each with why.
DIFFERENCES = {
    "MASTER_ADDR": "one node: dtrun 127.0.0.1, torchrun localhost (dtrun's store listens on "
                   "127.0.0.1 only, and localhost may resolve to ::1 first); several: the "
                   "workers' store host, named by address (dtrun) or by its name (torchrun)",
    "MASTER_PORT": "the workers' store port: a free port in both, so different",
    "TORCHELASTIC_RUN_ID": "a fresh uuid4 in both (--standalone)",
    "TORCHELASTIC_ERROR_FILE": "a temporary path in both: torchrun "
                               "<tmp>/torchelastic_<rand>/<run_id>_<rand>/attempt_N/<local_rank>/"
                               "error.json, dtrun <tmp>/<run_id>_<rand>/attempt_N/<local_rank>/"
                               "error.json",
}


def launch_env(**extra: str) -> dict[str, str]:
    """The parent environment of both launchers: the tests' own, with what
    the launchers decide left unset, so that is compared too."""
    env = dh.job_env(**extra)
    for key in ("OMP_NUM_THREADS", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "TORCHELASTIC_SIGNALS_TO_HANDLE"):
        if key not in extra:
            env.pop(key, None)
    return env


def envs(folder: Path, nproc: int, rnd: int = 0, first_rank: int = 0) -> list[dict]:
    """The environments dump_rounds.py wrote for round `rnd`, by rank."""
    return [json.loads((folder / f"round{rnd}_rank{r}.json").read_text())
            for r in range(first_rank, first_rank + nproc)]


def added(env: dict, parent: dict) -> dict:
    """What a launcher added or changed on top of `parent`."""
    return {k: v for k, v in env.items() if parent.get(k) != v}


def same_but_documented(ours: list[dict], theirs: list[dict], parent: dict, *,
                        same_addr: bool = False, same_port: bool = False,
                        same_run_id: bool = False, attempt: int = 0) -> None:
    """Asserts that every rank's variables are the same under both
    launchers but for DIFFERENCES (less those the caller says are equal
    in this job), that each launcher gives the job one store and one run
    id, and that the differences are only of the documented shape."""
    allowed = dict(DIFFERENCES)
    for key, same in (("MASTER_ADDR", same_addr), ("MASTER_PORT", same_port),
                      ("TORCHELASTIC_RUN_ID", same_run_id)):
        if same:
            del allowed[key]
    assert len(ours) == len(theirs)
    for rank, (o, t) in enumerate(zip(ours, theirs)):
        added_ours, added_theirs = added(o, parent), added(t, parent)
        assert sorted(set(added_ours) - set(added_theirs)) == [], (rank, "set by dtrun only")
        assert sorted(set(added_theirs) - set(added_ours)) == [], (rank, "set by torchrun only")
        for key in sorted(set(added_theirs) - set(allowed)):
            assert o[key] == t[key], (rank, key, o[key], t[key])
        assert o["RANK"] == t["RANK"] == str(rank + int(ours[0]["RANK"]))
        for e in (o, t):
            assert 0 < int(e["MASTER_PORT"]) < 65536
            assert f"/attempt_{attempt}/{e['LOCAL_RANK']}/error.json" in \
                e["TORCHELASTIC_ERROR_FILE"]
    for launched in (ours, theirs):
        assert len({e["MASTER_PORT"] for e in launched}) == 1
        assert len({e["TORCHELASTIC_RUN_ID"] for e in launched}) == 1
