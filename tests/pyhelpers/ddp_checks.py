"""What examples/ddp_gloo.py's workers report (rank<N>.json in --out) and
the checks every DDP test makes of it, whichever torch and launch ran it:
a clean run trains and all-reduces on every rank with identical replicas;
a run that crashed once and restarted resumes from the checkpoint and
ends where the clean run did."""

import json

import pytest

# ddp_gloo.py's --crash-at-step exits with this code.
CRASH_EXIT_CODE = 13


def results(out, nproc: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def check_trained(out, world: int) -> list[dict]:
    """Every rank of `world` trained to the end, whatever restarts or
    membership changes it took: all-reduced across all of them, identical
    replicas. Returns the ranks' reports."""
    rs = results(out, world)
    assert sorted(r["rank"] for r in rs) == list(range(world))
    for r in rs:
        assert r["world_size"] == world
        assert r["allreduce_sum"] == world * (world + 1) / 2
    assert len({r["param_checksum"] for r in rs}) == 1
    return rs


def check_torch(runs: list[dict], torch_version: str | None) -> None:
    """Every worker ran the torch `torch_version` ("2.6"); None: any."""
    if torch_version is None:
        return
    for x in runs:
        assert x["torch"].startswith(torch_version + "."), x["torch"]


def check_clean_run(runs: list[dict], nproc: int, torch_version: str | None = None) -> None:
    check_torch(runs, torch_version)
    assert sorted(x["rank"] for x in runs) == list(range(nproc))
    for x in runs:
        assert x["world_size"] == nproc
        assert x["allreduce_sum"] == nproc * (nproc + 1) / 2
        assert x["restart_count"] == 0
        assert x["start_epoch"] == 0
    # DDP keeps every replica identical.
    assert len({x["param_checksum"] for x in runs}) == 1


def check_resumed_run(resumed: list[dict], clean: list[dict], nproc: int,
                      torch_version: str | None = None) -> None:
    """After a crash at step 6 (epoch 1; epoch 0 was checkpointed) and one
    group restart."""
    check_torch(resumed, torch_version)
    for x in resumed:
        assert x["restart_count"] == 1
        assert x["start_epoch"] == 1
        assert x["allreduce_sum"] == nproc * (nproc + 1) / 2
    # Same training as without the crash (float32 sums may differ in the
    # last bits with the reduction order).
    assert resumed[0]["param_checksum"] == pytest.approx(clean[0]["param_checksum"], rel=1e-6)
