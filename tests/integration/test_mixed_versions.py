"""A job of two dtrun versions: one from before round records (issue 47),
whose round ends are sentences, and this one (docs/rendezvous.md, "Mixed
versions"). Neither may misread the other: this dtrun refuses the round
with one line naming both formats, and the older one reads that refusal
in its own words (a refused failure: it rejoins, reads `failed`, exits 1)
instead of restarting without spending a restart.

It needs the older dtrun binary, built from the commit before round
records: `scripts/build-older-dtrun` builds it (a git worktree and one
target, mostly from ccache) and prints its path; the test runs when
DTRUN_OLDER_DTRUN names it and is skipped otherwise (the fast loop has no
second build). Without it, the same refusal is tested against a scripted
peer that writes what the older dtrun wrote
(tests/unit/rendezvous/dynamic_rendezvous_records_test.cpp)."""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

OLDER = os.environ.get("DTRUN_OLDER_DTRUN", "")

pytestmark = pytest.mark.skipif(
    not OLDER, reason="DTRUN_OLDER_DTRUN is not set (scripts/build-older-dtrun builds it)")


def agent(binary: str, port: int, is_host: int, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [binary, "--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
         f"--rdzv-conf={dh.FAST_RDZV},is_host={is_host}", "--max-restarts=3", "--no-python",
         "sleep", "600"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=dh.default_signals)


def test_a_job_of_this_dtrun_and_an_older_one_is_refused_by_both_in_their_own_words():
    env = dh.job_env()
    port = dh.free_port()
    # The older dtrun hosts the store: it outlives this one's refusal and
    # is there for the older node to read the job's failure from.
    procs = [agent(OLDER, port, 1, env)]
    try:
        procs.append(agent(str(dh.DTRUN), port, 0, env))
        older_err = procs[0].communicate(timeout=120)[1]
        newer_err = procs[1].communicate(timeout=120)[1]
    finally:
        dh.kill_all(procs, env["DTRUN_TEST_MARK"])
    refusal = "refusing to run with another dtrun version: "
    assert procs[1].returncode == 1, newer_err
    line = next(line for line in newer_err.splitlines() if refusal in line)
    assert ("writes sentences (format 0: a dtrun from before round records), this dtrun "
            "writes round records of format 1; run the same dtrun version on every node") in line
    assert ("a node of round 0 (host " in line) or ("the node that closed round 0 " in line)
    # The older one read a refused failure, not a newcomer: no restart.
    assert procs[0].returncode != 0, older_err
    assert "the job failed on another node (node " in older_err, older_err
    assert ": not restarted: " + refusal in older_err, older_err
    assert "restarting the workers" not in older_err
    assert "restarting the workers" not in newer_err
