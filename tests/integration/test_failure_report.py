"""The failure summary and the event log, with real workers: a torch 1.13
worker decorated with @record that raises, a worker killed by SIGSEGV, a
worker that exits 3 without an error file, and the event log of a run with
one restart."""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402

# Rank 1 raises inside torch's @record (which writes TORCHELASTIC_ERROR_FILE
# and re-raises, so Python exits 1); the other ranks wait to be stopped.
# Only rank 1 imports torch: the import is the slow part.
RECORD_WORKER = """
import os, signal, sys
if os.environ["RANK"] != "1":
    signal.pause()
    sys.exit(0)
from torch.distributed.elastic.multiprocessing.errors import record

@record
def main():
    raise ValueError("boom 42")

main()
"""

# A real segmentation fault: reading address 0.
SEGV_WORKER = "import ctypes; ctypes.string_at(0)"



def test_record_worker_exception_is_the_root_cause(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(RECORD_WORKER)
    r = dh.run(["--standalone", "--nproc-per-node=3", "--python", dh.PYTHON, str(script)],
               timeout=120)
    # An uncaught exception makes Python exit 1; @record does not change that.
    assert r.returncode == 1, r.stderr
    block = summary(r.stderr)
    assert field(block, "rank") == "1 (local_rank 1)"
    assert field(block, "exit") == "exit code 1"
    assert field(block, "error") == "ValueError: boom 42"
    assert field(block, "error_file").endswith("/attempt_0/1/error.json")
    assert re.search(r"^dtrun:   time      : \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", block, re.M)
    # The traceback from the error file, indented under the root cause.
    assert "dtrun:   traceback :" in block
    assert re.search(r'^dtrun:       File ".*worker\.py", line \d+, in main$', block, re.M), block
    assert 'dtrun:         raise ValueError("boom 42")' in block
    assert "other failures: none" in block
    # dtrun stopped ranks 0 and 2; they are not failures.
    assert "stopped by dtrun (not failures): rank(s) 0, 2" in block
    # The failure was also said in one line when it happened.
    assert "worker local_rank=1 (rank 1, pid" in r.stderr
    assert "exited with code 1: ValueError: boom 42; stopping the other workers" in r.stderr


def test_segfault_is_named(tmp_path):
    r = dh.run(["--standalone", "--nproc-per-node=1", "--no-python", dh.PYTHON, "-c",
                SEGV_WORKER])
    assert r.returncode == 139, r.stderr
    block = summary(r.stderr)
    assert field(block, "exit") == "signal 11 (SIGSEGV), exit code 139"
    assert field(block, "rank") == "0 (local_rank 0)"


def test_exit_code_without_error_file_points_at_the_output(tmp_path):
    r = dh.run(["--standalone", "--nproc-per-node=2", "--no-python", "/bin/sh", "-c",
                '[ "$RANK" = 1 ] && { echo "rank 1 gives up" >&2; exit 3; }; exec sleep 1000'])
    assert r.returncode == 3, r.stderr
    block = summary(r.stderr)
    assert field(block, "exit") == "exit code 3"
    assert field(block, "rank") == "1 (local_rank 1)"
    assert "no error file (decorate the entrypoint with torch.distributed.elastic." \
           "multiprocessing.errors.record" in block
    # Without --redirects the output went to the console: say so, and how to keep it.
    hint = field(block, "output")
    assert "went to the console of dtrun on" in hint
    assert "--log-dir DIR --redirects 3" in hint


def restart_once_args(tmp_path, *extra):
    # Attempt 0: rank 1 exits 3 while rank 0 waits to be stopped; attempt 1
    # succeeds.
    worker = ('[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0; '
              '[ "$RANK" = 1 ] && exit 3; exec sleep 1000')
    return ["--standalone", "--nproc-per-node=2", "--max-restarts=1", *extra,
            "--no-python", "/bin/sh", "-c", worker]


def test_event_log_of_a_run_with_one_restart(tmp_path):
    events_file = tmp_path / "events.jsonl"
    r = dh.run(restart_once_args(tmp_path, f"--event-log={events_file}"))
    assert r.returncode == 0, r.stderr
    lines = events_file.read_text().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    for e in events:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["time"]), e
        assert e["agent_pid"] == events[0]["agent_pid"]
    names = [e["event"] for e in events]
    assert names == [
        "agent_started", "node_health",
        "rendezvous_started", "rendezvous_completed", "worker_started", "worker_started",
        "worker_exited", "worker_failed", "group_stopping", "worker_exited",
        "restart",
        "rendezvous_started", "rendezvous_completed", "worker_started", "worker_started",
        "incident",
        "worker_exited", "worker_exited",
        "job_succeeded", "agent_exiting",
    ], names
    by_name = {}
    for e in events:
        by_name.setdefault(e["event"], []).append(e)
    started = by_name["agent_started"][0]
    assert started["version"] and started["nproc_per_node"] == 2 and started["max_restarts"] == 1
    first, second = by_name["rendezvous_completed"]
    assert (first["round"], second["round"]) == (0, 1)
    assert first["group_rank"] == 0 and first["group_world_size"] == 1
    assert first["ranks"] == [0, 1] and isinstance(first["duration_ms"], int)
    pids = [e["pid"] for e in by_name["worker_started"]]
    assert len(set(pids)) == 4
    failed_exit, stopped_exit = by_name["worker_exited"][:2]
    assert failed_exit["rank"] == 1 and failed_exit["exit_code"] == 3
    assert failed_exit["signal"] is None and failed_exit["round"] == 0
    assert failed_exit["pid"] == pids[1]
    assert stopped_exit["rank"] == 0 and stopped_exit["signal"] == "SIGTERM"
    assert stopped_exit["stopped_by_dtrun"] is True
    assert by_name["worker_failed"][0]["rank"] == 1
    assert "exited with code 3" in by_name["group_stopping"][0]["reason"]
    assert by_name["restart"][0]["count"] == 1 and by_name["restart"][0]["max"] == 1
    assert all(e["exit_code"] == 0 and e["round"] == 1 for e in by_name["worker_exited"][2:])
    assert by_name["agent_exiting"][0]["exit_code"] == 0
    # The incident: what ended round 0 and what it cost, once the workers
    # ran again.
    incident = by_name["incident"][0]
    assert (incident["round"], incident["class"], incident["rank"]) == (0, "exit", 1)
    assert incident["failed_at"] == by_name["worker_failed"][0]["exit_time"]
    assert incident["resumed_at"] >= by_name["worker_started"][3]["time"][:23]
    assert 0 <= incident["detect_s"] <= incident["recover_s"]
    assert incident["restart"] == 1 and incident["step"] is None


def test_event_log_to_stderr_and_a_failed_job(tmp_path):
    r = dh.run(["--standalone", "--nproc-per-node=1", "--event-log=-", "--no-python",
                "/bin/sh", "-c", "exit 5"])
    assert r.returncode == 5
    events = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    # The incident the job ended with closes as the agent exits.
    assert [e["event"] for e in events][-3:] == ["job_failed", "incident", "agent_exiting"]
    assert events[-2]["class"] == "exit" and events[-2]["resumed_at"] is None
    root = events[-3]["root_cause"]
    assert root["rank"] == 0 and root["exit_code"] == 5 and root["signal"] is None
    assert events[-1]["exit_code"] == 5


def test_quiet_and_verbose(tmp_path):
    env = dh.job_env()
    del env["OMP_NUM_THREADS"]  # so there is a warning to silence
    quiet = dh.run(restart_once_args(tmp_path, "--quiet"), env=env)
    assert quiet.returncode == 0
    # The failure is an error and stays; progress lines go.
    assert "exited with code 3" in quiet.stderr
    assert "restarting the workers" not in quiet.stderr
    assert "warning" not in quiet.stderr
    verbose = dh.run(restart_once_args(tmp_path, "-v"))
    assert verbose.returncode == 0
    assert re.search(r"round 0: worker local_rank=1 \(rank 1\) started, pid \d+", verbose.stderr)
    assert "restarting the workers (restart 1 of 1)" in verbose.stderr
    both = dh.run(["-q", "-v", "--no-python", "/bin/true"])
    assert both.returncode == 2 and "contradict" in both.stderr


def test_unwritable_event_log_is_one_clear_line(tmp_path):
    r = dh.run(["--standalone", "--event-log=/nonexistent/dir/events.jsonl", "--no-python",
                "/bin/true"])
    assert r.returncode == 1
    assert "cannot open the event log /nonexistent/dir/events.jsonl" in r.stderr


def test_agents_sharing_an_event_log_never_interleave(tmp_path):
    events_file = tmp_path / "events.jsonl"
    env = dh.job_env()
    args = ["--standalone", "--nproc-per-node=4", f"--event-log={events_file}", "--no-python",
            "/bin/sh", "-c", "exit 0"]
    procs = [subprocess.Popen([str(dh.DTRUN), *args], env=env,
                                 stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    by_agent = {}
    for e in events:
        by_agent.setdefault(e["agent_pid"], []).append(e["event"])
    assert sorted(by_agent) == sorted(p.pid for p in procs)
    for names in by_agent.values():
        assert names[0] == "agent_started" and names[-2:] == ["job_succeeded", "agent_exiting"]
        assert names.count("worker_exited") == 4
