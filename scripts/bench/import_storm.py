"""What one `import torch` asks of the file system, for scripts/bench/restart.

On a shared file system (NFS, Lustre) every worker that starts by exec
repeats the same metadata work (path look-ups, most of them failing while
the import system searches sys.path, directory listings, opens) and reads
the same bytes, all at once across a restarted job's workers: the import
storm. strace -f (-y names each descriptor's file) counts that work for
one import (strace_import) or for a whole job from a given time on
(strace_job: a restart's share); trace_counts() reads its output.

Counted (a path is a file-system object; pipes, sockets, /dev and /proc
are not):
  opens          open/openat calls, and how many failed
  files          distinct files opened successfully
  look-ups       stat-family calls given a path (stat, lstat, newfstatat,
                 statx, access, readlink), and how many failed; fstat on
                 an open descriptor is not a look-up and is left out
  listings       distinct directories listed (getdents64): the import
                 system's cache of each sys.path folder
  bytes read     read/pread64 from files
  bytes mapped   the sizes of the distinct files mmap'ed (the shared
                 libraries: what the first touch of each page may read)
Without strace, /proc/PID/io's rchar and syscr (every read call and byte,
pipes included) stand in: proc_io() reads them at the end of the import.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

# strace -ff -ttt: a file per process (so no call is split into an
# "unfinished" and a "resumed" line), each line `TIME CALL(ARGS) = RESULT`.
SYSCALL = re.compile(r"^(\d+\.\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|0x[0-9a-f]+)(?:\s+(\w+))?")
FD_PATH = re.compile(r"^(-?\d+|AT_FDCWD)(?:<([^>]*)>)?")
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
LOOKUPS = {"stat", "lstat", "newfstatat", "statx", "access", "faccessat", "faccessat2",
           "readlink", "readlinkat"}
NOT_FILES = ("/dev/", "/proc/", "/sys/", "pipe:", "socket:", "anon_inode:")
TRACED = "%file,read,pread64,getdents64,mmap"


def is_file(path: str | None) -> bool:
    return bool(path) and path.startswith("/") and not path.startswith(NOT_FILES)


def trace_counts(lines, since: float = 0.0) -> dict:
    """The counts above from `strace -ff -ttt -qq -y` output lines, of the
    calls made at `since` (time.time()) or later."""
    c = dict(opens=0, opens_failed=0, lookups=0, lookups_failed=0, bytes_read=0)
    files, listed, mapped = set(), set(), set()
    for line in lines:
        m = SYSCALL.match(line)
        if not m or float(m.group(1)) < since:
            continue  # a signal or an exit, or before `since`
        name, args, ret, err = m.group(2), m.group(3), m.group(4), m.group(5)
        failed = ret.startswith("-") and err is not None
        fd = FD_PATH.match(args)
        fd_path = fd.group(2) if fd else None
        if name in ("open", "openat"):
            c["opens"] += 1
            c["opens_failed"] += failed
            q = QUOTED.search(args)
            if not failed and q:
                files.add(q.group(1))
        elif name in LOOKUPS:
            if "AT_EMPTY_PATH" in args and '""' in args:
                continue  # fstat of an open descriptor
            c["lookups"] += 1
            c["lookups_failed"] += failed
        elif name == "getdents64" and is_file(fd_path):
            listed.add(fd_path)
        elif name in ("read", "pread64") and is_file(fd_path) and not failed:
            c["bytes_read"] += int(ret)
        elif name == "mmap":
            fd = FD_PATH.match(args.split(", ")[4]) if args.count(", ") >= 5 else None
            if fd and is_file(fd.group(2)):
                mapped.add(fd.group(2))
    c["files"] = len(files)
    c["listings"] = len(listed)
    c["bytes_mapped"] = sum(os.stat(p).st_size for p in mapped if os.path.exists(p))
    return c


def strace_command(out: Path) -> list[str] | None:
    """The strace prefix writing OUT.<pid> files; None where strace is missing."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    return [strace, "-ff", "-ttt", "-qq", "-y", "-e", f"trace={TRACED}", "-o", str(out)]


def read_traces(out: Path, since: float = 0.0) -> dict:
    total: dict = {}
    traces = sorted(out.parent.glob(out.name + ".*"))
    counts = [trace_counts(t.open(errors="replace"), since) for t in traces]
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    # Distinct across processes would need the sets; per process is what
    # each process asks of the file system, so the sum is the load.
    total["processes"] = sum(1 for c in counts if c["opens"] or c["lookups"])
    return total


def strace_import(python: str, statement: str, env: dict) -> dict | None:
    """trace_counts() of `python -c statement`; None where strace is missing."""
    with tempfile.TemporaryDirectory(prefix="dtrun_storm_") as tmp:
        out = Path(tmp) / "trace"
        prefix = strace_command(out)
        if prefix is None:
            return None
        subprocess.run([*prefix, python, "-c", statement], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return read_traces(out)


def proc_io(python: str, statement: str, env: dict) -> dict:
    """rchar and syscr of `python -c statement`, read by itself at its end."""
    code = f"{statement}\nprint(open('/proc/self/io').read())"
    text = subprocess.run([python, "-c", code], env=env, check=True, capture_output=True,
                          text=True).stdout
    fields = dict(line.split(": ") for line in text.splitlines() if ": " in line)
    return {"rchar": int(fields["rchar"]), "syscr": int(fields["syscr"])}
