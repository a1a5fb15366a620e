"""A worker that reports which signal reached it and who sent it.

    signal_report_worker.py FIFO

Blocks SIGUSR1 and SIGTERM, writes `ready <RANK> <SLURM_JOB_ID>` to FIFO,
then waits for either. On one it writes `got <NAME> <RANK> <sender>` and
exits 0, where sender is `parent` when the signal came from the process that
started it (dtrun), else `other` (e.g. slurmstepd signalling it directly).
No torch: it starts fast, so the tests measure dtrun and Slurm, not imports.
"""

import os
import signal
import sys

fifo = sys.argv[1]
rank = os.environ["RANK"]
wanted = {signal.SIGUSR1, signal.SIGTERM}
# Blocked before "ready", so a signal sent after it is never lost.
signal.pthread_sigmask(signal.SIG_BLOCK, wanted)


def report(line: str) -> None:
    # One short write per line on a FIFO is atomic: lines never interleave.
    with open(fifo, "w") as f:
        f.write(line + "\n")


report(f"ready {rank} {os.environ.get('SLURM_JOB_ID', '-')}")
info = signal.sigwaitinfo(wanted)
sender = "parent" if info.si_pid == os.getppid() else "other"
report(f"got {signal.Signals(info.si_signo).name} {rank} {sender}")
sys.exit(0)
