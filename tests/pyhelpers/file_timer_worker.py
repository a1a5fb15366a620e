"""A worker that uses torch's file-timer watchdog client the way training
code does (torch.distributed.elastic.timer.FileTimerClient + expires).

Usage: file_timer_worker.py MODE OUT
Every mode first writes the pipe's path and st_mode to OUT/rank<RANK>.json.
  hang     sleep forever inside `with expires(after=1)`: the watchdog must
           kill it.
  quick    finish inside `with expires(after=600)` (acquire, then release)
           and exit 0.
  hang_once  `hang` when OUT/hung does not exist yet (creating it), else
           `quick`: the restarted group succeeds.
  abuse    write garbage, an overlong line and requests naming other pids
           (VICTIM_PIDS, dtrun itself) into the pipe, then ask for SIGUSR1
           at a deadline already passed and wait for it: the agent read the
           pipe in order, so when SIGUSR1 comes every earlier line has been
           handled. Then acquires and releases a deadline with torch's
           client and exits 0.
"""

import json
import os
import signal
import sys
import threading
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

mode, out = sys.argv[1], sys.argv[2]
path = os.environ["TORCHELASTIC_TIMER_FILE"]
rank = os.environ["RANK"]
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"path": path, "mode": os.stat(path).st_mode}, f)


def send(line: bytes) -> None:
    # Blocking write: the agent reads while we write, so a line longer than
    # the pipe's buffer goes through too.
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def request(pid: int, scope: str, expiration: float, sig: int) -> bytes:
    return (json.dumps({"version": 1, "pid": pid, "scope_id": scope,
                        "expiration_time": expiration, "signal": sig}) + "\n").encode()


configure(FileTimerClient(path))

if mode == "hang_once":
    marker = os.path.join(out, "hung")
    if os.path.exists(marker):
        mode = "quick"
    else:
        open(marker, "w").close()
        mode = "hang"

if mode == "hang":
    with expires(after=1):
        print("inside the deadline", flush=True)
        threading.Event().wait()  # never returns: the watchdog must end this
elif mode == "quick":
    with expires(after=600):
        pass
    print("released", flush=True)
elif mode == "abuse":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    send(b"this is not json\n")
    send(b"\x1b[31m{\"pid\": \x00\xff\n")
    send(b"[1, 2, 3]\n")
    send(b'{"pid": "1", "scope_id": "x", "expiration_time": 0, "signal": 9}\n')
    send(b'{"pid": 18446744073709551615, "scope_id": "x", "expiration_time": 0, "signal": 9}\n')
    send(b'{"pid": -1, "scope_id": "x", "expiration_time": 0, "signal": 9}\n')
    send(b"[" * 4000 + b"\n")
    send(b"x" * 200000 + b"\n")
    past = time.time() - 10
    for victim in [int(p) for p in os.environ["VICTIM_PIDS"].split(",")] + [os.getppid()]:
        send(request(victim, "hostile", past, signal.SIGKILL))
    send(request(os.getpid(), "notice", past, signal.SIGUSR1))
    signal.sigwait({signal.SIGUSR1})
    print("got SIGUSR1 from the watchdog", flush=True)
    with expires(after=600):
        pass
    print("released", flush=True)
else:
    sys.exit(f"unknown mode {mode}")
