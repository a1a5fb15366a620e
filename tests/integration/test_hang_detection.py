"""--hang-timeout: a job whose workers all stop making progress (no output,
no heartbeat-file touch, no file-timer request) for the timeout is a hang:
dtrun says so, captures where each worker is, kills the rank stuck apart
from the others and fails (or restarts) the group. Progress of any kind
on any node keeps the job alive, and the option is off by default."""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

WORKER = str(dh.SOURCE_DIR / "tests" / "pyhelpers" / "hang_worker.py")


def run(*flags, mode, nproc=2, timeout=120):
    return dh.run(["--standalone", f"--nproc-per-node={nproc}", *flags, "--python", dh.PYTHON,
                   WORKER, *mode], timeout=timeout)


def test_a_silent_job_is_a_hang_and_fails_with_a_summary(tmp_path):
    events = tmp_path / "events.jsonl"
    r = run("--hang-timeout=1", f"--event-log={events}", mode=["stuck"])
    assert r.returncode == 137, r.stderr
    assert "hang: no progress from any worker for" in r.stderr
    assert "hang      : killed by dtrun after a hang (--hang-timeout)" in r.stderr
    hang = [e for e in dh.read_json_lines(events) if e["event"] == "hang_detected"]
    assert len(hang) == 1
    assert hang[0]["hang_timeout_s"] == 1
    assert hang[0]["idle_s"] >= 1
    assert sorted(w["rank"] for w in hang[0]["workers"]) == [0, 1]
    failed = [e for e in dh.read_json_lines(events) if e["event"] == "job_failed"]
    assert len(failed) == 1


def test_a_hang_restarts_the_group_while_restarts_remain(tmp_path):
    events = tmp_path / "events.jsonl"
    r = run("--hang-timeout=1", "--max-restarts=1", f"--event-log={events}", mode=["stuck"])
    assert r.returncode == 137, r.stderr
    names = [e["event"] for e in dh.read_json_lines(events)]
    assert names.count("hang_detected") == 2
    assert names.count("restart") == 1


# Tests that must NOT see a hang give the interpreter's start (no progress
# yet) 3 s: a loaded machine must not turn them into hangs.
def test_output_is_progress():
    r = run("--hang-timeout=3", mode=["prints", "4"])
    assert r.returncode == 0, r.stderr
    assert "hang" not in r.stderr
    # The watched console passes the lines through unchanged.
    assert r.stdout.count("rank 0: step") >= 10
    assert "[default0]" not in r.stdout


def test_output_redirected_to_files_is_progress(tmp_path):
    r = run("--hang-timeout=3", "--redirects=3", f"--log-dir={tmp_path}", mode=["prints", "4"])
    assert r.returncode == 0, r.stderr
    assert "hang" not in r.stderr
    logs = list(tmp_path.glob("*/attempt_0/0/stdout.log"))
    assert len(logs) == 1 and logs[0].read_text().count("rank 0: step") >= 10


def test_touching_the_heartbeat_file_is_progress():
    r = run("--hang-timeout=3", mode=["heartbeat", "4"])
    assert r.returncode == 0, r.stderr
    assert "hang" not in r.stderr


def test_one_printing_rank_keeps_the_whole_job_alive():
    r = run("--hang-timeout=3", mode=["rank0-prints", "4"])
    assert r.returncode == 0, r.stderr


def test_hang_detection_is_off_by_default():
    r = run(mode=["silent", "2"])
    assert r.returncode == 0, r.stderr
    assert "hang" not in r.stderr


def test_progress_on_another_node_keeps_a_silent_node_alive():
    # Node 1's only worker (rank 1) never prints; rank 0 on node 0 does.
    nodes = dh.run_two_local_nodes(["--nproc-per-node=1", "--hang-timeout=3", "--python",
                                    dh.PYTHON], [WORKER, "rank0-prints", "8"])
    for node in nodes:
        assert node.returncode == 0, node.stderr
        assert "hang" not in node.stderr


def test_a_silent_multi_node_job_is_a_hang_on_every_node():
    nodes = dh.run_two_local_nodes(["--nproc-per-node=1", "--hang-timeout=1", "--python",
                                    dh.PYTHON], [WORKER, "silent", "3600"])
    for node in nodes:
        assert node.returncode == 137, node.stderr
        assert "job failed" in node.stderr


# Round 0: rank 0 stops itself (its dump never comes: the capture waits
# for its Python deadline) and rank 1 exits 1 when the stack signal comes,
# so the group restarts while the capture is still under way. Round 1
# waits until that capture makes its last stacks file, then asks the agent
# for its status over the control socket: the reply comes only after the
# agent finished the handler that made the file, so a rank still alive to
# read it was not killed for the previous round's hang.
STALE_CAPTURE_WORKER = r"""
import ctypes, json, os, signal, socket, sys
from pathlib import Path

rank_dir = Path(os.environ["TORCHELASTIC_ERROR_FILE"]).parent
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    if os.environ["LOCAL_RANK"] == "1":
        header = [l for l in (rank_dir / "python_stacks.log").read_text().splitlines()
                  if l.startswith("dtrun-stack-hook ")][-1]
        signum = int(header.split(" signal=")[1].split()[0])
        signal.signal(signum, lambda *_: os._exit(1))
        print("rank 1 ready", flush=True)
        while True:
            signal.pause()
    print("rank 0 ready", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    while True:
        signal.pause()

print(f"round 1 rank {os.environ['RANK']}", flush=True)
last = rank_dir.parent.parent / "attempt_0" / "1"
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
IN_CLOSE_WRITE, IN_CREATE = 0x8, 0x100
assert libc.inotify_add_watch(fd, str(last).encode(), IN_CLOSE_WRITE | IN_CREATE) >= 0
while not (last / "stacks-1.txt").exists():
    os.read(fd, 4096)
# The agent made the file in the handler that ends the capture; it answers
# us only after that handler (and a kill it may send) is over.
agent = socket.socket(socket.AF_UNIX)
agent.connect(f"{os.environ['DTRUN_CONTROL_DIR']}/{os.getppid()}.sock")
agent.sendall(b'{"op": "status"}\n')
reply = agent.makefile().readline()
assert json.loads(reply)["schema"] == "dtrun.status/1", reply
print(f"round 1 rank {os.environ['RANK']} done", flush=True)
"""


def test_a_capture_that_outlives_its_round_kills_nobody_of_the_next(tmp_path):
    script = tmp_path / "stale_capture.py"
    script.write_text(STALE_CAPTURE_WORKER)
    control = tmp_path / "control"
    control.mkdir(mode=0o700)
    events = tmp_path / "events.jsonl"
    # 5 s: round 1 is silent from its start until round 0's capture ends
    # (its 3 s Python deadline), which must not be a hang of its own.
    r = dh.run(["--standalone", "--nproc-per-node=2", "--hang-timeout=5", "--max-restarts=1",
                f"--event-log={events}", "--python", dh.PYTHON, str(script)],
               env=dh.job_env(DTRUN_CONTROL_DIR=str(control)), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "round 1 rank 0 done" in r.stdout and "round 1 rank 1 done" in r.stdout, r.stdout
    names = [e["event"] for e in dh.read_json_lines(events)]
    assert names.count("restart") == 1
    assert names.count("hang_detected") == 0, names


def test_the_stacks_files_the_summary_names_outlive_dtrun_without_log_dir(tmp_path):
    # Without --log-dir the run folder is temporary; the hang summary and
    # the failure summary name stacks-<n>.txt files in it, which must stay.
    r = dh.run(["--standalone", "--nproc-per-node=2", "--hang-timeout=1", "--python",
                dh.PYTHON, WORKER, "stuck"], env=dh.job_env(TMPDIR=str(tmp_path)), timeout=120)
    assert r.returncode == 137, r.stderr
    named = re.findall(r"stacks: (\S+/stacks-\d+\.txt)", r.stderr)
    assert named, r.stderr
    for path in named:
        assert path.startswith(str(tmp_path)) and os.path.isfile(path), (path, r.stderr)
    assert re.search(r"^dtrun: run folder: \S+ \(kept: it holds the stacks files dtrun named; "
                     r"choose the folder with --log-dir\)$", r.stderr, re.M), r.stderr
