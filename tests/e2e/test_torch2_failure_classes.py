"""Failure classes under real torch 2.15 (tests/pyhelpers/torch_pypi.py; the
torch 1.13 twin is tests/integration/test_failure_classes.py): a gloo
collective timeout is `collective-timeout` with no guessed culprit, an
exception raised in a DDP worker is `exception` with its type,
--no-restart-on=exception:TypeError ends the job with restarts left, and
the NCCL flight recorder dtrun turns on for a GPU node is set under the
names torch 2.15 reads, with no warning of the old ones."""

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402
from failure_summary import field, summary  # noqa: E402

# Rank 1 never enters the all_reduce (TIMEOUT) or raises TypeError in the
# middle of DDP training (RAISE); rank 0 trains.
WORKER = """
import datetime, os, signal
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
model = DDP(torch.nn.Linear(4, 1))
rank = dist.get_rank()
if os.environ["MODE"] == "timeout":
    if rank == 1:
        signal.pause()
    dist.all_reduce(torch.ones(1))
else:
    for step in range(3):
        if rank == 1 and step == 2:
            raise TypeError("unsupported operand at step 2")
        model(torch.ones(8, 4)).sum().backward()
"""


def run(tmp_path, mode, *flags):
    torch_pypi.require()
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    events = tmp_path / "events.jsonl"
    r = torch_pypi.dtrun(["--standalone", "--nproc-per-node=2", f"--event-log={events}", *flags,
                          "--python", torch_pypi.PYTHON, worker],
                         env=dh.job_env(MODE=mode), timeout=180)
    evs = [json.loads(line) for line in events.read_text().splitlines()]
    return r, evs


def test_a_gloo_timeout_is_a_collective_timeout_on_torch_2_15(tmp_path):
    r, evs = run(tmp_path, "timeout", "--max-restarts=0")
    assert r.returncode == 1, r.stderr
    block = summary(r.stderr)
    assert field(block, "rank").startswith("0 "), block
    assert field(block, "class").startswith("collective-timeout"), block
    assert field(block, "culprit").startswith("unknown: every failed rank timed out"), block
    assert [e["class"] for e in evs if e["event"] == "incident"] == ["collective-timeout"]


def test_no_restart_on_an_exception_type_on_torch_2_15(tmp_path):
    r, evs = run(tmp_path, "raise", "--max-restarts=2", "--no-restart-on=exception:TypeError")
    assert r.returncode == 1, r.stderr
    assert ("not restarted: --no-restart-on=exception:TypeError matched the failure of rank 1 "
            "(exception TypeError, exited with code 1); 2 restart(s) left unused") in r.stderr
    assert field(summary(r.stderr), "class") == "exception (TypeError)"
    assert len([e for e in evs if e["event"] == "rendezvous_completed"]) == 1


FLIGHT_RECORDER_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE",
                         "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                         "TORCH_NCCL_DUMP_ON_TIMEOUT", "DTRUN_FLIGHT_RECORDER")


def test_the_flight_recorder_warns_of_no_old_name_on_torch_2_15(tmp_path):
    """On a GPU node (tests/fake_nvml) dtrun turns the flight recorder on
    under the names every torch reads; torch 2.8 and later renamed two and
    warn of the old ones on every rank (an H200 showed the line), even in a
    gloo job. The hook moves them for such a torch: the ranks see the new
    names with dtrun's values, and say nothing of them."""
    torch_pypi.require()
    script = tmp_path / "fr.py"
    script.write_text(
        "import json, os\n"
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "dist.all_reduce(torch.ones(1))\n"
        f"print(json.dumps({{n: os.environ.get(n) for n in {FLIGHT_RECORDER_NAMES!r}}}))\n"
        "dist.destroy_process_group()\n")
    fake_nvml = dh.BUILD_DIR / "tests" / "fake_nvml"
    r = torch_pypi.dtrun(["--standalone", "--nproc-per-node=2", "--gpu-reclaim-timeout=0",
                          f"--log-dir={tmp_path / 'logs'}", "--python", torch_pypi.PYTHON, script],
                         env=dh.job_env(LD_LIBRARY_PATH=str(fake_nvml), FAKE_NVML_GPUS="2"),
                         timeout=180)
    assert r.returncode == 0, r.stderr
    assert "deprecated" not in r.stderr, r.stderr
    seen = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(seen) == 2, r.stdout
    for env in seen:
        assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
        assert re.fullmatch(rf"{tmp_path}/logs/.+/attempt_0/nccl_trace_rank_",
                            env["TORCH_FR_DUMP_TEMP_FILE"]), env
        assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"  # ProcessGroupNCCL's own name
        assert (env["TORCH_NCCL_TRACE_BUFFER_SIZE"], env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"],
                env["DTRUN_FLIGHT_RECORDER"]) == (None, None, None)
