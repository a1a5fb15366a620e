"""Own work per step, against fakes of what the start-up hook wraps
(docs/stragglers.md): a DistributedDataParallel whose logging data says
what an NCCL job's would (DDP's CUDA timer fills the same fields from CUDA
events on the GPU stream: no GPU here), and a c10d module whose blocking
collective waits. The figures the worker writes to its progress page are
read back: each step's wait is the communication DDP saw still running
after the backward (or the collective's time), its own work the rest.
Real workers on plain /usr/bin/python3 under dtrun; the real torch DDP is
tests/e2e/test_stragglers.py."""

import os
import struct
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

DDP_WORKER = r"""
import types
import dtrun

# DDP as torch.nn.parallel.distributed has it, reduced to what the hook
# uses. Each iteration's communication runs 50 ms, 10 of them overlapped
# with the backward's compute: 40 ms exposed (what an NCCL job's CUDA
# timer reports in the same fields).
class DistributedDataParallel:
    def __init__(self):
        self.pre, self.post, self.iteration, self.rate = [], [], 0, None
    def _set_ddp_runtime_logging_sample_rate(self, rate):
        self.rate = rate
    def register_forward_pre_hook(self, hook):
        self.pre.append(hook)
    def register_forward_hook(self, hook):
        self.post.append(hook)
    def _get_ddp_logging_data(self):
        return {"iteration": self.iteration, "backward_comm_time": 50_000_000,
                "backward_compute_comm_overlap_time": 10_000_000}
    def __call__(self):
        for hook in self.pre:
            hook(self, ())
        self.iteration += 1  # DDP counts a forward with grad as an iteration
        for hook in self.post:
            hook(self, (), None)

distributed = types.SimpleNamespace(DistributedDataParallel=DistributedDataParallel)
dtrun.instrument_ddp(distributed)
model = DistributedDataParallel()
assert model.rate == 1, model.rate
for _ in range(5):
    model()  # each forward starts a step (no dtrun.step() calls)
"""

COLLECTIVE_WORKER = r"""
import threading, time, types
import dtrun

# A blocking collective that waits 30 ms; with async_op it is not timed,
# nor on another thread (a checkpointing thread's barrier).
def all_reduce(tensor, async_op=False):
    time.sleep(0.03)
c10d = types.SimpleNamespace(all_reduce=all_reduce)
dtrun.instrument_collectives(c10d)
for n in range(3):
    dtrun.step(n)
    c10d.all_reduce(None)
    c10d.all_reduce(None, async_op=True)
    other = threading.Thread(target=c10d.all_reduce, args=(None,))
    other.start()
    other.join()
dtrun.step()
"""


def ring(path):
    words = struct.unpack("<512q", path.read_bytes())
    done = words[7]
    entries = {}
    for i in range(min(done, 16)):
        at = 16 + i * 5
        step, start, end, own, wait = words[at:at + 5]
        entries[step] = (end - start, own, wait)
    return entries


def steps_of(tmp_path, worker):
    script = tmp_path / "worker.py"
    script.write_text(worker)
    logs = tmp_path / "logs"
    r = dh.run(["--standalone", "--nproc-per-node=1", f"--log-dir={logs}", "--python",
                dh.PYTHON, str(script)], env=dh.job_env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (page,) = logs.glob("*/attempt_0/0/progress_page")
    return ring(page)


def test_ddp_s_exposed_communication_is_each_steps_wait_one_step_late(tmp_path):
    steps = steps_of(tmp_path, DDP_WORKER)
    # Steps 0..4 by forward; each iteration's exposed communication lands
    # on the step before the next forward: 0..3, with their own work.
    for step in (0, 1, 2, 3):
        wall, own, wait = steps[step]
        assert wait == 40_000_000, steps
        assert own == max(1, wall - wait), steps
    # Step 4 still runs: a step ends at the next forward, and is filled
    # when that forward ends.
    assert 4 not in steps, steps


def test_a_blocking_collective_is_its_steps_wait_on_the_training_thread_only(tmp_path):
    steps = steps_of(tmp_path, COLLECTIVE_WORKER)
    for step in (0, 1, 2):
        wall, own, wait = steps[step]
        # Its 30 ms once: not the async call, not the other thread's.
        assert 30_000_000 <= wait < 60_000_000, steps
        assert wall >= 90_000_000 > wait, steps  # the other thread's ran in it, untimed
        assert own == max(1, wall - wait), steps


def test_worker_timing_off_leaves_torch_unwrapped_and_the_environment_as_torchrun_s(tmp_path):
    # The hook's finder (it wraps torch's modules as they are imported) is
    # there by default and not with --worker-timing=off; the flag's
    # variable never reaches the program.
    script = tmp_path / "worker.py"
    script.write_text("import os, sys\n"
                      "assert 'DTRUN_WORKER_TIMING' not in os.environ\n"
                      "print('finder', any(type(f).__name__ == '_DtrunAfterImport' "
                      "for f in sys.meta_path))\n")
    for flag, expected in (("--worker-timing=on", "finder True"),
                           ("--worker-timing=off", "finder False")):
        r = dh.run(["--standalone", "--nproc-per-node=1", flag, "--python", dh.PYTHON,
                    str(script)], env=dh.job_env(), cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == expected, (flag, r.stdout)
