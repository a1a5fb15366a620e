"""Progress from the workers (issue 48): a worker started by dtrun imports
`dtrun` with nothing installed, and its dtrun.step() and dtrun.section()
reach the agent through the progress page (no system call per call):
`dtrun status` and /metrics show each rank's step and section. With
--section-timeouts, a rank that overstays its section is a hang of that
section, caught with stacks, and the round ends as a `hang` naming it.
Real workers on plain /usr/bin/python3: the module needs no torch."""

import json
import os
import re
import signal
import struct
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

# Steps 0..2, then the checkpoint section, where it says so on the FIFO
# and waits for a line on the GO pipe; a forked child's calls do nothing.
STEPPING_WORKER = r"""
import os, sys
import dtrun
assert dtrun.enabled(), "dtrun.step() would report nothing"
for n in range(3):
    dtrun.step(n)
child = os.fork()
if child == 0:
    dtrun.step(99)
    os._exit(0 if not dtrun.enabled() else 3)
assert os.waitpid(child, 0)[1] == 0
with dtrun.section("checkpoint"):
    with open(os.environ["READY"], "w") as ready:
        ready.write("ready\n")
    go = os.open(os.environ["GO"], os.O_RDONLY)
    os.read(go, 3)
dtrun.step()
"""

# Rank 1 stays in its checkpoint for ever; rank 0 waits outside any section.
CHECKPOINT_HANG_WORKER = r"""
import os, signal
import dtrun
dtrun.step(0)
if os.environ["RANK"] == "1":
    with dtrun.section("checkpoint"):
        print("rank 1 in checkpoint", flush=True)
        signal.pause()
signal.pause()
"""

PAGE_WORDS = 512


def write_script(tmp_path, text, name="worker.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def page_words(path):
    return struct.unpack(f"<{PAGE_WORDS}q", path.read_bytes())


def test_steps_and_sections_show_in_status_and_metrics(tmp_path):
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    ready = dh.Fifo(tmp_path, "ready")
    go = dh.Fifo(tmp_path, "go")
    env.update(READY=str(ready.path), GO=str(go.path))
    logs = tmp_path / "logs"
    proc = dh.start(["--standalone", "--nproc-per-node=1", "--metrics-port=0",
                     f"--log-dir={logs}", "--python", dh.PYTHON,
                     write_script(tmp_path, STEPPING_WORKER)], env)
    try:
        line = dh.wait_for_stderr(proc, "metrics: http://")
        base = re.search(r"(http://127\.0\.0\.1:\d+)/metrics", line).group(1)
        ready.lines(1)
        r = subprocess.run([str(dh.DTRUN), "status", "--json"], env=env, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        worker = json.loads(r.stdout)[0]["workers"][0]
        assert worker["step"] == 2  # not the forked child's 99
        assert worker["section"] == "checkpoint"
        assert worker["section_seconds"] >= 0
        table = subprocess.run([str(dh.DTRUN), "status"], env=env, capture_output=True,
                               text=True, timeout=60).stdout
        assert "STEP" in table and "SECTION" in table and " checkpoint " in table, table
        metrics = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
        assert re.search(r'^dtrun_worker_step\{[^}]*rank="0"[^}]*\} 2$', metrics, re.M), metrics
        assert re.search(r'^dtrun_worker_section_seconds\{[^}]*section="checkpoint"\} \S+$',
                         metrics, re.M), metrics
        go.write("go\n")
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        ready.close()
        go.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])
    # The page as the worker left it, read here with the documented layout.
    pages = list(logs.glob("*/attempt_0/0/progress_page"))
    assert len(pages) == 1
    w = page_words(pages[0])
    assert w[0] == 0x3147504E55525444 and w[1] == 1  # magic, version
    assert w[3] > 0 and w[4] % 2 == 0  # a writer attached; no write half done
    assert w[5] == 3 and w[7] == 3     # step 3 runs, steps 0..2 completed
    assert w[8] == 0                    # back in "step" after the section
    checkpoint = 128 + 13
    assert pages[0].read_bytes()[checkpoint * 8:checkpoint * 8 + 11] == b"checkpoint\0"
    assert w[checkpoint + 4] == 1 and w[checkpoint + 5] > 0  # one interval, its length


def test_without_calls_the_step_is_the_progress_file(tmp_path):
    env = dh.job_env(DTRUN_CONTROL_DIR=str(tmp_path / "control"))
    ready = dh.Fifo(tmp_path, "ready")
    progress = tmp_path / "step"
    progress.write_text("41\n")
    script = write_script(tmp_path, "import os, signal\n"
                                    "with open(os.environ['READY'], 'w') as f: f.write('ready\\n')\n"
                                    "signal.pause()\n")
    env["READY"] = str(ready.path)
    proc = dh.start(["--standalone", "--nproc-per-node=1", f"--progress-file={progress}",
                     "--python", dh.PYTHON, script], env)
    try:
        ready.lines(1)
        r = subprocess.run([str(dh.DTRUN), "status", "--json"], env=env, capture_output=True,
                           text=True, timeout=60)
        worker = json.loads(r.stdout)[0]["workers"][0]
        assert worker["step"] == 41
        assert worker["section"] is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        ready.close()
        dh.kill_marked(env["DTRUN_TEST_MARK"])


def test_a_rank_that_overstays_its_checkpoint_is_a_hang_of_that_section(tmp_path):
    events = tmp_path / "events.jsonl"
    r = dh.run(["--standalone", "--nproc-per-node=2", "--section-timeouts=checkpoint=2",
                f"--event-log={events}", f"--log-dir={tmp_path / 'logs'}", "--python",
                dh.PYTHON, write_script(tmp_path, CHECKPOINT_HANG_WORKER)], timeout=120)
    assert r.returncode == 137, r.stderr
    assert "hang: rank 1 has been in section checkpoint for" in r.stderr
    assert "(--section-timeouts checkpoint=2); capturing every worker's stacks" in r.stderr
    assert ("hang      : killed by dtrun after a hang of section checkpoint "
            "(--section-timeouts): in section checkpoint for") in r.stderr
    log = dh.read_json_lines(events)
    hang = [e for e in log if e["event"] == "hang_detected"]
    assert len(hang) == 1
    assert hang[0]["section"] == "checkpoint" and hang[0]["rank"] == 1
    assert hang[0]["in_section_s"] >= 2 and hang[0]["section_timeout_s"] == 2
    assert hang[0]["learned"] is False
    # The stacks say where it was: in the worker's signal.pause().
    stacks = open(hang[0]["stacks"]).read()
    assert "worker.py" in stacks, stacks
    incident = [e for e in log if e["event"] == "incident"]
    assert len(incident) == 1
    assert incident[0]["class"] == "hang" and incident[0]["section"] == "checkpoint"
    assert incident[0]["rank"] == 1


def test_section_timeouts_are_parsed_strictly():
    r = dh.run(["--standalone", "--section-timeouts=checkpoint=soon", "--no-python", "true"])
    assert r.returncode == 2, r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr
    assert "--section-timeouts checkpoint: 'soon'" in lines[0], r.stderr

