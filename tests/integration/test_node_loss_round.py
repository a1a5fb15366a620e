"""After a node dies, the survivors' next round closes at once, without
waiting out the last call (docs/rendezvous.md, "Closing a restart round at
once").

Three dtrun agents on this machine (c10d, the first hosts the store on
127.0.0.1), `--nnodes=2:3`, default rendezvous settings (last_call_timeout
30 s), one held worker each. Once all three run round 0, the third agent is
SIGKILLed with its worker: its connection closes and its last will ends
round 0. The two survivors' round 1 must close with 2 nodes because every
node that can come is there, which the closer says; a round closed by the
last call would say so instead."""

import os
import re
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.environ["DTRUN_SOURCE_DIR"], "tests", "pyhelpers"))
import dtrun_helpers as dh  # noqa: E402

ROUND_0 = re.compile(r"round 0: node (\d+) of 3,")


class Lines:
    """Every stderr line of an agent, read by a thread of its own, with a
    wait for a line that a condition variable wakes (no polling)."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[str] = []
        self._done = False
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in iter(proc.stderr.readline, ""):
            with self._cv:
                self.lines.append(line.rstrip("\n"))
                self._cv.notify_all()
        with self._cv:
            self._done = True
            self._cv.notify_all()

    def wait_for(self, needle: str, timeout: float = 60) -> str:
        def found():
            return next((line for line in self.lines if needle in line), None)
        with self._cv:
            self._cv.wait_for(lambda: found() is not None or self._done, timeout)
            line = found()
        assert line is not None, f"no stderr line with {needle!r}; got {self.lines!r}"
        return line


def agent(port: int, is_host: int, env: dict[str, str]) -> subprocess.Popen:
    return dh.start(["--nnodes=2:3", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                     f"--rdzv-conf=is_host={is_host}", "--max-restarts=3", "--no-python",
                     "sleep", "600"], env)


def test_the_survivors_round_closes_when_every_node_that_can_come_is_there():
    env = dh.job_env()
    port = dh.free_port()
    procs = [agent(port, 1, env)]
    try:
        procs += [agent(port, 0, env), agent(port, 0, env)]
        logs = [Lines(p) for p in procs]
        ranks = [int(ROUND_0.search(log.wait_for("round 0: node")).group(1)) for log in logs]
        assert sorted(ranks) == [0, 1, 2]
        # The third node dies: the agent and its worker at once.
        os.killpg(procs[2].pid, signal.SIGKILL)
        procs[2].wait()
        for log in logs[:2]:
            assert "of 2," in log.wait_for("round 1: node")
        lines = logs[0].lines + logs[1].lines
        everyone_here = [line for line in lines if "every node that can come is here" in line]
        assert len(everyone_here) >= 1, lines
        assert all(f"round 1: every node that can come is here (2 back from round 0, node "
                   f"{ranks[2]} gone; 2 arrived); closing with 2 node(s)" in line
                   for line in everyone_here), everyone_here
        assert not [line for line in lines if "the last call" in line and "is over" in line], lines
    finally:
        dh.kill_all(procs, env["DTRUN_TEST_MARK"])
