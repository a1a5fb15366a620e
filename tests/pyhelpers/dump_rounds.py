"""A worker that writes its environment to <out>/round<R>_rank<RANK>.json,
R being TORCHELASTIC_RESTART_COUNT, and exits 0; with --fail-rank=N, rank
N exits 3 in round 0 instead, so the launcher restarts the group, but only
once every rank of round 0 has written its file (each says so in the
workers' store, MASTER_ADDR:MASTER_PORT, which both launchers host): a
failure before that would stop a slower rank before it wrote. Used to
compare dtrun's worker environment with torchrun's
(tests/pyhelpers/torch_env_compare.py)."""

import datetime
import json
import os
import sys

out = sys.argv[1]
fail_rank = next((int(a.split("=", 1)[1]) for a in sys.argv[2:] if a.startswith("--fail-rank=")),
                 None)
rnd = os.environ["TORCHELASTIC_RESTART_COUNT"]
rank = int(os.environ["RANK"])
with open(os.path.join(out, f"round{rnd}_rank{rank}.json"), "w") as f:
    json.dump(dict(os.environ), f, indent=1, sort_keys=True)
if fail_rank is not None and rnd == "0":
    import torch.distributed as dist  # only here: the other runs need no torch

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=datetime.timedelta(seconds=120))
    store.set(f"dumped{rank}", "1")
    if rank == fail_rank:
        store.wait([f"dumped{r}" for r in range(int(os.environ["WORLD_SIZE"]))])
        sys.exit(3)
