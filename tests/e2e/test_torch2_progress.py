"""`import dtrun` inside a real torch 2.15 gloo DDP worker (issue 48): the
module dtrun's start-up hook makes importable works beside torch, and what
the training reports (dtrun.step, a checkpoint section around torch.save)
lands on each worker's progress page. The plain-Python twin, with `dtrun
status` and a section's hang, is tests/integration/test_worker_progress.py."""

import os
import struct
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import torch_pypi  # noqa: E402

NPROC = 2
STEPS = 6

WORKER = r"""
import os, sys
import torch
import torch.distributed as dist
import dtrun

assert dtrun.enabled()
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(dist.get_rank())
for n in range(int(sys.argv[1])):
    dtrun.step(n)
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    if n % 2 == 1:
        with dtrun.section("checkpoint"):
            torch.save(model.state_dict(), os.path.join(sys.argv[2], f"rank{dist.get_rank()}.pt"))
dtrun.step()
dist.destroy_process_group()
"""


def test_a_ddp_worker_reports_steps_and_checkpoints_through_the_page(tmp_path):
    torch_pypi.require()
    script = tmp_path / "train.py"
    script.write_text(WORKER)
    logs = tmp_path / "logs"
    r = torch_pypi.dtrun(["--standalone", f"--nproc-per-node={NPROC}", f"--log-dir={logs}",
                          "--python", torch_pypi.PYTHON, script, str(STEPS), tmp_path],
                         timeout=300)
    assert r.returncode == 0, r.stderr
    pages = sorted(logs.glob("*/attempt_0/*/progress_page"))
    assert len(pages) == NPROC
    for page in pages:
        words = struct.unpack("<512q", page.read_bytes())
        assert words[5] == STEPS and words[7] == STEPS  # steps 0..5 done, the last one running
        checkpoint = 128 + 13  # slot 1: the first section named
        assert page.read_bytes()[checkpoint * 8:checkpoint * 8 + 11] == b"checkpoint\0"
        assert words[checkpoint + 4] == STEPS // 2
