"""A worker fails while the rendezvous store cannot be reached: the agent
cannot report the failure, so no restart can be counted, and the job
fails. Its summary must say that, not "all N restart(s) used" with none
spent (found by scripts/chaos, bench seeds 52 and 69: a host's link went
down while its worker failed)."""

import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402
import store_helpers as sh  # noqa: E402


def test_a_failure_the_store_never_heard_of_is_not_called_restarts_used(tmp_path):
    ready = dh.Fifo(tmp_path, "ready")
    hold = tmp_path / "hold"
    os.mkfifo(hold)
    events = tmp_path / "events.jsonl"
    env = dh.job_env(READY=str(ready.path), HOLD=str(hold))
    with sh.StoreServer() as store:
        agent = subprocess.Popen(
            [str(dh.DTRUN), "--nnodes=1", "--rdzv-backend=c10d",
             f"--rdzv-endpoint={store.endpoint}", "--rdzv-id=unreported",
             # is_host=0: the store is the external one, which the test
             # stops; close_timeout bounds each request to it.
             "--rdzv-conf=is_host=0,close_timeout=2,join_timeout=20",
             "--max-restarts=3", f"--event-log={events}", "--no-python", "sh", "-c",
             'echo ready > "$READY"; read x < "$HOLD"; exit 1'],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=dh.default_signals)
        try:
            ready.lines(1, timeout=60)
            # The store stops answering (its connections stay open, as
            # behind a link that is down), then the worker fails.
            os.kill(store.proc.pid, signal.SIGSTOP)
            with open(hold, "w") as f:
                f.write("go\n")
            _, stderr = agent.communicate(timeout=120)
        finally:
            os.kill(store.proc.pid, signal.SIGCONT)
            if agent.poll() is None:
                agent.kill()
                agent.wait()
            dh.kill_marked(env["DTRUN_TEST_MARK"])
    assert agent.returncode == 1, stderr
    assert "could not reach the rendezvous to report the failure" in stderr, stderr
    assert "restart(s) used" not in stderr, stderr
    assert "the failure could not be reported to the rendezvous" in stderr, stderr
    failed = [json.loads(line) for line in events.read_text().splitlines()
              if '"job_failed"' in line]
    assert [e["reason"] for e in failed] == [
        "the failure could not be reported to the rendezvous, so no restart could be counted"]
