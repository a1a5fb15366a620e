"""A worker that reports its SIGHUP disposition, then waits to be told to end.

    nohup_worker.py FIFO GO_DIR

Writes `ready <RANK> <pid> <ignored|not-ignored>` to FIFO (its SIGHUP
disposition as inherited through exec), then blocks reading a line from GO_DIR/go_<RANK>
(a FIFO the test writes to when the worker may end),
prints `rank <RANK> finished` on stdout and exits 0. A SIGHUP that is not
ignored kills it meanwhile (default action). No torch: it starts fast.
"""

import os
import signal
import sys

fifo, go_dir = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]
hup = "ignored" if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else "not-ignored"
with open(fifo, "w") as f:  # one short write on a FIFO: atomic
    f.write(f"ready {rank} {os.getpid()} {hup}\n")
with open(os.path.join(go_dir, f"go_{rank}")) as go:
    go.readline()
# One write: print() makes two ("text", "\n") when Python is unbuffered
# (PYTHONUNBUFFERED=1, as on CI), and the two workers share the agent's stdout.
os.write(1, f"rank {rank} finished\n".encode())
sys.exit(0)
