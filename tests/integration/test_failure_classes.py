"""Failure classes, --no-restart-on and the no-progress stop, with real
workers (docs/agent.md, "Failure classes" and "Restart policy"): a raise
without @record, os._exit, a SIGSEGV, a kernel OOM kill under a memory
cgroup limit (its oom_kill count checked), a real gloo collective timeout
(torch 1.13) and a hang, each classified in the failure summary, the
event log's worker_failed and its incident."""

import json
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402

# Rank 1 fails as FAIL_MODE says; the other ranks wait to be stopped.
WORKER = """
import ctypes, os, signal, sys, time
if os.environ["RANK"] != "1":
    signal.pause()
mode = os.environ["FAIL_MODE"]
if mode == "raise":
    raise TypeError("unsupported operand 42")
if mode == "exit":
    os._exit(3)
if mode == "segv":
    ctypes.string_at(0)
if mode == "oom":
    hog = []
    while True:
        hog.append(bytearray(16 << 20))
if mode == "hang":
    time.sleep(3600)
"""

# Both ranks meet in gloo; rank 1 never enters the all_reduce, so rank 0's
# times out after 2 s (gloo's own watchdog).
GLOO_TIMEOUT_WORKER = """
import datetime, signal
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2))
if dist.get_rank() == 1:
    signal.pause()
dist.all_reduce(torch.ones(1))
"""


def events_of(path: Path, name: str) -> list[dict]:
    return [e for e in dh.read_json_lines(path) if e["event"] == name]


def run_failing(tmp_path, mode: str, *flags: str, script: str = WORKER, timeout: float = 120,
                prefix: list[str] | None = None):
    worker = tmp_path / "worker.py"
    worker.write_text(script)
    events = tmp_path / "events.jsonl"
    argv = [str(dh.DTRUN), "--standalone", "--nproc-per-node=2", "--max-restarts=0",
            f"--event-log={events}", "--python", dh.PYTHON, *flags, str(worker)]
    r = subprocess.run((prefix or []) + argv, env=dh.job_env(FAIL_MODE=mode), timeout=timeout,
                       capture_output=True, text=True)
    return r, events


def check_class(r, events: Path, klass: str, rank: int | None = 1):
    """rank None: several ranks failed alike (a hang kills every rank stuck
    apart): the summary's root cause is one of them, by exit time, and the
    incident's rank the first exit the agent saw; both are failed ranks."""
    block = summary(r.stderr)
    failed = events_of(events, "worker_failed")
    candidates = {rank} if rank is not None else {e["rank"] for e in failed}
    assert int(field(block, "rank").split(" ")[0]) in candidates, block
    assert field(block, "class").split(" ")[0] == klass, block
    assert failed and all(e["class"] == klass for e in failed if e["rank"] in candidates), failed
    incidents = events_of(events, "incident")
    assert len(incidents) == 1, incidents
    assert incidents[0]["class"] == klass
    assert incidents[0]["rank"] in candidates
    assert incidents[0]["resumed_at"] is None  # the job ended with it
    return block, incidents[0]


@pytest.mark.parametrize("mode,klass,code", [
    ("raise", "exception", 1),
    ("exit", "exit", 3),
    ("segv", "signal", 128 + signal.SIGSEGV),
])
def test_a_worker_failure_is_classified(tmp_path, mode, klass, code):
    r, events = run_failing(tmp_path, mode)
    assert r.returncode == code, r.stderr
    block, incident = check_class(r, events, klass)
    if mode == "raise":
        # No @record and the output on the console: the start-up hook's
        # note still names the type.
        assert field(block, "class") == "exception (TypeError)"
        assert incident["exception_type"] == "TypeError"


def test_a_gloo_collective_timeout_names_no_culprit_it_cannot_know(tmp_path):
    r, events = run_failing(tmp_path, "", script=GLOO_TIMEOUT_WORKER)
    assert r.returncode == 1, r.stderr
    block, _ = check_class(r, events, "collective-timeout", rank=0)
    assert field(block, "class") == "collective-timeout (RuntimeError)"
    # Rank 0 is a victim; rank 1 never entered the collective and is the
    # suspect dtrun can name, not the root cause it would have to guess.
    culprit = field(block, "culprit")
    assert culprit.startswith("unknown: every failed rank timed out in a collective"), culprit
    assert "rank(s) 1 on" in culprit and "were still running" in culprit


def test_a_hang_is_classified_as_hang(tmp_path):
    r, events = run_failing(tmp_path, "hang", "--hang-timeout=2")
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    # Every rank is stuck somewhere of its own: dtrun kills them all.
    _, incident = check_class(r, events, "hang", rank=None)
    # Detection took the hang timeout: from the last progress to the kill.
    assert incident["detect_s"] >= 2.0, incident


def memory_cgroup_root() -> Path | None:
    """The memory controller's folder where this test may make a child
    cgroup (cgroup v1's memory mount, or v2 with the memory controller)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if (base / "memory.oom_control").exists():
                return base
        if hier == "0":
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            if "memory" in (base / "cgroup.controllers").read_text().split() if (
                    base / "cgroup.controllers").exists() else False:
                return base
    return None


def oom_kills(group: Path) -> int:
    for name in ("memory.events", "memory.oom_control"):
        f = group / name
        if f.exists():
            for line in f.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    raise AssertionError(f"no oom_kill count in {group}")


def test_a_kernel_oom_kill_is_proven_by_the_cgroup_count(tmp_path):
    root = memory_cgroup_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip("no writable memory cgroup here: cannot limit a job's memory")
    group = root / f"dtrun-oom-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        limit = str(256 << 20)
        if (group / "memory.max").exists():
            (group / "memory.max").write_text(limit)
        else:
            (group / "memory.limit_in_bytes").write_text(limit)
        before = oom_kills(group)
        procs = group / "cgroup.procs"
        # dtrun and its workers start inside the limited cgroup.
        prefix = ["/bin/sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]
        r, events = run_failing(tmp_path, "oom", prefix=prefix)
        assert oom_kills(group) > before, "the kernel counted no OOM kill"
        assert r.returncode == 128 + signal.SIGKILL, r.stderr
        block, _ = check_class(r, events, "oom-kill")
        assert "OOM killer" in field(block, "hint")
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            os.kill(int(pid), signal.SIGKILL)
        group.rmdir()


def test_no_restart_on_fails_the_job_at_once(tmp_path):
    r, events = run_failing(tmp_path, "raise", "--max-restarts=3",
                            "--no-restart-on=oom-kill,exception:TypeError")
    assert r.returncode == 1, r.stderr
    line = ("not restarted: --no-restart-on=exception:TypeError matched the failure of rank 1 "
            "(exception TypeError, exited with code 1); 3 restart(s) left unused")
    assert f"dtrun: {line}" in r.stderr
    assert len(events_of(events, "rendezvous_completed")) == 1
    assert line in summary(r.stderr)  # the summary's outcome


def test_a_failure_the_rules_do_not_name_is_restarted(tmp_path):
    r, events = run_failing(tmp_path, "exit", "--max-restarts=1",
                            "--no-restart-on=exception:TypeError,exit:4,signal:SEGV")
    assert r.returncode == 3, r.stderr
    assert "not restarted" not in r.stderr
    assert len(events_of(events, "rendezvous_completed")) == 2
    # The first incident ended when the workers ran again; the second
    # with the job.
    incidents = events_of(events, "incident")
    assert [i["class"] for i in incidents] == ["exit", "exit"]
    assert incidents[0]["resumed_at"] is not None and incidents[0]["recover_s"] >= 0
    assert incidents[1]["resumed_at"] is None


# Rank 0 writes the step it reached, then fails there: the same step on
# every round after the first.
STALLED_WORKER = """
import os, sys
step_file = os.environ["STEP_FILE"]
if os.environ["RANK"] == "0":
    with open(step_file + ".tmp", "w") as f:
        f.write("500\\n")
    os.replace(step_file + ".tmp", step_file)
    sys.exit(7)
import signal
signal.pause()
"""


def test_restarts_without_progress_stop_the_job(tmp_path):
    step_file = tmp_path / "step"
    worker = tmp_path / "worker.py"
    worker.write_text(STALLED_WORKER)
    events = tmp_path / "events.jsonl"
    r = subprocess.run(
        [str(dh.DTRUN), "--standalone", "--nproc-per-node=2", "--max-restarts=10",
         f"--event-log={events}", f"--progress-file={step_file}",
         "--max-no-progress-restarts=2", "--python", dh.PYTHON, str(worker)],
        env=dh.job_env(STEP_FILE=str(step_file)), timeout=120, capture_output=True, text=True)
    assert r.returncode == 7, r.stderr
    # Round 0 reached step 500 (progress); rounds 1 and 2 did not move it.
    line = (f"not restarted: no progress: the step in {step_file} stayed at 500 over 2 failed "
            "round(s) in a row (--max-no-progress-restarts=2); 8 restart(s) left unused")
    assert f"dtrun: {line}" in r.stderr, r.stderr
    assert len(events_of(events, "rendezvous_completed")) == 3
    assert [i["step"] for i in events_of(events, "incident")] == [500, 500, 500]


def test_an_unreadable_progress_file_is_ignored_with_a_warning(tmp_path):
    step_file = tmp_path / "step"
    os.mkfifo(step_file)  # never read: it would block the agent
    r, events = run_failing(tmp_path, "exit", "--max-restarts=1",
                            f"--progress-file={step_file}", "--max-no-progress-restarts=1")
    assert r.returncode == 3, r.stderr
    assert f"warning: --progress-file {step_file}: it is not a regular file; ignored" in r.stderr
    assert r.stderr.count("it is not a regular file") == 1  # said once
    assert len(events_of(events, "rendezvous_completed")) == 2


@pytest.mark.parametrize("value,error", [
    ("oom", "--no-restart-on: 'oom' is not a failure class or a rule"),
    ("exit:0", "--no-restart-on: 'exit:0' is not a failure class or a rule"),
    ("node", "--no-restart-on: 'node' is not a failure class or a rule"),
])
def test_bad_no_restart_on_is_one_line_and_exit_2(tmp_path, value, error):
    r = dh.run(["--standalone", f"--no-restart-on={value}", "--no-python", "true"])
    assert r.returncode == 2
    assert error in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_lost_node_is_the_survivors_node_incident(tmp_path):
    """Two local nodes (--nnodes=1:2) whose workers do not talk to each
    other: SIGKILL the second node's agent (its workers die with it), and
    the survivor's incident is `node`, closed when its round-1 workers run."""
    port = dh.free_port()
    env = dh.job_env()
    events = [tmp_path / "events0.jsonl", tmp_path / "events1.jsonl"]
    # Round 0's workers wait to be stopped; round 1's finish at once.
    worker = '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0; exec sleep 1000'
    procs = []
    try:
        for node, is_host in ((0, 1), (1, 0)):
            procs.append(dh.start(
                ["--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                 f"--rdzv-endpoint=127.0.0.1:{port}",
                 f"--rdzv-conf={dh.FAST_RDZV},is_host={is_host}", f"--event-log={events[node]}",
                 "--no-python", "/bin/sh", "-c", worker], env))
        for p in procs:
            dh.wait_for_stderr(p, "round 0: node", timeout=60)
        os.kill(procs[1].pid, signal.SIGKILL)
        procs[1].wait()
        _, stderr = procs[0].communicate(timeout=60)
        assert procs[0].returncode == 0, stderr
    finally:
        dh.kill_all(procs, env["DTRUN_TEST_MARK"])
    incidents = events_of(events[0], "incident")
    assert len(incidents) == 1, incidents
    i = incidents[0]
    assert (i["round"], i["class"], i["rank"]) == (0, "node", None), i
    assert "was lost" in i["detail"] and i["detect_s"] is None
    assert i["resumed_at"] is not None and i["recover_s"] > 0


FAKE_NVML = dh.BUILD_DIR / "tests" / "fake_nvml"
PRINT_TRACE_ENV = ('for v in TORCH_NCCL_TRACE_BUFFER_SIZE TORCH_NCCL_DUMP_ON_TIMEOUT '
                   'TORCH_NCCL_DEBUG_INFO_TEMP_FILE; do eval echo "$v=\\${$v-unset}"; done')


def test_nccl_flight_recorder_is_on_where_there_are_gpus(tmp_path):
    """With a GPU (the fake NVML of tests/fake_nvml), the workers get torch's
    flight recorder, dumping into the attempt's folder; a value the user
    set is kept. Without GPUs nothing is added (the env stays torchrun's)."""
    args = ["--standalone", "--nproc-per-node=1", "--gpu-reclaim-timeout=0",
            f"--log-dir={tmp_path / 'logs'}", "--no-python", "/bin/sh", "-c", PRINT_TRACE_ENV]
    gpu = dh.run(args, env=dh.job_env(LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS="1",
                                      TORCH_NCCL_TRACE_BUFFER_SIZE="500"))
    assert gpu.returncode == 0, gpu.stderr
    lines = dict(line.split("=", 1) for line in gpu.stdout.split())
    assert lines["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "500"
    assert lines["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert re.fullmatch(rf"{tmp_path}/logs/.+/attempt_0/nccl_trace_rank_",
                        lines["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]), lines
    cpu = dh.run(args)
    assert cpu.returncode == 0, cpu.stderr
    assert set(dict(line.split("=", 1) for line in cpu.stdout.split()).values()) == {"unset"}
    # The user's own value under torch 2.8's name stands: no old name added.
    own = dh.run(args, env=dh.job_env(LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS="1",
                                      TORCH_FR_BUFFER_SIZE="500"))
    assert own.returncode == 0, own.stderr
    assert dict(line.split("=", 1) for line in own.stdout.split())[
        "TORCH_NCCL_TRACE_BUFFER_SIZE"] == "unset"


def test_a_torch_before_2_8_keeps_the_flight_recorders_names(tmp_path):
    """The hook moves dtrun's flight recorder names only for a torch that
    reads the new ones (torch 2.15's twin: test_torch2_failure_classes.py);
    torch 1.13 keeps those it reads, and DTRUN_FLIGHT_RECORDER, the hook's
    own, never reaches the program."""
    script = tmp_path / "fr.py"
    script.write_text("import os, sys\n"
                      "names = ('TORCH_NCCL_TRACE_BUFFER_SIZE', 'TORCH_FR_BUFFER_SIZE',\n"
                      "         'DTRUN_FLIGHT_RECORDER')\n"
                      "print(' '.join('%s=%s' % (n, os.environ.get(n, 'unset')) for n in names))\n")
    r = dh.run(["--standalone", "--nproc-per-node=1", "--gpu-reclaim-timeout=0",
                f"--log-dir={tmp_path / 'logs'}", "--python", dh.PYTHON, str(script)],
               env=dh.job_env(LD_LIBRARY_PATH=str(FAKE_NVML), FAKE_NVML_GPUS="1"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["TORCH_NCCL_TRACE_BUFFER_SIZE=2000", "TORCH_FR_BUFFER_SIZE=unset",
                                "DTRUN_FLIGHT_RECORDER=unset"], r.stdout
