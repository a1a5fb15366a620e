"""DDP on NCCL, one rank per GPU: the worker of scripts/bench/gpu.

Each rank trains a 4-layer MLP (4096 wide) on cuda:LOCAL_RANK for --steps
steps, checks an all-reduce of (rank + 1), and prints one JSON line (rank 0)
with the seconds from BENCH_T0 (the launcher's start, exported by the
caller) to: the end of `import torch`, init_process_group, the first step
done, the last step done. --crash-once makes rank 0 exit 13 after its first
step on attempt 0 only (TORCHELASTIC_RESTART_COUNT), so the caller measures
a whole-group restart on a GPU: the JSON of attempt 1 gives the restart's
cost to the job. --hold-file F: after the first step, write "ready" to F
and keep stepping for --hold-seconds (for `dtrun status` to sample NVML).
"""

import argparse
import json
import os
import sys
import time

T0 = float(os.environ.get("BENCH_T0", time.time()))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

T_IMPORT = time.time() - T0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--crash-once", action="store_true")
    p.add_argument("--hold-file", default="")
    p.add_argument("--hold-seconds", type=float, default=15.0)
    args = p.parse_args()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    t_init = time.time() - T0
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    width = 4096
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)]).cuda()
    ddp = DDP(model, device_ids=[local_rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    x = torch.randn(256, width, device="cuda")

    def step() -> None:
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    t_first = time.time() - T0
    if args.crash_once and rank == 0 and restart == 0:
        print(json.dumps({"restart": restart, "crashed_after_first_step_s": round(t_first, 3)}),
              flush=True)
        os._exit(13)
    if args.hold_file:
        with open(args.hold_file, "w") as f:
            f.write("ready\n")
        end = time.time() + args.hold_seconds
        while time.time() < end:
            step()
        torch.cuda.synchronize()
    for _ in range(args.steps - 1):
        step()
    torch.cuda.synchronize()
    t_last = time.time() - T0
    total = torch.tensor([float(rank + 1)], device="cuda")
    dist.all_reduce(total)
    ok = total.item() == world * (world + 1) / 2
    if rank == 0:
        print(json.dumps({"world_size": world, "restart": restart, "allreduce_ok": ok,
                          "import_s": round(T_IMPORT, 3), "init_pg_s": round(t_init, 3),
                          "first_step_s": round(t_first, 3), "last_step_s": round(t_last, 3),
                          "affinity": sorted(os.sched_getaffinity(0)),
                          "torch": torch.__version__,
                          "nccl": ".".join(map(str, torch.cuda.nccl.version()))}),
              flush=True)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
