"""What a failing worker leaves at TORCHELASTIC_ERROR_FILE is its own
choice, and dtrun must survive every choice: a FIFO (whose read would
block the agent's one event loop), a directory, a message written to
forge dtrun's own lines, bytes that are not UTF-8. Real dtrun runs with
--no-python workers; the job's other worker waits until dtrun stops it,
so nothing here waits on a clock (the subprocess timeout only turns a
frozen agent into a failure instead of a hung test)."""

import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
from failure_summary import field, summary  # noqa: E402

# Rank 0 puts something in place of its error file and exits; rank 1
# blocks until dtrun stops it.
def replace_error_file_then_exit(make: str, code: int) -> str:
    return ('if [ "$RANK" = 0 ]; then rm -f "$TORCHELASTIC_ERROR_FILE"; '
            f'{make} "$TORCHELASTIC_ERROR_FILE" || exit 99; exit {code}; fi; exec sleep 100000')


def run_replacing(tmp_path, make: str, code: int):
    events_file = tmp_path / "events.jsonl"
    r = dh.run(["--standalone", "--nproc-per-node=2", f"--event-log={events_file}",
                "--no-python", "/bin/sh", "-c", replace_error_file_then_exit(make, code)])
    return r, dh.read_json_lines(events_file)


def assert_other_worker_stopped(events, code):
    exits = {e["rank"]: e for e in events if e["event"] == "worker_exited"}
    assert exits[0]["exit_code"] == code and exits[0]["signal"] is None
    # The sleeping rank was stopped by dtrun: it could only end by a signal.
    assert exits[1]["signal"] == "SIGTERM" and exits[1]["stopped_by_dtrun"] is True
    assert events[-1]["event"] == "agent_exiting" and events[-1]["exit_code"] == code


def test_a_fifo_as_the_error_file_neither_freezes_the_agent_nor_hides_the_exit_code(tmp_path):
    r, events = run_replacing(tmp_path, "mkfifo", 3)
    assert r.returncode == 3, r.stderr
    block = summary(r.stderr)
    assert field(block, "exit") == "exit code 3"
    assert field(block, "rank") == "0 (local_rank 0)"
    assert re.fullmatch(r"/.*/attempt_0/0/error\.json is unusable: not a regular file \(a FIFO\); "
                        r"ignored", field(block, "error_file")), block
    assert "stopped by dtrun (not failures): rank(s) 1" in block
    assert_other_worker_stopped(events, 3)


def test_a_directory_as_the_error_file_keeps_the_exit_code_and_the_summary(tmp_path):
    r, events = run_replacing(tmp_path, "mkdir", 5)
    assert r.returncode == 5, r.stderr
    assert "underflow" not in r.stderr
    block = summary(r.stderr)
    assert field(block, "exit") == "exit code 5"
    assert field(block, "error_file").endswith(
        "/error.json is unusable: not a regular file (a directory); ignored")
    assert_other_worker_stopped(events, 5)


# Writes torch's nested shape (json.dump escapes the control characters as
# \u001b, so the file is valid JSON) and exits 1.
FORGING_WORKER = r"""
import json, os, sys
forged = "\x1b[2K\rFAKE dtrun: job succeeded\n"
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
    json.dump({"message": {"message": forged,
                           "extraInfo": {"py_callstack": "Traceback:\n" + forged + "last line\n",
                                         "timestamp": "1"}}}, f)
sys.exit(1)
"""


def test_an_error_message_cannot_forge_a_dtrun_line(tmp_path):
    script = tmp_path / "forge.py"
    script.write_text(FORGING_WORKER)
    r = dh.run(["--standalone", "--nproc-per-node=1", "--no-python", dh.PYTHON, str(script)])
    assert r.returncode == 1, r.stderr
    # splitlines() also splits at a bare \r, as a terminal would return there.
    for line in r.stderr.splitlines():
        assert not line.startswith("FAKE"), r.stderr
    assert "\x1b" not in r.stderr and "\r" not in r.stderr
    block = summary(r.stderr)
    assert field(block, "error") == r"\x1b[2K\rFAKE dtrun: job succeeded\n"
    # The traceback keeps its lines, each escaped and indented under the field.
    assert "\ndtrun:     \\x1b[2K\\rFAKE dtrun: job succeeded\ndtrun:     last line\n" in block
    # The one line said when the worker failed is escaped as well.
    assert r"exited with code 1: \x1b[2K\rFAKE dtrun: job succeeded\n; stopping" in r.stderr


def test_bytes_that_are_not_utf8_keep_the_event_log_valid(tmp_path):
    # A log folder whose name is not UTF-8 puts such bytes in the error
    # file's path (event log fields error_file, root_cause); the error file
    # itself holds raw invalid UTF-8, which is not JSON.
    log_dir = os.fsencode(tmp_path) + b"/logs-\xff\xfe"
    events_file = tmp_path / "events.jsonl"
    worker = r"""printf '{"message": "bad \377\376 byte"}' > "$TORCHELASTIC_ERROR_FILE"; exit 4"""
    r = subprocess.run([os.fsencode(dh.DTRUN), b"--standalone", b"--nproc-per-node=1",
                        b"--log-dir", log_dir, b"--event-log", os.fsencode(events_file),
                        b"--no-python", b"/bin/sh", b"-c", worker.encode()],
                       env=dh.job_env(), capture_output=True, timeout=60)
    # dtrun's own lines are escaped: no byte of its stderr is invalid UTF-8
    # (the record's path went through the store as JSON: U+FFFD there).
    stderr = r.stderr.decode("utf-8")
    assert r.returncode == 4, stderr
    block = summary(stderr)
    assert field(block, "exit") == "exit code 4"
    assert re.fullmatch(r"/.*/logs-(\\xff\\xfe|\ufffd\ufffd)/.*/error\.json is unusable: "
                        r"not valid JSON; ignored", field(block, "error_file")), block
    # Every line is valid UTF-8 and one JSON object; the bad bytes became U+FFFD.
    lines = events_file.read_bytes().decode("utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    failed = [e for e in events if e["event"] == "worker_failed"]
    assert len(failed) == 1 and "logs-\ufffd\ufffd" in failed[0]["error_file"]
    job_failed = [e for e in events if e["event"] == "job_failed"]
    assert job_failed[0]["root_cause"]["exit_code"] == 4
    assert events[-1]["event"] == "agent_exiting" and events[-1]["exit_code"] == 4
