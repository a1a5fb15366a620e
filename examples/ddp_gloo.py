"""A small DDP training run on CPU (gloo), for dtrun and torchrun alike.

    dtrun --standalone --nproc-per-node=4 --python /usr/bin/python3 \
        examples/ddp_gloo.py --out /tmp/ddp --checkpoint /tmp/ddp/ckpt.pt

Each rank trains the same tiny model on its own deterministic data; rank 0
checkpoints at the end of every epoch; --resume continues from the last
checkpoint, so a restarted group (dtrun --max-restarts) picks up where the
last full epoch ended. Training is deterministic: a run that crashed and
resumed ends with exactly the parameters of a run that did not.

At the end every rank writes <out>/rank<N>.json with what a test checks:
the all-reduced sum of (rank + 1), a checksum of its parameters, the epoch
it started from and the restart count it ran under.

--crash-at-step N makes rank --crash-rank exit with code 13 at global step
N, on the first attempt only (TORCHELASTIC_RESTART_COUNT == 0).
"""

import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

CRASH_EXIT_CODE = 13


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--checkpoint", default="", help="checkpoint file (rank 0 writes it)")
    p.add_argument("--checkpoint-dir", default="",
                   help="shorthand: checkpoint DIR/checkpoint.pt, results in DIR")
    p.add_argument("--resume", action="store_true", help="start from --checkpoint if present")
    p.add_argument("--out", default="", help="folder for the per-rank result files")
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds each step takes on top (stands in for a bigger model)")
    p.add_argument("--progress", default="",
                   help="rank 0 appends 'epoch N round R' here after each checkpoint "
                        "(a file or a FIFO a test reads)")
    p.add_argument("--hold", default="",
                   help="rank 0 stops after epoch 0 until it can read a line from this FIFO "
                        "(a --resume'd restart starts past it): a test that adds a node needs "
                        "the job still running when the node arrives, however slow the machine")
    p.add_argument("--crash-at-step", type=int, default=-1)
    p.add_argument("--crash-rank", type=int, default=1)
    args = p.parse_args()
    if args.checkpoint_dir:
        args.checkpoint = args.checkpoint or os.path.join(args.checkpoint_dir, "checkpoint.pt")
        args.out = args.out or args.checkpoint_dir
    if not args.out:
        p.error("give --out or --checkpoint-dir")
    return args


def batch(epoch: int, step: int, rank: int):
    # The same data for the same (epoch, step, rank), whatever the attempt.
    g = torch.Generator().manual_seed(1000 * epoch + 10 * step + rank)
    x = torch.randn(16, 8, generator=g)
    y = x.sum(dim=1, keepdim=True).repeat(1, 4) * 0.5
    return x, y


def save_checkpoint(path: str, model: nn.Module, optimizer, epoch: int) -> None:
    # Write then rename, so a crash never leaves half a checkpoint.
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": epoch}, tmp)
    os.replace(tmp, path)


def main() -> int:
    args = parse_args()
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    start_epoch = 0
    if args.resume and args.checkpoint and os.path.exists(args.checkpoint):
        state = torch.load(args.checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
    ddp = DDP(model)
    loss_fn = nn.MSELoss()

    for epoch in range(start_epoch, args.epochs):
        for step in range(args.steps_per_epoch):
            global_step = epoch * args.steps_per_epoch + step
            if (global_step == args.crash_at_step and rank == args.crash_rank
                    and restart_count == 0):
                print(f"rank {rank}: crashing at step {global_step} as asked", flush=True)
                os._exit(CRASH_EXIT_CODE)
            x, y = batch(epoch, step, rank)
            optimizer.zero_grad()
            loss_fn(ddp(x), y).backward()
            optimizer.step()
            if args.step_sleep:
                time.sleep(args.step_sleep)
        if rank == 0 and args.checkpoint:
            save_checkpoint(args.checkpoint, model, optimizer, epoch)
        if rank == 0 and args.progress:
            with open(args.progress, "a") as f:
                f.write(f"epoch {epoch} round {restart_count} world {world}\n")
        if rank == 0 and args.hold and epoch == 0:
            # Blocks until a writer opens it, or the agent stops us for a
            # restart (which resumes after epoch 0, so it never holds again).
            with open(args.hold) as f:
                f.readline()
        # Nobody runs ahead of the checkpoint it might resume from.
        dist.barrier()

    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    checksum = float(sum(p.detach().double().sum() for p in model.parameters()))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": world, "allreduce_sum": total.item(),
                   "param_checksum": checksum, "start_epoch": start_epoch,
                   "restart_count": restart_count, "host": socket.gethostname(),
                   "local_rank": int(os.environ["LOCAL_RANK"]), "torch": torch.__version__}, f)
    if rank == 0:
        print(f"rank 0 of {world}: epochs {start_epoch}..{args.epochs - 1} done "
              f"(restart {restart_count}); all-reduce of rank+1 = {total.item():g} "
              f"(expected {world * (world + 1) / 2:g}); parameter checksum {checksum:.6f}",
              flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and the process group destroyed: leave without
    # the interpreter's C++ teardown, in which torch 2.6 (Debian 13's) now
    # and then aborts after DDP on gloo ("terminate called without an active
    # exception", SIGABRT; under torchrun 2.6 as well).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
