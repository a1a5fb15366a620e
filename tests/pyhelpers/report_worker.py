"""A worker for dtrun report's test: the first attempt fails at a known
point, the next one succeeds.

The marker file (argv[1]) decides: rank 1 of the attempt that finds it
missing creates it and raises; the other ranks of that attempt wait to be
stopped. With the marker there, every rank prints one line and exits 0.
"""

import os
import sys
import time

marker = sys.argv[1]
rank = int(os.environ["RANK"])
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    if rank == 1:
        open(marker, "x").close()
        raise RuntimeError("report_worker: the first attempt fails")
    time.sleep(1000)  # ended by dtrun's stop once rank 1 has failed
assert os.path.exists(marker), "the first attempt did not fail"
print(f"rank {rank}: done", flush=True)
