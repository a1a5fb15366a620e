"""A worker that writes what a Python program can see of how it was
started to $DUMP_TO.<RANK>.json (--preload's "same as a plain start",
docs/agent.md, "Preload"), then exits with $DUMP_EXIT (default 0)."""

import sys

preloaded = sorted(m for m in ("torch", "numpy") if m in sys.modules)  # before any import here

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402

import __main__  # noqa: E402
import numpy  # noqa: E402
import torch  # noqa: E402


def proc_status() -> dict:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: fields[k].strip() for k in ("SigBlk", "SigIgn", "SigCgt")}


def descriptors() -> dict:
    fds = {}
    for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
        try:
            fds[str(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # listdir's own
            pass
    return fds


def handlers() -> dict:
    names = {s.value: s.name for s in signal.Signals}
    return {names.get(s, str(s)): repr(signal.getsignal(s)) for s in signal.valid_signals()
            if s not in (signal.SIGKILL, signal.SIGSTOP)}


def stream(s) -> list:
    return [s.name, s.mode, s.encoding, s.errors, s.line_buffering, s.write_through,
            type(s.buffer).__name__]


dump = {
    "preloaded": preloaded,
    "environ": dict(os.environ),
    "argv": sys.argv,
    "orig_argv": getattr(sys, "orig_argv", None),
    "path": sys.path,
    "name": __name__,
    "file": __file__,
    "main": sorted(vars(__main__)),
    "spec": re.sub(" at 0x[0-9a-f]+", "", repr(__main__.__spec__)),
    "loader": type(__main__.__loader__).__name__,
    "cwd": os.getcwd(),
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "pgid": os.getpgid(0),
    "sid": os.getsid(0),
    "handlers": handlers(),
    "signal_masks": proc_status(),
    "flags": repr(sys.flags),
    "fds": descriptors(),
    "stdio": [stream(sys.stdin), stream(sys.stdout), stream(sys.stderr)],
    "threads": len(os.listdir("/proc/self/task")),
    "torch_threads": [torch.get_num_threads(), torch.get_num_interop_threads()],
    "parallel_info": torch.__config__.parallel_info(),
    "affinity": sorted(os.sched_getaffinity(0)),
    "excepthook": getattr(sys.excepthook, "__name__", "?"),
    "cmdline": open("/proc/self/cmdline").read().split("\0"),
    "hash": hash("dtrun"),
    # Drawn at import in a plain start: fresh in every worker.
    "random_state": [torch.initial_seed(), int(numpy.random.randint(2**62)),
                     __import__("multiprocessing").current_process().authkey.hex()],
}
with open(f"{os.environ['DUMP_TO']}.{os.environ['RANK']}.json", "w") as f:
    json.dump(dump, f, indent=1, sort_keys=True)
sys.exit(int(os.environ.get("DUMP_EXIT", "0")))
