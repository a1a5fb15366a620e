"""Restarts: the group is stopped and started again with the next
TORCHELASTIC_RESTART_COUNT while restarts remain; then dtrun fails with the
worker's code."""

import os
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

# Each worker logs "restart rank pid port" then rank 1 fails on attempts
# below FAIL_UNTIL; the others wait to be stopped.
WORKER = ('echo "$TORCHELASTIC_RESTART_COUNT $RANK $$ $MASTER_PORT" >> "$LOG"; '
          '[ "$TORCHELASTIC_RESTART_COUNT" -ge "$FAIL_UNTIL" ] && exit 0; '
          '[ "$RANK" = 1 ] && exit 3; exec sleep 1000')


def attempts(log):
    rows = [line.split() for line in log.read_text().splitlines()]
    by_attempt = {}
    for restart, rank, pid, port in rows:
        by_attempt.setdefault(int(restart), []).append((int(rank), int(pid), port))
    return by_attempt


def run(tmp_path, max_restarts, fail_until):
    log = tmp_path / "log"
    env = dh.job_env(LOG=str(log), FAIL_UNTIL=str(fail_until))
    r = dh.run(["--standalone", "--nproc-per-node=3", f"--max-restarts={max_restarts}",
                "--no-python", "/bin/sh", "-c", WORKER], env=env)
    return r, attempts(log)


def test_restart_then_success(tmp_path):
    r, by_attempt = run(tmp_path, max_restarts=2, fail_until=2)
    assert r.returncode == 0, r.stderr
    assert sorted(by_attempt) == [0, 1, 2]
    # The failing attempts may be stopped before every rank logged; the
    # last one ran them all.
    assert sorted(rank for rank, _, _ in by_attempt[2]) == [0, 1, 2]
    assert all(1 in [rank for rank, _, _ in by_attempt[a]] for a in (0, 1))
    # Fresh processes each attempt, same store.
    pids = [pid for rows in by_attempt.values() for _, pid, _ in rows]
    assert len(set(pids)) == len(pids)
    assert len({port for rows in by_attempt.values() for _, _, port in rows}) == 1
    assert "restarting the workers (restart 1 of 2)" in r.stderr
    assert "restarting the workers (restart 2 of 2)" in r.stderr



# Restarts used up and --max-restarts=0 (the policy alone) are tested
# without processes: tests/unit/agent/policy/elastic_agent_test.cpp.
