"""Stragglers named (docs/stragglers.md, issue 48 item 2) in real gloo DDP
jobs under the torch from PyPI that dtrun is proven against: the start-up
hook times DDP, every agent shares its ranks' own work per step, node 0
names the slow one.

- Three network-namespace hosts, one of whose workers sleep in every step
  (a slow GPU's longer compute): exactly that host is named, within the
  bound docs/stragglers.md states (20 warm-up steps, then 50), in one line,
  a `straggler` event and `dtrun status`; with --straggler-action=leave it
  leaves and the job trains on without it.
- The same hosts with no slow worker, over a long run: nobody is named
  (no false alarm at this machine's noise).
Every rank's step is mostly a sleep, the host's wait for its GPU's
compute, and a small model: CPU-bound steps of six ranks on CI's two
loaded CPUs differ for real (a rank ran 1.42x its peers over 32 steps
while other tests ran), and naming that is the detector's job, not noise.
- One node, a compiled model (torch.compile): the hook does not break it,
  and the slow rank is named.
No timing is asserted: who was named, over which steps, and that the job
trained."""

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import netns_hosts  # noqa: E402
import torch_pypi  # noqa: E402
from netns_jobs import env, finish  # noqa: E402

NPROC = 2
PORT = 29400
UNHEALTHY = 75
# The bound the issue sets: named within 50 steps after 20 warm-up steps.
WARMUP, BOUND = 20, 50
RDZV = "join_timeout=60,last_call_timeout=30,keep_alive_interval=1,keep_alive_max_attempt=3"

# A DDP job without dtrun.step() calls (each forward starts a step). Every
# rank sleeps 30 ms in each step (its GPU's compute, which the host waits
# for); the ranks on host argv[2] (or rank argv[2] when it is a number)
# sleep argv[3] s more; the run ends after argv[1] steps, or
# earlier once the file argv[4] exists (a test that looked at the job
# while it ran). argv[5] == "compile": the model is compiled.
WORKER = r"""
import os, socket, sys, time
import torch
import torch.distributed as dist

torch.set_num_threads(1)
steps, slow_who, slow_s, stop_file = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo")
slow = slow_who == socket.gethostname() or slow_who == str(dist.get_rank())
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
run = torch.compile(model, backend="eager") if sys.argv[5:] == ["compile"] else model
optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
x = torch.randn(32, 64)
for n in range(steps):
    if os.path.exists(stop_file):
        break
    optimizer.zero_grad()
    time.sleep(0.03 + (slow_s if slow else 0))
    run(x).sum().backward()
    optimizer.step()
dist.barrier()
dist.destroy_process_group()
"""


def script(folder):
    path = folder / "train.py"
    path.write_text(WORKER)
    return path


def events(path, kind):
    return [e for e in dh.read_json_lines(path) if e["event"] == kind]


def straggler_lines(stderr):
    """Node 0's lines naming a straggler (not the round's end that a
    straggler's departure causes, which quotes its reason)."""
    return [line for line in stderr.splitlines()
            if line.startswith("dtrun: warning: node ") and "is a straggler:" in line]


def netns_args(folder, nnodes, steps, slow_host, *flags):
    return [str(dh.DTRUN), f"--nnodes={nnodes}", f"--nproc-per-node={NPROC}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={netns_hosts.Hosts.addr(1)}:{PORT}",
            "--rdzv-id=job1", f"--rdzv-conf={RDZV}", *flags, "--python", torch_pypi.PYTHON,
            script(folder), str(steps), slow_host, "0.1", folder / "stop"]


def run_three(tmp_path, nnodes, steps, slow_host, *flags):
    """Every agent's (exit code, stderr), host 1 first."""
    torch_pypi.require()
    if netns_hosts.unavailable_reason():
        pytest.skip(netns_hosts.unavailable_reason())
    with netns_hosts.Hosts(3) as hosts:
        e = env()
        procs = [hosts.start(i, netns_args(tmp_path, nnodes, steps, slow_host, *flags,
                                           f"--event-log={tmp_path}/events-h{i}.jsonl"), e)
                 for i in (1, 2, 3)]
        return [(code, stderr) for code, _, stderr in finish(procs, timeout=400)]


def test_a_slow_host_is_named_within_the_bound(tmp_path):
    outs = run_three(tmp_path, 3, 150, "h3")
    for code, stderr in outs:
        assert code == 0, stderr
    lines = straggler_lines(outs[0][1])
    assert len(lines) == 1, outs[0][1]  # node 0 says it, once
    (line,) = lines
    # Both of h3's ranks, or the one whose streak was ready first (its
    # sibling's first sample may have straddled the warm-up): one line.
    assert "(h3) is a straggler: rank" in line, line
    assert "against the job's median" in line and "(kept: --straggler-action=warn)" in line, line
    (event,) = events(tmp_path / "events-h1.jsonl", "straggler")
    assert event["straggler_host"] == "h3", event
    assert event["straggler_ranks"] and set(event["straggler_ranks"]) <= {4, 5}, event
    assert event["host"] != "h3", event  # the writer's: node 0's
    assert event["own_work_s"] > 1.4 * event["job_median_s"], event
    assert WARMUP < event["first_step"] <= event["last_step"] <= WARMUP + BOUND, event
    # h3 heard it too, in its own words.
    assert any("this node is named a straggler: node 2 (h3)" in line
               for line in outs[2][1].splitlines()), outs[2][1]
    assert straggler_lines(outs[1][1]) == [], outs[1][1]


def test_with_leave_the_slow_host_leaves_and_the_job_trains_on(tmp_path):
    (h1, h2, h3) = run_three(tmp_path, "2:3", 300, "h3", "--straggler-action=leave")
    code3, err3 = h3
    assert code3 == UNHEALTHY, err3
    assert "straggler: node 2 (h3) is a straggler" in err3, err3
    assert "--straggler-action=leave); stopping this node's workers and leaving the job" in err3
    for code, stderr in (h1, h2):
        assert code == 0, stderr
    lines = straggler_lines(h1[1])
    assert len(lines) == 1, h1[1]
    (line,) = lines
    assert "it leaves the job (--straggler-action=leave)" in line, line
    (event,) = events(tmp_path / "events-h1.jsonl", "straggler")
    assert event["leaves"] is True and event["action"] == "leave", event


def test_no_straggler_is_named_in_a_long_run_without_one(tmp_path):
    outs = run_three(tmp_path, 3, 400, "nobody", "-v")
    for code, stderr in outs:
        assert code == 0, stderr
        assert straggler_lines(stderr) == [], stderr
    assert events(tmp_path / "events-h1.jsonl", "straggler") == []


def test_a_compiled_model_runs_timed_and_its_slow_rank_is_named_in_status(tmp_path):
    torch_pypi.require()
    control = tmp_path / "control"
    e = dh.job_env(DTRUN_CONTROL_DIR=str(control))
    proc = torch_pypi.popen([dh.DTRUN, "--standalone", f"--nproc-per-node={NPROC}",
                             f"--event-log={tmp_path}/events.jsonl", "--python",
                             torch_pypi.PYTHON, script(tmp_path), "100000", "1", "0.1",
                             tmp_path / "stop", "compile"],
                            env=e, stderr=subprocess.PIPE)
    with dh.cleaned_up(proc, e["DTRUN_TEST_MARK"]):
        said = []
        for line in proc.stderr:
            said.append(line)
            if "is a straggler:" in line:
                break
        assert "node 0 " in said[-1] and "rank 1 works" in said[-1], said
        status = subprocess.run([str(dh.DTRUN), "status", "--json"], env=e,
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        (job,) = json.loads(status.stdout)
        (straggler,) = job["stragglers"]
        assert straggler["ranks"] == [1] and straggler["leaves"] is False, straggler
        table = subprocess.run([str(dh.DTRUN), "status"], env=e, capture_output=True,
                               text=True, timeout=60)
        assert "straggler: node 0 " in table.stdout, table.stdout
        (tmp_path / "stop").touch()
        assert proc.wait(timeout=120) == 0, "".join(said) + proc.stderr.read()
    (event,) = events(tmp_path / "events.jsonl", "straggler")
    assert event["straggler_ranks"] == [1], event
