"""--preload's hand-over under the least friendly order: once a round is
started, its warm interpreter forks a successor (the next round's) and
exits at once. Every child it forked goes on only once the agent, having
reaped it, closes the round's go pipe: a child that runs only after its
parent has exited must still start, and the successor must still serve
the restart. (An earlier version read the parent's pid after the fork,
and such a successor then waited for the agent's own death.)

SCHED_FIFO on one CPU makes that order certain: a forked child runs only
once its parent blocks or exits. Skipped where chrt cannot set it (no
CAP_SYS_NICE). The module preloaded is json: the hand-over is the same
whatever was imported.
"""

import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

# Logs its attempt; rank 1 fails the first one, so the group restarts once.
CRASH_ONCE = """import os, sys
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(sys.argv[1], "a") as f:
    f.write(attempt + "\\n")
if attempt == "0" and os.environ["RANK"] == "1":
    os._exit(1)
"""


def fifo_on_one_cpu() -> list[str]:
    if not (shutil.which("chrt") and shutil.which("taskset")):
        pytest.skip("chrt or taskset is missing (util-linux)")
    probe = subprocess.run(["chrt", "-f", "1", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot run SCHED_FIFO here: {probe.stderr.strip()}")
    return ["taskset", "-c", "0", "chrt", "-f", "1"]


def test_a_successor_that_runs_after_its_parent_exited_serves_the_restart(tmp_path):
    script, log = tmp_path / "crash_once.py", tmp_path / "attempts"
    script.write_text(CRASH_ONCE)
    r = subprocess.run([*fifo_on_one_cpu(), str(dh.DTRUN), "--standalone", "--nproc-per-node=2",
                        "--max-restarts=1", "--python", dh.PYTHON, "--preload", "json",
                        str(script), str(log)],
                       env=dh.job_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    attempts = log.read_text().split()
    assert attempts.count("1") == 2 and set(attempts) == {"0", "1"}, (attempts, r.stderr)
    assert "restarting the workers (restart 1 of 1)" in r.stderr
    assert "warning" not in r.stderr  # forked, not a plain start after a fallback
