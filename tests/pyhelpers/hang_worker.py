"""A worker for the hang-detection tests. Its first argument says how it
behaves; it never imports torch, so the tests stay fast.

  silent SECONDS      prints nothing and sleeps, then exits 0
  prints SECONDS      prints a line every 0.2 s for SECONDS, then exits 0
  heartbeat SECONDS   prints nothing but touches $DTRUN_HEARTBEAT_FILE every
                      0.2 s for SECONDS, then exits 0
  stuck               rank 1 blocks in load_batch(), the others in
                      wait_for_peers(): the shape of a real hang
  rank0-prints SECONDS  global rank 0 prints every 0.2 s, the others are
                      silent, for SECONDS (a multi-node job's usual output)
"""

import os
import sys
import time
from pathlib import Path

mode = sys.argv[1]
rank = int(os.environ["RANK"])


def load_batch():
    time.sleep(3600)  # a data loader that never returns


def wait_for_peers():
    time.sleep(3600)  # a collective waiting for rank 1


def every(seconds, action):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        action()
        time.sleep(0.2)


if mode == "silent":
    time.sleep(float(sys.argv[2]))
elif mode == "prints":
    every(float(sys.argv[2]), lambda: print(f"rank {rank}: step", flush=True))
elif mode == "heartbeat":
    beat = Path(os.environ["DTRUN_HEARTBEAT_FILE"])
    every(float(sys.argv[2]), beat.touch)
elif mode == "rank0-prints":
    every(float(sys.argv[2]),
          (lambda: print("rank 0: step", flush=True)) if rank == 0 else (lambda: None))
elif mode == "stuck":
    print(f"rank {rank}: started", flush=True)
    if rank == 1:
        load_batch()
    else:
        wait_for_peers()
sys.exit(0)
