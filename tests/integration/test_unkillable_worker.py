"""A worker that does not die on SIGKILL (uninterruptible sleep, D) does
not wedge the agent: a bounded grace after the SIGKILL the agent names it
in one line, stops waiting for it and ends with the failure's code instead
of restarting (torchrun 2.12-2.13, pytorch PRs #184304 and #185414;
docs/agent.md, "Workers that do not die").

A real D-state process: a task in a frozen cgroup v1 freezer is in D and
ignores SIGKILL until the cgroup is thawed (cgroup v2's freezer lets
SIGKILL through, so it would not do). Needs root and the v1 freezer
hierarchy mounted; skipped, saying why, without them."""

import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

FREEZER = Path("/sys/fs/cgroup/freezer")
GRACE_S = 10  # kill_watch::default_grace

# Rank 1 moves itself into the freezer cgroup and says so on SYNC; rank 0
# waits for that, freezes the cgroup (the write marks every task in it
# frozen before it returns, so no later signal gets in first) and fails.
WORKER = ('if [ "$RANK" = 1 ]; then echo $$ > "$CG/cgroup.procs"; echo in > "$SYNC"; '
          'exec sleep 1000; fi; '
          'read line < "$SYNC"; echo FROZEN > "$CG/freezer.state"; exit 3')


@pytest.fixture
def freezer(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to make a cgroup v1 freezer group")
    if not (FREEZER / "freezer.state").exists() and not (FREEZER / "cgroup.procs").exists():
        pytest.skip(f"no cgroup v1 freezer hierarchy at {FREEZER}")
    group = FREEZER / f"dtrun-test-{uuid.uuid4().hex[:12]}"
    try:
        group.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a freezer group: {e}")
    try:
        yield group
    finally:
        (group / "freezer.state").write_text("THAWED\n")
        for pid in (int(p) for p in (group / "cgroup.procs").read_text().split()):
            try:
                died = os.pidfd_open(pid)
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue  # gone already
            # Readable once it has exited; then it has left the group.
            select.select([died], [], [], 10)
            os.close(died)
        group.rmdir()

def test_worker_in_d_state_does_not_wedge_the_agent(tmp_path, freezer):
    sync = tmp_path / "sync"
    os.mkfifo(sync)
    env = dh.job_env(CG=str(freezer), SYNC=str(sync))
    mark = env["DTRUN_TEST_MARK"]
    log = tmp_path / "stderr"
    started = time.monotonic()
    # Restarts remain: the agent must not spend them on a node that cannot
    # clean up. The output goes to a file, not a pipe: the frozen worker
    # inherits it and would hold a pipe open after dtrun ended.
    with open(log, "w") as stderr:
        r = subprocess.run([str(dh.DTRUN), "--standalone", "--nproc-per-node=2",
                            "--max-restarts=3", "--stop-timeout=1", "--no-python", "/bin/sh",
                            "-c", WORKER], env=env, stdout=subprocess.DEVNULL, stderr=stderr,
                           timeout=60)
    took = time.monotonic() - started
    r.stderr = log.read_text()
    frozen = [int(p) for p in (freezer / "cgroup.procs").read_text().split()]
    assert len(frozen) == 1, r.stderr
    pid = frozen[0]
    # rank 0's failure is the job's exit code.
    assert r.returncode == 3, r.stderr
    assert (f"rank 1 (pid {pid}) is in uninterruptible sleep (D) and did not die on SIGKILL "
            f"within {GRACE_S} s; leaving it to the kernel") in r.stderr
    assert "restarting the workers" not in r.stderr
    assert f"not restarted: rank 1 (pid {pid}) did not die on SIGKILL" in r.stderr
    # The stop timeout (1 s), then the grace: bounded, not a hang.
    assert GRACE_S < took < GRACE_S + 20, r.stderr
    # Still there, frozen, until the kernel lets go; then it dies of the
    # SIGKILL it already has, and nothing of the job is left.
    assert Path(f"/proc/{pid}").exists()
    (freezer / "freezer.state").write_text("THAWED\n")
    assert dh.gone_within(mark) == []
